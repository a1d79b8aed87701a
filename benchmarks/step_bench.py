"""The pure-Python bookkeeping of one decode step for 1,024 rows, per row: per-row and batched.

    python benchmarks/step_bench.py            # the full run (about a minute)
    python benchmarks/step_bench.py --smoke    # a quick pass that only checks it runs
    python benchmarks/step_bench.py --baseline-rev bba96f4   # + the per-row API against v0.1

Every path first does the scheduler's own per-row work (commit the token:
the bare loop, timed alone as the reference), then the library's
bookkeeping for the step:

- ``per-row``: ``snapshot_boundary_if_ssm`` for every row;
- ``batched, lists``: one ``snapshot_boundaries`` call over Python lists;
- ``batched, numpy``: the same over numpy arrays (the scheduler keeps its
  step columns as arrays; the library reads them through ``tolist()``).

Each is measured without and with handing the step's saves to
``apply_effects`` on a pool whose copies cost nothing (so the pool's own
per-row copying, which a real pool does in one batched tensor op, is not
counted). All paths run in one process, interleaved, and the medians are
compared; the microseconds per row are the library's cost (path minus bare
loop), the ratios hold on a busy machine.

``--baseline-rev REV`` also times the per-row API of the library as it was
at git revision ``REV`` (extracted with ``git archive`` into a temporary
folder and imported beside this one, see ``_baseline.py``), interleaved with
today's, and prints today's cost over the baseline's at each boundary rate.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol

import numpy as np

from _baseline import Baseline, baseline_package
from ssm_rollback import (
    SaveBatch,
    SaveOutcome,
    SsmDecodeRing,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    apply_effects,
    snapshot_boundaries,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.pool._base import PoolBase

ROWS = 1_024
SLOTS = 8
PATTERNS = 64


class NullCopyPool(PoolBase):
    """A pool that runs every check and tag of a real one but copies nothing."""

    def save(self, saves: Sequence[SsmSnapshotSave] | SaveBatch, /) -> SaveOutcome:
        return SaveOutcome(self._save_batch(saves))

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        self._restore_batch(restores)

    def _copy_saves(self, rows: list[int], flat: list[int]) -> None:
        pass

    def _copy_restores(self, rows: list[int], flat: list[int]) -> None:
        pass


class Batch:
    """Scheduler-side state of a decode batch, as a scheduler would keep it."""

    def __init__(self, boundary_rate: float, seed: int = 0) -> None:
        rng = random.Random(seed)
        self.tokens: list[list[int]] = [[] for _ in range(ROWS)]
        self.rings = [SsmDecodeRing(SLOTS) for _ in range(ROWS)]
        self.pool = NullCopyPool(ROWS, SLOTS)
        # Fixed boundary patterns, drawn once, so every path sees the same.
        self.patterns = [
            [rng.random() < boundary_rate for _ in range(ROWS)] for _ in range(PATTERNS)
        ]
        self.np_patterns = [np.array(p, dtype=bool) for p in self.patterns]
        self.thinking = [False] * ROWS
        self.np_thinking = np.zeros(ROWS, dtype=bool)
        self.positions = [0] * ROWS
        self.np_positions = np.zeros(ROWS, dtype=np.int64)
        self.steps = 0


class Decide(Protocol):
    """``snapshot_boundary_if_ssm``'s signature (today's, or a baseline revision's)."""

    def __call__(
        self,
        ring: SsmDecodeRing,
        /,
        *,
        seq: int,
        token_position: int,
        is_boundary: bool,
        in_thinking: bool,
    ) -> SsmSnapshotSave | None: ...


def commit_tokens(batch: Batch) -> list[bool]:
    """The scheduler's own work: append each row's token (and read its boundary flag)."""
    pattern = batch.patterns[batch.steps % PATTERNS]
    for seq, tokens in enumerate(batch.tokens):
        tokens.append(seq)
    batch.steps += 1
    return pattern


def bare(batch: Batch, apply: bool) -> None:
    commit_tokens(batch)


def per_row(batch: Batch, apply: bool, decide: Decide = snapshot_boundary_if_ssm) -> None:
    pattern = commit_tokens(batch)
    rings, saves = batch.rings, []
    for seq, tokens in enumerate(batch.tokens):
        save = decide(
            rings[seq],
            seq=seq,
            token_position=len(tokens),
            is_boundary=pattern[seq],
            in_thinking=False,
        )
        if save is not None:
            saves.append(save)
    if apply:
        apply_effects(batch.pool, saves, rings)


def batched_lists(batch: Batch, apply: bool) -> None:
    pattern = commit_tokens(batch)
    batch.positions = [p + 1 for p in batch.positions]  # the scheduler's position column
    saves = snapshot_boundaries(
        batch.rings, positions=batch.positions, is_boundary=pattern, in_thinking=batch.thinking
    )
    if apply:
        apply_effects(batch.pool, [saves], batch.rings)


def batched_numpy(batch: Batch, apply: bool) -> None:
    commit_tokens(batch)
    batch.np_positions += 1
    saves = snapshot_boundaries(
        batch.rings,
        positions=batch.np_positions,
        is_boundary=batch.np_patterns[(batch.steps - 1) % PATTERNS],
        in_thinking=batch.np_thinking,
    )
    if apply:
        apply_effects(batch.pool, [saves], batch.rings)


PATHS: dict[str, Callable[[Batch, bool], None]] = {
    "per-row": per_row,
    "batched, lists": batched_lists,
    "batched, numpy": batched_numpy,
}


def compare_baseline(base: Baseline, steps: int, rounds: int) -> None:
    """Today's per-row API against the baseline revision's, interleaved, at each boundary rate."""
    rev = base.label
    ring, decide = base.take(SsmDecodeRing), base.take(snapshot_boundary_if_ssm)
    print(f"\nper-row API, today's cost / revision {rev}'s (library cost: path minus bare loop)")
    for rate in (0.0, 0.1, 1.0):
        today, then, empty = Batch(rate), Batch(rate), Batch(rate)
        then.rings = [ring(SLOTS) for _ in range(ROWS)]
        times: dict[str, list[float]] = {"today": [], "then": [], "bare": []}
        old_per_row = partial(per_row, decide=decide)
        for _ in range(rounds):
            times["bare"].append(time_steps(bare, empty, steps, False))
            times["today"].append(time_steps(per_row, today, steps, False))
            times["then"].append(time_steps(old_per_row, then, steps, False))
        median = {key: statistics.median(values) for key, values in times.items()}
        ours, theirs = median["today"] - median["bare"], median["then"] - median["bare"]
        print(
            f"{rate:>10.0%}   today {ours:.3f} us  {rev} {theirs:.3f} us  ratio {ours / theirs:.2f}"
        )


def time_steps(step: Callable[[Batch, bool], None], batch: Batch, steps: int, apply: bool) -> float:
    """Microseconds per row per step."""
    start = time.perf_counter_ns()
    for _ in range(steps):
        step(batch, apply)
    return (time.perf_counter_ns() - start) / 1_000 / (steps * ROWS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run, only checks it works")
    parser.add_argument("--steps", type=int, default=20, help="steps per timing")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median)")
    parser.add_argument(
        "--baseline-rev", metavar="REV", help="also time the per-row API at this git revision"
    )
    args = parser.parse_args(argv)
    steps, rounds = (2, 1) if args.smoke else (args.steps, args.rounds)
    baseline = baseline_package(args.baseline_rev) if args.baseline_rev else None  # fails early

    print(f"{ROWS} rows, ring capacity {SLOTS}; library cost in us per row per step")
    print("(path minus the bare loop; medians of interleaved rounds)")
    header = f"{'boundaries':>10} {'bare loop':>9}"
    for name in PATHS:
        header += f" {name:>15} {'+ apply':>8}"
    print(header)
    for rate in (0.0, 0.1, 1.0):
        batches = {
            (name, apply): Batch(rate) for name in ["bare", *PATHS] for apply in (False, True)
        }
        times: dict[tuple[str, bool], list[float]] = {key: [] for key in batches}
        for _ in range(rounds):
            for (name, apply), batch in batches.items():
                step = bare if name == "bare" else PATHS[name]
                times[name, apply].append(time_steps(step, batch, steps, apply))
        median = {key: statistics.median(values) for key, values in times.items()}
        base = median["bare", False]
        line = f"{rate:>10.0%} {base:>9.3f}"
        for name in PATHS:
            line += f" {median[name, False] - base:>15.3f} {median[name, True] - base:>8.3f}"
        print(line)
    if baseline is not None:
        compare_baseline(baseline, steps, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
