"""Synthetic multi-request traces: ``chat``, ``agentic`` and ``branching`` traffic.

A trace is the ordered list of requests a server receives from many
sessions at once (``_requests``: each prompt a chain of shared ``Segment``
messages in a chat template). Content tokens are fresh ids from a counter:
two different messages share only their template tokens, as real text
diverges within a few tokens. Every parameter lives in one frozen
``TraceParams``; the same parameters and seed give the same trace.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import Final, Literal

import attrs

from ..._errors import InvalidArgumentError
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

__all__ = ["WORKLOADS", "TraceParams", "Workload", "generate"]

Workload = Literal["chat", "agentic", "branching"]
WORKLOADS: Final[tuple[Workload, ...]] = ("chat", "agentic", "branching")
_FIRST_CONTENT: Final = 100
# Lengths are lognormal (text lengths are heavy-tailed) with this sigma, at most
# this many times their mean: the tail stays realistic without unbounded prompts.
_SIGMA: Final = 1.0
_LONGEST: Final = 8


def _rate(_: TraceParams, attribute: attrs.Attribute[float], value: float) -> None:
    # 1 would repeat forever: every output regenerated, every message edited.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise InvalidArgumentError(f"'{attribute.name}' must be in [0, 1), got {value!r}")


def _count(least: int) -> Callable[[TraceParams, attrs.Attribute[int], int], None]:
    def check(_: TraceParams, attribute: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or value < least:
            raise InvalidArgumentError(
                f"'{attribute.name}' must be an int >= {least}, got {value!r}"
            )

    return check


@attrs.frozen(kw_only=True)
class TraceParams:
    """Every parameter of a synthetic trace; ``default(workload)`` gives real-traffic values.

    Lengths are means (tokens, lognormal). ``turns`` is the mean number of
    user turns (``chat``), of agent steps (``agentic``), or the search depth
    (``branching``). ``regenerate_rate`` is the chance an output is asked for
    again from the same prompt (a regenerate button, a retried tool call);
    ``edit_rate`` the chance a user edits their last message instead of
    replying. ``samples`` outputs are drawn per prompt (best-of-n) and
    ``beam`` of them continue at each depth of a search. ``sessions`` are
    in flight at once: each request comes from one of them at random.
    """

    workload: Workload = attrs.field()
    requests: int = attrs.field(validator=_count(1))
    seed: int = attrs.field(default=0, validator=_count(0))
    sessions: int = attrs.field(validator=_count(1))
    system_prompts: int = attrs.field(validator=_count(1))
    system_tokens: int = attrs.field(validator=_count(1))
    tool_schemas: int = attrs.field(default=0, validator=_count(0))
    tool_tokens: int = attrs.field(default=0, validator=_count(0))
    user_tokens: int = attrs.field(validator=_count(1))
    output_tokens: int = attrs.field(validator=_count(1))
    tool_result_tokens: int = attrs.field(default=0, validator=_count(0))
    turns: float = attrs.field()
    regenerate_rate: float = attrs.field(default=0.0, validator=_rate)
    edit_rate: float = attrs.field(default=0.0, validator=_rate)
    samples: int = attrs.field(default=1, validator=_count(1))
    beam: int = attrs.field(default=1, validator=_count(1))

    @workload.validator
    def _workload(self, _: attrs.Attribute[str], value: str) -> None:
        if value not in WORKLOADS:
            raise InvalidArgumentError(
                f"'workload' must be one of {', '.join(WORKLOADS)}, got {value!r}"
            )

    @turns.validator
    def _turns(self, _: attrs.Attribute[float], value: float) -> None:
        finite = isinstance(value, int | float) and not isinstance(value, bool)
        if not finite or not 1 <= value < math.inf:  # inf: sessions that never end
            raise InvalidArgumentError(f"'turns' must be a finite number >= 1, got {value!r}")

    @classmethod
    def default(cls, workload: str, *, requests: int | None = None, seed: int = 0) -> TraceParams:
        """The parameters describing real traffic of ``workload`` (sources in ``_DEFAULTS``)."""
        if workload not in _DEFAULTS:
            raise InvalidArgumentError(
                f"'workload' must be one of {', '.join(WORKLOADS)}, got {workload!r}"
            )
        params = _DEFAULTS[workload]
        return attrs.evolve(
            params, requests=params.requests if requests is None else requests, seed=seed
        )

    def describe(self) -> str:
        """One line per parameter, for the report."""
        return "\n".join(f"{f.name}: {getattr(self, f.name)}" for f in attrs.fields(type(self)))


# Why each default is what it is. Measured figures are cited; the rest are stated
# assumptions, chosen before any simulation ran and never to make a rule win.
_DEFAULTS: Final[dict[str, TraceParams]] = {
    # LMSYS-Chat-1M (Zheng et al., 2023): 2.0 turns per conversation, 69.5 tokens per
    # user prompt and 214.5 per response on average. Assumed: 8 deployments' system
    # prompts of ~800 tokens (product prompts run from a few hundred to ~2k tokens);
    # 64 conversations in flight, so ~64 requests pass between two turns of one user;
    # 5% of answers regenerated and 3% of turns edited (a minority of turns; no public
    # per-turn rates are known to us).
    "chat": TraceParams(
        workload="chat",
        requests=4000,
        sessions=64,
        system_prompts=8,
        system_tokens=800,
        user_tokens=70,
        output_tokens=215,
        turns=2.0,
        regenerate_rate=0.05,
        edit_rate=0.03,
    ),
    # A public Terminal-Bench 2.1 coding-agent trace (32,887 requests in 712 sessions:
    # 46 requests per session; median 417 output tokens and 444 fresh input tokens per
    # request, mostly the tool result). Assumed: 2 agent system prompts of ~3k tokens
    # and 4 tool-schema sets of ~5k (agent harnesses ship thousands of tokens of
    # instructions and JSON schemas), a ~200-token task, 16 agent sessions in flight,
    # 2% of tool calls retried.
    "agentic": TraceParams(
        workload="agentic",
        requests=2000,
        sessions=16,
        system_prompts=2,
        system_tokens=3000,
        tool_schemas=4,
        tool_tokens=5000,
        user_tokens=200,
        output_tokens=420,
        tool_result_tokens=440,
        turns=46.0,
        regenerate_rate=0.02,
    ),
    # Tree search and best-of-n over reasoning steps: Tree of Thoughts (Yao et al.,
    # 2023) keeps b = 5 candidates per step; best-of-n decoding commonly uses n = 4 to
    # 16. Assumed: 4 few-shot prompts of ~1.5k tokens (4-8 worked examples), ~150-token
    # problems and steps, a ~30-token verifier note before each next step, 4 samples
    # per prompt, a beam of 4, depth 4, 8 problems in flight.
    "branching": TraceParams(
        workload="branching",
        requests=3000,
        sessions=8,
        system_prompts=4,
        system_tokens=1500,
        user_tokens=150,
        output_tokens=150,
        tool_result_tokens=30,
        turns=4.0,
        samples=4,
        beam=4,
    ),
}


def generate(params: TraceParams) -> list[Request]:
    """The trace ``params`` describe: ``params.requests`` requests, deterministic by seed.

    Where the application knows a session's end (an agent, a search), the
    session's last request says so (``Request.ends_session``); a chat's
    never does.
    """
    source = _Trace(params)
    trace = list(source.requests())
    if params.workload != "chat":
        last = {request.session: i for i, request in enumerate(trace)}
        for session, i in last.items():
            if session in source.ended:
                trace[i] = attrs.evolve(trace[i], ends_session=True)
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
            yield Request(session, kind, prompt, output, editable=editable)
            while self.rng.random() < p.regenerate_rate:
                output = self.output()
                yield Request(session, "regenerate", prompt, output, editable=editable)
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
            yield Request(session, kind, prompt, output)
            while self.rng.random() < p.regenerate_rate:
                output = self.output()
                yield Request(session, "retry", prompt, output)
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
