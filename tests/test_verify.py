"""Verify steps: publish only accepted boundaries, each from its own intermediate state."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_rollback import (
    InvalidArgumentError,
    OutOfOrderError,
    ReplaySegment,
    SsmDecodeRing,
    SsmSnapshotSave,
    SsmStateAccept,
    StaleSnapshotError,
    VerifyPlan,
    apply_effects,
    commit_verified,
    commit_verified_batch,
    rollback_to_boundary,
)
from ssm_rollback.backends.fake import FakeSnapshotPool


def tokens(n: int) -> tuple[int, ...]:
    """The fake live state after ``n`` tokens: the tokens themselves."""
    return tuple(range(1, n + 1))


def verify(ring: SsmDecodeRing, first: int, accepted: int, flags: str, seq: int = 0) -> VerifyPlan:
    """``flags``: one char per fed token, ``b`` boundary, ``t`` boundary in thinking, ``.``."""
    return commit_verified(
        ring,
        seq=seq,
        first_position=first,
        accepted=accepted,
        is_boundary=[c in "bt" for c in flags],
        in_thinking=[c == "t" for c in flags],
    )


def test_only_accepted_boundaries_are_recorded_each_from_its_own_state() -> None:
    ring = SsmDecodeRing(4)
    plan = verify(ring, first=5, accepted=2, flags=".b.b")  # positions 5..8; 6 and 8 boundaries
    assert ring.snapshot_positions() == (6,)  # 8 was a rejected draft (rule 1)
    accept = plan.effects[0]
    assert isinstance(accept, SsmStateAccept)
    assert (accept.seq, accept.index) == (0, 2)  # live = state after 5 + 2 tokens (rule 3)
    assert accept.ticket is not None  # minted by the plan: applied twice, it is refused
    (save,) = plan.saves
    entry = ring.entry_for(6)
    assert entry is not None
    assert save == SsmSnapshotSave(0, entry.snapshot_slot, 6, entry.ticket, source=1)  # rule 2
    assert plan.end_position == 7


def test_thinking_boundaries_and_the_first_fed_token_follow_the_plain_rules() -> None:
    ring = SsmDecodeRing(4)
    plan = verify(ring, first=3, accepted=3, flags="btb.")
    assert ring.snapshot_positions() == (3, 5)
    assert [s.source for s in plan.saves] == [0, 2]


def test_the_plan_applies_through_a_fake_pool_with_intermediate_states() -> None:
    pool, ring = FakeSnapshotPool(1, 4), SsmDecodeRing(4)
    pool.live[0] = tokens(4)  # last committed token is the 5th: fed first
    pool.intermediate[0] = [tokens(5 + j) for j in range(4)]  # k = 3 drafts
    plan = verify(ring, first=5, accepted=2, flags=".b.b")
    apply_effects(pool, plan.effects, [ring])
    assert pool.live[0] == tokens(7)
    assert pool.stored_value(0, plan.saves[0].slot) == tokens(6)
    restore = rollback_to_boundary(ring, [6], seq=0, current_len=7)
    assert not isinstance(restore, type(None))
    apply_effects(pool, restore.effects, [ring])  # type: ignore[union-attr]
    assert pool.live[0] == tokens(6)


def test_an_accept_beyond_what_the_step_produced_is_refused() -> None:
    pool, ring = FakeSnapshotPool(2, 2), SsmDecodeRing(2)
    pool.live[0] = "before"
    pool.intermediate[0] = ["after 5", "after 6"]
    with pytest.raises(StaleSnapshotError, match="intermediate state 2 of seq 0, which holds 2"):
        apply_effects(pool, [SsmStateAccept(0, 2)], [ring, SsmDecodeRing(2)])
    with pytest.raises(StaleSnapshotError, match="holds 2"):
        pool.accept([SsmStateAccept(0, 2)])
    with pytest.raises(StaleSnapshotError, match="holds no intermediate"):  # row 1 fed nothing
        pool.accept([SsmStateAccept(1, 0)])
    assert pool.live == ["before", None]
    pool.accept([SsmStateAccept(0, 1)])
    assert pool.live == ["after 6", None]


def test_a_save_from_an_intermediate_state_the_row_lacks_is_refused() -> None:
    pool, ring = FakeSnapshotPool(1, 2), SsmDecodeRing(2)
    pool.intermediate[0] = ["after 5"]
    plan = verify(ring, first=5, accepted=1, flags="bb")
    with pytest.raises(StaleSnapshotError, match="intermediate state 1"):
        apply_effects(pool, plan.effects, [ring])
    assert pool.stored_position(0, 0) is None


def test_a_pool_without_intermediate_states_refuses_accepts() -> None:
    from ssm_rollback.pool import SaveOutcome

    class PlainPool:
        num_sequences, slots_per_sequence = 1, 1

        def save(self, saves: object) -> SaveOutcome:
            return SaveOutcome(())

        def restore(self, restores: object) -> None:
            pass

        def stored_position(self, seq: int, slot: int) -> int | None:
            return None

        def stored_ticket(self, seq: int, slot: int) -> int | None:
            return None

    with pytest.raises(InvalidArgumentError, match="accept"):
        apply_effects(PlainPool(), [SsmStateAccept(0, 0)], [SsmDecodeRing(1)])


def test_the_replay_form_names_the_checkpoint_and_the_segments() -> None:
    ring = SsmDecodeRing(4)
    plan = verify(ring, first=5, accepted=2, flags=".b.b")
    assert plan.checkpoint_position == 4
    assert plan.replay_needed
    (first, last) = plan.replay
    assert first.through == 6
    assert first.save is not None
    assert first.save.source is None  # replayed: saved from the live state
    assert (first.save.slot, first.save.ticket) == (plan.saves[0].slot, plan.saves[0].ticket)
    assert last == ReplaySegment(7, None)


def test_all_drafts_accepted_with_a_boundary_at_the_end_needs_no_replay() -> None:
    plan = verify(SsmDecodeRing(2), first=2, accepted=2, flags="..b")
    assert not plan.replay_needed
    (segment,) = plan.replay
    assert segment.through == 4
    assert segment.save is not None


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"accepted": 4}, InvalidArgumentError, "at most the 3 drafts fed"),
        ({"accepted": -1}, InvalidArgumentError, "'accepted'"),
        ({"first_position": 0}, InvalidArgumentError, "'first_position'"),
        ({"is_boundary": [True]}, InvalidArgumentError, "one flag per fed token"),
        ({"in_thinking": [False, False, 2, False]}, InvalidArgumentError, r"'in_thinking\[2\]'"),
        ({"first_position": 3}, OutOfOrderError, "newest live snapshot position 4"),
    ],
)
def test_bad_verify_steps_change_nothing(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    ring = SsmDecodeRing(4)
    ring.record(4)
    arguments: dict[str, object] = {
        "seq": 0,
        "first_position": 5,
        "accepted": 2,
        "is_boundary": [True, True, True, True],
        "in_thinking": [False, False, False, False],
    }
    arguments.update(kwargs)
    before = ring.entries
    with pytest.raises(error, match=match):
        commit_verified(ring, **arguments)  # type: ignore[arg-type]
    assert ring.entries == before


def test_the_batch_form_matches_the_per_row_plans_and_checks_every_row_first() -> None:
    rings = [SsmDecodeRing(3) for _ in range(3)]
    batch = commit_verified_batch(
        rings,
        first_positions=[5, 2, 9],
        accepted=[1, 0, 3],
        is_boundary=[[False, True, True], [True], [True, False, False, True]],
        in_thinking=[[False] * 3, [False], [False] * 4],
    )
    assert [r.snapshot_positions() for r in rings] == [(6,), (2,), (9, 12)]
    assert batch.saves.seqs == (0, 1, 2, 2)
    assert batch.saves.sources == (1, 0, 0, 3)
    assert [(a.seq, a.index) for a in batch.accepts] == [(0, 1), (1, 0), (2, 3)]
    assert batch.accepts == tuple(p.effects[0] for p in batch.plans)  # the plans' own tickets
    assert len({a.ticket for a in batch.accepts}) == 3
    assert [p.accepted for p in batch.plans] == [1, 0, 3]
    pool = FakeSnapshotPool(3, 3)
    for seq, (first, fed) in enumerate([(5, 3), (2, 1), (9, 4)]):
        pool.intermediate[seq] = [tokens(first + j) for j in range(fed)]
    apply_effects(pool, batch.effects, rings)
    assert pool.live == [tokens(6), tokens(2), tokens(12)]
    assert pool.stored_value(2, 1) == tokens(12)
    before = [r.entries for r in rings]
    with pytest.raises(InvalidArgumentError, match=r"'accepted\[1\]'"):
        commit_verified_batch(
            rings,
            first_positions=[20, 20],
            accepted=[0, 5],
            is_boundary=[[True], [True]],
            in_thinking=[[False], [False]],
        )
    assert [r.entries for r in rings] == before  # row 0 was valid, and still not recorded


def test_boundaries_the_step_itself_evicts_get_no_save_and_no_segment() -> None:
    ring = SsmDecodeRing(1)
    plan = verify(ring, first=5, accepted=2, flags="bbb")  # 5, 6 and 7 share the one slot
    (entry,) = ring.entries
    assert entry.token_position == 7
    assert [s.token_position for s in plan.saves] == [7]  # one save per slot, the survivor's
    assert [segment.through for segment in plan.replay] == [7]
    assert not plan.replay_needed  # all drafts accepted, the only save at the end


def test_a_batch_with_rows_reads_each_rows_own_ring() -> None:
    """``rows=[2, 0]``: element 0 is row 2, whose ring is ``rings[2]``, not ``rings[0]``."""
    rings = [SsmDecodeRing(2) for _ in range(3)]
    batch = commit_verified_batch(
        rings,
        first_positions=[5, 7],
        accepted=[0, 0],
        is_boundary=[[True], [True]],
        in_thinking=[[False], [False]],
        rows=[2, 0],
    )
    assert [r.snapshot_positions() for r in rings] == [(7,), (), (5,)]
    assert batch.saves.seqs == (2, 0)


def test_a_negative_row_is_refused_naming_it() -> None:
    rings = [SsmDecodeRing(2), SsmDecodeRing(2)]
    with pytest.raises(InvalidArgumentError, match=r"'rows\[0\]' must be an int >= 0, got -1"):
        commit_verified_batch(
            rings,
            first_positions=[5],
            accepted=[0],
            is_boundary=[[True]],
            in_thinking=[[False]],
            rows=[-1],
        )
    assert [r.snapshot_positions() for r in rings] == [(), ()]


def test_a_row_whose_ring_keeps_nothing_records_nothing_beside_one_that_does() -> None:
    """A ring of capacity 0 (rollback off for that row) records no boundary; the batch's
    other rows keep theirs, each under its own row."""
    rings = [SsmDecodeRing(0), SsmDecodeRing(2)]
    batch = commit_verified_batch(
        rings,
        first_positions=[3, 4],
        accepted=[1, 1],
        is_boundary=[[True, True], [True, True]],
        in_thinking=[[False, False], [False, False]],
    )
    assert [r.snapshot_positions() for r in rings] == [(), (4, 5)]
    assert batch.plans[0].saves == ()
    assert [s.token_position for s in batch.plans[1].saves] == [4, 5]
    assert batch.saves.seqs == (1, 1)


def test_a_replay_is_needed_for_a_save_before_the_end_even_with_every_draft_accepted() -> None:
    """All drafts accepted, but a boundary before the step's end: a replay engine must stop
    there to save it, so the live state at the end alone is not enough."""
    ring = SsmDecodeRing(4)
    plan = verify(ring, first=5, accepted=2, flags="b..")
    assert plan.accepted == plan.fed - 1
    assert [s.token_position for s in plan.saves] == [5]
    assert plan.replay_needed


@st.composite
def _shared_ring_steps(draw: st.DrawFn) -> tuple[list[int], list[tuple[int, int, list[bool]]]]:
    """Rows of one verify step, each on ring 0 or 1: (first, accepted, boundary flags)."""
    n = draw(st.integers(1, 4))
    owners = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    steps = []
    for _ in range(n):
        flags = draw(st.lists(st.booleans(), min_size=1, max_size=3))
        steps.append((draw(st.integers(1, 12)), draw(st.integers(0, len(flags) - 1)), flags))
    return owners, steps


@given(
    capacity=st.integers(0, 3),
    recorded=st.lists(st.integers(1, 8), max_size=2, unique=True).map(sorted),
    step=_shared_ring_steps(),
)
def test_a_verify_batch_on_shared_rings_does_what_the_per_row_calls_do_or_nothing(
    capacity: int, recorded: list[int], step: tuple[list[int], list[tuple[int, int, list[bool]]]]
) -> None:
    """SPEC 15: rows sharing a ring, in row order, as the per-row calls would run; a refusal
    is theirs (the same error) and changes no ring."""
    owners, steps = step

    def rings() -> list[SsmDecodeRing]:
        made = [SsmDecodeRing(capacity) for _ in range(2)]
        for ring in made:
            for position in recorded:
                ring.record(position)
        return made

    per_row, batched = rings(), rings()
    expected: type[Exception] | None = None
    for seq, (ring, (first, accepted, flags)) in enumerate(zip(owners, steps, strict=True)):
        try:
            commit_verified(
                per_row[ring],
                seq=seq,
                first_position=first,
                accepted=accepted,
                is_boundary=flags,
                in_thinking=[False] * len(flags),
            )
        except OutOfOrderError as error:
            expected = type(error)
            break
    before = [ring.snapshot_positions() for ring in batched]
    arguments = {
        "first_positions": [first for first, _, _ in steps],
        "accepted": [accepted for _, accepted, _ in steps],
        "is_boundary": [flags for _, _, flags in steps],
        "in_thinking": [[False] * len(flags) for _, _, flags in steps],
    }
    mapping = dict(enumerate(batched[ring] for ring in owners))
    if expected is not None:
        with pytest.raises(expected):
            commit_verified_batch(mapping, **arguments)  # type: ignore[arg-type]
        assert [ring.snapshot_positions() for ring in batched] == before
    else:
        commit_verified_batch(mapping, **arguments)  # type: ignore[arg-type]
        assert [r.snapshot_positions() for r in batched] == [
            r.snapshot_positions() for r in per_row
        ]
