"""ns per ring operation at several capacities, side by side with the seed's list port.

    python benchmarks/ring_bench.py            # the full run (about a minute)
    python benchmarks/ring_bench.py --smoke    # a quick pass that only checks it runs

Both implementations are timed in the same run, interleaved, and the median
of several rounds is reported, so the ratios hold on a busy machine even
where the absolute figures drift. ``ratio`` is list port / ours: above 1 is
faster than the seed. ``truncate_after`` runs on a different, freshly built
ring at every call, so its figures include the cache misses of reaching a
cold ring, which grow with its size; on one warm ring it costs the same at
every capacity.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Protocol

from ssm_rollback import SsmDecodeRing, rollback_to_boundary
from ssm_rollback.testing import ReferenceRing

CAPACITIES = (1, 8, 64, 256)


class Ring(Protocol):
    def record(self, token_position: int) -> int | None: ...
    def slot_for_position(self, keep_len: int) -> int | None: ...
    def truncate_after(self, keep_len: int) -> None: ...


Factory = Callable[[int], Ring]


def full(factory: Factory, capacity: int) -> Ring:
    ring = factory(capacity)
    for position in range(capacity):
        ring.record(position)
    return ring


def time_record(factory: Factory, capacity: int, ops: int) -> float:
    """Steady state: every record evicts the owner of its slot."""
    ring = full(factory, capacity)
    record = ring.record
    positions = range(capacity, capacity + ops)
    start = time.perf_counter_ns()
    for position in positions:
        record(position)
    return (time.perf_counter_ns() - start) / ops


def time_lookup(factory: Factory, capacity: int, ops: int) -> float:
    """Lookups of live positions, spread over the whole ring."""
    ring = full(factory, capacity)
    lookup = ring.slot_for_position
    keys = [i % capacity for i in range(ops)]
    start = time.perf_counter_ns()
    for key in keys:
        lookup(key)
    return (time.perf_counter_ns() - start) / ops


def time_truncate(factory: Factory, capacity: int, ops: int) -> float:
    """A rollback that drops the newest entry of a full ring (one ring per call, built untimed)."""
    ops = min(ops, 2_000)  # every call needs a fresh full ring; keep the setup short
    rings = [full(factory, capacity) for _ in range(ops)]
    keep = capacity - 2 if capacity > 1 else 0
    start = time.perf_counter_ns()
    for ring in rings:
        ring.truncate_after(keep)
    return (time.perf_counter_ns() - start) / ops


OPERATIONS: dict[str, Callable[[Factory, int, int], float]] = {
    "record": time_record,
    "slot_for_position": time_lookup,
    "truncate_after": time_truncate,
}


def measure(ops: int, rounds: int) -> dict[tuple[str, int], tuple[float, float]]:
    """(operation, capacity) -> (median ns ours, median ns list port)."""
    results = {}
    for name, bench in OPERATIONS.items():
        for capacity in CAPACITIES:
            ours, theirs = [], []
            for _ in range(rounds):  # interleaved, so drift hits both alike
                ours.append(bench(SsmDecodeRing, capacity, ops))
                theirs.append(bench(ReferenceRing, capacity, ops))
            results[name, capacity] = (statistics.median(ours), statistics.median(theirs))
    return results


def time_rollback(capacity: int, ops: int) -> float:
    """ns per ``rollback_to_boundary`` on a full ring whose newest snapshot is the hit."""
    ring = SsmDecodeRing(capacity)
    for position in range(1, capacity + 1):
        ring.record(position)
    boundaries = list(range(1, capacity + 1))
    start = time.perf_counter_ns()
    for _ in range(ops):
        rollback_to_boundary(ring, boundaries, seq=0, current_len=capacity)
    return (time.perf_counter_ns() - start) / ops


def rollback_figures(ops: int, rounds: int) -> dict[int, float]:
    """Capacity -> median ns of a rollback whose target is the newest snapshot."""
    times: dict[int, list[float]] = {8: [], 1_024: []}
    for _ in range(rounds):  # interleaved
        for capacity, values in times.items():
            values.append(time_rollback(capacity, ops))
    return {capacity: statistics.median(values) for capacity, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run, only checks it works")
    parser.add_argument("--ops", type=int, default=20_000, help="operations per timing")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    args = parser.parse_args(argv)
    ops, rounds = (200, 1) if args.smoke else (args.ops, args.rounds)

    results = measure(ops, rounds)
    print(f"{'operation':<18} {'capacity':>8} {'ours ns':>9} {'list ns':>9} {'ratio':>7}")
    for (name, capacity), (ours, theirs) in results.items():
        print(f"{name:<18} {capacity:>8} {ours:>9.0f} {theirs:>9.0f} {theirs / ours:>6.1f}x")
    flat = results["record", 256][0] / results["record", 8][0]
    print(f"\nrecord at capacity 256 / at capacity 8: {flat:.2f} (goal: at most 1.5)")
    rollback = rollback_figures(ops // 10 or 1, rounds)
    print(
        f"rollback_to_boundary, newest snapshot the hit: {rollback[8]:.0f} ns at capacity 8, "
        f"{rollback[1_024]:.0f} ns at capacity 1,024, ratio {rollback[1_024] / rollback[8]:.2f} "
        f"(goal: at most 2)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
