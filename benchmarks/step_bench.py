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

``--baseline-rev REV`` also times the per-row and batched-lists paths of
the library as it was at git revision ``REV`` (extracted with ``git
archive`` into a temporary folder and imported beside this one, see
``_baseline.py``), with and without ``apply_effects`` on each revision's
``FakeSnapshotPool``, interleaved with today's, and prints today's cost over
the baseline's at each boundary rate.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Protocol

import numpy as np

from _baseline import TODAY, Baseline, Library, baseline_package
from ssm_rollback import (
    Effect,
    SaveBatch,
    SaveOutcome,
    SnapshotPool,
    SsmDecodeRing,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    apply_effects,
    snapshot_boundaries,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.backends.fake import FakeSnapshotPool
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
        self.pool: SnapshotPool = NullCopyPool(ROWS, SLOTS)
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


#: ``apply_effects``' signature, as this bench calls it.
Apply = Callable[[SnapshotPool, Iterable[Effect], list[SsmDecodeRing]], SaveOutcome]


class Boundaries(Protocol):
    """``snapshot_boundaries``' signature, as this bench calls it."""

    def __call__(
        self,
        rings: list[SsmDecodeRing],
        /,
        *,
        positions: list[int],
        is_boundary: list[bool],
        in_thinking: list[bool],
    ) -> SaveBatch: ...


def commit_tokens(batch: Batch) -> list[bool]:
    """The scheduler's own work: append each row's token (and read its boundary flag)."""
    pattern = batch.patterns[batch.steps % PATTERNS]
    for seq, tokens in enumerate(batch.tokens):
        tokens.append(seq)
    batch.steps += 1
    return pattern


def bare(batch: Batch, apply: bool) -> None:
    commit_tokens(batch)


def per_row(
    batch: Batch,
    apply: bool,
    decide: Decide = snapshot_boundary_if_ssm,
    run: Callable[
        [SnapshotPool, Iterable[Effect], list[SsmDecodeRing]], SaveOutcome
    ] = apply_effects,
) -> None:
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
        run(batch.pool, saves, rings)


def batched_lists(
    batch: Batch,
    apply: bool,
    decide: Boundaries = snapshot_boundaries,
    run: Callable[
        [SnapshotPool, Iterable[Effect], list[SsmDecodeRing]], SaveOutcome
    ] = apply_effects,
) -> None:
    pattern = commit_tokens(batch)
    batch.positions = [p + 1 for p in batch.positions]  # the scheduler's position column
    saves = decide(
        batch.rings, positions=batch.positions, is_boundary=pattern, in_thinking=batch.thinking
    )
    if apply:
        run(batch.pool, [saves], batch.rings)


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


def _library_paths(lib: Library) -> dict[str, Callable[[Batch, bool], None]]:
    """The per-row and batched-lists paths through ``lib`` (today's, or a baseline's)."""
    run = lib.take(apply_effects)
    row_by_row = partial(per_row, decide=lib.take(snapshot_boundary_if_ssm), run=run)
    batched = partial(batched_lists, decide=lib.take(snapshot_boundaries), run=run)
    return {"per-row": row_by_row, "batched, lists": batched}


def compare_baseline(base: Baseline, steps: int, rounds: int) -> None:
    """Today's per-row and batched paths against the baseline revision's, interleaved.

    ``+ apply`` hands the saves to ``apply_effects`` on each library's own
    ``FakeSnapshotPool`` (the pools the public API offers at every revision).
    """
    rev = base.label
    libraries: dict[str, Library] = {"today": TODAY, rev: base}
    print(f"\ntoday's library cost / revision {rev}'s (path minus bare loop, us per row)")
    print(f"{'boundaries':>10} {'path':>15} {'applied':>8} {'today':>8} {rev:>10} {'ratio':>6}")
    for rate in (0.0, 0.1, 1.0):
        empty = Batch(rate)
        runs = {}
        for label, lib in libraries.items():
            for name, path in _library_paths(lib).items():
                for applied in (False, True):
                    batch = Batch(rate)
                    batch.rings = [lib.take(SsmDecodeRing)(SLOTS) for _ in range(ROWS)]
                    batch.pool = lib.take(FakeSnapshotPool, "backends.fake")(ROWS, SLOTS)
                    runs[label, name, applied] = (path, batch)
        times: dict[object, list[float]] = {key: [] for key in [*runs, "bare"]}
        for _ in range(rounds):
            times["bare"].append(time_steps(bare, empty, steps, False))
            for key, (path, batch) in runs.items():
                times[key].append(time_steps(path, batch, steps, key[2]))
        bare_median = statistics.median(times["bare"])
        cost = {key: statistics.median(values) - bare_median for key, values in times.items()}
        for name in ("per-row", "batched, lists"):
            for applied in (False, True):
                ours, theirs = cost["today", name, applied], cost[rev, name, applied]
                print(
                    f"{rate:>10.0%} {name:>15} {'yes' if applied else 'no':>8} {ours:>8.3f} "
                    f"{theirs:>10.3f} {ours / theirs:>6.2f}"
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
        "--baseline-rev", metavar="REV", help="also time the library at this git revision"
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
