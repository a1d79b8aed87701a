"""The pure-Python bookkeeping of one decode step for 1,024 sequences, per sequence.

    python benchmarks/step_bench.py            # the full run (about half a minute)
    python benchmarks/step_bench.py --smoke    # a quick pass that only checks it runs

Per step and sequence, the library's path commits the token, asks
``snapshot_boundary_if_ssm`` whether to snapshot, and then hands the step's
saves to ``apply_effects`` on the fake pool (one batched call). The bare loop
iterates the same sequences and only commits the token. Both run in the same
process, interleaved, and the medians are compared, so the overhead is a
ratio that holds on a busy machine; the microseconds are context.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from ssm_rollback import SsmDecodeRing, SsmSnapshotSave, apply_effects, snapshot_boundary_if_ssm
from ssm_rollback.backends.fake import FakeSnapshotPool

SEQUENCES = 1_024
SLOTS = 8


class Batch:
    """Scheduler-side state of a decode batch, as a scheduler would keep it."""

    def __init__(self, boundary_rate: float, seed: int = 0) -> None:
        rng = random.Random(seed)
        self.tokens: list[list[int]] = [[] for _ in range(SEQUENCES)]
        self.rings = [SsmDecodeRing(SLOTS) for _ in range(SEQUENCES)]
        self.pool = FakeSnapshotPool(SEQUENCES, SLOTS)
        # A fixed pattern of boundaries per step, drawn once, so both loops see the same.
        self.pattern = [[rng.random() < boundary_rate for _ in range(SEQUENCES)] for _ in range(64)]
        self.steps = 0


def bare_step(batch: Batch) -> None:
    pattern = batch.pattern[batch.steps % 64]
    for seq, tokens in enumerate(batch.tokens):
        tokens.append(seq)
        _ = pattern[seq]
    batch.steps += 1


def library_step(batch: Batch) -> None:
    pattern = batch.pattern[batch.steps % 64]
    rings = batch.rings
    effects: list[SsmSnapshotSave] = []
    for seq, tokens in enumerate(batch.tokens):
        tokens.append(seq)
        save = snapshot_boundary_if_ssm(
            rings[seq],
            seq=seq,
            token_position=len(tokens),
            is_boundary=pattern[seq],
            in_thinking=False,
        )
        if save is not None:
            effects.append(save)
    apply_effects(batch.pool, effects, rings)
    batch.steps += 1


def time_steps(step: object, batch: Batch, steps: int) -> float:
    """Microseconds per sequence per step."""
    assert callable(step)
    start = time.perf_counter_ns()
    for _ in range(steps):
        step(batch)
    return (time.perf_counter_ns() - start) / 1_000 / (steps * SEQUENCES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run, only checks it works")
    parser.add_argument("--steps", type=int, default=40, help="steps per timing")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median)")
    args = parser.parse_args(argv)
    steps, rounds = (2, 1) if args.smoke else (args.steps, args.rounds)

    print(f"{SEQUENCES} sequences, ring capacity {SLOTS}, fake pool; us per sequence per step")
    print(f"{'boundary rate':>13} {'bare loop':>10} {'library':>10} {'overhead':>9}")
    for rate in (0.0, 0.1, 0.5, 1.0):
        bare_batch, library_batch = Batch(rate), Batch(rate)
        bare, library = [], []
        for _ in range(rounds):
            bare.append(time_steps(bare_step, bare_batch, steps))
            library.append(time_steps(library_step, library_batch, steps))
        b, lib = statistics.median(bare), statistics.median(library)
        print(f"{rate:>13.1f} {b:>10.3f} {lib:>10.3f} {lib / b:>8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
