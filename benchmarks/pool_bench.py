"""Batched snapshot copies against a per-sequence loop and the memory-bandwidth limit.

    python benchmarks/pool_bench.py                  # CPU, the full run
    python benchmarks/pool_bench.py --device cuda    # on a GPU
    python benchmarks/pool_bench.py --smoke          # a quick pass that only checks it runs

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
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch

from ssm_rollback import SsmSnapshotRestore, SsmSnapshotSave
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


def bench(batch: int, fraction: float, args: argparse.Namespace) -> dict[str, float]:
    """Medians for saving and restoring a random ``fraction`` of ``batch`` rows, shuffled."""
    batch_dim = 1 if args.layout == "stacked" else 0
    live = make_live(batch, args.layout, args.device, args.dtype)
    pool = TorchSnapshotPool(live, SLOTS, batch_dim=batch_dim)
    storage = [torch.empty_like(s).repeat_interleave(SLOTS, dim=batch_dim) for s in live]
    generator = torch.Generator().manual_seed(batch)
    count = max(1, round(batch * fraction))
    order = torch.randperm(batch, generator=generator)[:count].tolist()  # random rows, shuffled
    saves = [SsmSnapshotSave(seq, seq % SLOTS, 1, seq + 1) for seq in order]
    restores = [SsmSnapshotRestore(seq, seq % SLOTS, 1, seq + 1) for seq in order]
    pairs = [(seq, seq * SLOTS + seq % SLOTS) for seq in order]
    nbytes = count * sum(s.numel() * s.element_size() for s in live) // batch
    # Both buffers written before timing: every page is backed, none is the zero page.
    flat_src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=args.device)
    flat_dst = torch.ones_like(flat_src)

    runs: dict[str, Callable[[], object]] = {
        "save_pool": lambda: pool.save(saves),
        "save_loop": per_sequence_loop(live, storage, pairs, batch_dim),
        "restore_pool": lambda: pool.restore(restores),
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
    args = parser.parse_args(argv)
    args.dtype = getattr(torch, args.dtype)
    batches = [int(b) for b in args.batches.split(",")]
    fractions = [float(f) for f in args.fractions.split(",")]
    if args.smoke:
        batches, fractions, args.rounds = [4], [0.5, 1.0], 1
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
