"""The silent-corruption bugs other engines shipped, replayed against our ring, rollback and pools.

Each test drives the same sequence of events as an upstream bug report and
shows that we either refuse (a library error, nothing copied, the live state
unchanged) or land on exactly the right state. The fake pool's live state is
the tuple of tokens a row has consumed, so a wrong restore shows as the wrong
tokens; the torch pool covers the row-offset and uninitialised-memory cases,
and one case runs a real tiny Bamba model through the Hugging Face pool.

Speculative decoding is modelled with what the library has today: a verify
step is the saves and restores the scheduler issues once it knows how many
draft tokens were accepted, and a rejected draft is a rollback.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import pytest

pytest.importorskip("torch")

import torch

from ssm_rollback import (
    DeclineReason,
    InvalidArgumentError,
    RollbackDeclined,
    RollbackPlan,
    SlotTags,
    SsmDecodeRing,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    StaleSnapshotError,
    apply_effects,
    rollback_to_boundary,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.backends.fake import FakeSnapshotPool
from ssm_rollback.backends.torch import TorchSnapshotPool


class Scheduler:
    """A plain decode loop over a fake pool: row ``seq``'s live state is the tokens it consumed."""

    def __init__(self, rows: int = 1, slots: int = 2) -> None:
        self.pool = FakeSnapshotPool(rows, slots)
        self.rings = [SsmDecodeRing(slots) for _ in range(rows)]
        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.boundaries: list[list[int]] = [[] for _ in range(rows)]
        self.pool.live[:] = [() for _ in range(rows)]

    def live(self, seq: int = 0) -> object:
        return self.pool.live[seq]

    def consume(self, seq: int, token: int) -> None:
        """The model consumes one token: the live state moves on."""
        self.tokens[seq].append(token)
        self.pool.live[seq] = tuple(self.tokens[seq])

    def record(self, seq: int, token: int, *, boundary: bool) -> SsmSnapshotSave | None:
        """Commit one token; return the save a boundary asks for (not yet applied)."""
        self.consume(seq, token)
        position = len(self.tokens[seq])
        if boundary:
            self.boundaries[seq].append(position)
        return snapshot_boundary_if_ssm(
            self.rings[seq],
            seq=seq,
            token_position=position,
            is_boundary=boundary,
            in_thinking=False,
        )

    def decode(self, seq: int, tokens: Sequence[int], boundaries: Sequence[int] = ()) -> None:
        """Commit ``tokens``, saving at every position in ``boundaries`` through the pool."""
        for token in tokens:
            save = self.record(seq, token, boundary=len(self.tokens[seq]) + 1 in boundaries)
            apply_effects(self.pool, [save] if save is not None else [], self.rings)

    def plan(self, seq: int, at_most: int | None = None) -> RollbackPlan | RollbackDeclined:
        """Plan a rollback (the ring is truncated); the restore is not applied yet."""
        return rollback_to_boundary(
            self.rings[seq],
            self.boundaries[seq],
            seq=seq,
            current_len=len(self.tokens[seq]),
            at_most=at_most,
        )

    def truncate(self, seq: int, keep_len: int) -> None:
        """Drop tokens and boundaries past ``keep_len``, as the scheduler does after a restore."""
        del self.tokens[seq][keep_len:]
        self.boundaries[seq] = [b for b in self.boundaries[seq] if b <= keep_len]

    def roll_back(self, seq: int, at_most: int | None = None) -> RollbackPlan:
        """Plan and carry out a rollback that must succeed."""
        plan = self.plan(seq, at_most)
        assert isinstance(plan, RollbackPlan), plan
        apply_effects(self.pool, plan.effects, self.rings)
        self.truncate(seq, plan.keep_len)
        return plan


def restore_for(ring: SsmDecodeRing, seq: int, position: int) -> SsmSnapshotRestore:
    """The restore of the ring's live entry at ``position`` (what a plan to it carries)."""
    entry = ring.entry_for(position)
    assert entry is not None, f"no live entry at {position}: {ring!r}"
    return SsmSnapshotRestore(seq, entry.snapshot_slot, position, entry.ticket)


def restore_for_ticket(save: SsmSnapshotSave) -> SsmSnapshotRestore:
    """The restore a plan to ``save``'s snapshot carries."""
    return SsmSnapshotRestore(save.seq, save.slot, save.token_position, save.ticket)


# -- the two reproductions of "same position, different snapshot" ----------------------------


def test_seen_a_lost_save_on_a_new_branch_never_restores_the_abandoned_branch() -> None:
    """Record 5, save it; roll back to 3; record 5 again on a new branch but lose that save.

    Position tags alone cannot tell the two snapshots at 5 apart (same slot,
    same position): v0.1 restored the abandoned branch's state. With tickets
    the restore is a ``StaleSnapshotError`` and the live state is untouched,
    whether the save failed in the pool (fault injection) or never reached it.
    """
    for lost_how in ("failed", "never applied"):
        s = Scheduler(slots=3)
        s.decode(0, [1, 2, 3, 4, 5], boundaries=[3, 5])
        abandoned_slot = s.rings[0].slot_for_position(5)
        s.roll_back(0, at_most=4)
        assert s.live() == (1, 2, 3)
        s.consume(0, 40)
        save = s.record(0, 50, boundary=True)
        assert save is not None
        assert save.slot == abandoned_slot  # the abandoned branch's 5 is still in that memory
        if lost_how == "failed":
            # A scheduler that calls the pool itself and misses the failure: the ring keeps 5.
            s.pool.fail_when(lambda save: save.token_position == 5)
            assert not s.pool.save([save]).ok
        else:
            assert s.pool.stored_value(0, save.slot) == (1, 2, 3, 4, 5)
        s.consume(0, 60)
        plan = s.plan(0, at_most=5)
        assert isinstance(plan, RollbackPlan)
        assert plan.effects == (restore_for_ticket(save),)
        held = "holds nothing" if lost_how == "failed" else "holds position 5 ticket"
        with pytest.raises(StaleSnapshotError, match=held):
            apply_effects(s.pool, plan.effects, s.rings)
        assert s.live() == (1, 2, 3, 40, 50, 60), lost_how


def test_seen_a_lost_save_through_apply_effects_rolls_back_to_the_last_good_boundary() -> None:
    """The same events through ``apply_effects``: the failed save is forgotten, 3 is exact."""
    s = Scheduler(slots=3)
    s.decode(0, [1, 2, 3, 4, 5], boundaries=[3, 5])
    s.roll_back(0, at_most=4)
    s.pool.fail_when(lambda save: save.token_position == 5)
    s.decode(0, [40, 50, 60], boundaries=[5])
    assert s.rings[0].snapshot_positions() == (3,)
    plan = s.roll_back(0)
    assert plan.keep_len == 3
    assert s.live() == (1, 2, 3)


def test_seen_a_row_reused_with_a_fresh_ring_never_restores_the_previous_sequence() -> None:
    """A row reused with a fresh ring instead of ``clear()``: the restore is refused.

    The new ring starts at slot 0 again and records the same position the
    previous sequence saved there; its own save never reached the pool. v0.1
    restored the previous sequence's state; now the restore raises and the
    live state is the new sequence's.
    """
    s = Scheduler(slots=2)
    s.decode(0, [1, 2, 3, 4, 5], boundaries=[5])
    assert s.pool.stored_value(0, 0) == (1, 2, 3, 4, 5)
    # The sequence finished; the row is handed to a new one with a new ring.
    s.rings[0] = SsmDecodeRing(2)
    s.tokens[0], s.boundaries[0] = [], []
    for token in (11, 12, 13, 14):
        s.consume(0, token)
    save = s.record(0, 15, boundary=True)
    assert save is not None
    assert (save.slot, save.token_position) == (0, 5)  # indistinguishable by position
    s.consume(0, 16)  # the save is lost: never handed to the pool
    plan = s.plan(0)
    assert isinstance(plan, RollbackPlan)
    with pytest.raises(StaleSnapshotError, match="holds position 5 ticket"):
        apply_effects(s.pool, plan.effects, s.rings)
    assert s.live() == (11, 12, 13, 14, 15, 16)


# -- vLLM ------------------------------------------------------------------------------------


def test_vllm_53912_stale_state_of_an_earlier_request_is_not_reused() -> None:
    """vLLM #53912: prefix caching + MTP restored a block's stale draft state into a new request.

    Upstream, a recurrent-state block written by an earlier request's draft
    was taken as the cached state of a later request sharing the prefix, and
    the output was silently corrupt. Here request A saves its draft state at
    4; the row is cleared and reused by request B with the same prefix, whose
    snapshot at 4 lands in the same slot but whose save was skipped (the
    scheduler assumed the prefix hit made it unnecessary): B's restore is
    refused and B keeps its own state; had B saved, it gets exactly its own.
    """
    s = Scheduler(slots=2)
    s.decode(0, [1, 2, 3], boundaries=[])
    s.decode(0, [90], boundaries=[4])  # request A's draft token at 4, snapshotted
    assert s.pool.stored_value(0, 0) == (1, 2, 3, 90)
    s.rings[0].clear()  # A finished; request B gets the row
    s.tokens[0], s.boundaries[0] = [], []
    for token in (1, 2, 3):  # the shared prefix
        s.consume(0, token)
    skipped = s.record(0, 4, boundary=True)
    assert skipped is not None
    assert (skipped.slot, skipped.token_position) == (0, 4)
    s.consume(0, 5)
    s.consume(0, 6)
    plan = s.plan(0, at_most=5)  # B's draft is rejected after 4
    assert isinstance(plan, RollbackPlan)
    with pytest.raises(StaleSnapshotError):
        apply_effects(s.pool, plan.effects, s.rings)
    assert s.live() == (1, 2, 3, 4, 5, 6)
    assert s.pool.stored_value(0, 0) == (1, 2, 3, 90)  # nothing was overwritten either

    # The same events with B's save applied: B gets exactly its own state at 4.
    s.rings[0].clear()
    s.tokens[0], s.boundaries[0] = [], []
    s.decode(0, [1, 2, 3, 4, 5, 6], boundaries=[4])
    plan = s.roll_back(0, at_most=5)
    assert plan.keep_len == 4
    assert s.live() == (1, 2, 3, 4)


def torch_rows(rows: int, tag: int, *, shape: tuple[int, ...] = (3, 4)) -> torch.Tensor:
    """``rows`` rows of distinct float64 contents: row ``r`` holds ``r * 1000 + tag * 100 + i``."""
    per_row = torch.arange(int(torch.tensor(shape).prod().item()), dtype=torch.float64)
    return torch.stack([r * 1000 + tag * 100 + per_row.reshape(shape) for r in range(rows)])


def test_vllm_55600_an_out_of_range_slot_or_row_is_refused_not_wrapped_into_the_next_row() -> None:
    """vLLM #55600: an index past a row's slots read another row's block and restored its state.

    Upstream, a state index computed in the wrong units ran past the row's
    width and, where the memory stayed mapped, silently restored an
    unrelated block. Here ``slot == slots_per_sequence`` and ``seq ==
    num_sequences`` are refused before any copy, even when the effect
    carries exactly the position and ticket the wrapped-to slot holds.
    """
    live = torch_rows(2, tag=1)
    pool = TorchSnapshotPool([live], 2)
    rings = [SsmDecodeRing(2), SsmDecodeRing(2)]
    saves = [
        save
        for seq in (0, 1)
        if (
            save := snapshot_boundary_if_ssm(
                rings[seq], seq=seq, token_position=7, is_boundary=True, in_thinking=False
            )
        )
        is not None
    ]
    apply_effects(pool, saves, rings)
    row1 = restore_for(rings[1], 1, 7)
    assert row1.slot == 0  # flat index 1 * 2 + 0 == 0 * 2 + 2
    wrapped = SsmSnapshotRestore(0, 2, row1.token_position, row1.ticket)
    past_rows = SsmSnapshotRestore(2, 0, row1.token_position, row1.ticket)
    live[:] = -1
    before = live.clone()
    for restore in (wrapped, past_rows):
        with pytest.raises(InvalidArgumentError, match="must be <"):
            pool.restore([restore])
        with pytest.raises(InvalidArgumentError, match="must be <"):
            apply_effects(pool, [restore], rings)
        assert torch.equal(live, before)
    # A save past the row's slots would overwrite row 1's snapshot: refused, row 1 intact.
    with pytest.raises(InvalidArgumentError, match="must be <"):
        pool.save([SsmSnapshotSave(0, 2, 9, row1.ticket)])
    with pytest.raises(InvalidArgumentError):
        SlotTags(2, 2).index(0, 2)
    pool.restore([row1])
    assert torch.equal(live[1], torch_rows(2, tag=1)[1])
    assert torch.equal(live[0], before[0])


def test_vllm_53919_a_late_restore_from_an_earlier_step_is_refused() -> None:
    """vLLM #53919: a stale accepted count let step N's state copy land after step N+1's.

    Upstream, a request decoded with an accepted count that a later step had
    already permuted, and the wrong state was written back, silently. Here
    step N plans a rollback to 2; step N+1, planned from a different count,
    rolls back to 1 and re-records 2 on a new branch in the same slot; when
    step N's restore arrives late it names a ticket the slot no longer holds
    and is refused. In order, each step lands on exactly its state, and two
    steps' restores for one row in one batch are refused.
    """
    s = Scheduler(slots=2)
    s.decode(0, [1, 2, 3, 4], boundaries=[1, 2])
    step_n = s.plan(0, at_most=3)
    assert isinstance(step_n, RollbackPlan)
    assert step_n.keep_len == 2
    # Step N+1, from another accepted count: back to 1, then a new branch.
    step_n1 = s.plan(0, at_most=1)
    assert isinstance(step_n1, RollbackPlan)
    # Both steps' restores for one row in one batch: refused before any copy.
    with pytest.raises(InvalidArgumentError, match="at most once"):
        apply_effects(s.pool, [*step_n1.effects, *step_n.effects], s.rings)
    assert s.live() == (1, 2, 3, 4)
    apply_effects(s.pool, step_n1.effects, s.rings)
    s.truncate(0, step_n1.keep_len)
    assert s.live() == (1,)
    s.decode(0, [20, 30], boundaries=[2])
    assert s.rings[0].slot_for_position(2) == step_n.effects[0].slot
    with pytest.raises(StaleSnapshotError, match="holds position 2 ticket"):
        apply_effects(s.pool, step_n.effects, s.rings)
    assert s.live() == (1, 20, 30)
    # In order, the new branch's own rollback restores exactly its state at 2.
    assert s.roll_back(0, at_most=2).keep_len == 2
    assert s.live() == (1, 20)


def test_vllm_50272_after_a_rejected_draft_the_state_is_exactly_the_boundarys() -> None:
    """vLLM #50272: the conv window kept the rejected draft tokens' activations.

    Upstream, attention KV rolled back at the first rejected token but the
    short-conv state did not, and greedy speculative output diverged there.
    Here the verify step runs four draft tokens, the third is rejected, and
    the rollback restores exactly the state at the boundary before the
    draft; replaying the accepted tokens gives exactly a plain decode's state.
    """
    s = Scheduler(slots=2)
    s.decode(0, [1, 2, 3], boundaries=[3])
    for draft in (4, 5, 96, 97):  # the verify forward consumed the whole draft
        s.consume(0, draft)
    plan = s.roll_back(0, at_most=5)  # 96 is the first rejected token
    assert plan.keep_len == 3
    assert s.live() == (1, 2, 3)
    s.decode(0, [4, 5, 6])
    assert s.live() == (1, 2, 3, 4, 5, 6)


def test_vllm_50272_on_a_real_hybrid_model_the_restored_state_is_bitwise_a_plain_decode() -> None:
    """vLLM #50272 on a tiny Bamba: after a rejected draft, conv and SSM state match a plain decode.

    Upstream the conv state kept rejected tokens, so the first rejected
    position decoded from a wrong state. Here the Hugging Face pool restores
    the boundary before the draft, ``crop_attention`` cuts the KV, the
    accepted tokens and the correction are replayed, and every recurrent
    state tensor and the next logits equal a plain decode's bit for bit.
    """
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM
    from transformers.cache_utils import Cache

    from ssm_rollback.integrations.transformers import HybridCacheSnapshotPool, crop_attention
    from ssm_rollback.testing import tiny_config

    prompt_len = 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(tiny_config("bamba")).eval()  # type: ignore[no-untyped-call]
        g = torch.Generator().manual_seed(1)
        prompt = torch.randint(0, 64, (1, prompt_len), generator=g)
        committed, draft, fix = (
            torch.randint(0, 64, (n,), generator=g).tolist() for n in (3, 4, 1)
        )

        def forward(ids: torch.Tensor, cache: Cache | None) -> tuple[torch.Tensor, Cache]:
            with torch.no_grad():
                if cache is None:
                    out = model(ids, use_cache=True)
                else:
                    out = model(ids, cache=cache, use_cache=True)
            logits: torch.Tensor = out.logits
            result: Cache = out.cache
            return logits, result

        def feed(cache: Cache, tokens: Sequence[int]) -> torch.Tensor:
            logits = torch.empty(0)
            for token in tokens:
                logits, _ = forward(torch.tensor([[token]]), cache)
            return logits

        _, cache = forward(prompt, None)
        pool = HybridCacheSnapshotPool(cache, 2)
        ring = SsmDecodeRing(2)
        feed(cache, committed)
        save = snapshot_boundary_if_ssm(
            ring, seq=0, token_position=3, is_boundary=True, in_thinking=False
        )
        assert save is not None
        assert apply_effects(pool, [save], [ring]).ok
        feed(cache, draft)  # the verify step consumed all four draft tokens
        plan = rollback_to_boundary(ring, [3], seq=0, current_len=7, at_most=5)
        assert isinstance(plan, RollbackPlan)
        assert plan.keep_len == 3
        apply_effects(pool, plan.effects, [ring])
        crop_attention(cache, prompt_len + plan.keep_len)
        replayed = [*draft[:2], *fix]  # two accepted, then the target's own token
        logits = feed(cache, replayed)

        _, fresh = forward(prompt, None)
        fresh_logits = feed(fresh, [*committed, *replayed])
        fresh_states = HybridCacheSnapshotPool(fresh, 1).torch_pool.live_states
    states = pool.torch_pool.live_states
    assert len(states) == len(fresh_states)
    for name, got, want in zip(pool.state_names, states, fresh_states, strict=True):
        assert torch.equal(got, want), f"{name} differs from a plain decode"
    assert cache.get_seq_length() == prompt_len + 6
    assert torch.equal(logits, fresh_logits)


def test_vllm_43559_53505_a_save_over_a_live_snapshot_evicts_it() -> None:
    """vLLM #43559/#53505: a backward state copy overwrote a snapshot that was still in use.

    Upstream, a boundary copy with its destination before its source wrote
    over a state the cache still pointed at, and later hits continued from
    overwritten memory. Here a save into a slot a live entry owns evicts
    that entry from the ring first: a rollback to it declines, and a restore
    of it built by hand is refused by the pool; the overwritten slot is
    never served under the old snapshot's name.
    """
    s = Scheduler(slots=2)
    s.decode(0, [1, 2, 3, 4], boundaries=[2, 4])
    s.roll_back(0, at_most=3)  # back to 2: slot 1 (position 4) is free again
    evicted = restore_for(s.rings[0], 0, 2)
    s.decode(0, [30, 40, 50], boundaries=[3, 5])  # 3 takes slot 1, 5 takes slot 0 from 2
    assert s.rings[0].snapshot_positions() == (3, 5)
    assert s.rings[0].slot_for_position(5) == evicted.slot
    s.rings[0].check_valid()
    assert s.pool.stored_value(0, evicted.slot) == (1, 2, 30, 40, 50)
    before = s.plan(0, at_most=2)
    assert before == RollbackDeclined(0, DeclineReason.SNAPSHOT_EVICTED)
    assert s.rings[0].snapshot_positions() == (3, 5)
    with pytest.raises(StaleSnapshotError, match="holds position 5"):
        apply_effects(s.pool, [evicted], s.rings)
    assert s.live() == (1, 2, 30, 40, 50)


# -- SGLang ----------------------------------------------------------------------------------


def test_sglang_33450_a_failed_save_leaves_its_slot_holding_nothing() -> None:
    """SGLang #33450: the radix cache kept a wrong SSM state under a new extra-buffer entry.

    Upstream, the state stored for a track slot was not the one its tag
    named, and later prefix hits continued from it. Here a save into a slot
    that held an earlier snapshot fails: the slot then holds nothing - not
    the earlier content under the new tag, nor under the old - so restores
    of either are refused, and the ring forgets the failed snapshot.
    """
    s = Scheduler(slots=1)
    s.decode(0, [1, 2], boundaries=[2])
    old = restore_for(s.rings[0], 0, 2)
    s.pool.fail_when(lambda save: save.token_position == 4)
    s.consume(0, 3)
    save = s.record(0, 4, boundary=True)
    assert save is not None
    assert save.slot == old.slot
    outcome = apply_effects(s.pool, [save], s.rings)
    assert outcome.failed == (save,)
    assert s.rings[0].snapshot_positions() == ()
    assert (s.pool.stored_position(0, 0), s.pool.stored_ticket(0, 0)) == (None, None)
    assert s.pool.stored_value(0, 0) is None
    for restore in (restore_for_ticket(save), old):
        with pytest.raises(StaleSnapshotError, match="holds nothing"):
            s.pool.restore([restore])
    assert s.live() == (1, 2, 3, 4)
    assert s.plan(0) == RollbackDeclined(0, DeclineReason.SNAPSHOT_EVICTED)


@pytest.mark.parametrize("batch_dim", [0, 1])
def test_sglang_37836_a_batch_over_shuffled_rows_lands_each_in_its_own_row(batch_dim: int) -> None:
    """SGLang #37836: states of a multi-request batch were taken at the wrong row offsets.

    Upstream, every request after the first in a batch had its state read
    at the wrong offset, silently. Here batches of saves and restores over
    shuffled, non-contiguous, and contiguous-but-out-of-order rows each land
    in their own row, checked element for element on every row.
    """
    rows, layers = 6, 2

    def contents(tag: int) -> torch.Tensor:
        per_row = torch_rows(rows, tag)  # [rows, 3, 4]
        stacked = torch.stack([per_row + layer * 10_000 for layer in range(layers)])
        return stacked if batch_dim == 1 else stacked.transpose(0, 1).contiguous()

    def row(t: torch.Tensor, r: int) -> torch.Tensor:
        return t.select(batch_dim, r)

    live = contents(tag=0)
    pool = TorchSnapshotPool([live], 3, batch_dim=batch_dim)
    rings = [SsmDecodeRing(3) for _ in range(rows)]

    def save_batch(order: Sequence[int], position: int) -> None:
        live.copy_(contents(tag=position))
        saves = []
        for seq in order:
            save = snapshot_boundary_if_ssm(
                rings[seq], seq=seq, token_position=position, is_boundary=True, in_thinking=False
            )
            assert save is not None
            saves.append(save)
        assert apply_effects(pool, saves, rings).ok

    save_batch([3, 0, 5, 1, 4, 2], position=1)  # shuffled, all rows
    save_batch([4, 0, 2], position=2)  # non-contiguous
    save_batch([2, 1, 3, 0], position=3)  # contiguous, out of order
    live.fill_(-1.0)

    expected: dict[int, int | None] = dict.fromkeys(range(rows))

    def restore_batch(order: Sequence[int], position: int) -> None:
        apply_effects(pool, [restore_for(rings[seq], seq, position) for seq in order], rings)
        for seq in order:
            expected[seq] = position
        for r, tag in expected.items():
            want = torch.full_like(row(live, r), -1.0) if tag is None else row(contents(tag), r)
            assert torch.equal(row(live, r), want), f"row {r} after restoring {order}"

    restore_batch([1, 3, 2, 0], position=3)  # contiguous, out of order
    restore_batch([4, 0], position=2)  # non-contiguous
    restore_batch([5, 2, 3], position=1)  # shuffled
    restore_batch([2, 0, 3, 1], position=3)  # the neighbouring rows of the issue, [0, 2, 1, 3]


# -- llama.cpp -------------------------------------------------------------------------------


def test_llama_cpp_28466_a_conv_state_that_was_never_written_is_not_restored() -> None:
    """llama.cpp #28466: a restore read a conv state that was never written.

    Upstream, a checkpoint's conv state was restored from memory no save had
    filled. Here a ring entry whose save never reached the pool makes the
    rollback's restore a ``StaleSnapshotError``; the live state keeps every
    bit, instead of the pool's uninitialised storage.
    """
    conv = torch.full((2, 3, 4), 7.0)
    ssm = torch.full((2, 5), 8.0)
    pool = TorchSnapshotPool([conv, ssm], 2)
    ring = SsmDecodeRing(2)
    never_saved = snapshot_boundary_if_ssm(
        ring, seq=1, token_position=3, is_boundary=True, in_thinking=False
    )
    assert never_saved is not None
    assert pool.stored_ticket(1, never_saved.slot) is None
    plan = rollback_to_boundary(ring, [3], seq=1, current_len=5)
    assert isinstance(plan, RollbackPlan)
    with pytest.raises(StaleSnapshotError, match="holds nothing"):
        apply_effects(pool, plan.effects, {1: ring})
    assert torch.equal(conv, torch.full((2, 3, 4), 7.0))
    assert torch.equal(ssm, torch.full((2, 5), 8.0))


def test_llama_cpp_24055_checkpoints_of_an_edited_prompt_are_never_restored() -> None:
    """llama.cpp #24055: a prompt edit left hybrid checkpoints that no longer matched the prompt.

    Upstream, the server could not tell which recurrent checkpoints survived
    an edit, and invalidated them all. Here an edit after token 5 keeps the
    checkpoint at 4 (``truncate_after``), which restores exactly; after a
    rewrite from the start the scheduler ``clear()``s the ring: a rollback
    declines even against the old boundaries, and once the new prompt's
    checkpoints take the same slots and positions, the old ones' restores
    are refused by ticket.
    """
    s = Scheduler(slots=2)
    s.decode(0, [1, 2, 3, 4, 5, 6, 7, 8], boundaries=[4, 8])
    # An edit after token 5: checkpoint 4 is still the prompt's; 8 is not.
    s.rings[0].truncate_after(5)
    s.truncate(0, 5)
    s.pool.live[0] = tuple(s.tokens[0])
    for token in (60, 70, 80):
        s.consume(0, token)
    assert s.rings[0].snapshot_positions() == (4,)
    assert s.roll_back(0).keep_len == 4
    assert s.live() == (1, 2, 3, 4)
    s.decode(0, [5, 6, 7, 8], boundaries=[8])
    old = [restore_for(s.rings[0], 0, p) for p in (4, 8)]
    # A rewrite from the start: nothing survives, even against the old boundaries.
    s.rings[0].clear()
    assert s.plan(0) == RollbackDeclined(0, DeclineReason.SNAPSHOT_EVICTED)
    s.tokens[0], s.boundaries[0], s.pool.live[0] = [], [], ()
    s.decode(0, [10, 20, 30, 40, 50, 60, 70, 80], boundaries=[4, 8])
    for restore in old:
        assert restore_for(s.rings[0], 0, restore.token_position).slot == restore.slot
        with pytest.raises(
            StaleSnapshotError, match=f"holds position {restore.token_position} ticket"
        ):
            s.pool.restore([restore])
        assert s.live() == (10, 20, 30, 40, 50, 60, 70, 80)
    assert s.roll_back(0, at_most=7).keep_len == 4
    assert s.live() == (10, 20, 30, 40)


def test_llama_cpp_24055_a_row_reused_with_a_fresh_ring_cannot_restore_old_checkpoints() -> None:
    """llama.cpp #24055, without ``clear()``: the edited prompt gets a fresh ring on the same row.

    The fresh ring reuses the old checkpoints' slots at the same positions,
    and its checkpoint at 8 is recorded but its save never reaches the pool.
    Tickets make the old prompt's content in that slot unrestorable: the
    restore of the fresh 8 is refused; dropping it, a rollback finds the new
    4, exactly.
    """
    s = Scheduler(slots=2)
    s.decode(0, [1, 2, 3, 4, 5, 6, 7, 8], boundaries=[4, 8])
    s.rings[0] = SsmDecodeRing(2)
    s.tokens[0], s.boundaries[0], s.pool.live[0] = [], [], ()
    s.decode(0, [10, 20, 30, 40, 50, 60, 70], boundaries=[4])
    lost = s.record(0, 80, boundary=True)
    assert lost is not None
    assert s.pool.stored_value(0, lost.slot) == (1, 2, 3, 4, 5, 6, 7, 8)
    assert s.pool.stored_position(0, lost.slot) == lost.token_position
    plan = s.plan(0)
    assert isinstance(plan, RollbackPlan)
    assert plan.effects == (restore_for_ticket(lost),)
    with pytest.raises(StaleSnapshotError, match="holds position 8 ticket"):
        apply_effects(s.pool, plan.effects, s.rings)
    assert s.live() == (10, 20, 30, 40, 50, 60, 70, 80)
    s.rings[0].discard(8)  # the scheduler drops the snapshot it knows was lost
    assert s.roll_back(0).keep_len == 4
    assert s.live() == (10, 20, 30, 40)
