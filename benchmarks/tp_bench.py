"""A 1,024-row step's effects to a tensor-parallel worker: ``broadcast_effects`` vs pickled dicts.

    python benchmarks/tp_bench.py            # the full run
    python benchmarks/tp_bench.py --smoke    # a quick pass that only checks it runs
    python benchmarks/tp_bench.py --baseline-rev REV   # + broadcast_effects against REV's

Two ranks on loopback over gloo, torch pinned to one thread. Each round
moves one step's effects for 1,024 rows - a ``SaveBatch`` of the boundary
rows, a few rollbacks' restores and a verify step's accepts; eight such
steps in turn - from rank 0 to rank 1 by each path, interleaved and in
rotating order: ``broadcast_effects`` (one message of the group's buffer)
and ``broadcast_object_list`` of ``effect.to_dict()`` with
``effect_from_dict`` on the receiver (what v0.1 offered), both ending with
the effects as values on every rank; and bare messages of the same sizes,
each path's floor: one send (on gloo ``broadcast_effects`` sends its
buffer, see ``docs/distributed.md``) and two broadcasts. The worker's clock
runs from the common barrier until it holds the effects; medians (and the
tenth percentile) over the rounds. Last, each path's Python work off the wire, in one process:
where the time goes.

``--baseline-rev REV`` also times ``broadcast_effects`` of the library as it
was at git revision ``REV`` (extracted with ``git archive`` into a temporary
folder and imported beside this one on both ranks, see ``_baseline.py``) as
one more path of the same rounds, on the same steps' effects rebuilt from
the baseline's own classes (``effect_from_dict`` of ``to_dict()``), and
prints today's median over the baseline's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pickle
import random
import socket
import statistics
import struct
import tempfile
import time
from array import array
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from _baseline import Baseline, extract
from ssm_rollback import (
    Effect,
    SaveBatch,
    SsmSnapshotRestore,
    SsmStateAccept,
    effect_from_dict,
)
from ssm_rollback._tp import channel as _wire_channel
from ssm_rollback._tp import wire as _wire
from ssm_rollback.distributed import broadcast_effects

ROWS = 1024


def step_effects(seed: int) -> list[Effect]:
    """One step of 1,024 rows: a quarter save a boundary, some roll back, some accept drafts."""
    rng = random.Random(seed)
    rows = list(range(ROWS))
    rng.shuffle(rows)
    saving, restoring, accepting = rows[:256], rows[256:288], rows[288:544]
    restores: list[Effect] = [
        SsmSnapshotRestore(r, r % 8, 40 + r % 7, 10_000 + r) for r in restoring
    ]
    batch = SaveBatch(
        saving,
        [r % 8 for r in saving],
        [100 + r % 50 for r in saving],
        [20_000 + r for r in saving],
    )
    # Each accept carries the ticket its verify plan minted (SPEC 15), as an engine's would.
    accepts: list[Effect] = [SsmStateAccept(r, rng.randint(0, 3), 30_000 + r) for r in accepting]
    return [*restores, batch, *accepts]


def by_tensor(effects: list[Effect] | None) -> tuple[Effect, ...]:
    return broadcast_effects(effects, src=0)


def by_pickle(effects: list[Effect] | None) -> tuple[Effect, ...]:
    box: list[object] = [None if effects is None else [e.to_dict() for e in effects]]
    dist.broadcast_object_list(box, src=0)
    dicts = box[0]
    assert isinstance(dicts, list)
    return tuple(effect_from_dict(d) for d in dicts)


def bare(*tensors: torch.Tensor) -> tuple[Effect, ...]:
    """Bare broadcasts of buffers of these sizes, nothing encoded: the pickled path's floor."""
    for tensor in tensors:
        dist.broadcast(tensor, src=0)
    return ()


def bare_send(tensor: torch.Tensor) -> tuple[Effect, ...]:
    """A bare send of the buffer, as ``broadcast_effects`` sends it on gloo: its floor."""
    if dist.get_rank() == 0:
        dist.send(tensor, dst=1, tag=_wire_channel.TAG)
    else:
        dist.recv(tensor, src=0, tag=_wire_channel.TAG)
    return ()


STEPS = 8  # distinct steps, cycled: no path sees the same effects twice in a row
WARMUP = 3
Send = Callable[[list[Effect] | None], tuple[Effect, ...]]


def baseline_name(rev: str) -> str:
    return f"broadcast_effects at {rev}"


def baseline_path(
    rev: str, folder: str, steps: list[list[Effect]]
) -> tuple[Send, list[list[Effect]]]:
    """The baseline's ``broadcast_effects``, and ``steps`` rebuilt from the baseline's classes."""
    base = Baseline(rev, Path(folder))
    rebuild = base.take(effect_from_dict)
    broadcast = base.take(broadcast_effects, "distributed")
    return (
        lambda effects: broadcast(effects, src=0),
        [[rebuild(_before_accept_tickets(e.to_dict())) for e in effects] for effects in steps],
    )


def _before_accept_tickets(d: Mapping[str, object]) -> Mapping[str, object]:
    """``d`` as a revision before v0.3 reads it: its accepts had no ticket."""
    if d.get("kind") == SsmStateAccept.kind:
        return {key: value for key, value in d.items() if key != "ticket"}
    return d


def check_baseline(parser: argparse.ArgumentParser, rev: str, folder: str) -> None:
    """Exit now, not in the ranks, if revision ``rev`` cannot send these steps' effects."""
    try:
        baseline_path(rev, folder, [step_effects(0)])
    except Exception as error:  # whatever the baseline raises, with its own classes
        parser.error(f"--baseline-rev {rev}: {type(error).__name__}: {error}")


def rank_main(rank: int, port: int, rounds: int, out: str, rev: str, folder: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        steps = [step_effects(seed) for seed in range(STEPS)]
        for effects in steps * WARMUP:  # the group's handshake and its buffer's growth
            broadcast_effects(effects if rank == 0 else None, src=0)
        capacity = _wire_channel.channel_capacity(None)
        pickled = len(pickle.dumps([e.to_dict() for e in steps[0]]))
        one = torch.zeros(capacity, dtype=torch.int64)
        two = (torch.zeros(1, dtype=torch.int64), torch.zeros(pickled, dtype=torch.uint8))
        # Each path with the steps it sends: today's effects, or the baseline's own.
        paths: list[tuple[str, Send, list[list[Effect]]]] = [
            ("broadcast_effects", by_tensor, steps),
            ("broadcast_object_list", by_pickle, steps),
            (f"(1 bare send, {capacity * 8:,} B)", lambda _: bare_send(one), steps),
            (f"(2 bare broadcasts, 8 + {pickled:,} B)", lambda _: bare(*two), steps),
        ]
        if folder:
            send, their_steps = baseline_path(rev, folder, steps)
            for effects in their_steps * WARMUP:  # the baseline's own buffer's growth
                send(effects if rank == 0 else None)
            paths.append((baseline_name(rev), send, their_steps))
        times: dict[str, list[float]] = {name: [] for name, _, _ in paths}
        for r in range(rounds):
            turn = paths[r % len(paths) :] + paths[: r % len(paths)]  # no path always goes first
            for name, path, path_steps in turn:
                effects = path_steps[r % STEPS]
                dist.barrier()
                start = time.perf_counter()
                got = path(effects if rank == 0 else None)
                # The worker's clock: from the common start until it holds the effects.
                times[name].append(time.perf_counter() - start)
                assert got == tuple(effects) or name.startswith("("), name
        if rank == 1:
            Path(out).write_text(json.dumps(times), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def cpu_costs(repeats: int) -> dict[str, float]:
    """Each path's work off the wire, one process, medians: where the time goes."""
    torch.set_num_threads(1)
    effects = step_effects(0)
    words = _wire.encode(effects)
    buffer = array("q", bytes(8 * 2048))  # as the channel packs and unpacks its buffer
    view = memoryview(buffer)
    n = len(words)
    dicts = [e.to_dict() for e in effects]
    blob = pickle.dumps(dicts)
    work: dict[str, Callable[[], object]] = {
        "encode (effects -> words)": lambda: _wire.encode(effects, ranged=False),
        "pack (words -> buffer)": lambda: struct.pack_into(f"{n}q", buffer, 16, *words),
        "unpack (buffer -> words, checked)": lambda: (
            struct.unpack_from(f"{n}q", buffer, 16),
            view.cast("B")[16 : 16 + 8 * n].tobytes()[7::8].isascii(),  # the sign bytes
        ),
        "decode (words -> effects)": lambda: _wire.decode(words, checked=True),
        "to_dict + pickle.dumps": lambda: pickle.dumps([e.to_dict() for e in effects]),
        "pickle.loads": lambda: pickle.loads(blob),
        "effect_from_dict": lambda: [effect_from_dict(d) for d in dicts],
    }
    costs: dict[str, float] = {}
    for name, call in work.items():
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            call()
            samples.append(time.perf_counter() - start)
        costs[name] = statistics.median(samples)
    return costs


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few rounds, only to check it runs")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument(
        "--baseline-rev", metavar="REV", help="also time broadcast_effects at this git revision"
    )
    args = parser.parse_args()
    rounds = 3 if args.smoke else args.rounds
    rev: str = args.baseline_rev or ""
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "times.json")
        base_folder = ""
        if rev:  # extracted once here, imported by both ranks; checked before they start
            base_folder = str(extract(rev, Path(folder) / "baseline"))
            check_baseline(parser, rev, base_folder)
        context = mp.start_processes(  # type: ignore[attr-defined, no-untyped-call]
            rank_main,
            args=(free_port(), rounds, out, rev, base_folder),
            nprocs=2,
            join=False,
            start_method="spawn",
        )
        deadline = time.monotonic() + 600
        while not context.join(timeout=max(1.0, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                raise SystemExit("tp_bench: the ranks did not finish within 600 s")
        times: dict[str, list[float]] = json.loads(Path(out).read_text(encoding="utf-8"))
    then = times.pop(baseline_name(rev)) if rev else None
    count = len(step_effects(0))
    print(
        f"one step of {ROWS} rows ({count} effects: a 256-row SaveBatch, 32 restores, 256 "
        f"accepts; {STEPS} such steps in turn)"
    )
    print(f"2 ranks, gloo on loopback, {rounds} rounds, the worker's clock in us per step:")
    print(f"  {'':<36} {'median':>8} {'p10':>8} {'effects/s':>10}")
    medians = {}
    for name, values in times.items():
        values.sort()
        medians[name] = statistics.median(values)
        p10 = values[len(values) // 10]
        rate = "" if name.startswith("(") else f"{count / medians[name]:10,.0f}"
        print(f"  {name:<36} {medians[name] * 1e6:8.0f} {p10 * 1e6:8.0f} {rate}".rstrip())
    ours, theirs, one, two = medians.values()
    print(f"  broadcast_effects is {theirs / ours:.1f}x faster end to end (goal: 5x)")
    print(
        f"  above their own messages: {(ours - one) * 1e6:.0f} us vs {(theirs - two) * 1e6:.0f} us"
    )
    if then is not None:
        then.sort()
        median = statistics.median(then)
        print(
            f"  {baseline_name(rev):<36} {median * 1e6:8.0f} {then[len(then) // 10] * 1e6:8.0f} "
            f"{count / median:10,.0f}"
        )
        print(f"  broadcast_effects, today / {rev}: {ours / median:.2f} (medians, same rounds)")
    print("where the time goes, off the wire (one process, medians):")
    for name, cost in cpu_costs(20 if args.smoke else 500).items():
        print(f"  {name:<36} {cost * 1e6:8.0f} us")


if __name__ == "__main__":
    main()
