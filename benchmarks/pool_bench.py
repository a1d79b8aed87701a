"""Batched snapshot copies against a per-sequence loop and the memory-bandwidth limit.

    python benchmarks/pool_bench.py                  # CPU, the full run
    python benchmarks/pool_bench.py --device cuda    # on a GPU
    python benchmarks/pool_bench.py --smoke          # a quick pass that only checks it runs
    python benchmarks/pool_bench.py --baseline-rev REV    # + today's pool against REV's

The state is shaped like a scaled-down Nemotron-H layer stack: per Mamba-2
layer a conv state ``[conv_dim, conv_kernel - 1]`` and an SSM state
``[heads, head_dim, state_size]``, stacked over layers as ``[L, B, ...]``
(vLLM / SGLang style, ``batch_dim=1``) or one ``[B, ...]`` tensor per layer
(``--layout per-layer``, Hugging Face style). For each batch size it times,
side by side in one run, interleaved, medians of several rounds:

- (a) ``TorchSnapshotPool.save`` / ``restore`` of a random subset of the
  rows (1/16, 1/4, 1/2 and all of them by default), in shuffled order - an
  engine saves only its boundary rows;
- (b) the loop a naive integration writes: one ``copy_`` per sequence per
  layer per state tensor;
- (c) one contiguous ``copy_`` of the same number of bytes between two
  buffers that hold data: the bandwidth limit of the device. (A source
  never written reads as the kernel's shared zero page, straight from the
  cache, which made this copy about a third faster than any real one.)

Torch runs on ``--threads`` CPU threads (1 by default), and the process is
pinned to as many CPUs (``--cpus``, by default the first ones it may use)
for stable numbers. On one thread the pool copies scattered wide rows in a
single pass, row by row; on more it keeps the index ops, one parallel
region each (docs/torch-pool.md says why).

It prints b/a (the speed-up over the loop), c/a (how close to the limit; 1.0
means as fast as a plain contiguous copy) and the achieved GB/s (bytes of
state copied per second).

Then the host's bookkeeping alone: ``apply_effects(pool, [batch], rings)``
of a 1,024-row ``SaveBatch`` built by ``snapshot_boundaries`` over 1,024
``SsmDecodeRing`` s (every row at a boundary), and ``pool.save(batch)``
alone, on a pool whose live state is one float32 ``[1024, 4]`` tensor: 16
bytes a row, so the copy costs next to nothing. Every timed call applies a fresh
batch (ascending positions), built before its clock starts; ns per row,
the median of the calls, the libraries' calls alternating.

Then the shared slots of prefix snapshots (SPEC 13): ``save_shared`` and
``restore_shared`` of a random half of 1,024 rows (the same state per row
as above) into and out of as many shared slots, taken in a random order as
an index hands them out, against (c), the contiguous copy of the same bytes;
c/pool is how close to the limit, with a goal of 0.45.

``--sections`` picks what runs (``ring``: the table above, ``host``,
``shared``, ``compare``: the baseline's pool below); all by default.

``--baseline-rev REV`` also times the library as it was at git revision
``REV`` (extracted with ``git archive`` into a temporary folder and imported
beside this one, see ``_baseline.py``), interleaved with today's in the same
run: the host's bookkeeping above, and ``TorchSnapshotPool.save`` /
``restore`` of the same rows of the same live tensors for each batch size
and share of rows; it prints today's time over the baseline's.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch

from _baseline import TODAY, Baseline, Library, baseline_package
from ssm_rollback import (
    SaveBatch,
    SnapshotPool,
    SsmDecodeRing,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    apply_effects,
    snapshot_boundaries,
)
from ssm_rollback.backends.torch import TorchSnapshotPool

SLOTS = 2
# A scaled-down Nemotron-H: the real 8B has 128 heads of 64 x 128 and 10,240 conv channels.
LAYERS, HEADS, HEAD_DIM, STATE, GROUPS, KERNEL = 8, 16, 32, 64, 2, 4
CONV_DIM = HEADS * HEAD_DIM + 2 * GROUPS * STATE


def make_live(batch: int, layout: str, device: str, dtype: torch.dtype) -> list[torch.Tensor]:
    conv, ssm = (CONV_DIM, KERNEL - 1), (HEADS, HEAD_DIM, STATE)
    if layout == "stacked":
        shapes = [(LAYERS, batch, *conv), (LAYERS, batch, *ssm)]
    else:
        shapes = [(batch, *conv), (batch, *ssm)] * LAYERS
    return [torch.randn(shape, device=device).to(dtype) for shape in shapes]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(device: str, call: Callable[[], object]) -> float:
    sync(device)
    start = time.perf_counter()
    call()
    sync(device)
    return time.perf_counter() - start


def per_sequence_loop(
    sources: list[torch.Tensor],
    targets: list[torch.Tensor],
    pairs: list[tuple[int, int]],
    batch_dim: int,
) -> Callable[[], None]:
    """One copy_ per (sequence, layer, tensor): what a naive integration writes."""

    def run() -> None:
        for source, target in zip(sources, targets, strict=True):
            layers = source.shape[0] if batch_dim == 1 else 1
            for src_row, dst_row in pairs:
                for layer in range(layers):
                    s = source[layer] if batch_dim == 1 else source
                    t = target[layer] if batch_dim == 1 else target
                    t[dst_row].copy_(s[src_row])

    return run


_VERSIONS = itertools.count(1)  # every save of a run newer than the last, pool by pool


class Steps:
    """A step's saves and restores for ``rows``, one version per save, each newer.

    A slot refuses a save not newer than the newest it took (a step applied
    late or twice: SPEC 15 rule 6), so each of the ``saves`` timed or warm-up
    saves writes the next version's tickets, all built before the clock
    starts; each restore names what the last save wrote.
    """

    def __init__(
        self,
        pool: SnapshotPool,
        rows: list[int],
        saves: int,
        save: type[SsmSnapshotSave] = SsmSnapshotSave,
        restore: type[SsmSnapshotRestore] = SsmSnapshotRestore,
    ) -> None:
        self.pool = pool
        self.versions = []
        for _ in range(saves):
            offset = next(_VERSIONS) << 40
            self.versions.append(
                (
                    [save(seq, seq % SLOTS, 1, offset + seq + 1) for seq in rows],
                    [restore(seq, seq % SLOTS, 1, offset + seq + 1) for seq in rows],
                )
            )
        self.last = -1

    def save(self) -> object:
        self.last += 1
        return self.pool.save(self.versions[self.last][0])

    def restore(self) -> None:
        self.pool.restore(self.versions[self.last][1])


def bench(batch: int, fraction: float, args: argparse.Namespace) -> dict[str, float]:
    """Medians for saving and restoring a random ``fraction`` of ``batch`` rows, shuffled."""
    batch_dim = 1 if args.layout == "stacked" else 0
    live = make_live(batch, args.layout, args.device, args.dtype)
    pool = TorchSnapshotPool(live, SLOTS, batch_dim=batch_dim)
    storage = [torch.empty_like(s).repeat_interleave(SLOTS, dim=batch_dim) for s in live]
    generator = torch.Generator().manual_seed(batch)
    count = max(1, round(batch * fraction))
    order = torch.randperm(batch, generator=generator)[:count].tolist()  # random rows, shuffled
    steps = Steps(pool, order, args.rounds + 1)  # the warm-up's save, then each round's
    pairs = [(seq, seq * SLOTS + seq % SLOTS) for seq in order]
    nbytes = count * sum(s.numel() * s.element_size() for s in live) // batch
    # Both buffers written before timing: every page is backed, none is the zero page.
    flat_src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=args.device)
    flat_dst = torch.ones_like(flat_src)

    runs: dict[str, Callable[[], object]] = {
        "save_pool": steps.save,
        "save_loop": per_sequence_loop(live, storage, pairs, batch_dim),
        "restore_pool": steps.restore,
        "restore_loop": per_sequence_loop(storage, live, [(d, s) for s, d in pairs], batch_dim),
        "contiguous": lambda: flat_dst.copy_(flat_src),
    }
    for run in runs.values():  # warm up: allocators, caches, kernels, the pool's scratch
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            times[name].append(timed(args.device, run))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    medians["bytes"] = float(nbytes)
    medians["rows"] = float(count)
    return medians


def compare(
    base: Baseline, batch: int, fractions: list[float], args: argparse.Namespace
) -> list[tuple[int, dict[str, float]]]:
    """Today's ``save`` / ``restore`` against the baseline's, interleaved: (rows, medians) each.

    Both pools are built over the same live tensors and copy the same random
    rows as ``bench``; their effects are made from each one's own classes.
    """
    batch_dim = 1 if args.layout == "stacked" else 0
    live = make_live(batch, args.layout, args.device, args.dtype)
    libraries: tuple[Library, ...] = (TODAY, base)
    pools = [
        lib.take(TorchSnapshotPool, "backends.torch")(live, SLOTS, batch_dim=batch_dim)
        for lib in libraries
    ]
    results = []
    for fraction in fractions:
        generator = torch.Generator().manual_seed(batch)
        count = max(1, round(batch * fraction))
        order = torch.randperm(batch, generator=generator)[:count].tolist()
        runs: dict[str, Callable[[], object]] = {}
        for lib, pool in zip(libraries, pools, strict=True):
            steps = Steps(
                pool,
                order,
                args.rounds + 1,
                lib.take(SsmSnapshotSave),
                lib.take(SsmSnapshotRestore),
            )
            runs[f"save {lib.label}"] = steps.save
            runs[f"restore {lib.label}"] = steps.restore
        for run in runs.values():  # warm up; every slot then holds what the restores want
            run()
        names = list(runs)
        times: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:  # rotating order
                times[name].append(timed(args.device, runs[name]))
        results.append((count, {name: statistics.median(ts) for name, ts in times.items()}))
    return results


SHARED_ROWS = 1_024  # a random half of them is saved into shared slots, then restored
SHARED_GOAL = 0.45  # of a contiguous copy of the same bytes


def shared_bench(rows: int, args: argparse.Namespace) -> dict[str, float]:
    """Medians for ``save_shared`` / ``restore_shared`` of a random half of ``rows`` rows.

    The pool holds no ring slots, only ``rows // 2`` shared slots; rows and
    slots are random and shuffled. Each save, the warm-up's included, writes
    newer tickets than the last (a slot refuses a save not newer than the
    newest it took: SPEC 15 rule 6), each restore names the last.
    """
    batch_dim = 1 if args.layout == "stacked" else 0
    live = make_live(rows, args.layout, args.device, args.dtype)
    count = max(1, rows // 2)
    pool = TorchSnapshotPool(live, 0, batch_dim=batch_dim, shared_slots=count)
    generator = torch.Generator().manual_seed(rows + 1)
    order = torch.randperm(rows, generator=generator)[:count].tolist()
    slots = torch.randperm(count, generator=generator).tolist()
    versions = [  # one per save, each newer than the last, built before the clock starts
        (
            [SsmPrefixSave(seq, slot, 1, v + 1) for seq, slot in zip(order, slots, strict=True)],
            [SsmPrefixRestore(seq, slot, 1, v + 1) for seq, slot in zip(order, slots, strict=True)],
        )
        for v in range(args.rounds + 1)
    ]
    last = [-1]

    def save() -> object:
        last[0] += 1
        return pool.save_shared(versions[last[0]][0])

    def restore() -> None:
        pool.restore_shared(versions[last[0]][1])

    nbytes = count * sum(s.numel() * s.element_size() for s in live) // rows
    flat_src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=args.device)
    flat_dst = torch.ones_like(flat_src)
    runs: dict[str, Callable[[], object]] = {
        "save_shared": save,
        "restore_shared": restore,
        "contiguous": lambda: flat_dst.copy_(flat_src),
    }
    for run in runs.values():  # warm up
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            times[name].append(timed(args.device, run))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    medians["bytes"] = float(nbytes)
    medians["rows"] = float(count)
    return medians


def print_shared(rows: int, args: argparse.Namespace) -> None:
    m = shared_bench(rows, args)
    print(
        f"\nshared slots (SPEC 13): save_shared / restore_shared of a random half of {rows} rows "
        f"into {int(m['rows'])} shared slots in random order; medians of {args.rounds} rounds; "
        f"goal c/pool >= {SHARED_GOAL}"
    )
    print(
        f"{'op':<15} {'rows':>5} {'MiB':>7} {'pool ms':>9} {'contig ms':>10} "
        f"{'contig/pool':>11} {'pool GB/s':>9}"
    )
    for op in ("save_shared", "restore_shared"):
        pool_t, contig_t = m[op], m["contiguous"]
        print(
            f"{op:<15} {int(m['rows']):>5} {m['bytes'] / 2**20:>7.1f} {pool_t * 1e3:>9.3f} "
            f"{contig_t * 1e3:>10.3f} {contig_t / pool_t:>11.2f} {m['bytes'] / pool_t / 1e9:>9.2f}"
        )


HOST_ROWS, HOST_SLOTS, HOST_WIDTH = 1_024, 8, 4  # one float32 [1024, 4]: 16 bytes a row
HOST_ROUNDS, HOST_BATCHES = 21, 16  # rounds of this many fresh batches; median of all calls


class Host:
    """1,024 rings and a ``TorchSnapshotPool`` of 16 bytes a row: the host's bookkeeping alone."""

    def __init__(self, lib: Library, device: str) -> None:
        ring = lib.take(SsmDecodeRing)
        self.rings = [ring(HOST_SLOTS) for _ in range(HOST_ROWS)]
        live = torch.zeros(HOST_ROWS, HOST_WIDTH, dtype=torch.float32, device=device)
        self.pool = lib.take(TorchSnapshotPool, "backends.torch")([live], HOST_SLOTS)
        self.boundaries = lib.take(snapshot_boundaries)
        self.apply = lib.take(apply_effects)
        self.label = lib.label
        self.device = device
        self.position = 0

    def batches(self, count: int) -> list[SaveBatch]:
        """``count`` steps' saves, every row at a boundary, at ascending positions."""
        made = []
        for _ in range(count):
            self.position += 1
            made.append(
                self.boundaries(
                    self.rings,
                    positions=[self.position] * HOST_ROWS,
                    is_boundary=[True] * HOST_ROWS,
                    in_thinking=[False] * HOST_ROWS,
                )
            )
        return made

    def ns_per_row(self, op: str, batch: SaveBatch) -> float:
        """One ``op`` ("apply_effects" or "pool.save") of a fresh ``batch``, ns per row."""
        sync(self.device)
        start = time.perf_counter_ns()
        if op == "apply_effects":
            self.apply(self.pool, [batch], self.rings)
        else:
            self.pool.save(batch)
        sync(self.device)
        return (time.perf_counter_ns() - start) / HOST_ROWS


HOST_OPS = ("apply_effects", "pool.save")


def host_costs(
    libraries: list[Library], rounds: int, count: int, device: str
) -> dict[tuple[str, str], float]:
    """(label, op) -> median ns per row, each library's calls alternating with the others'."""
    hosts = [Host(lib, device) for lib in libraries]
    times: dict[tuple[str, str], list[float]] = {
        (lib.label, op): [] for lib in libraries for op in HOST_OPS
    }
    for r in range(-1, rounds):  # round -1 warms up
        turn = hosts[r % len(hosts) :] + hosts[: r % len(hosts)]  # no library always goes first
        for op in HOST_OPS:
            fresh = [host.batches(count) for host in turn]  # built outside the timed calls
            for i in range(count):
                for host, batches in zip(turn, fresh, strict=True):
                    ns = host.ns_per_row(op, batches[i])
                    if r >= 0:
                        times[host.label, op].append(ns)
    return {key: statistics.median(ts) for key, ts in times.items()}


def pin(cpus: str, threads: int) -> list[int]:
    """Pin the process to ``cpus`` (or the first ``threads`` it may use); return them."""
    if not hasattr(os, "sched_setaffinity"):  # not on macOS or Windows
        return []
    allowed = sorted(os.sched_getaffinity(0))
    chosen = [int(c) for c in cpus.split(",")] if cpus else allowed[:threads]
    os.sched_setaffinity(0, chosen)
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--layout", default="stacked", choices=["stacked", "per-layer"])
    parser.add_argument("--batches", default="256,1024", help="comma-separated sizes")
    parser.add_argument(
        "--fractions", default="0.0625,0.25,0.5,1", help="comma-separated shares of rows copied"
    )
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (pinned)")
    parser.add_argument(
        "--cpus", default="", help="comma-separated CPUs to pin to (default: the first --threads)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny run, only checks it works")
    parser.add_argument(
        "--sections",
        default="ring,host,shared,compare",
        help="comma-separated: ring, host, shared, compare (the last with --baseline-rev)",
    )
    parser.add_argument(
        "--baseline-rev", metavar="REV", help="also time the pool at this git revision"
    )
    args = parser.parse_args(argv)
    args.dtype = getattr(torch, args.dtype)
    batches = [int(b) for b in args.batches.split(",")]
    fractions = [float(f) for f in args.fractions.split(",")]
    host_rounds, host_batches = HOST_ROUNDS, HOST_BATCHES
    shared_rows = SHARED_ROWS
    sections = set(args.sections.split(","))
    if sections - {"ring", "host", "shared", "compare"}:
        parser.error(
            f"--sections: unknown {sorted(sections - {'ring', 'host', 'shared', 'compare'})}"
        )
    if args.smoke:
        # Two rounds: a save or restore repeated across rounds is exercised as in a full run.
        batches, fractions, args.rounds = [4], [0.5, 1.0], 2
        host_rounds, host_batches = 1, 2
        shared_rows = 8
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    base = baseline_package(args.baseline_rev) if args.baseline_rev else None  # fails early
    if base is not None:
        try:
            base.take(SsmSnapshotSave)(0, 0, 1, 1)
        except TypeError:
            parser.error(f"--baseline-rev {base.label}: its effects predate tickets")
    torch.set_num_threads(args.threads)
    cpus = pin(args.cpus, args.threads)

    per_seq = sum(
        s.numel() * s.element_size() for s in make_live(1, args.layout, "cpu", args.dtype)
    )
    print(
        f"device {args.device}, {args.dtype}, layout {args.layout}, {LAYERS} layers, "
        f"{per_seq / 1024:.0f} KiB of state per sequence, torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads pinned to CPUs {cpus}; random rows, shuffled; "
        f"medians of {args.rounds} interleaved rounds"
    )
    if "ring" in sections:
        print_ring(batches, fractions, args)
    if "host" in sections:
        print_host(base, host_rounds, host_batches, args)
    if "shared" in sections:
        print_shared(shared_rows, args)
    if base is not None and "compare" in sections:
        print_compare(base, batches, fractions, args)
    return 0


def print_ring(batches: list[int], fractions: list[float], args: argparse.Namespace) -> None:
    print(
        f"{'op':<8} {'seqs':>5} {'rows':>5} {'MiB':>7} {'pool ms':>9} {'loop ms':>9} "
        f"{'contig ms':>10} {'loop/pool':>9} {'contig/pool':>11} {'pool GB/s':>9}"
    )
    for batch in batches:
        for fraction in fractions:
            m = bench(batch, fraction, args)
            for op in ("save", "restore"):
                pool_t, loop_t, contig_t = m[f"{op}_pool"], m[f"{op}_loop"], m["contiguous"]
                print(
                    f"{op:<8} {batch:>5} {int(m['rows']):>5} {m['bytes'] / 2**20:>7.1f} "
                    f"{pool_t * 1e3:>9.3f} {loop_t * 1e3:>9.3f} {contig_t * 1e3:>10.3f} "
                    f"{loop_t / pool_t:>8.1f}x {contig_t / pool_t:>11.2f} "
                    f"{m['bytes'] / pool_t / 1e9:>9.2f}"
                )


def print_host(
    base: Baseline | None, host_rounds: int, host_batches: int, args: argparse.Namespace
) -> None:
    libraries = [TODAY]
    if base is not None and base.has(snapshot_boundaries):
        libraries.append(base)
    elif base is not None:
        print(f"\n(revision {base.label} has no snapshot_boundaries: its bookkeeping is not timed)")
    costs = host_costs(libraries, host_rounds, host_batches, args.device)
    print(
        f"\nthe host's bookkeeping: apply_effects(pool, [batch], rings) of a {HOST_ROWS}-row "
        f"SaveBatch from snapshot_boundaries (every row a boundary), and pool.save(batch) "
        f"alone, on a TorchSnapshotPool of {4 * HOST_WIDTH} bytes a row; ns per row, median "
        f"of {host_rounds * host_batches} calls on fresh batches, interleaved"
    )
    header = f"{'':<14} {'today':>8}"
    if len(libraries) > 1:
        header += f" {libraries[1].label:>8} {'today/' + libraries[1].label:>14}"
    print(header)
    for op in HOST_OPS:
        line = f"{op:<14} {costs[TODAY.label, op]:>8.0f}"
        if len(libraries) > 1:
            then = costs[libraries[1].label, op]
            line += f" {then:>8.0f} {costs[TODAY.label, op] / then:>14.2f}"
        print(line)


def print_compare(
    base: Baseline, batches: list[int], fractions: list[float], args: argparse.Namespace
) -> None:
    rev = base.label
    print(
        f"\nTorchSnapshotPool.save / restore, today against revision {rev}, same rows "
        f"and live tensors; medians of {args.rounds} interleaved rounds"
    )
    print(
        f"{'op':<8} {'seqs':>5} {'rows':>5} {'today ms':>9} {rev + ' ms':>11} {'today/' + rev:>14}"
    )
    for batch in batches:
        for rows, medians in compare(base, batch, fractions, args):
            for op in ("save", "restore"):
                ours, theirs = medians[f"{op} today"], medians[f"{op} {rev}"]
                print(
                    f"{op:<8} {batch:>5} {rows:>5} {ours * 1e3:>9.3f} {theirs * 1e3:>11.3f} "
                    f"{ours / theirs:>14.2f}"
                )


if __name__ == "__main__":
    sys.exit(main())
