"""A synthetic trace's parameters: ``TraceParams``, and the real-traffic defaults per workload.

Every parameter of a trace lives in one frozen ``TraceParams``; the same
parameters and seed give the same trace (``_trace``). ``_DEFAULTS`` says
where each default comes from: measured figures are cited, the rest are
stated assumptions, chosen before any simulation ran.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final, Literal

import attrs

from ..._errors import InvalidArgumentError, shown

__all__ = ["WORKLOADS", "TraceParams", "Workload", "at_least"]

Workload = Literal["chat", "agentic", "branching"]
WORKLOADS: Final[tuple[Workload, ...]] = ("chat", "agentic", "branching")


def _rate(_: TraceParams, attribute: attrs.Attribute[float], value: float) -> None:
    # 1 would repeat forever: every output regenerated, every message edited.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise InvalidArgumentError(f"'{attribute.name}' must be in [0, 1), got {shown(value)}")


def at_least(least: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    """An attrs validator: an int (not a bool) of at least ``least``, named when refused."""

    def check(_: object, attribute: attrs.Attribute[int], value: int) -> None:
        if type(value) is not int or value < least:
            raise InvalidArgumentError(
                f"'{attribute.name}' must be an int >= {least}, got {shown(value)}"
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
    requests: int = attrs.field(validator=at_least(1))
    seed: int = attrs.field(default=0, validator=at_least(0))
    sessions: int = attrs.field(validator=at_least(1))
    system_prompts: int = attrs.field(validator=at_least(1))
    system_tokens: int = attrs.field(validator=at_least(1))
    tool_schemas: int = attrs.field(default=0, validator=at_least(0))
    tool_tokens: int = attrs.field(default=0, validator=at_least(0))
    user_tokens: int = attrs.field(validator=at_least(1))
    output_tokens: int = attrs.field(validator=at_least(1))
    tool_result_tokens: int = attrs.field(default=0, validator=at_least(0))
    turns: float = attrs.field()
    regenerate_rate: float = attrs.field(default=0.0, validator=_rate)
    edit_rate: float = attrs.field(default=0.0, validator=_rate)
    samples: int = attrs.field(default=1, validator=at_least(1))
    beam: int = attrs.field(default=1, validator=at_least(1))

    @workload.validator
    def _workload(self, _: attrs.Attribute[str], value: str) -> None:
        if value not in WORKLOADS:
            raise InvalidArgumentError(
                f"'workload' must be one of {', '.join(WORKLOADS)}, got {shown(value)}"
            )

    @turns.validator
    def _turns(self, _: attrs.Attribute[float], value: float) -> None:
        finite = isinstance(value, int | float) and not isinstance(value, bool)
        if not finite or not 1 <= value < math.inf:  # inf: sessions that never end
            raise InvalidArgumentError(f"'turns' must be a finite number >= 1, got {shown(value)}")

    @classmethod
    def default(cls, workload: str, *, requests: int | None = None, seed: int = 0) -> TraceParams:
        """The parameters describing real traffic of ``workload`` (sources in ``_DEFAULTS``)."""
        if workload not in _DEFAULTS:
            raise InvalidArgumentError(
                f"'workload' must be one of {', '.join(WORKLOADS)}, got {shown(workload)}"
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
