"""Tensor-parallel workers over gloo: a scheduler on rank 0, shard pools on every rank.

Each case starts ``world`` processes on loopback (this file, run as a
script, is the rank's program) and waits for them with a bounded timeout,
so a hang fails the test instead of stalling CI. The decode scenario
compares every rank's live shard, after every step, with the matching shard
of a single-process reference run of the same scheduler.
"""

from __future__ import annotations

import datetime
import gc
import json
import random
import sys
import weakref
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Final, ParamSpec, TypeVar

import pytest

if TYPE_CHECKING:
    from conftest import RankLauncher

pytest.importorskip("torch")

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore

from ssm_rollback import (
    Effect,
    InvalidArgumentError,
    RollbackPlan,
    SaveBatch,
    SsmDecodeRing,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
    apply_effects,
    commit_verified_batch,
    rollback_to_boundary,
    snapshot_boundaries,
    snapshot_boundary_if_ssm,
)
from ssm_rollback import distributed as tp
from ssm_rollback._tp import channel as _wire_channel
from ssm_rollback._tp import groups as _groups
from ssm_rollback._tp import wire as _wire
from ssm_rollback.backends.torch import TorchSnapshotPool

ROWS: Final = 32
SLOTS: Final = 4
DRAFTS: Final = 3
STEPS: Final = 70
PRIME: Final = 65521.0  # states stay exact integers in float32

IDLE, DECODE, VERIFY, RESET, ROLLBACK = range(5)

P = ParamSpec("P")
R = TypeVar("R")


def config(groups: int) -> dict[str, object]:
    return {
        "model_type": "mamba2",
        "num_hidden_layers": 2,
        "hidden_size": 16,
        "num_heads": 8,
        "head_dim": 4,
        "state_size": 4,
        "n_groups": groups,
        "conv_kernel": 4,
        "torch_dtype": "float32",
    }


def groups_for(world: int) -> int:
    # 2 ranks: the groups divide; 4 ranks: one group, replicated on every rank.
    return 2 if world == 2 else 1


def fault(save: SsmSnapshotSave) -> bool:
    """The saves the faulty rank (and the reference's one pool) fail."""
    return (save.seq * 7 + save.token_position) % 23 == 0


# -- the scheduler -------------------------------------------------------------------------------


class Scheduler:
    """A deterministic decode loop over ``ROWS`` rows: decodes, verify steps, rollbacks, resets."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.rings = [SsmDecodeRing(SLOTS) for _ in range(ROWS)]
        self.length = [0] * ROWS
        self.boundaries: list[list[int]] = [[] for _ in range(ROWS)]

    def plan(self) -> tuple[list[list[int]], list[Effect]]:
        """This step's per-row ops (``op, accepted, tokens...``) and its effects."""
        ops = [[IDLE, 0] + [0] * (DRAFTS + 1) for _ in range(ROWS)]
        restores: list[Effect] = []
        singles: list[Effect] = []
        decode: list[int] = []
        verify: list[int] = []
        for r in range(ROWS):
            x = self.rng.random()
            tokens = [self.rng.randrange(100) for _ in range(DRAFTS + 1)]
            if x < 0.03:
                self.rings[r].clear()
                self.length[r], self.boundaries[r] = 0, []
                ops[r][0] = RESET
            elif x < 0.13 and self.length[r] > 1:
                plan = rollback_to_boundary(
                    self.rings[r],
                    self.boundaries[r],
                    seq=r,
                    current_len=self.length[r],
                    at_most=self.length[r] - 1,
                )
                if isinstance(plan, RollbackPlan):
                    restores.extend(plan.effects)
                    self.length[r] = plan.keep_len
                    self.boundaries[r] = [b for b in self.boundaries[r] if b <= plan.keep_len]
                    ops[r][0] = ROLLBACK
            elif x < 0.33:
                accepted = self.rng.randint(0, DRAFTS)
                ops[r] = [VERIFY, accepted, *tokens]
                verify.append(r)
            else:
                ops[r] = [DECODE, 0, *tokens]
                position = self.length[r] + 1
                self.length[r] = position
                if tokens[0] % 4 == 0:
                    self.boundaries[r].append(position)
                if r % 8 == 0:  # the per-row path: single saves on the wire
                    save = snapshot_boundary_if_ssm(
                        self.rings[r],
                        seq=r,
                        token_position=position,
                        is_boundary=tokens[0] % 4 == 0,
                        in_thinking=False,
                    )
                    if save is not None:
                        singles.append(save)
                else:
                    decode.append(r)
        batch = snapshot_boundaries(
            self.rings,
            positions=[self.length[r] for r in decode],
            is_boundary=[ops[r][2] % 4 == 0 for r in decode],
            in_thinking=[False] * len(decode),
            rows=decode,
        )
        effects = [*restores, *singles, batch, *self._verify(ops, verify)]
        return ops, effects

    def _verify(self, ops: list[list[int]], rows: list[int]) -> tuple[Effect, ...]:
        first = [self.length[r] + 1 for r in rows]
        fed = [[t % 4 == 0 for t in ops[r][2:]] for r in rows]
        step = commit_verified_batch(
            self.rings,
            first_positions=first,
            accepted=[ops[r][1] for r in rows],
            is_boundary=fed,
            in_thinking=[[False] * (DRAFTS + 1) for _ in rows],
            rows=rows,
        )
        for r, start, flags in zip(rows, first, fed, strict=True):
            n = ops[r][1]
            self.boundaries[r] += [start + j for j in range(n + 1) if flags[j]]
            self.length[r] = start + n
        return step.effects

    def ring_view(self) -> list[list[int]]:
        return [list(ring.snapshot_positions()) for ring in self.rings]


# -- the fake model --------------------------------------------------------------------------------


def ids(shape: Sequence[int]) -> torch.Tensor:
    """A distinct number per state element (layer, channel, ...), the same for every row."""
    count = 1
    for size in shape:
        count *= size
    return torch.arange(count, dtype=torch.float32).reshape(shape[0], 1, *shape[1:])


def forward(
    live: Sequence[torch.Tensor],
    staged: Sequence[torch.Tensor],
    element_ids: Sequence[torch.Tensor],
    ops: list[list[int]],
) -> None:
    """Each row's state after its tokens: elementwise, so a shard's update is the shard of one."""

    def step(state: torch.Tensor, token: int, eid: torch.Tensor) -> torch.Tensor:
        return torch.remainder(state * 3 + token * 5 + eid, PRIME)

    for r, (op, _accepted, *tokens) in enumerate(ops):
        for state, buffer, eid in zip(live, staged, element_ids, strict=True):
            if op == RESET:
                state[:, r] = 0
            elif op == DECODE:
                state[:, r] = step(state[:, r], tokens[0], eid[:, 0])
            elif op == VERIFY:
                row = state[:, r]
                for j, token in enumerate(tokens):
                    row = step(row, token, eid[:, 0])
                    buffer[:, r, j] = row


def model(cfg: dict[str, object], world: int) -> tuple[tuple[torch.Tensor, ...], ...]:
    live = tp.shard_live_states(cfg, num_sequences=ROWS, tp_size=world)
    staged = tuple(
        torch.zeros((t.shape[0], ROWS, DRAFTS + 1, *t.shape[2:]), dtype=t.dtype) for t in live
    )
    return live, staged


Record = list[tuple[list[list[int]], int]]  # per step: the rings' positions, saves failed


def reference_run(cfg: dict[str, object]) -> tuple[list[list[torch.Tensor]], Record]:
    """The single-process run: full state, one pool failing the faulty rank's saves."""
    sched = Scheduler(seed=7)
    live, staged = model(cfg, 1)
    element_ids = [ids((t.shape[0], *t.shape[2:])) for t in live]
    pool = TorchSnapshotPool(live, SLOTS, batch_dim=1, intermediate_states=staged)
    pool.fail_when(fault)
    states: list[list[torch.Tensor]] = []
    record: Record = []
    for _ in range(STEPS):
        ops, effects = sched.plan()
        forward(live, staged, element_ids, ops)
        failed = apply_effects(pool, effects, sched.rings).failed
        states.append([t.clone() for t in live])
        record.append((sched.ring_view(), len(failed)))
    return states, record


# -- the ranks' programs ---------------------------------------------------------------------------


def scenario(rank: int, world: int) -> dict[str, object]:
    cfg = config(groups_for(world))
    expected, reference = reference_run(cfg)
    names = ("conv", "ssm")
    live, staged = model(cfg, world)
    full_ids = [ids((t.shape[0], *t.shape[2:])) for t in expected[0]]
    element_ids = [
        tp.shard_of(e, cfg, tensor=n, rank=rank, tp_size=world, dim=2)
        for e, n in zip(full_ids, names, strict=True)
    ]
    pool = tp.shard_pool(live, cfg, SLOTS, tp_size=world, intermediate_states=staged)
    faulty = world - 1
    if rank == faulty:
        pool.fail_when(fault)
    sched = Scheduler(seed=7) if rank == 0 else None
    known: dict[tuple[int, int], tuple[int, int]] = {}
    mismatches = detected = retired = row_steps = 0
    before = 0
    ops_buffer = torch.zeros((ROWS, DRAFTS + 3), dtype=torch.int64)
    for step in range(STEPS):
        effects: list[Effect] | None = None
        if sched is not None:
            ops, effects = sched.plan()
            ops_buffer.copy_(torch.tensor(ops))
        dist.broadcast(ops_buffer, src=0)  # the engine's own step input (tokens), not ours
        received = tp.broadcast_effects(effects, src=0)
        if sched is not None:
            assert received == tuple(effects or ())
        forward(live, staged, element_ids, ops_buffer.tolist())
        if sched is not None:
            apply_effects(pool, received, sched.rings)
        else:
            tp.apply_on_worker(pool, received)
        try:
            tp.check_agreement(pool, known=known)
        except tp.AgreementError as error:
            detected += 1
            if error.rank != faulty:
                raise
            if sched is not None:
                retired += len(tp.retire_disputed(sched.rings, error))
        rings, failed = reference[step]
        assert (detected > before) == (failed > 0), f"step {step}: fault not detected"
        before = detected
        if sched is not None:
            assert sched.ring_view() == rings, f"step {step}: rings differ from the reference"
        for state, full, name in zip(live, expected[step], names, strict=True):
            want = tp.shard_of(full, cfg, tensor=name, rank=rank, tp_size=world, dim=2)
            differs = (state != want).flatten(2).any(dim=2).any(dim=0)
            mismatches += int(differs.sum())
        row_steps += ROWS
    return {
        "row_steps": row_steps,
        "mismatches": mismatches,
        "detected": detected,
        "injected_steps": sum(1 for _, failed in reference if failed),
        "injected_saves": sum(failed for _, failed in reference),
        "retired": retired,
    }


def outcome_of(call: Callable[[], object]) -> str:
    """``ok`` or the error's type and first words: what every rank must agree on.

    A call that returns ``False`` (a comparison) is ``wrong``.
    """
    try:
        returned = call()
    except (tp.AgreementError, tp.WireError, InvalidArgumentError) as error:
        return f"{type(error).__name__}: {str(error)[:40]}"
    return "wrong" if returned is False else "ok"


def bad_input(rank: int, world: int, group: dist.ProcessGroup | None) -> dict[str, str]:
    """Bad input on ``group`` (``None``: the world): the same error on every rank, no hang."""
    good: list[Effect] = [SsmStateAccept(1, 2), SaveBatch([0, 1], [0, 0], [3, 4], [5, 6])]
    mine = good if rank == 0 else None
    results = {"good": outcome_of(lambda: tp.broadcast_effects(mine, src=0, group=group))}
    results["prefix step"] = prefix_step(rank, group)
    not_effects: list[object] = [SsmStateAccept(0, 0), object()]
    results["not effects"] = outcome_of(
        lambda: tp.broadcast_effects(not_effects if rank == 0 else None, src=0, group=group)  # type: ignore[arg-type]
    )

    def breaks() -> Iterator[Effect]:
        yield SsmStateAccept(0, 0)
        raise ValueError("the engine's iterator broke")

    results["a breaking iterable"] = outcome_of(
        lambda: tp.broadcast_effects(breaks() if rank == 0 else None, src=0, group=group)
    )
    real_encode = _wire.encode

    def unknown_kind(effects: object, *, ranged: bool = True) -> list[int]:
        return [_wire.MAGIC, 1, 99, 0]

    def cut(effects: object, *, ranged: bool = True) -> list[int]:
        return real_encode(good)[:-1]

    for label, encoder in (("unknown kind", unknown_kind), ("size mismatch", cut)):
        if rank == 0:
            _wire.encode = encoder
        results[label] = outcome_of(lambda: tp.broadcast_effects(mine, src=0, group=group))
        _wire.encode = real_encode
    # A peer on another format version: caught by the handshake of a group's first step.
    fresh = dist.new_group()
    magic = _wire.MAGIC
    if rank == world - 1:
        _wire.MAGIC = magic + 1  # type: ignore[misc]
    results["mixed versions"] = outcome_of(lambda: tp.broadcast_effects(mine, src=0, group=fresh))
    _wire.MAGIC = magic  # type: ignore[misc]
    results["fresh group"] = outcome_of(lambda: tp.broadcast_effects(mine, src=0, group=fresh))
    # A group without the sender (nor, on rank 0, this rank): refused on every rank alike.
    others = dist.new_group(list(range(1, world)))
    results["src not in group"] = outcome_of(
        lambda: tp.broadcast_effects(mine, src=0, group=others)
    ).split(":")[0]
    # From the last rank over the others: its group rank is not its global rank.
    last = good if rank == world - 1 else None
    results["from the last rank"] = (
        outcome_of(lambda: tp.broadcast_effects(last, src=world - 1, group=others) == tuple(good))
        if rank
        else "ok"  # rank 0 is not in the group: nothing to take part in
    )
    results["from each rank in turn"] = from_each_rank(rank, world, group)
    results["beside the engine's sends"] = beside_engine_sends(rank, world, mine, group)
    results.update(corrupt_headers(rank, mine, group))
    results.update(growth(rank, group))
    results["big step from the last rank"] = big_step_from_the_last_rank(rank, world, group)
    results["bad src"] = outcome_of(lambda: tp.broadcast_effects(mine, src=world + 5, group=group))
    results["good again"] = outcome_of(lambda: tp.broadcast_effects(mine, src=0, group=group))
    # Pools of different shapes are a dispute on every rank, not a hang.
    live = (torch.zeros((1, 2 + (rank == 1), 3)),)
    odd = TorchSnapshotPool(live, 2, batch_dim=1)
    results["shapes"] = outcome_of(lambda: tp.check_agreement(odd))
    return results


def prefix_step(rank: int, group: dist.ProcessGroup | None) -> str:
    """A prefill step's shared-slot effects among ring effects: every rank gets them as sent.

    Shards split each state tensor, never the effects: every rank applies the
    same restore of shared slot 3 and the same saves, to its own shard.
    """
    step: list[Effect] = [
        SsmPrefixRestore(4, 3, 512, 2**40 + 1),
        SsmSnapshotRestore(1, 0, 7, 9),
        SsmPrefixSave(4, 5, 768, 2**40 + 2),
        SsmPrefixSave(6, 0, 1024, 2**40 + 3),
        SaveBatch([0, 1], [0, 0], [3, 4], [5, 6]),
        SsmPrefixSave(4, 1, 900, 2**40 + 4),
        SsmStateAccept(2, 1),
    ]
    mine = step if rank == 0 else None
    return outcome_of(lambda: tp.broadcast_effects(mine, src=0, group=group) == tuple(step))


def from_each_rank(rank: int, world: int, group: dist.ProcessGroup | None) -> str:
    """Every rank sends a step of its own in turn over one group: each arrives from its sender.

    The group keeps each sender's group rank from its first step: a step from
    a new sender must not go out from the root of the one before.
    """

    def step_from(src: int) -> str:
        mine = [SsmStateAccept(src, 1)] if rank == src else None
        return outcome_of(
            lambda: tp.broadcast_effects(mine, src=src, group=group) == (SsmStateAccept(src, 1),)
        )

    return ", ".join(step_from(src) for src in (*range(world), 0))


def beside_engine_sends(
    rank: int, world: int, mine: list[Effect] | None, group: dist.ProcessGroup | None
) -> str:
    """The engine's own untagged send, posted before a step and received after it, stays its own.

    A step's sends carry their own tag: with the engine's (0), a worker's
    receive of the step would take the engine's message instead.
    """
    tokens = (
        torch.arange(5, dtype=torch.int64) + 100 if rank == 0 else torch.zeros(5, dtype=torch.int64)
    )
    sends = (
        [dist.isend(tokens, dst=peer, group=group) for peer in range(1, world)] if not rank else []
    )
    got = outcome_of(lambda: tp.broadcast_effects(mine, src=0, group=group))
    if rank:
        dist.recv(tokens, src=0, group=group)
    for send in sends:
        assert send is not None
        send.wait()
    return f"{got}, tokens {tokens.tolist()}"


def corrupt_headers(
    rank: int, mine: list[Effect] | None, group: dist.ProcessGroup | None
) -> dict[str, str]:
    """The sender's header corrupted: a ``WireError`` on every rank, and the group still works."""
    real = _wire_channel.header_words
    results = {}
    for label, header in (
        ("bad status", lambda status, n: (7, n)),
        ("negative length", lambda status, n: (status, -4)),
        ("length past the buffer", lambda status, n: (status, 10**6)),
        ("huge length follows", lambda status, n: (status | _wire_channel.FOLLOWS, 2**40)),
    ):
        if rank == 0:
            _wire_channel.header_words = header
        results[label] = outcome_of(lambda: tp.broadcast_effects(mine, src=0, group=group))
        _wire_channel.header_words = real
    results["after corruption"] = outcome_of(lambda: tp.broadcast_effects(mine, src=0, group=group))
    return results


class Loud:
    """Not an effect, with a long type name (the refusal quotes a given value's repr only up
    to 200 characters, but names its type whole): the sender's refusal outgrows the buffer."""


Loud.__name__ = "Loud" + "loud" * 3000


def growth(rank: int, group: dist.ProcessGroup | None) -> dict[str, str]:
    """A step bigger than the buffer costs one more message, once; then one per step again."""
    calls = {"messages": 0, "all_reduce": 0}
    channel = _wire_channel._Channel  # a step's messages: _message, or _reduced's all_reduce
    real_message, real_reduced, real_all_reduce = (
        channel._message,
        channel._reduced,
        dist.all_reduce,
    )

    def counted(name: str, call: Callable[P, R]) -> Callable[P, R]:
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            calls[name] += 1
            return call(*args, **kwargs)

        return wrapper

    channel._message = counted("messages", real_message)  # type: ignore[method-assign]
    channel._reduced = counted("messages", real_reduced)  # type: ignore[method-assign]
    dist.all_reduce = counted("all_reduce", real_all_reduce)
    results = {}
    rows = 0
    try:
        for label in ("small step", "loud refusal", "big step", "big step again"):
            step: list[object] = [SsmStateAccept(1, 2)] if label == "small step" else [Loud()]
            if label.startswith("big"):  # three times what the buffer held before it
                rows = rows or 3 * _wire_channel.channel_capacity(group)
                step = [SaveBatch(range(rows), [0] * rows, range(rows), range(rows))]
            calls.update(messages=0, all_reduce=0)
            mine = step if rank == 0 else None
            got = outcome_of(partial(tp.broadcast_effects, mine, src=0, group=group))  # type: ignore[arg-type]
            results[label] = f"{got} {calls['messages']} messages {calls['all_reduce']} reduces"
    finally:
        channel._message = real_message  # type: ignore[method-assign]
        channel._reduced = real_reduced  # type: ignore[method-assign]
        dist.all_reduce = real_all_reduce
    results["capacity"] = str(_wire_channel.channel_capacity(group))
    return results


def big_step_from_the_last_rank(rank: int, world: int, group: dist.ProcessGroup | None) -> str:
    """A step past the buffer from a sender that is not group rank 0: its second message (the
    grown buffer's) comes from that sender too, not from the group's first rank."""
    rows = 3 * _wire_channel.channel_capacity(group)
    step = [SaveBatch(range(rows), [0] * rows, range(rows), range(rows))]
    mine = step if rank == world - 1 else None
    return outcome_of(lambda: tp.broadcast_effects(mine, src=world - 1, group=group) == tuple(step))


def row_disputes_of(call: Callable[[], None]) -> str:
    """The rows ``call``'s ``AgreementError`` names, with its rank and slot disputes."""
    try:
        call()
    except tp.AgreementError as error:
        return repr((error.rank, error.disputes, error.shared_disputes, error.row_disputes))
    return "ok"


def agreement_misuse(rank: int, world: int) -> dict[str, str]:
    """``check_agreement`` and a step after a timeout, where one rank differs from the rest.

    Refused arguments on one rank raised there before the gather: its peers waited out the
    group's timeout (30 minutes by default), or took its next call for this one. A rank
    outside the group got gloo's ValueError. Pools whose buffers hold different numbers of
    intermediate states passed, though an accept applied on one and not the other. After a
    timeout on the group, a step's send raised gloo's RuntimeError as it started."""
    from ssm_rollback.backends.fake import FakeSnapshotPool

    def pool() -> FakeSnapshotPool:
        return FakeSnapshotPool(2, 1)

    seen: dict[str, str] = {}
    bad_known: object = [] if rank == 1 else None
    seen["one rank's arguments refused"] = outcome_of(
        lambda: tp.check_agreement(pool(), known=bad_known)  # type: ignore[arg-type]
    )
    seen["the next check"] = outcome_of(lambda: tp.check_agreement(pool()))
    some = dist.new_group(list(range(world - 1)))
    seen["outside the group"] = outcome_of(lambda: tp.check_agreement(pool(), group=some))
    staged = pool()
    staged.intermediate[0] = [0] * (2 + rank)
    seen["buffers apart"] = outcome_of(lambda: tp.check_agreement(staged))
    # One verify step's buffer on every rank, and its accept applied on rank 1 only: the
    # row's live state differs, though every slot agrees (the digest left accepts out).
    moved = FakeSnapshotPool(2, 1, shared_slots=2)
    moved.intermediate[1] = ["a", "b"]
    if rank == 1:
        moved.accept([SsmStateAccept(1, 1, ticket=7)])
    known: dict[tuple[int, int], tuple[int, int]] = {}
    seen["accept apart"] = row_disputes_of(lambda: tp.check_agreement(moved, known=known))
    seen["accept apart, known"] = outcome_of(lambda: tp.check_agreement(moved, known=known))
    # A save on rank 0 only, reported and excused; then rank 1 gets it too: every rank holds
    # the same again. The excusal (rank 0's words excused, rank 1's not) raised a dispute of
    # equal tickets; now it passes and the slot is back under the check.
    mended = pool()
    mended_known: dict[tuple[int, int], tuple[int, int]] = {}
    if rank == 0:
        mended.save([SsmSnapshotSave(0, 0, 4, 10)])
    seen["saved apart"] = row_disputes_of(lambda: tp.check_agreement(mended, known=mended_known))
    if rank != 0:
        mended.save([SsmSnapshotSave(0, 0, 4, 10)])
    seen["saved alike again"] = outcome_of(lambda: tp.check_agreement(mended, known=mended_known))
    seen["known after"] = repr(mended_known)
    # As many intermediate states at most, but not on the same row: no slot differs.
    counts = pool()
    counts.intermediate[0] = ["a", "b"]
    counts.intermediate[1] = ["a", "b"] if rank == 1 else ["a"]
    seen["buffers of a row apart"] = row_disputes_of(lambda: tp.check_agreement(counts))
    short = dist.new_group(timeout=datetime.timedelta(seconds=3))
    first = [SsmStateAccept(0, 0)] if rank == 0 else None
    seen["first step"] = outcome_of(lambda: tp.broadcast_effects(first, src=0, group=short))
    if rank == 0:  # alone: its peers never call, and the group times out
        for label, call in (
            ("a check alone", lambda: tp.check_agreement(pool(), group=short)),
            ("a step after it", lambda: tp.broadcast_effects(first, src=0, group=short)),
        ):
            try:
                call()
                seen[label] = "ok"
            except tp.DistributedError:
                seen[label] = "DistributedError"
    dist.barrier()
    return seen


_REAL_GROW: Final = _wire_channel._Channel.grow


def grow_apart(self: _wire_channel._Channel, capacity: int) -> None:
    """``grow`` with the wire a tensor of its own, as on a GPU: the words must be copied across.

    The sender's words go from the host buffer to the wire (``_write``), a
    receiver's from the wire back to the host buffer it decodes (``_message``, ``_reduced``).
    """
    _REAL_GROW(self, capacity)
    self._wire = self._tensor.clone()


def main(argv: list[str]) -> None:
    rank, world, port, out = int(argv[0]), int(argv[1]), argv[2], Path(argv[3])
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        tracked = scenario(rank, world)
        paths = {"bad input": bad_input(rank, world, None)}
        # The all_reduce, NCCL's path, on a group of its own: the same results.
        _wire_channel.sends_on = lambda config, device: False
        apart = dist.new_group()
        paths["bad input, all_reduce"] = bad_input(rank, world, apart)
        # NCCL's buffer lives on the GPU, apart from the host words: a CPU stand-in for it.
        _wire_channel._Channel.grow = grow_apart  # type: ignore[method-assign]
        device = dist.new_group()
        paths["bad input, device buffer"] = bad_input(rank, world, device)
        for label, group in (
            ("bad input", dist.group.WORLD),
            ("bad input, all_reduce", apart),
            ("bad input, device buffer", device),
        ):
            channel = _wire_channel._CHANNELS[group]  # type: ignore[index]
            paths[label]["sends"] = str(channel._sends)
            paths[label]["device buffer"] = str(channel._wire is not channel._tensor)
        result = {"scenario": tracked, **paths, "agreement": agreement_misuse(rank, world)}
    finally:
        dist.destroy_process_group()
    (out / f"rank{rank}.json").write_text(json.dumps(result), encoding="utf-8")


# -- the tests -------------------------------------------------------------------------------------


def launch(launcher: RankLauncher, world: int, out: Path) -> list[str]:
    """Run ``world`` ranks; their JSON results."""
    port = launcher.port()
    launcher.run(
        {f"rank {r}": [__file__, str(r), str(world), str(port), str(out)] for r in range(world)}
    )
    return [(out / f"rank{r}.json").read_text(encoding="utf-8") for r in range(world)]


# -- one rank, a real process group in this process: the buffer's paths, fast ---------------------


@pytest.fixture
def one_rank() -> Iterator[None]:
    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def batch_of(rows: int) -> SaveBatch:
    return SaveBatch(range(rows), [r % 4 for r in range(rows)], range(rows), range(rows))


@pytest.mark.usefixtures("one_rank")
@pytest.mark.parametrize("rows", [0, 1, 253, 254, 255, 1000, 5000])
def test_a_step_of_any_size_arrives_and_the_buffer_grows_to_hold_it(rows: int) -> None:
    step: list[Effect] = [SsmStateAccept(0, 1), batch_of(rows), SsmStateAccept(1, 0)]
    assert tp.broadcast_effects(step, src=0) == tuple(step)
    capacity = _wire_channel.channel_capacity(None)
    needed = _wire_channel.HEADER + len(_wire.encode(step))
    # The first buffer holds 1,024 words; a step past it doubles it at least, to a power of two.
    assert capacity == (1024 if needed <= 1024 else max(2048, 1 << (needed - 1).bit_length()))
    assert tp.broadcast_effects(step, src=0) == tuple(step)
    assert _wire_channel.channel_capacity(None) == capacity  # no growth when it fits


@pytest.mark.usefixtures("one_rank")
@pytest.mark.parametrize(
    ("accepts", "restores", "words", "capacity"),
    [  # 2 + (2 + 3 * accepts) + (2 + 4 * restores) words, after a header of 2, in 1,024 first
        (336, 2, 1022, 1024),  # the buffer exactly, no growth
        (338, 1, 1024, 2048),  # past it
        (676, 3, 2046, 2048),  # the grown buffer exactly
        (678, 2, 2048, 4096),  # a power of two: the header needs the next one
    ],
)
def test_a_payload_at_the_edge_of_the_buffer_arrives_and_grows_only_past_it(
    accepts: int, restores: int, words: int, capacity: int
) -> None:
    step: list[Effect] = [SsmStateAccept(r, 1, r) for r in range(accepts)]
    step += [SsmSnapshotRestore(r, 0, 1, 1) for r in range(restores)]
    assert len(_wire.encode(step)) == words
    assert tp.broadcast_effects(step, src=0) == tuple(step)
    assert _wire_channel.channel_capacity(None) == capacity


@pytest.mark.usefixtures("one_rank")
def test_a_step_of_exactly_the_word_limit_arrives(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit is inclusive, on the sender and in the header that says more follows."""
    step = [batch_of(260)]
    monkeypatch.setattr(_wire_channel, "MAX_WORDS", len(_wire.encode(step)))  # 1,045: past 1,022
    assert tp.broadcast_effects(step, src=0) == tuple(step)
    assert _wire_channel.channel_capacity(None) == 2048


@pytest.mark.usefixtures("one_rank")
def test_none_from_the_sender_is_an_empty_step() -> None:
    assert tp.broadcast_effects(None, src=0) == ()


# -- no process group at all: one rank, no wire ---------------------------------------------------


def test_without_a_group_none_is_an_empty_step_and_effects_come_back_decoded() -> None:
    assert not dist.is_initialized()
    assert tp.broadcast_effects(None, src=0) == ()
    step: list[Effect] = [SsmStateAccept(1, 2), batch_of(3)]
    assert tp.broadcast_effects(step, src=0) == tuple(step)


@pytest.mark.parametrize("src", [1, 7])
def test_without_a_group_a_src_other_than_0_is_refused(src: int) -> None:
    with pytest.raises(InvalidArgumentError, match=f"'src' must be 0 without .* got {src}"):
        tp.broadcast_effects([SsmStateAccept(0, 0)], src=src)


@pytest.mark.parametrize(
    ("src", "message"),
    [
        (-1, "'src' must be an int >= 0, got -1"),
        (True, "'src' must be an int >= 0, got True of type bool"),
        (2**63, "'src' must be a rank \\(an int64\\), got"),
    ],
)
def test_without_a_group_a_bad_src_raises_its_own_error(src: object, message: str) -> None:
    """The error names what is wrong with ``src``, not that it is not 0."""
    with pytest.raises(InvalidArgumentError, match=message):
        tp.broadcast_effects([SsmStateAccept(0, 0)], src=src)  # type: ignore[arg-type]


@pytest.mark.usefixtures("one_rank")
@pytest.mark.parametrize("rows", [1, 600])  # within the first buffer, and past it
def test_a_value_int64_cannot_carry_is_refused_naming_it_and_nothing_grows(rows: int) -> None:
    """Refused before the header: a header that says more follows commits every rank to it."""
    step: list[Effect] = [batch_of(rows), SsmStateAccept(2**63, 0)]
    at = len(_wire.encode([batch_of(rows)])) + 2  # the accept record's kind, count, then seq
    with pytest.raises(
        InvalidArgumentError, match=f"rank 0 refused .*fit int64, got {2**63} at word {at}"
    ):
        tp.broadcast_effects(step, src=0)
    assert _wire_channel.channel_capacity(None) == 1024
    assert tp.broadcast_effects([SsmStateAccept(0, 0)], src=0) == (SsmStateAccept(0, 0),)


def random_step(rng: random.Random) -> list[Effect]:
    """Runs of every kind (shared slots too), live and staged sources, up to past the buffer."""
    step: list[Effect] = []
    for _ in range(rng.randint(0, 6)):
        kind, n = rng.randrange(6), rng.choice([0, 1, 3, 40, 700])
        rows = range(rng.randrange(1_000), 2_000)
        for r in rng.sample(rows, min(n, 60)) if kind != 3 else ():
            if kind == 0:
                step.append(SsmSnapshotSave(r, r % 5, r + 1, r * 7, rng.choice([None, 0, 3])))
            elif kind == 1:
                step.append(SsmSnapshotRestore(r, r % 5, r + 1, r * 7))
            elif kind == 2:
                step.append(SsmStateAccept(r, rng.randrange(4)))
            elif kind == 4:
                step.append(SsmPrefixSave(r, r % 5, 8 * r + 1, 2**41 + r))
            else:
                step.append(SsmPrefixRestore(r, r % 5, 8 * r + 1, 2**41 + r))
        if kind == 3:
            sources = None if rng.random() < 0.5 else [rng.randrange(-1, 4) for _ in range(n)]
            step.append(
                SaveBatch(range(n), [1] * n, range(n), [2**40 + i for i in range(n)], sources)
            )
    return step


@pytest.mark.usefixtures("one_rank")
def test_random_steps_arrive_equal_to_what_was_sent() -> None:
    rng = random.Random(5)
    for _ in range(60):
        step = random_step(rng)
        got = tp.broadcast_effects(step, src=0)
        assert got == tuple(step)
        assert [type(e) for e in got] == [type(e) for e in step]
    assert _wire_channel.channel_capacity(None) > 1024  # some step outgrew the first buffer


@pytest.mark.usefixtures("one_rank")
@pytest.mark.parametrize(
    "header",
    [
        (7, 3),
        (-1, 3),
        (_wire_channel.OK, -1),
        (_wire_channel.OK, 1023),
        (_wire_channel.REFUSED, 10**9),
        (_wire_channel.OK | _wire_channel.FOLLOWS, _wire_channel.MAX_WORDS + 1),
        (_wire_channel.OK | _wire_channel.FOLLOWS, -3),
    ],
)
def test_a_corrupted_header_is_a_wire_error_and_the_group_goes_on(
    header: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    step = [SsmStateAccept(2, 3)]
    monkeypatch.setattr(_wire_channel, "header_words", lambda status, n: header)
    with pytest.raises(tp.WireError, match="header must hold a status in"):
        tp.broadcast_effects(step, src=0)
    monkeypatch.undo()
    assert tp.broadcast_effects(step, src=0) == (SsmStateAccept(2, 3),)


@pytest.mark.usefixtures("one_rank")
# Negative words whose low bytes look like a small positive int's: only the sign byte tells.
@pytest.mark.parametrize("negative", [-1, -256, -(1 << 40), -(1 << 63)])
@pytest.mark.parametrize("at", [4, 5])  # the seq, and the index: the payload's last word
def test_a_negative_word_on_the_wire_is_refused(
    monkeypatch: pytest.MonkeyPatch, negative: int, at: int
) -> None:
    forged = [_wire.MAGIC, 1, _wire.ACCEPTS, 1, 0, 0]
    forged[at] = negative  # no sender could build the accept
    monkeypatch.setattr(_wire, "encode", lambda effects, *, ranged=True: forged)
    with pytest.raises(tp.WireError, match=f"ints >= 0, got {negative} at word {at}"):
        tp.broadcast_effects([SsmStateAccept(0, 0)], src=0)


@pytest.mark.usefixtures("one_rank")
def test_words_with_high_low_bytes_are_not_mistaken_for_negative_ones() -> None:
    """The sign check reads each word's most significant byte, not its lowest."""
    step = [SsmStateAccept(0xFF, 0x80), SsmStateAccept((1 << 63) - 1, 0xFFFF_FFFF)]
    assert tp.broadcast_effects(step, src=0) == tuple(step)


@pytest.mark.usefixtures("one_rank")
def test_a_header_that_says_more_follows_grows_every_rank_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    step = [SsmStateAccept(2, 3)]
    length = len(_wire.encode(step))
    follows = (_wire_channel.OK | _wire_channel.FOLLOWS, length)
    monkeypatch.setattr(_wire_channel, "header_words", lambda status, n: follows)
    assert tp.broadcast_effects(step, src=0) == (SsmStateAccept(2, 3),)
    assert _wire_channel.channel_capacity(None) == 2048


@pytest.mark.parametrize(
    ("config", "device", "sends"),
    [  # dist.get_backend_config's strings
        ("cpu:gloo,cuda:gloo", "cpu", True),  # init_process_group("gloo")
        ("cpu:gloo", "cpu", True),  # init_process_group() on a machine without CUDA
        ("cpu:gloo,cuda:nccl", "cpu", True),  # a group over both device types
        ("cuda:nccl,cpu:gloo", "cpu", True),
        ("gloo", "cpu", True),  # a bare name serves every device type
        ("cuda:nccl", "cuda", False),
        ("cpu:mpi,cuda:mpi", "cpu", False),
        ("cpu:mpi,cuda:nccl", "cpu", False),
    ],
)
def test_a_step_travels_as_sends_only_on_gloo(config: str, device: str, sends: bool) -> None:
    if device == "cpu":  # only an NCCL-only group asks for CUDA (and so needs a GPU here)
        assert _groups.buffer_device(config) == torch.device("cpu")
    assert _groups.sends_on(config, torch.device(device)) is sends


def test_an_nccl_group_keeps_its_buffer_on_the_current_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``init_process_group("nccl")``'s config: no CPU backend, so the buffer goes to the GPU."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)  # no GPU needed to name one
    assert _groups.buffer_device("cuda:nccl") == torch.device("cuda", 3)


@pytest.mark.parametrize("backend", ["gloo", None])
def test_a_group_started_with_or_without_a_backend_name_sends_on_gloo(
    backend: str | None,
) -> None:
    """Without a name ``get_backend`` says ``undefined``: the config is what names gloo."""
    dist.init_process_group(backend, store=HashStore(), rank=0, world_size=1)
    try:
        step = [SsmStateAccept(0, 1)]
        assert tp.broadcast_effects(step, src=0) == tuple(step)
        channel = _wire_channel._CHANNELS[dist.group.WORLD]  # type: ignore[index]
        assert channel._sends
    finally:
        dist.destroy_process_group()


@pytest.mark.usefixtures("one_rank")
def test_an_iterable_that_raises_is_refused_like_bad_input() -> None:
    """Not the iterable's own error on the sender alone: its peers would wait for the step."""

    def breaks() -> Iterator[Effect]:
        yield SsmStateAccept(0, 0)
        raise KeyError("row 7")

    with pytest.raises(InvalidArgumentError, match="iterating 'effects' raised KeyError: 'row 7'"):
        tp.broadcast_effects(breaks(), src=0)
    assert tp.broadcast_effects([SsmStateAccept(0, 0)], src=0) == (SsmStateAccept(0, 0),)


@pytest.mark.usefixtures("one_rank")
def test_a_refusal_longer_than_the_buffer_still_arrives_whole() -> None:
    with pytest.raises(InvalidArgumentError, match=r"rank 0 refused .*effects\[1\]") as caught:
        tp.broadcast_effects([SsmStateAccept(0, 0), Loud()], src=0)  # type: ignore[list-item]
    assert str(caught.value).endswith("of type Loud" + "loud" * 3000)
    assert _wire_channel.channel_capacity(None) >= 3000 * 4


@pytest.mark.usefixtures("one_rank")
def test_a_step_past_the_word_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_wire_channel, "MAX_WORDS", 100)
    with pytest.raises(InvalidArgumentError, match="must encode to at most 100 words, got 1005"):
        tp.broadcast_effects([batch_of(250)], src=0)
    assert _wire_channel.channel_capacity(None) == 1024  # refused: nothing grew


def test_a_new_process_group_shakes_hands_again_and_a_dead_one_is_let_go() -> None:
    for _ in range(2):
        dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
        try:
            assert _wire_channel.channel_capacity(None) == 0
            assert tp.broadcast_effects([batch_of(2000)], src=0) == (batch_of(2000),)
            assert _wire_channel.channel_capacity(None) == 8192
            group = weakref.ref(dist.group.WORLD)
        finally:
            dist.destroy_process_group()
        gc.collect()
        # Held past its destruction, a group's threads would be torn down at exit, in disorder.
        assert group() is None
        assert not _wire_channel._CHANNELS  # nor its buffer
    assert _wire_channel.channel_capacity(None) == 0


_LAUNCHED: dict[int, list[str]] = {}


@pytest.fixture(params=[2, 4], ids=lambda world: f"{world}-ranks")
def ranks(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    launch_ranks: RankLauncher,
) -> list[str]:
    """Each rank's results; one launch per world size serves both tests (startup dominates)."""
    world: int = request.param
    if world not in _LAUNCHED:
        _LAUNCHED[world] = launch(launch_ranks, world, tmp_path_factory.mktemp(f"tp{world}"))
    return _LAUNCHED[world]


def test_every_rank_tracks_its_shard_of_the_reference(ranks: list[str]) -> None:
    results: list[dict[str, int]] = [json.loads(t)["scenario"] for t in ranks]
    for r, result in enumerate(results):
        assert result["mismatches"] == 0, (r, result)
        assert result["row_steps"] == ROWS * STEPS
        assert result["detected"] == result["injected_steps"] > 0, (r, result)
    assert results[0]["retired"] == results[0]["injected_saves"]
    assert results[0]["row_steps"] >= 2_000


@pytest.mark.parametrize("path", ["bad input", "bad input, all_reduce", "bad input, device buffer"])
def test_a_step_with_prefix_effects_arrives_equal_on_every_rank(
    ranks: list[str], path: str
) -> None:
    """Shared-slot saves and restores among ring effects reach every rank as sent."""
    assert [json.loads(t)[path]["prefix step"] for t in ranks] == ["ok"] * len(ranks)


@pytest.mark.parametrize(
    ("path", "sends", "device_buffer"),
    [
        ("bad input", "True", "False"),
        ("bad input, all_reduce", "False", "False"),
        ("bad input, device buffer", "False", "True"),
    ],
)
def test_bad_input_raises_on_every_rank(
    ranks: list[str], path: str, sends: str, device_buffer: str
) -> None:
    results: list[dict[str, str]] = [json.loads(t)[path] for t in ranks]
    assert results[0]["sends"] == sends  # the path the case means to run
    assert results[0]["device buffer"] == device_buffer
    assert all(r == results[0] for r in results), results
    seen = results[0]
    assert seen["good"] == seen["good again"] == "ok"
    assert seen["prefix step"] == "ok"
    assert seen["not effects"].startswith("InvalidArgumentError: rank 0 refused")
    assert seen["a breaking iterable"].startswith("InvalidArgumentError: rank 0 refused")
    assert seen["unknown kind"].startswith("WireError: record 0 at word 2 must have")
    assert seen["size mismatch"].startswith("WireError: record 1 (save batch)")
    assert seen["mixed versions"].startswith("WireError: every rank must speak")
    assert seen["fresh group"] == "ok"  # a failed handshake is not kept: the next one passes
    assert seen["src not in group"] == "InvalidArgumentError"
    assert seen["from the last rank"] == "ok"
    assert seen["from each rank in turn"] == ", ".join(["ok"] * (len(ranks) + 1))
    for label in ("bad status", "negative length", "length past the buffer", "huge length follows"):
        assert seen[label].startswith("WireError: the step's header must hold"), seen[label]
    assert seen["after corruption"] == "ok"
    assert seen["beside the engine's sends"] == "ok, tokens [100, 101, 102, 103, 104]"
    assert seen["small step"] == "ok 1 messages 0 reduces"
    assert seen["big step"] == "ok 2 messages 0 reduces"
    assert seen["big step again"] == "ok 1 messages 0 reduces"
    assert seen["loud refusal"].startswith("InvalidArgumentError: rank 0 refused")
    assert seen["loud refusal"].endswith(" 2 messages 0 reduces")
    assert int(seen["capacity"]) >= 4 * 1024
    assert seen["big step from the last rank"] == "ok"
    assert seen["bad src"] != "ok"
    assert seen["shapes"].startswith("AgreementError: every rank's pool must")


def test_check_agreement_fails_together_whatever_one_rank_passes(ranks: list[str]) -> None:
    seen: list[dict[str, str]] = [json.loads(t)["agreement"] for t in ranks]
    for r, mine in enumerate(seen):
        refused = mine["one rank's arguments refused"]
        assert refused.startswith(
            "InvalidArgumentTypeError: 'known' must be"
            if r == 1
            else "InvalidArgumentError: every rank must"
        ), refused
        assert mine["the next check"] == "ok"  # paired with the next call of every rank
        outside = mine["outside the group"]
        if r == len(seen) - 1:
            assert outside.startswith("InvalidArgumentError: 'group' must hold"), outside
        else:
            assert outside == "ok"
        assert mine["buffers apart"].startswith("AgreementError: every rank's pool"), mine
        tickets = (None, 7, *([None] * (len(seen) - 2)))
        dispute = tp.RowDispute(1, tickets, (2,) * len(seen))
        assert mine["accept apart"] == repr((1, (), (), (dispute,))), mine
        assert mine["accept apart, known"] == "ok"  # reported once
        dispute_of_save = tp.SlotDispute(0, 0, (10, *([None] * (len(seen) - 1))))
        odd = 1 if len(seen) == 2 else 0  # a tie goes to rank 0's view
        assert mine["saved apart"] == repr((odd, (dispute_of_save,), (), ())), mine
        assert mine["saved alike again"] == "ok"
        assert mine["known after"] == "{}"
        counts = (1, 2, *([1] * (len(seen) - 2)))
        dispute = tp.RowDispute(1, (None,) * len(seen), counts)
        assert mine["buffers of a row apart"] == repr((1, (), (), (dispute,))), mine
        assert mine["first step"] == "ok"
    assert seen[0]["a check alone"] == seen[0]["a step after it"] == "DistributedError"


if __name__ == "__main__":
    main(sys.argv[1:])
