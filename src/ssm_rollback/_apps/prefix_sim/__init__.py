"""Prefix-snapshot placement simulation (SPEC 13): which rule computes the least prefill.

Synthetic ``chat``, ``agentic`` and ``branching`` traces (``_trace`` by ``_params``, of
``_requests``) are replayed through ``PrefixSnapshotIndex`` under the application's rule and the
engines' fixed rules at equal shared slots (``_replay``, ``_rules``; in worker processes with
``jobs``, ``_workers``), beside
two oracles: the unlimited bound (every position kept, unlimited slots) and
the clairvoyant oracle at each slot count (``_clairvoyant``: Belady's
eviction over the prefixes later requests reuse).
``simulate(SimulationOptions(...))`` returns a report with a text form and
plot data (``_report``). A command line builds the options and
prints ``report.render()``.
"""

from __future__ import annotations

from ._params import WORKLOADS, TraceParams, Workload
from ._replay import RuleResult
from ._report import SimulationOptions, SimulationReport, plot, simulate
from ._requests import Request, RequestKind, Segment
from ._rules import RULES, EngineSettings, RuleName
from ._trace import generate

__all__ = [
    "RULES",
    "WORKLOADS",
    "EngineSettings",
    "Request",
    "RequestKind",
    "RuleName",
    "RuleResult",
    "Segment",
    "SimulationOptions",
    "SimulationReport",
    "TraceParams",
    "Workload",
    "generate",
    "plot",
    "simulate",
]
