"""Synthetic multi-request traces: ``chat``, ``agentic`` and ``branching`` traffic.

A trace is the ordered list of requests a server receives from many
sessions at once (``_requests``: each prompt a chain of shared ``Segment``
messages in a chat template). Content tokens are fresh ids from a counter:
two different messages share only their template tokens, as real text
diverges within a few tokens. Every parameter lives in one frozen
``TraceParams`` (``_params``); the same parameters and seed give the same
trace.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Final

import attrs

from ._params import TraceParams
from ._requests import (
    ASSISTANT,
    END,
    NEWLINE,
    START,
    SYSTEM,
    TOOL,
    USER,
    Request,
    RequestKind,
    Segment,
)

__all__ = ["generate"]

_FIRST_CONTENT: Final = 100
# Lengths are lognormal (text lengths are heavy-tailed) with this sigma, at most
# this many times their mean: the tail stays realistic without unbounded prompts.
_SIGMA: Final = 1.0
_LONGEST: Final = 8


def generate(params: TraceParams) -> list[Request]:
    """The trace ``params`` describe: ``params.requests`` requests, deterministic by seed.

    Where the application knows a session's end (an agent, a search), the
    session's last request says so (``Request.ends_session``); a chat's
    never does: each of its requests says its session can end silently
    (``Request.ends_silently``). Every other request of an agent calls a
    tool, and says that the session goes on from it (``Request.resumes``).
    """
    source = _Trace(params)
    trace = list(source.requests())
    if params.workload != "chat":
        last = {request.session: i for i, request in enumerate(trace)}
        for session, i in last.items():
            if session in source.ended:
                trace[i] = attrs.evolve(trace[i], ends_session=True, resumes=False)
    return trace


@attrs.define
class _Trace:
    params: TraceParams
    rng: random.Random = attrs.field(init=False)
    next_token: int = attrs.field(init=False, default=_FIRST_CONTENT)
    sessions: int = attrs.field(init=False, default=0)
    systems: list[Segment] = attrs.field(init=False)
    tools: dict[tuple[int, int], Segment] = attrs.field(init=False, factory=dict)
    #: The sessions that ran out of requests within the trace.
    ended: set[int] = attrs.field(init=False, factory=set)

    def __attrs_post_init__(self) -> None:
        self.rng = random.Random(self.params.seed)
        self.systems = [
            self.message(None, SYSTEM, self.params.system_tokens)
            for _ in range(self.params.system_prompts)
        ]
        for s, system in enumerate(self.systems):
            for t in range(self.params.tool_schemas):
                self.tools[s, t] = self.message(system, SYSTEM, self.params.tool_tokens)

    def requests(self) -> Iterator[Request]:
        """Interleave sessions: each request comes from a random session in flight."""
        active = [self.session() for _ in range(self.params.sessions)]
        owner = list(range(self.params.sessions))  # the session each iterator runs
        for _ in range(self.params.requests):
            i = self.rng.randrange(len(active))
            request = next(active[i], None)
            while request is None:  # that session ended: a new one takes its place
                self.ended.add(owner[i])
                active[i] = self.session()
                owner[i] = self.sessions - 1
                request = next(active[i], None)
            yield request

    def session(self) -> Iterator[Request]:
        self.sessions += 1
        run = {"chat": self.chat, "agentic": self.agentic, "branching": self.branching}
        return run[self.params.workload](self.sessions - 1)

    # -- the three workloads -----------------------------------------------------

    def chat(self, session: int) -> Iterator[Request]:
        p = self.params
        history: Segment = self.rng.choice(self.systems)
        turns = self.geometric(p.turns)
        kind: RequestKind = "first"
        while True:
            prompt = self.header(self.message(history, USER, p.user_tokens))
            output = self.output()
            editable = p.edit_rate > 0  # the chat offers an edit button
            yield Request(session, kind, prompt, output, editable=editable, ends_silently=True)
            while self.rng.random() < p.regenerate_rate:
                output = self.output()
                yield Request(
                    session, "regenerate", prompt, output, editable=editable, ends_silently=True
                )
            if self.rng.random() < p.edit_rate:  # the last message, rewritten: same history
                kind = "edit"
                continue
            turns -= 1
            if not turns:
                return
            history = Segment.after(prompt, output, message=True)
            kind = "turn"

    def agentic(self, session: int) -> Iterator[Request]:
        p = self.params
        system = self.rng.randrange(p.system_prompts)
        base = self.tools[system, self.rng.randrange(p.tool_schemas)] if p.tool_schemas else None
        context = self.message(base or self.systems[system], USER, p.user_tokens)
        kind: RequestKind = "first"
        for step in range(self.geometric(p.turns)):
            if step:
                kind = "step"
            prompt = self.header(context)
            output = self.output()
            yield Request(session, kind, prompt, output, resumes=True)
            while self.rng.random() < p.regenerate_rate:
                output = self.output()
                yield Request(session, "retry", prompt, output, resumes=True)
            done = Segment.after(prompt, output, message=True)
            context = self.message(done, TOOL, p.tool_result_tokens or 1)

    def branching(self, session: int) -> Iterator[Request]:
        p = self.params
        problem = self.message(self.rng.choice(self.systems), USER, p.user_tokens)
        frontier = [self.header(problem)]
        dropped: tuple[Segment, ...] = ()
        for depth in range(round(p.turns)):
            children = []
            for prompt in frontier:
                for n in range(p.samples):
                    output = self.output()
                    kind: RequestKind = "first" if depth == n == 0 else "sample"
                    yield Request(session, kind, prompt, output, abandons=dropped)
                    dropped = ()
                    children.append(Segment.after(prompt, output, message=True))
            kept = self.rng.sample(children, min(p.beam, len(children)))
            dropped = tuple(child for child in children if child not in kept)
            frontier = [
                self.header(self.message(child, USER, p.tool_result_tokens or 1)) for child in kept
            ]

    # -- pieces ------------------------------------------------------------------

    def message(self, parent: Segment | None, role: int, mean: int) -> Segment:
        content = self.fresh(self.length(mean))
        return Segment.after(parent, (START, role, NEWLINE, *content, END), message=True)

    def header(self, parent: Segment) -> Segment:
        """The assistant header that ends a prompt: what the model answers after."""
        return Segment.after(parent, (START, ASSISTANT, NEWLINE), message=False)

    def output(self) -> tuple[int, ...]:
        return (*self.fresh(self.length(self.params.output_tokens)), END)

    def fresh(self, n: int) -> range:
        first = self.next_token
        self.next_token += n
        return range(first, first + n)

    def length(self, mean: int) -> int:
        mu = math.log(mean) - _SIGMA**2 / 2  # the lognormal's mean is then ``mean``
        return max(1, min(_LONGEST * mean, round(self.rng.lognormvariate(mu, _SIGMA))))

    def geometric(self, mean: float) -> int:
        """A count >= 1 with the given mean: each further one follows with chance 1 - 1/mean."""
        count = 1
        while self.rng.random() > 1 / mean:
            count += 1
        return count
