"""The simulation's entry point and what it returns: options in, a report out.

``simulate(options)`` generates the trace, replays it under every rule and
eviction policy at every shared-slot count, beside two oracles - the
unlimited bound (every position kept, unlimited slots) and the clairvoyant
one at each slot count (``_clairvoyant``) - and returns a
``SimulationReport``: ``render()`` for a person, ``to_dict()`` for JSON,
``series()`` for a plot, which ``plot(report, path)`` draws (matplotlib is
imported only there).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import attrs

from ..._errors import InvalidArgumentError, shown
from ...prefix import EVICTIONS, Eviction
from ._params import TraceParams, at_least
from ._replay import RuleResult
from ._rules import APP_RULES, RULES, EngineSettings, RuleName
from ._trace import generate
from ._workers import Run, run_all

__all__ = ["SimulationOptions", "SimulationReport", "plot", "simulate"]

#: ``progress(done, total)``: requests replayed so far, over all runs.
Progress = Callable[[int, int], None]


def _names(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if (
        not isinstance(value, tuple)
        or not value
        or any(item not in allowed for item in value)
        or len(set(value)) != len(value)
    ):
        raise InvalidArgumentError(
            f"'{name}' must be a tuple of distinct names from {', '.join(allowed)}, "
            f"got {shown(value)}"
        )


@attrs.frozen(kw_only=True)
class SimulationOptions:
    """What to simulate: the trace, the shared-slot counts, the rules, evictions and settings."""

    params: TraceParams
    slots: tuple[int, ...] = (16, 64, 256)
    rules: tuple[RuleName, ...] = RULES
    evictions: tuple[Eviction, ...] = EVICTIONS
    engines: EngineSettings = attrs.field(factory=EngineSettings)
    #: Processes that replay (1: this one); the results are the same at any count.
    jobs: int = attrs.field(default=1, validator=at_least(1))

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.params, TraceParams):
            raise InvalidArgumentError(f"'params' must be a TraceParams, got {shown(self.params)}")
        slots: object = self.slots
        if (
            not isinstance(slots, tuple)
            or not slots
            or any(type(n) is not int or n < 0 for n in slots)
            or len(set(slots)) != len(slots)
        ):
            raise InvalidArgumentError(
                f"'slots' must be a tuple of distinct ints >= 0, got {shown(slots)}"
            )
        _names("rules", self.rules, RULES)
        _names("evictions", self.evictions, EVICTIONS)
        if not isinstance(self.engines, EngineSettings):
            raise InvalidArgumentError(
                f"'engines' must be an EngineSettings, got {shown(self.engines)}"
            )


@attrs.frozen(kw_only=True)
class SimulationReport:
    """Every rule's result at every slot count, the oracles', and what produced them."""

    params: TraceParams
    engines: EngineSettings
    #: How many requests of each kind the trace holds (first, turn, regenerate, ...).
    kinds: tuple[tuple[str, int], ...]
    #: The unlimited bound: every position kept, unlimited slots (label ``oracle``).
    oracle: RuleResult
    results: tuple[RuleResult, ...]
    #: The clairvoyant oracle at each slot count (label ``oracle@N``), Belady's eviction.
    clairvoyant: tuple[RuleResult, ...] = ()

    def at(self, slots: int) -> tuple[RuleResult, ...]:
        """The rules' results at ``slots`` shared slots."""
        return tuple(r for r in self.results if r.slots == slots)

    def clairvoyant_at(self, slots: int) -> RuleResult | None:
        """The clairvoyant oracle's result at ``slots`` shared slots, if it ran."""
        return next((r for r in self.clairvoyant if r.slots == slots), None)

    def series(self) -> dict[str, list[tuple[int, int]]]:
        """Plot data: for each ``rule/eviction``, ``(slots, prefill tokens)`` by slot count."""
        lines: dict[str, list[tuple[int, int]]] = {}
        for r in self.results:
            assert r.slots is not None
            lines.setdefault(r.label, []).append((r.slots, r.prefill_tokens))
        return {label: sorted(points) for label, points in lines.items()}

    def to_dict(self) -> dict[str, object]:
        """The whole report as JSON-ready values."""
        return {
            "params": attrs.asdict(self.params),
            "engines": attrs.asdict(self.engines),
            "kinds": dict(self.kinds),
            "oracle": _row(self.oracle),
            "results": [_row(r) for r in self.results],
            "clairvoyant": [_row(r) for r in self.clairvoyant],
        }

    def render(self) -> str:
        """Parameters, then one table per slot count: prefill computed per rule vs the oracles."""
        o = self.oracle
        lines = [
            f"workload {self.params.workload}: {o.requests:,} requests, "
            + ", ".join(f"{n:,} {kind}" for kind, n in self.kinds),
            "trace parameters:",
            *(f"  {line}" for line in self.params.describe().splitlines()),
            "engine settings:",
            *(f"  {line}" for line in self.engines.describe().splitlines()),
            f"prompt tokens (no reuse): {o.prompt_tokens:,}",
            f"oracle (every position kept, unlimited slots): {o.prefill_tokens:,} prefill tokens, "
            f"hit rate {100 * o.hit_rate:.1f}%",
        ]
        if self.clairvoyant:
            lines.append(
                "oracle@N (clairvoyant at N slots: Belady's eviction over the prefixes later "
                "requests reuse; a strong baseline, not a proven optimum): in each table"
            )
        counts = {r.slots for r in (*self.results, *self.clairvoyant) if r.slots is not None}
        for slots in sorted(counts):
            clairvoyant = self.clairvoyant_at(slots)
            lines += ["", f"{slots} shared slots:", self._header(slots, clairvoyant)]
            rows = (*self.at(slots), *([] if clairvoyant is None else [clairvoyant]))
            for r in sorted(rows, key=lambda r: r.prefill_tokens):
                against = "" if clairvoyant is None else f" {_ratio(r, clairvoyant):>12.2f}"
                lines.append(
                    f"{r.label:<20} {r.prefill_tokens:>14,} {_ratio(r, o):>8.2f}{against} "
                    f"{100 * r.hit_rate:>6.1f} {r.tokens_reused:>12,} {r.evicted:>8,} "
                    f"{r.demoted:>8,} {r.declined:>8,} {r.mismatches:>8,}"
                )
            lines += self._app_against_the_rest(slots)
        return "\n".join(lines)

    @staticmethod
    def _header(slots: int, clairvoyant: RuleResult | None) -> str:
        against = "" if clairvoyant is None else f" {f'x oracle@{slots}':>12}"
        return (
            f"{'rule':<20} {'prefill tokens':>14} {'x oracle':>8}{against} {'hit %':>6} "
            f"{'reused':>12} {'evicted':>8} {'demoted':>8} {'declined':>8} {'mismatch':>8}"
        )

    def _app_against_the_rest(self, slots: int) -> list[str]:
        """Per app rule and eviction: its prefill over the best engine rule's, and the oracles'."""
        results = self.at(slots)
        engines = [r for r in results if r.rule not in APP_RULES]
        if not engines:
            return []
        best = min(engines, key=lambda r: r.prefill_tokens)
        clairvoyant = self.clairvoyant_at(slots)
        lines = []
        for app in (r for r in results if r.rule in APP_RULES):
            line = (
                f"{app.label}: {_ratio(app, best):.2f}x the best engine rule ({best.label}), "
                f"{_ratio(app, self.oracle):.2f}x the oracle (unlimited slots)"
            )
            if clairvoyant is not None:
                line += f", {_ratio(app, clairvoyant):.2f}x {clairvoyant.label} (clairvoyant)"
            lines.append(line)
        return lines


def _ratio(r: RuleResult, to: RuleResult) -> float:
    """``r``'s prefill tokens over ``to``'s (1 when both are 0)."""
    return r.prefill_tokens / to.prefill_tokens if to.prefill_tokens else 1.0


def _row(r: RuleResult) -> dict[str, object]:
    return {**attrs.asdict(r), "label": r.label, "hit_rate": r.hit_rate}


def simulate(options: SimulationOptions, progress: Progress | None = None) -> SimulationReport:
    """The trace, replayed under every rule, eviction and slot count, and by the oracles."""
    if not isinstance(options, SimulationOptions):
        raise InvalidArgumentError(f"'options' must be a SimulationOptions, got {shown(options)}")
    trace = generate(options.params)
    runs: list[Run] = [
        (slots, rule, eviction)
        for slots in options.slots
        for rule in options.rules
        for eviction in options.evictions
    ]
    total = len(trace) * (len(runs) + 1 + len(options.slots))
    (oracle, clairvoyant), results = run_all(
        trace,
        options.params,
        runs,
        slots=options.slots,
        engines=options.engines,
        jobs=options.jobs,
        progress=None if progress is None else lambda done: progress(done, total),
    )
    if progress is not None:
        progress(total, total)
    kinds = Counter(request.kind for request in trace)
    return SimulationReport(
        params=options.params,
        engines=options.engines,
        kinds=tuple(kinds.most_common()),
        oracle=oracle,
        results=tuple(results),
        clairvoyant=clairvoyant,
    )


def plot(report: SimulationReport, path: str | Path) -> None:
    """Draw prefill tokens computed per rule against shared slots, the oracles in black, as a PNG.

    The unlimited bound is a dashed line; the clairvoyant oracle at each slot count a dotted one.

    Needs matplotlib (``pip install 'ssm-rollback[plot]'``).
    """
    try:
        import matplotlib
    except ImportError:
        raise InvalidArgumentError(
            "plotting needs matplotlib: pip install 'ssm-rollback[plot]'"
        ) from None
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axis = pyplot.subplots(figsize=(8, 4.5))
    for label, points in report.series().items():
        slots, tokens = zip(*points, strict=True)
        axis.plot(slots, [t / 1e6 for t in tokens], "o-", label=label)
    axis.axhline(
        report.oracle.prefill_tokens / 1e6,
        color="black",
        linestyle="--",
        label="oracle (unlimited slots)",
    )
    if report.clairvoyant:
        points = sorted((r.slots or 0, r.prefill_tokens) for r in report.clairvoyant)
        axis.plot(
            [n for n, _ in points],
            [t / 1e6 for _, t in points],
            "o:",
            color="black",
            label="oracle@N (clairvoyant)",
        )
    axis.set_xscale("log", base=2)
    axis.set_xlabel("shared slots (equal for every rule)")
    axis.set_ylabel("prefill tokens computed (millions)")
    axis.set_title(f"{report.params.workload}: prefill computed per placement rule")
    axis.legend(fontsize="small", ncol=2)
    figure.tight_layout()
    try:
        # format="png" whatever the suffix: an unknown suffix would fail after the whole run.
        figure.savefig(path, dpi=100, format="png")
    except OSError as error:
        raise InvalidArgumentError(
            f"'path': cannot write {shown(str(path))}: {error.strerror or type(error).__name__}"
        ) from None
    finally:
        pyplot.close(figure)
