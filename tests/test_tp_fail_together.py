"""Distributed calls fail together (SPEC 15), over gloo on loopback at two and three ranks.

Ranks that pass different ``src``, a rank that raised before the step, the
scheduler's bad effects, and a rank killed mid-step: every rank that raises
raises a library error naming the disagreement (each rank's ``src``) or the
group and the rank, never a foreign one, and no rank waits past the group's
timeout. Where a rank still completes a step, the case says so: on gloo,
ranks compare ``src`` only at a group's first step.

Each case runs on a group of its own whose timeout is ``TIMEOUT_S``. Both
world sizes start at once (run as a script, this file is a rank's program)
and the launch is bounded (``launch_ranks``), so a hang fails the tests instead of
stalling the suite. The in-process tests at the end make every backend call
fail on a stand-in group.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import weakref
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

import pytest

if TYPE_CHECKING:
    from conftest import RankLauncher

pytest.importorskip("torch")

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore

from ssm_rollback import Effect, InvalidArgumentError, SsmRollbackError, SsmStateAccept
from ssm_rollback import distributed as tp
from ssm_rollback._tp import channel as _wire_channel
from ssm_rollback._tp import failures as _failures
from ssm_rollback.backends.torch import TorchSnapshotPool

TIMEOUT_S: Final = 2
STEP: Final[tuple[Effect, ...]] = (SsmStateAccept(1, 2),)
SKIP: Final = "skip"  # a rank that makes no call in that round

Outcome = dict[str, object]


# -- the ranks' program ----------------------------------------------------------------------------


def outcome_of(call: Callable[[], object]) -> Outcome:
    """What a call did on this rank: ``ok``, or its error of whatever kind."""
    try:
        got = call()
    except Exception as error:  # a foreign error too: the test, not the rank, must fail on it
        return {
            "type": type(error).__name__,
            "library": isinstance(error, SsmRollbackError),
            "message": str(error),
            "rank": getattr(error, "rank", None),
            "group": getattr(error, "group", None),
        }
    return {"type": "ok" if got == STEP else f"wrong: {got!r}"}


def fresh_group() -> dist.ProcessGroup:
    """A case's own group, once every rank is done with the case before."""
    dist.barrier()  # on the world: in the case before, some ranks waited out a timeout
    group = dist.new_group(timeout=datetime.timedelta(seconds=TIMEOUT_S))
    assert isinstance(group, dist.ProcessGroup)
    return group


def rounds(group: dist.ProcessGroup, srcs: Sequence[Sequence[object]]) -> list[Outcome]:
    """One ``broadcast_effects`` per round, this rank passing its own ``src`` of that round."""
    me = dist.get_rank()
    outcomes: list[Outcome] = []
    for by_rank in srcs:
        src = by_rank[me]
        call = partial(tp.broadcast_effects, STEP if src == me else None, src=src, group=group)  # type: ignore[arg-type]
        outcomes.append({"type": SKIP} if src == SKIP else outcome_of(call))
    return outcomes


def cases(world: int) -> dict[str, list[Outcome]]:
    good = [0] * world
    differ = [0] * (world - 1) + [1]  # 2 ranks: [0, 1]; 3 ranks: [0, 0, 1]
    outside = [0] * (world - 1) + [world + 5]
    not_int = [0] * (world - 1) + ["0"]
    results = {
        "different src, first step": rounds(fresh_group(), [differ, good]),
        "src outside the group on one rank, first step": rounds(fresh_group(), [outside, good]),
        "src not an int on one rank, first step": rounds(fresh_group(), [not_int, good]),
        "different src, later step": rounds(fresh_group(), [good, differ, good]),
        "src outside the group on one rank, later step": rounds(
            fresh_group(), [good, outside, [*good[:-1], SKIP]]
        ),
        "a rank that raised before a step takes the next": rounds(
            fresh_group(), [good, outside, good]
        ),
    }
    group = fresh_group()
    me = dist.get_rank()
    bad: list[object] = [object()]
    results["bad effects on the scheduler"] = [
        outcome_of(lambda: tp.broadcast_effects(bad if me == 0 else None, src=0, group=group)),  # type: ignore[arg-type]
        *rounds(group, [good]),
    ]
    # NCCL's path, an all_reduce, on gloo: every step compares every rank's src.
    real_sends_on = _wire_channel.sends_on
    _wire_channel.sends_on = lambda config, device: False
    results["different src, later step, all_reduce"] = rounds(fresh_group(), [good, differ, good])
    results["src outside the group on one rank, later step, all_reduce"] = rounds(
        fresh_group(), [good, outside, good]
    )
    _wire_channel.sends_on = real_sends_on
    return results


def die_in_step(self: _wire_channel._Channel, root: int) -> None:
    os._exit(0)  # in the middle of a step: after the sender's encoding, before any message


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
    results = cases(world)
    # Last, as nothing runs on the world after it: a rank dies mid-step, the scheduler
    # itself at three ranks, a worker at two.
    group = fresh_group()
    victim = 0 if world == 3 else 1
    results["killed mid-step"] = rounds(group, [[0] * world])
    if rank == victim:
        (out / f"rank{rank}.json").write_text(json.dumps(results), encoding="utf-8")
        _wire_channel._Channel._message = die_in_step  # type: ignore[method-assign]
    results["killed mid-step"] += rounds(group, [[0] * world])
    (out / f"rank{rank}.json").write_text(json.dumps(results), encoding="utf-8")
    os._exit(0)  # no teardown: the world has lost a rank (at three ranks, the store's host)


# -- the launch ------------------------------------------------------------------------------------


def launch(
    launcher: RankLauncher, worlds: Sequence[int], out: Path
) -> dict[int, list[dict[str, list[Outcome]]]]:
    """Run every world's ranks at once; each rank's outcomes by case."""
    ranks = {}
    for world in worlds:
        port, folder = launcher.port(), out / f"world{world}"
        folder.mkdir()
        for r in range(world):
            ranks[f"rank {r} of {world}"] = [__file__, str(r), str(world), str(port), str(folder)]
    launcher.run(ranks)
    return {
        world: [
            json.loads((out / f"world{world}" / f"rank{r}.json").read_text(encoding="utf-8"))
            for r in range(world)
        ]
        for world in worlds
    }


@pytest.fixture(scope="module")
def launched(
    tmp_path_factory: pytest.TempPathFactory, launch_ranks: RankLauncher
) -> dict[int, list[dict[str, list[Outcome]]]]:
    return launch(launch_ranks, (2, 3), tmp_path_factory.mktemp("fail_together"))


def by_rank(
    launched: dict[int, list[dict[str, list[Outcome]]]], world: int, case: str
) -> list[list[Outcome]]:
    return [results[case] for results in launched[world]]


OK: Final[Outcome] = {"type": "ok"}
WORLDS = pytest.mark.parametrize("world", [2, 3])


def refused(outcome: Outcome, message: str) -> None:
    assert outcome["type"] == "InvalidArgumentError", outcome
    assert outcome["message"] == message


def lost(outcome: Outcome, rank: int, what: str = "") -> None:
    """A ``DistributedError`` naming the group and ``rank``."""
    assert outcome["type"] == "DistributedError", outcome
    assert outcome["rank"] == rank, outcome
    message = str(outcome["message"])
    assert str(outcome["group"]).startswith("process group '")
    assert message.startswith(f"{outcome['group']}: rank {rank} ") or (
        f"cannot take another step after: {outcome['group']}: rank {rank} " in message
    ), message
    assert what in message


def srcs(values: Sequence[object]) -> str:
    return ", ".join(f"{v} on rank {r}" for r, v in enumerate(values))


# -- the tests -------------------------------------------------------------------------------------


@WORLDS
def test_ranks_that_pass_different_src_at_a_groups_first_step_all_refuse_naming_each(
    launched: dict[int, list[dict[str, list[Outcome]]]], world: int
) -> None:
    differ = [0] * (world - 1) + [1]
    message = f"'src' must be the same rank of the group on every rank, got {srcs(differ)}"
    for first, after in by_rank(launched, world, "different src, first step"):
        refused(first, message)
        assert after == OK  # nothing was kept: the next step shakes hands again


@WORLDS
def test_one_rank_with_a_bad_src_at_a_groups_first_step_makes_every_rank_refuse(
    launched: dict[int, list[dict[str, list[Outcome]]]], world: int
) -> None:
    for case, odd in (
        ("src outside the group on one rank, first step", str(world + 5)),
        ("src not an int on one rank, first step", "no rank (not an int >= 0)"),
    ):
        message = "'src' must be the same rank of the group on every rank, got " + srcs(
            [*[0] * (world - 1), odd]
        )
        for first, after in by_rank(launched, world, case):
            refused(first, message)
            assert after == OK


@WORLDS
def test_the_schedulers_bad_effects_still_fail_on_every_rank_and_the_group_goes_on(
    launched: dict[int, list[dict[str, list[Outcome]]]], world: int
) -> None:
    for first, after in by_rank(launched, world, "bad effects on the scheduler"):
        assert first["type"] == "InvalidArgumentError"
        assert str(first["message"]).startswith("rank 0 refused the step's effects: 'effects[0]'")
        assert after == OK


@WORLDS
def test_different_src_after_the_first_step_ends_in_a_named_error_not_a_hang(
    launched: dict[int, list[dict[str, list[Outcome]]]], world: int
) -> None:
    """On gloo a later step's ``src`` is not compared: the ranks left waiting time out.

    Two ranks both send and time out, naming each other. At three ranks
    (``src`` 0, 0, 1) rank 1 takes rank 0's step - it agreed with the sender
    - and raises at its next step, when rank 0, having timed out, has closed
    the group.
    """
    outcomes = by_rank(launched, world, "different src, later step")
    assert all(warm == OK for warm, _, _ in outcomes)
    if world == 2:
        for rank, (_, first, after) in enumerate(outcomes):
            lost(first, 1 - rank, f"took no step from rank {rank} (its 'src')")
            lost(after, 1 - rank, "cannot take another step")
        return
    (_, first0, after0), (_, first1, after1), (_, first2, after2) = outcomes
    lost(first0, 2, "took no step from rank 0 (its 'src')")
    lost(after0, 2, "cannot take another step")
    assert first1 == OK
    lost(after1, 0, "sent no step (it is this rank's 'src')")
    lost(first2, 1, "sent no step (it is this rank's 'src')")
    lost(after2, 1, "cannot take another step")


@WORLDS
def test_a_rank_with_a_bad_src_after_the_first_step_raises_at_once_and_its_sender_times_out(
    launched: dict[int, list[dict[str, list[Outcome]]]], world: int
) -> None:
    outcomes = by_rank(launched, world, "src outside the group on one rank, later step")
    *others, (warm, bad, skipped) = outcomes
    assert warm == OK
    refused(bad, f"'src' must be a rank of the group (ranks {list(range(world))}), got {world + 5}")
    assert skipped == {"type": SKIP}
    _, first0, after0 = others[0]
    lost(first0, world - 1, "took no step from rank 0")
    lost(after0, world - 1, "cannot take another step")
    if world == 3:  # took rank 0's step; its next finds rank 0 gone
        _, first1, after1 = others[1]
        assert first1 == OK
        lost(after1, 0, "sent no step")


@WORLDS
def test_a_rank_that_raised_before_a_step_does_not_take_that_steps_message_as_its_next(
    launched: dict[int, list[dict[str, list[Outcome]]]], world: int
) -> None:
    """The step it skipped is still on its way to it: refused, by the step number it carries."""
    outcomes = by_rank(launched, world, "a rank that raised before a step takes the next")
    *others, (_, bad, next_step) = outcomes
    assert bad["type"] == "InvalidArgumentError"
    lost(next_step, 0, "sent step 2's message, this rank's step is 3")
    _, first0, after0 = others[0]
    assert first0 == OK  # its message was taken, then refused
    lost(after0, world - 1, "took no step from rank 0")
    if world == 3:
        assert others[1] == [OK, OK, OK]


@WORLDS
def test_on_nccls_path_every_step_compares_src_on_every_rank(
    launched: dict[int, list[dict[str, list[Outcome]]]], world: int
) -> None:
    differ = [0] * (world - 1) + [1]
    outside = [0] * (world - 1) + [world + 5]
    for case, values in (
        ("different src, later step, all_reduce", differ),
        ("src outside the group on one rank, later step, all_reduce", outside),
    ):
        message = f"'src' must be the same rank of the group on every rank, got {srcs(values)}"
        for warm, first, after in by_rank(launched, world, case):
            assert warm == after == OK  # refused alike everywhere: the group goes on
            refused(first, message)


@WORLDS
def test_a_rank_killed_mid_step_is_named_on_every_rank_waiting_on_it(
    launched: dict[int, list[dict[str, list[Outcome]]]], world: int
) -> None:
    """Two ranks: the worker dies, the scheduler raises. Three: the scheduler dies."""
    outcomes = by_rank(launched, world, "killed mid-step")
    victim = 0 if world == 3 else 1
    for rank, (warm, *step) in enumerate(outcomes):
        assert warm == OK
        if rank == victim:
            assert step == []  # its results were written before it died
        elif victim == 0:
            lost(step[0], 0, "sent no step (it is this rank's 'src')")
        else:
            lost(step[0], 1, "took no step from rank 0 (its 'src')")


@WORLDS
def test_no_rank_ever_raises_a_foreign_error(
    launched: dict[int, list[dict[str, list[Outcome]]]], world: int
) -> None:
    for results in launched[world]:
        for case, outcomes in results.items():
            for outcome in outcomes:
                assert outcome["type"] in ("ok", SKIP) or outcome["library"] is True, (
                    case,
                    outcome,
                )


# -- in one process: every backend call fails on a stand-in group ----------------------------------


class _Work:
    def __init__(self, failure: str | None, fill: Callable[[], None] | None = None) -> None:
        self.failure, self.fill, self.waited = failure, fill, False

    def wait(self) -> bool:
        self.waited = True
        if self.failure is not None:
            raise RuntimeError(self.failure)
        if self.fill is not None:
            self.fill()
        return True


CLOSED: Final = "Connection closed by peer [127.0.0.1]:4242"
TIMED_OUT: Final = "Timed out waiting 2000ms for recv operation to complete"


class StandIn:
    """A group of ``size`` ranks: calls with a ``dead`` peer fail as gloo's do, others succeed.

    A receive that succeeds writes ``header`` into the buffer, as a sender's message would.
    """

    def __init__(self, size: int, dead: Sequence[int] = (), header: Sequence[int] = ()) -> None:
        self._size, self.dead, self.header = size, dead, header
        self.works: list[_Work] = []

    def size(self) -> int:
        return self._size

    def _work(self, tensor: torch.Tensor, failure: str | None) -> _Work:
        def fill() -> None:
            tensor[: len(self.header)] = torch.tensor(self.header, dtype=torch.int64)

        self.works.append(_Work(failure, fill))
        return self.works[-1]

    def send(self, tensors: list[torch.Tensor], peer: int, tag: int) -> _Work:
        return self._work(tensors[0], CLOSED if peer in self.dead else None)

    def recv(self, tensors: list[torch.Tensor], peer: int, tag: int) -> _Work:
        return self._work(tensors[0], CLOSED if peer in self.dead else None)

    def allreduce(self, tensors: list[torch.Tensor]) -> _Work:
        return self._work(tensors[0], TIMED_OUT if self.dead else None)


def channel_on(group: StandIn, me: int, *, sends: bool = True) -> _wire_channel._Channel:
    ref = cast("weakref.ReferenceType[dist.ProcessGroup]", weakref.ref(group))
    label = "process group 'stand-in'"
    cpu = torch.device("cpu")
    ranks = tuple(range(group.size()))
    channel = _wire_channel._Channel(ref, label, cpu, me, me, ranks, sends)
    channel.grow(_wire_channel.FIRST_CAPACITY)
    return channel


def test_a_worker_whose_scheduler_died_names_it_and_refuses_every_later_step() -> None:
    group = StandIn(2, dead=[0])
    channel = channel_on(group, 1)
    with pytest.raises(tp.DistributedError, match="sent no step") as caught:
        channel.step(None, 0, None)
    error = caught.value
    assert (error.group, error.rank) == ("process group 'stand-in'", 0)
    assert str(error).startswith("process group 'stand-in': rank 0 sent no step")
    assert str(error).endswith(f"RuntimeError: {CLOSED}")
    assert isinstance(error.__cause__, RuntimeError)
    calls = len(group.works)
    with pytest.raises(tp.DistributedError, match="cannot take another step after") as again:
        channel.step(None, 0, None)
    assert again.value.rank == 0
    assert len(group.works) == calls  # refused without a call on the group


def test_a_scheduler_whose_worker_died_waits_for_every_send_then_names_the_dead_one() -> None:
    """No send is left in flight with the buffer it reads: the live peer's is waited for too."""
    group = StandIn(3, dead=[1])
    channel = channel_on(group, 0)
    with pytest.raises(tp.DistributedError, match="rank 1 took no step from rank 0") as caught:
        channel.step(list(STEP), 0, None)
    assert caught.value.rank == 1
    assert [w.waited for w in group.works] == [True, True]


def test_a_collective_step_that_fails_names_the_group() -> None:
    group = StandIn(2, dead=[1])
    channel = channel_on(group, 0, sends=False)
    with pytest.raises(tp.DistributedError, match="a peer did not take part") as caught:
        channel.step(list(STEP), 0, None)
    assert caught.value.rank is None
    assert str(caught.value).endswith(TIMED_OUT)


def test_a_message_of_another_step_is_refused_not_taken() -> None:
    """A message stamped step 4 reaching a worker at its step 1 (``channel`` rule 6)."""
    group = StandIn(2, header=[4 << 8 | _wire_channel.OK, 0])
    channel = channel_on(group, 1)
    with pytest.raises(tp.DistributedError) as caught:
        channel.step(None, 0, None)
    assert str(caught.value) == (
        "process group 'stand-in': rank 0 sent step 4's message, this rank's step is 1 - one of "
        "them skipped a step (raised before it, or never called); the group cannot be used again"
    )


@pytest.fixture
def one_rank() -> Iterator[None]:
    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def refuse(*args: object, **kwargs: object) -> None:
    raise RuntimeError(CLOSED)


@pytest.mark.usefixtures("one_rank")
def test_a_handshake_that_fails_names_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dist, "all_reduce", refuse)
    with pytest.raises(tp.DistributedError, match="did not take part in the group's first step"):
        tp.broadcast_effects(list(STEP), src=0)
    monkeypatch.undo()
    assert tp.broadcast_effects(list(STEP), src=0) == STEP  # nothing was kept


@pytest.mark.usefixtures("one_rank")
def test_an_agreement_check_that_fails_names_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    live = (torch.zeros((1, 2, 3)),)
    monkeypatch.setattr(dist, "all_gather", refuse)
    with pytest.raises(tp.DistributedError, match=r"process group '0'.*did not check agreement"):
        tp.check_agreement(TorchSnapshotPool(live, 2, batch_dim=1))


@pytest.mark.parametrize(
    ("src", "word", "message"),
    [
        (0, 0, None),
        (3, 3, None),
        (-1, _failures.INVALID, "'src' must be an int >= 0, got -1"),
        ("0", _failures.INVALID, "'src' must be an int >= 0, got '0' of type str"),
        (True, _failures.INVALID, "'src' must be an int >= 0, got True of type bool"),
        (2**63, _failures.INVALID, f"'src' must be a rank \\(an int64\\), got {2**63}"),
    ],
)
def test_a_ranks_src_word(src: object, word: int, message: str | None) -> None:
    got, error = _failures.src_word(src)
    assert got == word
    if message is None:
        assert error is None
    else:
        assert error is not None
        with pytest.raises(InvalidArgumentError, match=message):
            raise error


def test_the_src_refusal_every_rank_raises() -> None:
    refusal = _failures.src_refusal
    assert refusal([1, 1], (0, 1), None) is None
    mixed = refusal([0, _failures.INVALID, 2], (4, 5, 6), None)
    assert str(mixed) == (
        "'src' must be the same rank of the group on every rank, got 0 on rank 4, "
        "no rank (not an int >= 0) on rank 5, 2 on rank 6"
    )
    outside = refusal([9, 9], (0, 1), None)
    assert str(outside) == "'src' must be a rank of the group (ranks [0, 1]), got 9"
    own = InvalidArgumentError("this rank's own")
    assert refusal([_failures.INVALID] * 2, (0, 1), own) is own


def test_distributed_error_is_a_library_error_and_a_runtime_error() -> None:
    assert issubclass(tp.DistributedError, SsmRollbackError)
    assert issubclass(tp.DistributedError, RuntimeError)
    assert "DistributedError" in tp.__all__


def test_a_distributed_error_for_a_lost_peer_names_its_rank_and_group() -> None:
    """``rank`` is the peer's, for a caller that acts on it; ``None`` where none is known."""
    cause = RuntimeError(CLOSED)
    error = _failures.lost("process group 'g'", 3, "sent no step", cause)
    assert (error.group, error.rank) == ("process group 'g'", 3)
    assert str(error).startswith("process group 'g': rank 3 sent no step - ")
    unknown = _failures.lost("process group 'g'", None, "did not take part", None)
    assert unknown.rank is None
    assert str(unknown).startswith("process group 'g': a peer did not take part - ")


if __name__ == "__main__":
    main(sys.argv[1:])
