"""Prefix snapshots on tensor-parallel workers: shared slots on every rank's shard (SPEC 12, 13).

Two ranks over gloo on loopback (this file, run as a script, is the rank's
program). Rank 0 schedules requests that share system prompts - new
conversations, follow-ups, regenerations that reuse the prompt-end-minus-one
entry - with a ``PrefixSnapshotIndex``, and decodes with rings that save
boundaries and roll back. Every step's effects (shared saves and restores
among ring saves and restores) go to both ranks with ``broadcast_effects``;
each applies them to its shard of a torch pool with shared slots. After
every step each rank's live shard must equal the matching shard of a
single-process reference run: 0 mismatches.

Rank 1 fails some shared saves (fault injection); the reference pool fails
the same ones. ``check_agreement`` must name the shared slot on both ranks,
and ``retire_disputed(..., prefix_index=)`` must drop the entry from the
scheduler's index, so both runs keep the same index and make the same plans.
"""

from __future__ import annotations

import datetime
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

import pytest

if TYPE_CHECKING:
    from conftest import RankLauncher

pytest.importorskip("torch")

import torch
import torch.distributed as dist

from ssm_rollback import (
    Effect,
    InvalidArgumentError,
    PrefillPlan,
    PrefixSnapshotIndex,
    RollbackPlan,
    SsmDecodeRing,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotSave,
    apply_effects,
    prefix,
    rollback_to_boundary,
    snapshot_boundaries,
)
from ssm_rollback import distributed as tp
from ssm_rollback._tp.disputes import SharedSlotDispute
from ssm_rollback.backends.torch import TorchSnapshotPool

WORLD: Final = 2
ROWS: Final = 6
SLOTS: Final = 3
SHARED: Final = 4
STEPS: Final = 120
CHUNK: Final = 6  # prompt tokens a row feeds per step at most
PRIME: Final = 65521.0  # states stay exact integers in float32
SYSTEMS: Final = (
    (11, 12, 13, 14, 15, 16, 17, 18, 19),
    (21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31),
)

IDLE, RESET, RESTORE, FEED, ROLLBACK = range(5)
WIDTH: Final = CHUNK + 2  # a row's op: kind, count, tokens


def config() -> dict[str, object]:
    return {
        "model_type": "mamba2",
        "num_hidden_layers": 2,
        "hidden_size": 16,
        "num_heads": 8,
        "head_dim": 4,
        "state_size": 4,
        "n_groups": 2,
        "conv_kernel": 4,
        "torch_dtype": "float32",
    }


def shared_fault(save: SsmPrefixSave) -> bool:
    """The shared saves rank 1 (and the reference's one pool) fail: by row and length only.

    Tickets differ between the reference run and the ranks' (one counter
    per process), so the fault must not depend on them.
    """
    return (save.seq + 3 * save.length) % 11 == 4


# -- the scheduler -------------------------------------------------------------------------------


class Row:
    """One request on a row: its prompt, its prefill plan, what it has fed and decoded."""

    def __init__(self) -> None:
        self.busy = False
        self.prompt: list[int] = []
        self.ends: list[int] = []
        self.plan: PrefillPlan | None = None
        self.done = 0  # prompt tokens the live state stands after, during the prefill
        self.output: list[int] = []
        self.target = 0
        self.boundaries: list[int] = []

    @property
    def fed(self) -> list[int]:
        """The tokens the live state stands after."""
        if self.plan is not None:
            return self.prompt[: self.done]
        return self.prompt + self.output


class Scheduler:
    """Requests sharing system prompts over ``ROWS`` rows, with a prefix index and rings."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.rings = [SsmDecodeRing(SLOTS) for _ in range(ROWS)]
        self.index = PrefixSnapshotIndex(SHARED)
        self.rows = [Row() for _ in range(ROWS)]
        self.history: list[tuple[list[int], list[int]]] = []  # finished (tokens, message ends)
        self.prompts: list[tuple[list[int], list[int]]] = []  # prompts planned so far
        self.written: set[int] = set()  # tickets of shared saves applied
        self.pending: list[SsmPrefixSave] = []  # this step's shared saves
        self.releasing: list[PrefillPlan] = []
        self.counts = dict.fromkeys(("deferred", "regenerated", "followups", "rollbacks"), 0)

    def plan(self) -> tuple[list[list[int]], list[Effect]]:
        """This step's per-row ops and its effects, in the order a pool applies them."""
        # Release the prefills that finished last step, once their saves were applied:
        # released earlier, an entry whose save is still in this step could be evicted.
        for done in self.releasing:
            self.index.release(done)
        self.releasing = []
        ops = [[IDLE, 0] + [0] * CHUNK for _ in range(ROWS)]
        prefix_restores: list[Effect] = []
        ring_restores: list[Effect] = []
        shared_saves: list[SsmPrefixSave] = []
        decode: list[int] = []
        finished: list[int] = []
        published = False
        for r, row in enumerate(self.rows):
            if not row.busy:
                if self.rng.random() < 0.6:
                    self._start(r, row, ops[r], prefix_restores)
            elif row.plan is not None:
                self._feed(row, ops[r], shared_saves)
            elif len(row.output) >= row.target:
                finished.append(r)
            elif self.rng.random() < 0.12 and len(row.output) > 1:
                self._rollback(r, row, ops[r], ring_restores)
            else:
                token = self.rng.randrange(1, 100)
                ops[r][:3] = [FEED, 1, token]
                row.output.append(token)
                if token % 3 == 0:
                    row.boundaries.append(len(row.output))
                decode.append(r)
        # One decode-time publish a step, after every plan: a plan may evict only
        # entries whose saves were applied already.
        for r in finished:
            row = self.rows[r]
            row.busy = False
            self.history.append((row.fed, [*row.ends, len(row.prompt), len(row.fed)]))
            if not published and self.rng.random() < 0.7:
                save = self.index.publish(r, row.fed, len(row.fed))
                published = save is not None
                if save is not None:
                    shared_saves.append(save)
        batch = snapshot_boundaries(
            self.rings,
            positions=[len(self.rows[r].output) for r in decode],
            is_boundary=[ops[r][2] % 3 == 0 for r in decode],
            in_thinking=[False] * len(decode),
            rows=decode,
        )
        self.pending = shared_saves
        return ops, [*prefix_restores, *ring_restores, batch, *shared_saves]

    def applied(self, failed: Sequence[SsmPrefixSave]) -> None:
        """Note which of this step's shared saves reached the pool (the others were discarded)."""
        lost = {s.ticket for s in failed}
        self.written.update(s.ticket for s in self.pending if s.ticket not in lost)
        self.pending = []

    def _start(self, r: int, row: Row, op: list[int], restores: list[Effect]) -> None:
        tokens, ends = self._prompt()
        # The pitfall: an entry placed by a plan whose chunk has not run yet is
        # in the index already, but its slot does not hold it - a restore of it
        # now would be refused (StaleSnapshotError). Wait a step instead.
        entry = self.index.match(tokens)
        if entry is not None and entry.ticket not in self.written:
            self.counts["deferred"] += 1
            return
        plan = self.index.plan_prefill(
            r, tokens, publish_at=prefix.app(len(tokens), message_ends=ends)
        )
        self.prompts.append((tokens, ends))
        self.rings[r].clear()
        row.busy, row.prompt, row.ends, row.plan = True, tokens, ends, plan
        row.output, row.boundaries, row.target = [], [], self.rng.randint(2, 7)
        row.done = plan.start
        if plan.hit is None:
            op[0] = RESET
        else:
            op[0] = RESTORE
            restores.append(plan.hit.restore)
            if plan.hit.entry.length == len(tokens) - 1:
                self.counts["regenerated"] += 1

    def _prompt(self) -> tuple[list[int], list[int]]:
        x = self.rng.random()
        if x < 0.25 and self.prompts:  # regenerate a recent prompt: the same tokens again
            tokens, ends = self.rng.choice(self.prompts[-2:])
            return list(tokens), list(ends)
        if x < 0.5 and self.history:  # a follow-up: the conversation so far, one more message
            tokens, ends = self.rng.choice(self.history)
            if len(tokens) < 40:
                self.counts["followups"] += 1
                message = [self.rng.randrange(1, 100) for _ in range(self.rng.randint(2, 5))]
                return [*tokens, *message], ends
        system = list(self.rng.choice(SYSTEMS))
        message = [self.rng.randrange(1, 100) for _ in range(self.rng.randint(2, 6))]
        return system + message, [len(system)]

    def _feed(self, row: Row, op: list[int], saves: list[SsmPrefixSave]) -> None:
        plan = row.plan
        assert plan is not None
        chunk = next(c for c in plan.chunks if c.end > row.done)
        n = min(CHUNK, chunk.end - row.done)
        op[:2] = [FEED, n]
        op[2 : 2 + n] = row.prompt[row.done : row.done + n]
        row.done += n
        if row.done == chunk.end and chunk.save is not None:
            saves.append(chunk.save)
        if row.done == len(row.prompt):
            self.releasing.append(plan)
            row.plan = None

    def _rollback(self, r: int, row: Row, op: list[int], restores: list[Effect]) -> None:
        plan = rollback_to_boundary(
            self.rings[r],
            row.boundaries,
            seq=r,
            current_len=len(row.output),
            at_most=len(row.output) - 1,
        )
        if isinstance(plan, RollbackPlan):
            self.counts["rollbacks"] += 1
            restores.extend(plan.effects)
            del row.output[plan.keep_len :]
            row.boundaries = [b for b in row.boundaries if b <= plan.keep_len]
            op[0] = ROLLBACK


# -- the fake model ------------------------------------------------------------------------------


def ids(shape: Sequence[int]) -> torch.Tensor:
    """A distinct number per state element (layer, channel, ...), the same for every row."""
    count = 1
    for size in shape:
        count *= size
    return torch.arange(count, dtype=torch.float32).reshape(shape[0], *shape[1:])


def step(state: torch.Tensor, token: int, eid: torch.Tensor) -> torch.Tensor:
    """One token: elementwise, so a shard's update is the shard of the whole one's."""
    return torch.remainder(state * 3 + token * 5 + eid, PRIME)


def forward(
    live: Sequence[torch.Tensor], element_ids: Sequence[torch.Tensor], ops: list[list[int]]
) -> None:
    for r, (op, n, *tokens) in enumerate(ops):
        for state, eid in zip(live, element_ids, strict=True):
            if op == RESET:
                state[:, r] = 0
            elif op == FEED:
                for token in tokens[:n]:
                    state[:, r] = step(state[:, r], token, eid)


def recomputed(tokens: Sequence[int], like: torch.Tensor, eid: torch.Tensor) -> torch.Tensor:
    """A row's state computed from scratch: what every restore must reproduce exactly."""
    state = torch.zeros_like(like)
    for token in tokens:
        state = step(state, token, eid)
    return state


Record = list[tuple[int, list[int]]]  # per step: shared saves failed, live entries' slots


def reference_run(
    cfg: dict[str, object],
) -> tuple[list[list[torch.Tensor]], Record, dict[str, int]]:
    """The single-process run: the full state, one pool failing rank 1's shared saves."""
    sched = Scheduler(seed=11)
    live = tp.shard_live_states(cfg, num_sequences=ROWS, tp_size=1, dtype="float32")
    element_ids = [ids((t.shape[0], *t.shape[2:])) for t in live]
    pool = TorchSnapshotPool(live, SLOTS, batch_dim=1, shared_slots=SHARED)
    pool.fail_shared_when(shared_fault)
    states: list[list[torch.Tensor]] = []
    record: Record = []
    inexact = 0
    for _ in range(STEPS):
        ops, effects = sched.plan()
        forward(live, element_ids, ops)
        outcome = apply_effects(pool, effects, sched.rings, prefix_index=sched.index)
        sched.applied(outcome.failed_shared)
        sched.index.check_valid()
        for r, row in enumerate(sched.rows):
            if row.busy:
                for state, eid in zip(live, element_ids, strict=True):
                    inexact += int(
                        not torch.equal(state[:, r], recomputed(row.fed, state[:, r], eid))
                    )
        states.append([t.clone() for t in live])
        record.append((len(outcome.failed_shared), [e.slot for e in sched.index.entries()]))
    stats = sched.index.stats
    summary = {
        "inexact": inexact,
        "hits": stats.hits,
        "tokens_reused": stats.tokens_reused,
        "published": stats.published,
        "evicted": stats.evicted,
        **sched.counts,
    }
    return states, record, summary


# -- the ranks' program --------------------------------------------------------------------------


def scenario(rank: int) -> dict[str, int]:
    cfg = config()
    expected, reference, summary = reference_run(cfg)
    names = ("conv", "ssm")
    live = tp.shard_live_states(cfg, num_sequences=ROWS, tp_size=WORLD, dtype="float32")
    full_ids = [ids((t.shape[0], *t.shape[2:])) for t in expected[0]]
    element_ids = [
        tp.shard_of(e, cfg, tensor=n, rank=rank, tp_size=WORLD, dim=1)
        for e, n in zip(full_ids, names, strict=True)
    ]
    pool = tp.shard_pool(live, cfg, SLOTS, tp_size=WORLD, shared_slots=SHARED)
    if rank == WORLD - 1:
        pool.fail_shared_when(shared_fault)
    sched = Scheduler(seed=11) if rank == 0 else None
    known: dict[tuple[int, int], tuple[int, int]] = {}
    mismatches = detected = injected = named = others = retired = still_matched = 0
    prefix_steps = 0
    ops_buffer = torch.zeros((ROWS, WIDTH), dtype=torch.int64)
    for at in range(STEPS):
        effects: list[Effect] | None = None
        if sched is not None:
            ops, effects = sched.plan()
            ops_buffer.copy_(torch.tensor(ops))
        dist.broadcast(ops_buffer, src=0)  # the engine's own step input (tokens), not ours
        received = tp.broadcast_effects(
            effects,
            src=0,
            rings=None if sched is None else sched.rings,
            prefix_index=None if sched is None else sched.index,
        )
        prefix_steps += any(isinstance(e, SsmPrefixSave | SsmPrefixRestore) for e in received)
        forward(live, element_ids, ops_buffer.tolist())
        if sched is not None:
            outcome = apply_effects(pool, received, sched.rings, prefix_index=sched.index)
            sched.applied(outcome.failed_shared)
        else:
            tp.apply_on_worker(pool, received)
        try:
            tp.check_agreement(pool, known=known)
        except tp.AgreementError as error:
            detected += 1
            others += (error.rank != WORLD - 1) + len(error.disputes)  # only shared saves fail
            named += all(f"(shared slot {d.slot})" in str(error) for d in error.shared_disputes)
            if sched is not None:
                disputed = {d.slot for d in error.shared_disputes}
                gone = [e for e in sched.index.entries() if e.slot in disputed]
                prefixes = [sched.index.tokens_of(e) for e in gone]
                tp.retire_disputed(sched.rings, error, prefix_index=sched.index)
                retired += len(gone)
                for e, tokens in zip(gone, prefixes, strict=True):
                    hit = sched.index.match([*tokens, 0])
                    still_matched += hit is not None and hit.length == e.length
        failed, slots = reference[at]
        injected += failed > 0
        assert detected == injected, f"step {at}: a failed shared save went unnoticed"
        if sched is not None:
            assert [e.slot for e in sched.index.entries()] == slots, f"step {at}: index differs"
        for state, full, name in zip(live, expected[at], names, strict=True):
            want = tp.shard_of(full, cfg, tensor=name, rank=rank, tp_size=WORLD, dim=2)
            mismatches += int((state != want).flatten(2).any(dim=2).any(dim=0).sum())
    return {
        "mismatches": mismatches,
        "row_steps": ROWS * STEPS,
        "prefix_steps": prefix_steps,
        "detected": detected,
        "named": named,
        "others": others,
        "retired": retired,
        "still_matched": still_matched,
        "injected_steps": injected,
        "injected_saves": sum(failed for failed, _ in reference),
        **{f"reference {name}": value for name, value in summary.items()},
    }


def odd_shapes(rank: int) -> str:
    """Pools whose shared slots differ between ranks: a dispute on every rank, not a hang."""
    live = (torch.zeros((1, 2, 3)),)
    odd = TorchSnapshotPool(live, 2, batch_dim=1, shared_slots=2 + rank)
    try:
        tp.check_agreement(odd)
    except tp.AgreementError as error:
        return str(error)
    return "ok"


def decided_by_the_scheduler(rank: int) -> list[object]:
    """Steps that the scheduler's ``apply_effects`` decides by what only it holds. Given only
    ``src=0``, the first was applied on the scheduler (its index left the evicted entry's save
    out) and refused whole on the worker (one shared slot twice), so a rollback moved row 2 on
    one rank only; the second was refused on the scheduler (no ring for row 3) and applied on
    the worker. Given ``rings=`` and ``prefix_index=``, every rank does the same."""
    live = torch.zeros((4, 3))
    pool = TorchSnapshotPool((live,), 2, shared_slots=1)
    sched = rank == 0
    rings = [SsmDecodeRing(2) for _ in range(4)] if sched else None
    index = PrefixSnapshotIndex(1) if sched else None
    seen: list[object] = []

    def apply(effects: list[Effect] | None, given: dict[int, SsmDecodeRing] | None = None) -> None:
        try:
            step = tp.broadcast_effects(
                effects, src=0, rings=given if given is not None else rings, prefix_index=index
            )
        except InvalidArgumentError as error:
            seen.append(str(error))
            return
        if rings is not None:
            apply_effects(pool, step, rings, prefix_index=index)
        else:
            tp.apply_on_worker(pool, step)
        seen.append([type(e).__name__ for e in step])

    live[2] = 1.0
    saved = None
    if rings is not None:
        slot = rings[2].record(5)
        entry = rings[2].entry_for(5)
        assert slot is not None
        assert entry is not None
        saved = [cast(Effect, SsmSnapshotSave(2, slot, 5, entry.ticket))]
    apply(saved)
    live[2] = 9.0  # the forward pass
    rolled: list[Effect] | None = None
    if rings is not None and index is not None:
        plan = rollback_to_boundary(rings[2], [5], seq=2, current_len=9)
        assert isinstance(plan, RollbackPlan)
        first = index.publish(0, [1, 2, 3, 4], 3)
        second = index.publish(1, [7, 8, 9, 10], 3)  # evicts the first: one shared slot
        assert first is not None
        assert second is not None
        rolled = [*plan.effects, first, second]
    apply(rolled)
    seen.append(live[2].tolist())
    tp.check_agreement(pool)
    unringed = None
    if rings is not None:
        unringed = [cast(Effect, SsmSnapshotSave(3, 0, 4, 99))]
    apply(unringed, {2: SsmDecodeRing(2)})
    seen.append(pool.stored_ticket(3, 0))
    return seen


def main(argv: list[str]) -> None:
    rank, port, out = int(argv[0]), argv[1], Path(argv[2])
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        result = {
            "counts": scenario(rank),
            "shapes": odd_shapes(rank),
            "decided": decided_by_the_scheduler(rank),
        }
    finally:
        dist.destroy_process_group()
    (out / f"rank{rank}.json").write_text(json.dumps(result), encoding="utf-8")


# -- the tests -----------------------------------------------------------------------------------


Results = list[dict[str, int]]


@pytest.fixture(scope="module")
def launched(
    tmp_path_factory: pytest.TempPathFactory, launch_ranks: RankLauncher
) -> list[dict[str, object]]:
    """Each rank's results."""
    out = tmp_path_factory.mktemp("prefix-tp")
    port = launch_ranks.port()
    launch_ranks.run({f"rank {r}": [__file__, str(r), str(port), str(out)] for r in range(WORLD)})
    return [json.loads((out / f"rank{r}.json").read_text(encoding="utf-8")) for r in range(WORLD)]


@pytest.fixture
def counts(launched: list[dict[str, object]]) -> Results:
    return [cast(dict[str, int], result["counts"]) for result in launched]


def test_every_rank_tracks_its_shard_of_the_reference_through_prefix_effects(
    counts: Results,
) -> None:
    for r, result in enumerate(counts):
        assert result["mismatches"] == 0, (r, result)
        assert result["row_steps"] == ROWS * STEPS
        assert result["prefix_steps"] >= STEPS // 4, (r, result)
    ref = {k.removeprefix("reference "): v for k, v in counts[0].items()}
    # The reference's restores reproduce exactly the state a full recompute gives.
    assert ref["inexact"] == 0, ref
    # The workload exercised what it is for: hits (regenerations and follow-ups among
    # them), evictions, rollbacks, and the pitfall's wait.
    for name, least in (
        ("hits", 10),
        ("tokens_reused", 100),
        ("regenerated", 2),
        ("followups", 2),
        ("evicted", 1),
        ("rollbacks", 1),
    ):
        assert ref[name] >= least, (name, ref)


def test_a_shared_save_failed_on_one_rank_is_named_and_retired_from_the_index(
    counts: Results,
) -> None:
    for r, result in enumerate(counts):
        assert result["injected_steps"] >= 2, (r, result)
        assert result["detected"] == result["injected_steps"], (r, result)
        assert result["named"] == result["detected"], (r, result)
        assert result["others"] == 0, (r, result)
    assert counts[0]["retired"] == counts[0]["injected_saves"]
    assert counts[0]["still_matched"] == 0


def test_every_rank_applies_the_steps_the_scheduler_decides_or_all_refuse(
    launched: list[dict[str, object]],
) -> None:
    decided = [result["decided"] for result in launched]
    assert decided[0] == decided[1]
    assert decided[0] == [
        ["SsmSnapshotSave"],
        ["SsmSnapshotRestore", "SsmPrefixSave"],  # the superseded save left out, on both
        [1.0, 1.0, 1.0],  # row 2 rolled back on both
        "rank 0 refused the step's effects: 'rings' must hold a ring for every saved row, "
        "got none for seq 3 (effects[0])",
        None,  # nothing saved on either
    ]


def test_pools_with_different_shared_slots_are_a_dispute_on_every_rank(
    launched: list[dict[str, object]],
) -> None:
    messages = [str(result["shapes"]) for result in launched]
    assert messages[0] == messages[1]
    assert "intermediate states per row), got [(2, 2, 2, 0), (2, 2, 3, 0)] by rank" in messages[0]


# -- in one process: the scheduler's side of a shared dispute -------------------------------------


def test_retire_disputed_discards_the_disputed_shared_entry_from_the_index() -> None:
    index = PrefixSnapshotIndex(2)
    prompt = [5, 6, 7, 8, 9]
    plan = index.plan_prefill(0, prompt, publish_at=[2, 4])
    index.release(plan)
    short, long = index.entries()
    error = tp.AgreementError(
        "rank 1 differs", 1, (), (SharedSlotDispute(long.slot, (long.ticket, None)),)
    )
    ring = SsmDecodeRing(2)
    assert tp.retire_disputed([ring], error, prefix_index=index) == ()
    assert index.entries() == (short,)
    assert index.match(prompt) == short  # the shorter prefix, in agreement, still serves


def test_retire_disputed_leaves_a_shared_slot_placed_anew_since() -> None:
    """A dispute about a ticket no rank holds any more names another placement: kept."""
    index = PrefixSnapshotIndex(1)
    index.release(index.plan_prefill(0, [1, 2, 3], publish_at=[2]))
    (entry,) = index.entries()
    stale = SharedSlotDispute(entry.slot, (entry.ticket - 1, None))
    tp.retire_disputed([], tp.AgreementError("x", 1, (), (stale,)), prefix_index=index)
    assert index.entries() == (entry,)


def test_retire_disputed_refuses_a_prefix_index_of_another_kind() -> None:
    with pytest.raises(
        TypeError, match="'prefix_index' must be a PrefixSnapshotIndex or None, got dict"
    ):
        tp.retire_disputed([], tp.AgreementError("x", 1, ()), prefix_index={})  # type: ignore[arg-type]


if __name__ == "__main__":
    main(sys.argv[1:])
