"""A speculative scheduler's verify loop over many rows, against the fake pool, at scale.

Each row's "SSM state" is the tuple of tokens consumed so far, and tokens are
unique across the whole run (drafts, bonus tokens and rejected drafts alike),
so every state names exactly the tokens that produced it. A row whose last
committed token is at output length ``L`` has consumed ``L - 1`` tokens; a
verify step feeds that token and ``k`` drafts (1 to 8, drawn per row per
step), the target accepts ``n`` of them, and the bonus token it samples is
the new last committed token, fed first in the next step. After every step
and every rollback, for every row:

- the live state is the tuple of its committed tokens but the last one (the
  state after ``L + n`` tokens: rule 3);
- every live ring entry's slot holds that entry's ticket and exactly the
  token prefix at its position (rules 1 and 2: a snapshot of a rejected
  draft, or one taken from the wrong intermediate state, is a different
  tuple), and the position is a committed boundary outside thinking;
- the ring is valid.

Around the verify steps: boundaries and thinking spans anywhere in the
drafts (rejected ones included), save faults, idle rows whose intermediate
buffers are left stale, rollbacks between steps (a decline is checked
against what the slots physically hold, and is sometimes followed by a
recompute from the prompt), and rows reused by new sequences. Steps go
through ``commit_verified`` per row or ``commit_verified_batch``, chosen at
random per step.

Two engine styles: an intermediate buffer (the fake pool's ``intermediate``,
vLLM and SGLang), and replay (a pool without one: the scheduler restores
its checkpoint and feeds the plan's segments again, as TensorRT-LLM and
ReplaySSM do). The mutants at the end are applied to ``_verify`` and must be
caught.
"""

from __future__ import annotations

import inspect
import itertools
import os
import random
import textwrap
from collections.abc import Sequence

import attrs
import pytest

from ssm_rollback import (
    Effect,
    RollbackPlan,
    SaveBatch,
    SsmDecodeRing,
    VerifyBatch,
    VerifyPlan,
    apply_effects,
    commit_verified,
    commit_verified_batch,
    rollback_to_boundary,
)
from ssm_rollback._core import verify as verify_module
from ssm_rollback.backends.fake import FakeSnapshotPool

_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
# Verify steps per seed: 8 seeds x 64 rows x 230 steps, ~90% of rows busy each step,
# is over 100,000 row-steps for each engine style in the ci profile.
_STEPS = {"dev": 30, "ci": 230, "soak": 20_000}[_PROFILE]
_MIN_ROW_STEPS = {"dev": 1_000, "ci": 100_000, "soak": 10_000_000}[_PROFILE]
SEEDS = 8
ROWS = 64
MAX_DRAFTS = 8
IDLE_RATE = 0.1  # a row sits a step out (waiting, or prefilling elsewhere)
REUSE_RATE = 0.02  # a sequence finishes between steps and its row is reused
# One per seed: every depth from a single slot (most boundaries evict) up, and a disabled ring.
_CAPACITIES = (1, 2, 3, 4, 8, 1, 2, 0)


@attrs.frozen
class Config:
    """One run's knobs."""

    capacity: int
    boundary_rate: float
    thinking_rate: float
    accept_rate: float  # each draft accepted with this chance, until the first rejection
    fault_rate: float
    rollback_rate: float
    replay: bool = False

    @classmethod
    def draw(cls, seed: int, *, replay: bool) -> Config:
        rng = random.Random(f"config {seed} {replay}")
        return cls(
            capacity=_CAPACITIES[seed % len(_CAPACITIES)],
            boundary_rate=rng.choice([0.05, 0.2, 0.5]),
            thinking_rate=rng.choice([0.0, 0.02, 0.1]),
            accept_rate=rng.choice([0.3, 0.7, 0.95]),
            fault_rate=rng.choice([0.0, 0.05, 0.3]),
            rollback_rate=rng.choice([0.01, 0.05]),
            replay=replay,
        )


@attrs.define
class Row:
    """What the scheduler knows about one row's sequence."""

    # Committed tokens; the last one has not been fed yet.
    tokens: list[int]
    # Boundary position -> whether it was inside a thinking span.
    boundaries: dict[int, bool] = attrs.field(factory=dict)
    thinking_until: int = 0


@attrs.define
class Tally:
    """What a run exercised, so that a run that exercised nothing fails."""

    row_steps: int = 0
    batched_steps: int = 0
    per_row_steps: int = 0
    drafts_fed: int = 0
    drafts_accepted: int = 0
    all_accepted: int = 0
    none_accepted: int = 0
    mid_run_saves: int = 0
    rejected_boundaries: int = 0
    thinking_boundaries: int = 0
    failed_saves: int = 0
    replays: int = 0
    served: int = 0
    declined: int = 0
    recomputed: int = 0
    reuses: int = 0


@attrs.define
class _Step:
    """One busy row's part of a verify step, before and after the target's verdict."""

    seq: int
    first: int
    drafts: list[int]
    accepted: int
    is_boundary: list[bool]
    in_thinking: list[bool]
    thinking_until: list[int]  # the row's span end after each fed token
    checkpoint: tuple[int, ...]  # the live state before the forward pass


class Scheduler:
    """The step loop of a speculative-decoding scheduler over ``ROWS`` rows."""

    def __init__(self, seed: int, config: Config) -> None:
        self.rng = random.Random(seed)
        self.config = config
        self.pool = FakeSnapshotPool(ROWS, config.capacity)
        self.pool.fail_when(self._fault if config.fault_rate else None)
        self.rings = [SsmDecodeRing(config.capacity) for _ in range(ROWS)]
        self.fresh = itertools.count(1)
        self.rows = [self._new_row(seq) for seq in range(ROWS)]
        self.tally = Tally()
        self.draft_lengths: set[int] = set()

    def _fault(self, _save: object) -> bool:
        return self.rng.random() < self.config.fault_rate

    def _new_row(self, seq: int) -> Row:
        """A new sequence: prefill sampled its first token; the live state is the prompt's."""
        self.pool.live[seq] = ()
        return Row([next(self.fresh)])

    # -- the verify step ----------------------------------------------------------------

    def run(self, steps: int) -> Tally:
        self.check()
        for _ in range(steps):
            self.verify_step()
            self.check()  # every row: a wrong copy may land in any row
            self.between_steps()  # checks each row it touches
        return self.tally

    def verify_step(self) -> None:
        rng = self.rng
        busy = [self._draft(seq) for seq in range(ROWS) if rng.random() >= IDLE_RATE]
        if not busy:
            return
        plans, batch = self._commit(busy)
        if self.config.replay:
            for step, plan in zip(busy, plans, strict=True):
                self._replay(step, plan)
        else:
            effects = self._effects(plans, batch)
            self.tally.failed_saves += len(apply_effects(self.pool, effects, self.rings).failed)
        for step in busy:
            self._accept_tokens(step)

    def _draft(self, seq: int) -> _Step:
        """Draft ``k`` tokens for ``seq`` and run the forward pass over them."""
        rng, row, config = self.rng, self.rows[seq], self.config
        k = rng.randint(1, MAX_DRAFTS)
        drafts = [next(self.fresh) for _ in range(k)]
        first = len(row.tokens)
        until = row.thinking_until
        is_boundary, in_thinking, untils = [], [], []
        for position in range(first, first + k + 1):
            if position > until and rng.random() < config.thinking_rate:
                until = position + rng.randint(0, 12)  # a span opens here, maybe in a draft
            is_boundary.append(rng.random() < config.boundary_rate)
            in_thinking.append(position <= until)
            untils.append(until)
        accepted = 0
        while accepted < k and rng.random() < config.accept_rate:
            accepted += 1
        checkpoint = self.pool.live[seq]
        assert isinstance(checkpoint, tuple)
        # The forward pass: the state after each fed token; the live state ends after all.
        states = [tuple(row.tokens)]
        for token in drafts:
            states.append((*states[-1], token))
        if not self.config.replay:
            self.pool.intermediate[seq] = [*states]
        self.pool.live[seq] = states[-1]
        return _Step(seq, first, drafts, accepted, is_boundary, in_thinking, untils, checkpoint)

    def _commit(self, busy: list[_Step]) -> tuple[tuple[VerifyPlan, ...], VerifyBatch | None]:
        if self.rng.random() < 0.5:
            self.tally.per_row_steps += 1
            plans = tuple(
                commit_verified(
                    self.rings[step.seq],
                    seq=step.seq,
                    first_position=step.first,
                    accepted=step.accepted,
                    is_boundary=step.is_boundary,
                    in_thinking=step.in_thinking,
                )
                for step in busy
            )
            return plans, None
        self.tally.batched_steps += 1
        batch = commit_verified_batch(
            self.rings,
            first_positions=[step.first for step in busy],
            accepted=[step.accepted for step in busy],
            is_boundary=[step.is_boundary for step in busy],
            in_thinking=[step.in_thinking for step in busy],
            rows=[step.seq for step in busy],
        )
        assert [save.seq for save in batch.saves] == [s.seq for p in batch.plans for s in p.saves]
        return batch.plans, batch

    def _effects(
        self, plans: tuple[VerifyPlan, ...], batch: VerifyBatch | None
    ) -> Sequence[Effect | SaveBatch]:
        """The step's effects for an intermediate-buffer pool, as the plans give them.

        Every save a plan carries is for an entry still live after the step:
        a row that accepted more boundaries than its ring has slots does not
        save the ones its own step evicted.
        """
        for plan in plans:
            ring = self.rings[plan.seq]
            for save in plan.saves:
                entry = ring.entry_for(save.token_position)
                assert entry is not None, f"a save for no live entry: {save}"
                assert entry.ticket == save.ticket, f"a save for an evicted entry: {save}"
        return [e for plan in plans for e in plan.effects] if batch is None else batch.effects

    def _replay(self, step: _Step, plan: VerifyPlan) -> None:
        """A replay engine: restore the checkpoint, feed each segment, save at its end."""
        pool, seq = self.pool, step.seq
        accepted_tokens = self.rows[seq].tokens + step.drafts[: step.accepted]
        if plan.replay_needed:
            self.tally.replays += 1
            # The engine's checkpoint is the state before the forward pass, whose
            # position the plan names: a plan naming another would show below.
            pool.live[seq] = step.checkpoint
            position = plan.checkpoint_position
        else:
            position = plan.end_position
        for segment in plan.replay:
            live = pool.live[seq]
            assert isinstance(live, tuple)
            pool.live[seq] = live + tuple(accepted_tokens[position : segment.through])
            position = segment.through
            if segment.save is not None:
                outcome = apply_effects(pool, [segment.save], self.rings)
                self.tally.failed_saves += len(outcome.failed)

    def _accept_tokens(self, step: _Step) -> None:
        """The scheduler's side of the verdict: keep the accepted drafts, append the bonus."""
        row, n, tally = self.rows[step.seq], step.accepted, self.tally
        for j in range(len(step.drafts) + 1):
            if step.is_boundary[j]:
                if j <= n:
                    row.boundaries[step.first + j] = step.in_thinking[j]
                    tally.thinking_boundaries += step.in_thinking[j]
                    tally.mid_run_saves += j < n and not step.in_thinking[j]
                else:
                    tally.rejected_boundaries += 1
        row.tokens += step.drafts[:n]
        row.tokens.append(next(self.fresh))  # the bonus token
        row.thinking_until = step.thinking_until[n]
        tally.row_steps += 1
        self.draft_lengths.add(len(step.drafts))
        tally.drafts_fed += len(step.drafts)
        tally.drafts_accepted += n
        tally.all_accepted += n == len(step.drafts)
        tally.none_accepted += n == 0

    # -- between verify steps -----------------------------------------------------------

    def between_steps(self) -> None:
        for seq in range(ROWS):
            roll = self.rng.random()
            if roll < self.config.rollback_rate:
                self.roll_back(seq)
            elif roll < self.config.rollback_rate + REUSE_RATE:
                self.rings[seq].clear()
                self.rows[seq] = self._new_row(seq)
                self.tally.reuses += 1
            else:
                continue
            self.check_row(seq)

    def roll_back(self, seq: int) -> None:
        rng, row, ring = self.rng, self.rows[seq], self.rings[seq]
        current = len(row.tokens)
        at_most = rng.choice([None, rng.randint(0, current)])
        limit = current if at_most is None else min(at_most, current)
        expected = self.physically_reachable(seq, limit)
        result = rollback_to_boundary(
            ring, list(row.boundaries), seq=seq, current_len=current, at_most=at_most
        )
        if isinstance(result, RollbackPlan):
            assert result.keep_len == expected, f"restored {result.keep_len}, not {expected}"
            apply_effects(self.pool, result.effects, self.rings)
            keep = result.keep_len
            self.tally.served += 1
        else:
            assert expected == -1, f"declined ({result.reason}) although {expected} was held"
            self.tally.declined += 1
            reachable = [p for p in row.boundaries if p <= limit]
            if not reachable or rng.random() < 0.5:
                return
            keep = reachable[-1]  # recompute the prefix from the prompt instead
            ring.truncate_after(keep)
            self.pool.live[seq] = tuple(row.tokens[:keep])
            self.tally.recomputed += 1
        del row.tokens[keep:]
        for position in [p for p in row.boundaries if p > keep]:
            del row.boundaries[position]
        assert self.pool.live[seq] == tuple(row.tokens), "the restored state is not the prefix"
        row.tokens.append(next(self.fresh))  # the token chosen instead, fed next step

    def physically_reachable(self, seq: int, limit: int) -> int:
        """The largest boundary <= limit some slot of ``seq`` holds exactly (-1: none)."""
        held = {self.pool.stored_value(seq, slot) for slot in range(self.config.capacity)}
        tokens = self.rows[seq].tokens
        best = -1
        for position in self.rows[seq].boundaries:
            if position <= limit and tuple(tokens[:position]) in held:
                best = position
        return best

    # -- the check after everything -----------------------------------------------------

    def check(self) -> None:
        for seq in range(ROWS):
            self.check_row(seq)

    def check_row(self, seq: int) -> None:
        pool, row, ring = self.pool, self.rows[seq], self.rings[seq]
        ring.check_valid()
        tokens = row.tokens
        assert pool.live[seq] == tuple(tokens[:-1]), (
            f"row {seq}: the live state is not the state after its {len(tokens) - 1} "
            f"committed and fed tokens"
        )
        for entry in ring.entries:
            position, slot = entry.token_position, entry.snapshot_slot
            assert pool.stored_ticket(seq, slot) == entry.ticket, (
                f"row {seq}: slot {slot} does not hold the ticket of its entry at {position}"
            )
            assert pool.stored_value(seq, slot) == tuple(tokens[:position]), (
                f"row {seq}: the snapshot at position {position} (slot {slot}) is not "
                f"the state after the first {position} committed tokens"
            )
            assert row.boundaries.get(position) is False, (
                f"row {seq}: a snapshot at {position}, which is no committed boundary "
                f"outside thinking"
            )


def simulate(seed: int, steps: int, *, replay: bool, config: Config | None = None) -> Tally:
    return Scheduler(seed, config or Config.draw(seed, replay=replay)).run(steps)


# -- the runs -------------------------------------------------------------------------------


@pytest.mark.parametrize("replay", [False, True], ids=["intermediate", "replay"])
@pytest.mark.parametrize("seed", range(SEEDS))
def test_every_verify_step_leaves_each_state_and_snapshot_exact(seed: int, replay: bool) -> None:
    tally = simulate(seed, _STEPS, replay=replay)
    # Each engine style alone runs _MIN_ROW_STEPS row-steps over the SEEDS seeds.
    assert tally.row_steps >= _MIN_ROW_STEPS // SEEDS
    assert tally.per_row_steps > 0
    assert tally.batched_steps > 0


def test_the_runs_exercise_every_path() -> None:
    totals, lengths = Tally(), set()
    for seed in range(SEEDS):
        for replay in (False, True):
            scheduler = Scheduler(seed, Config.draw(seed, replay=replay))
            tally = scheduler.run(40)
            lengths |= scheduler.draft_lengths
            for field in attrs.fields(Tally):
                name = field.name
                setattr(totals, name, getattr(totals, name) + getattr(tally, name))
    zero = [f.name for f in attrs.fields(Tally) if not getattr(totals, f.name)]
    assert not zero, f"nothing exercised: {zero}"
    assert lengths == set(range(1, MAX_DRAFTS + 1))


# -- mutants of _verify: each must be caught -------------------------------------------------


def mutate(monkeypatch: pytest.MonkeyPatch, name: str, old: str, new: str) -> None:
    """Replace ``verify.<name>`` by a copy of its source with ``old`` changed to ``new``."""
    function = getattr(verify_module, name)
    source = textwrap.dedent(inspect.getsource(function))
    assert source.count(old) == 1, f"{old!r} is no longer in verify.{name}: update the mutant"
    namespace = dict(vars(verify_module))
    code = compile(
        source.replace(old, new),
        f"<mutant of _verify.{name}>",
        "exec",
        flags=annotations.compiler_flag,  # the feature this module imported
        dont_inherit=True,
    )
    exec(code, namespace)
    monkeypatch.setattr(verify_module, name, namespace[name])


# Small runs with every boundary saved and no faults. Boundaries are sparse enough that
# most steps accept at most one per row: with two, mutant (a) reads one intermediate state
# twice, which apply_effects refuses before the mismatch could show.
_MUTANT_CONFIG = Config(
    capacity=8,
    boundary_rate=0.05,
    thinking_rate=0.02,
    accept_rate=0.8,
    fault_rate=0.0,
    rollback_rate=0.02,
)


def test_the_mutant_harness_alone_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    mutate(monkeypatch, "_plan", "ticket, j)", "ticket, j)")
    mutate(monkeypatch, "_check_row", "range(n + 1)", "range(n + 1)")
    simulate(0, 60, replay=False, config=_MUTANT_CONFIG)
    simulate(0, 60, replay=True, config=attrs.evolve(_MUTANT_CONFIG, replay=True))


def test_a_mid_run_boundary_saved_from_the_step_end_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mutate(monkeypatch, "_plan", "ticket, j)", "ticket, checked.accepted)")
    with pytest.raises(AssertionError, match="is not the state after the first"):
        simulate(0, 60, replay=False, config=_MUTANT_CONFIG)


def test_a_recorded_rejected_draft_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    mutate(monkeypatch, "_check_row", "range(n + 1)", "range(len(boundary))")
    for replay in (False, True):
        with pytest.raises(AssertionError, match="is not the state after the first"):
            simulate(0, 60, replay=replay, config=attrs.evolve(_MUTANT_CONFIG, replay=replay))


def test_a_replay_segment_that_runs_to_the_step_end_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mutate(
        monkeypatch,
        "_plan",
        "ReplaySegment(position, trusted_save(",
        "ReplaySegment(checked.first + checked.accepted, trusted_save(",
    )
    with pytest.raises(AssertionError, match="is not the state after the first"):
        simulate(0, 60, replay=True, config=attrs.evolve(_MUTANT_CONFIG, replay=True))


# -- a step that evicts its own boundaries ------------------------------------------------


@pytest.mark.parametrize("batched", [False, True], ids=["per-row", "batched"])
def test_more_accepted_boundaries_than_slots_apply(batched: bool) -> None:
    """A step's early boundaries evicted by its later ones get no save: one save per slot."""
    ring, pool = SsmDecodeRing(1), FakeSnapshotPool(1, 1)
    pool.live[0] = (1, 2, 3, 4)
    pool.intermediate[0] = [(1, 2, 3, 4, 5), (1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 5, 6, 7)]
    boundary, thinking = [True, True, False], [False, False, False]
    if batched:
        effects: Sequence[Effect | SaveBatch] = commit_verified_batch(
            [ring],
            first_positions=[5],
            accepted=[2],
            is_boundary=[boundary],
            in_thinking=[thinking],
        ).effects
    else:
        effects = commit_verified(
            ring, seq=0, first_position=5, accepted=2, is_boundary=boundary, in_thinking=thinking
        ).effects
    apply_effects(pool, effects, [ring])
    (entry,) = ring.entries
    assert entry.token_position == 6
    assert pool.stored_value(0, entry.snapshot_slot) == (1, 2, 3, 4, 5, 6)
    assert pool.live[0] == (1, 2, 3, 4, 5, 6, 7)
