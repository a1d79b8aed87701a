"""A scheduler's step loop over many sequences, against the fake pool, at scale.

Each row's live "SSM state" is the tuple of tokens it has generated, and
tokens are unique across the whole run, so a restore is right exactly when
the row's live state equals the kept prefix afterwards. Random boundaries,
thinking spans, save faults, rollbacks with random ``at_most``, and
sequences finishing with their rows reused by new ones.

The bug classes other engines have shipped that this rules out:

- a snapshot whose save failed still being restorable (the pool clears the
  slot and ``apply_effects`` discards the entry; here a restore of it would
  either leave the wrong tuple live or raise ``StaleSnapshotError``);
- a slot overwritten by a later save being restored for an older position
  (eviction by slot ownership and the pool's position tags);
- a reused row restoring the previous sequence's state (``clear`` on finish;
  the old sequence's tokens can never be a prefix of the new one's);
- the KV length and the restored snapshot coming from different positions
  (``keep_len`` is checked against the restored tuple's length);
- batches with rows at different positions (sequences start at different
  steps, and every step's saves go to the pool as one batch).

Every decline is checked against the pool's physical contents: no boundary
at or before the limit may have a slot holding exactly its prefix.
"""

from __future__ import annotations

import itertools
import os
import random

import attrs
import pytest

from ssm_rollback import (
    RollbackDeclined,
    RollbackPlan,
    SsmDecodeRing,
    SsmSnapshotSave,
    apply_effects,
    rollback_to_boundary,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.backends.fake import FakeSnapshotPool

# Sequence-steps per seed: 8 seeds x 64 rows x 200 steps = 102,400 in the ci profile.
_SCALE = {"dev": 30, "ci": 200, "soak": 20_000}[os.environ.get("HYPOTHESIS_PROFILE", "ci")]
ROWS = 64


@attrs.define
class Sequence_:
    tokens: list[int] = attrs.field(factory=list)
    boundaries: list[int] = attrs.field(factory=list)
    thinking_until: int = 0


@attrs.define
class Tally:
    steps: int = 0
    served: int = 0
    declined: int = 0
    failed_saves: int = 0
    reuses: int = 0


def physically_reachable(pool: FakeSnapshotPool, seq: int, seq_state: Sequence_, limit: int) -> int:
    """The largest boundary <= limit that some slot of row seq holds exactly (-1: none)."""
    held = {pool.stored_value(seq, slot) for slot in range(pool.slots_per_sequence)}
    best = -1
    for boundary in seq_state.boundaries:
        if boundary <= limit and tuple(seq_state.tokens[:boundary]) in held:
            best = boundary
    return best


def simulate(seed: int, steps: int) -> Tally:
    rng = random.Random(seed)
    capacity = rng.choice([0, 1, 2, 3, 4, 8])
    boundary_rate = rng.choice([0.05, 0.2, 0.5])
    fault_rate = rng.choice([0.0, 0.05, 0.3])
    rollback_rate = rng.choice([0.01, 0.05])
    pool = FakeSnapshotPool(ROWS, capacity)
    pool.fail_when(lambda save: rng.random() < fault_rate)
    rings = [SsmDecodeRing(capacity) for _ in range(ROWS)]
    seqs = [Sequence_() for _ in range(ROWS)]
    fresh_tokens = itertools.count()
    tally = Tally()

    for _ in range(steps):
        # 1. The forward pass commits one token per row; rows sit at different positions.
        effects: list[SsmSnapshotSave] = []
        for seq, state in enumerate(seqs):
            state.tokens.append(next(fresh_tokens))
            pool.live[seq] = tuple(state.tokens)
            length = len(state.tokens)
            if rng.random() < 0.02:
                state.thinking_until = length + rng.randint(1, 20)
            is_boundary = rng.random() < boundary_rate
            if is_boundary:
                state.boundaries.append(length)
            save = snapshot_boundary_if_ssm(
                rings[seq],
                seq=seq,
                token_position=length,
                is_boundary=is_boundary,
                in_thinking=length <= state.thinking_until,
            )
            if save is not None:
                effects.append(save)
        # 2. One batched save for the whole step; failed saves leave their rings.
        calls_before = pool.save_calls
        outcome = apply_effects(pool, effects, rings)
        assert pool.save_calls - calls_before == (1 if effects else 0)  # one batch per step
        tally.failed_saves += len(outcome.failed)
        tally.steps += 1

        # 3. Some rows roll back, some finish and hand their row to a new sequence.
        for seq, state in enumerate(seqs):
            roll = rng.random()
            if roll < rollback_rate:
                check_rollback(pool, rings, seq, state, rng, tally)
            elif roll < rollback_rate + 0.01:
                rings[seq].clear()
                seqs[seq] = Sequence_()
                pool.live[seq] = ()
                tally.reuses += 1
        for ring in rings:
            ring.check_valid()
    return tally


def check_rollback(
    pool: FakeSnapshotPool,
    rings: list[SsmDecodeRing],
    seq: int,
    state: Sequence_,
    rng: random.Random,
    tally: Tally,
) -> None:
    current_len = len(state.tokens)
    at_most = rng.choice([None, rng.randint(0, current_len + 2)])
    limit = current_len if at_most is None else min(at_most, current_len)
    expected = physically_reachable(pool, seq, state, limit)
    result = rollback_to_boundary(
        rings[seq], state.boundaries, seq=seq, current_len=current_len, at_most=at_most
    )
    if isinstance(result, RollbackDeclined):
        assert expected == -1, f"declined ({result.reason}) although {expected} was reachable"
        tally.declined += 1
        return
    assert isinstance(result, RollbackPlan)
    assert result.keep_len == expected
    apply_effects(pool, result.effects, rings)
    del state.tokens[result.keep_len :]
    del state.boundaries[state.boundaries.index(result.keep_len) + 1 :]
    # The restored state is the kept prefix: same position as the truncated KV.
    assert pool.live[seq] == tuple(state.tokens)
    assert len(state.tokens) == result.keep_len
    tally.served += 1


@pytest.mark.parametrize("seed", range(8))
def test_every_rollback_restores_the_kept_prefix(seed: int) -> None:
    tally = simulate(seed, _SCALE)
    assert tally.steps * ROWS >= _SCALE * ROWS
    if _SCALE >= 200:
        assert tally.served + tally.declined > 0
        assert tally.reuses > 0


def test_the_ci_run_covers_100k_sequence_steps_with_rollbacks_and_faults() -> None:
    if _SCALE < 200:
        pytest.skip("only the ci and soak profiles run at full scale")
    assert 8 * ROWS * _SCALE >= 100_000
    totals = [simulate(seed, 60) for seed in range(8)]
    assert sum(t.served for t in totals) > 0
    assert sum(t.declined for t in totals) > 0
    assert sum(t.failed_saves for t in totals) > 0
