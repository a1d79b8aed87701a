"""One simulation's replays, one after another or in worker processes: ``run_all``.

Each replay is independent and deterministic (one trace; one rule, eviction
and slot count, or the oracles), so running them in ``jobs`` processes
gives exactly the results of running them in turn. A worker generates the
trace once from its parameters (the same parameters give the same trace)
instead of receiving it. Workers are forked on Linux while this process
runs no other thread (nothing is imported again); else spawned, so another
thread is never copied holding a lock (a spawned worker imports the
caller's main module again, which then needs its ``if __name__ ==
"__main__":`` guard, as for any spawned pool). In turn, progress is
reported request by request; in workers, as each replay finishes. After
an error in a worker, or an interrupt, no further replay starts; those
running finish first.
"""

from __future__ import annotations

import functools
import multiprocessing
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from ..._errors import InvariantError
from ...prefix import Eviction
from ._clairvoyant import replay_clairvoyant, targets
from ._oracle import Bound, unlimited_bound
from ._params import TraceParams
from ._replay import RuleResult, replay, replay_oracle
from ._requests import Request
from ._rules import EngineSettings, RuleName
from ._trace import generate

__all__ = ["Run", "run_all"]

#: One rule replay: shared slots, placement rule, eviction.
Run = tuple[int, RuleName, Eviction]
#: ``progress(done)``: requests replayed so far, over all replays.
Progress = Callable[[int], None]
#: The unlimited bound, and the clairvoyant oracle at each slot count.
Oracles = tuple[RuleResult, tuple[RuleResult, ...]]

_TRACE: list[Request] = []  # a worker's trace (``_load``)


def run_all(
    trace: Sequence[Request],
    params: TraceParams,
    runs: Sequence[Run],
    *,
    slots: Sequence[int],
    engines: EngineSettings,
    jobs: int,
    progress: Progress | None = None,
) -> tuple[Oracles, list[RuleResult]]:
    """The oracles at ``slots``, and every run's result in the order of ``runs``.

    ``trace`` is ``generate(params)``; ``jobs`` processes replay it (1: this one).
    """
    if jobs == 1:
        return _in_turn(trace, runs, slots, engines, progress)
    safe_fork = sys.platform == "linux" and threading.active_count() == 1
    context = multiprocessing.get_context("fork" if safe_fork else "spawn")
    task = functools.partial(_task, slots=tuple(slots), engines=engines)
    oracles: Oracles | None = None
    results: dict[int, RuleResult] = {}
    done = 0
    with ProcessPoolExecutor(
        min(jobs, len(runs) + 1), mp_context=context, initializer=_load, initargs=(params,)
    ) as pool:
        futures = [pool.submit(task, item) for item in [(-1, None), *enumerate(runs)]]
        try:
            for future in as_completed(futures):
                index, value = future.result()  # a worker's error, raised here
                if isinstance(value, RuleResult):
                    results[index] = value
                    done += len(trace)
                else:
                    oracles = value
                    done += len(trace) * (1 + len(slots))
                if progress is not None:
                    progress(done)
        except BaseException:  # an error or an interrupt: no replay starts after it
            pool.shutdown(cancel_futures=True)
            raise
    if oracles is None or len(results) != len(runs):
        raise InvariantError("a worker's replay came back twice or not at all")
    return oracles, [results[index] for index in range(len(runs))]


def _in_turn(
    trace: Sequence[Request],
    runs: Sequence[Run],
    slots: Sequence[int],
    engines: EngineSettings,
    progress: Progress | None,
) -> tuple[Oracles, list[RuleResult]]:
    n = len(trace)

    def report(base: int) -> Progress | None:
        return None if progress is None else lambda done: progress(base + done)

    bound = unlimited_bound(trace, report(0))  # the oracle's pass, and the clairvoyant's
    results = [
        replay(trace, rule, slots=count, eviction=eviction, engines=engines, progress=report(i * n))
        for i, (count, rule, eviction) in enumerate(runs, start=1)
    ]
    oracles = _oracles(trace, slots, bound, lambda i: report((len(runs) + 1 + i) * n))
    return oracles, results


def _oracles(
    trace: Sequence[Request],
    slots: Sequence[int],
    bound: Bound,
    report: Callable[[int], Progress | None] = lambda _: None,
) -> Oracles:
    """The unlimited bound's result and the clairvoyant oracle's at each of ``slots`` (the
    ``i``-th reporting its progress to ``report(i)``), from the bound's pass."""
    plan = targets(trace, bound)
    clairvoyant = tuple(
        replay_clairvoyant(trace, plan, slots=count, progress=report(i))
        for i, count in enumerate(slots)
    )
    return replay_oracle(trace, bound=bound), clairvoyant


def _load(params: TraceParams) -> None:
    """A worker's start: its own copy of the trace."""
    _TRACE[:] = generate(params)


def _task(
    item: tuple[int, Run | None], *, slots: tuple[int, ...], engines: EngineSettings
) -> tuple[int, RuleResult | Oracles]:
    """In a worker: the oracles (``(-1, None)``), or the rule replay ``(index, run)``."""
    index, run = item
    if run is None:
        return index, _oracles(_TRACE, slots, unlimited_bound(_TRACE))
    count, rule, eviction = run
    return index, replay(_TRACE, rule, slots=count, eviction=eviction, engines=engines)
