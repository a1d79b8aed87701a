"""The prefix-snapshot placement simulation: trace generator, replay, oracles, exactness, report.

Traces here are the real workloads' shapes at a small token scale (tens of
tokens per message instead of hundreds), so tens of thousands of requests
replay in seconds; what they check holds at any scale.
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import sys
import threading
from collections import Counter
from pathlib import Path

import attrs
import pytest

from ssm_rollback import InvalidArgumentError
from ssm_rollback._apps.prefix_sim import (
    RULES,
    WORKLOADS,
    EngineSettings,
    Request,
    RuleResult,
    Segment,
    SimulationOptions,
    TraceParams,
    _replay,
    _workers,
    generate,
    plot,
    simulate,
)
from ssm_rollback._apps.prefix_sim._clairvoyant import replay_clairvoyant, targets

SMALL: dict[str, dict[str, object]] = {
    "chat": {"system_tokens": 40, "user_tokens": 8, "output_tokens": 12, "sessions": 16},
    "agentic": {
        "system_tokens": 40,
        "tool_tokens": 60,
        "user_tokens": 10,
        "output_tokens": 12,
        "tool_result_tokens": 12,
        "turns": 10.0,
        "sessions": 6,
    },
    "branching": {
        "system_tokens": 40,
        "user_tokens": 10,
        "output_tokens": 10,
        "tool_result_tokens": 5,
        "sessions": 4,
        "samples": 3,
        "beam": 2,
        "turns": 3.0,
    },
}
ENGINES = EngineSettings(
    vllm_block_size=16,
    vllm_max_num_batched_tokens=64,
    sglang_chunked_prefill_size=32,
    trtllm_interval=16,
    trtllm_tokens_per_block=8,
    llamacpp_tail=8,
)


def small(workload: str, requests: int, seed: int = 0) -> TraceParams:
    params = TraceParams.default(workload, requests=requests, seed=seed)
    return attrs.evolve(params, **SMALL[workload])  # type: ignore[arg-type]


def fingerprint(trace: list[Request]) -> list[tuple[int, str, list[int], tuple[int, ...]]]:
    return [(r.session, r.kind, r.tokens(), r.output) for r in trace]


# -- the generator -----------------------------------------------------------------


@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_same_parameters_give_the_same_trace(workload: str) -> None:
    params = small(workload, 300)
    assert fingerprint(generate(params)) == fingerprint(generate(params))
    assert fingerprint(generate(attrs.evolve(params, seed=1))) != fingerprint(generate(params))


@pytest.mark.parametrize("workload", WORKLOADS)
def test_prompts_are_chat_templated_messages(workload: str) -> None:
    for request in generate(small(workload, 300)):
        tokens, ends = request.tokens(), request.message_ends()
        assert list(ends) == sorted(set(ends))
        assert ends[0] > 0
        assert ends[-1] == len(tokens) - 3  # then the assistant header
        assert all(tokens[end - 1] == 3 for end in ends)  # every message closes with END
        assert request.output[-1] == 3
        assert len(request.output) >= 2


@pytest.mark.parametrize("workload", WORKLOADS)
def test_branch_points_are_the_shared_messages_and_the_history_before_the_newest(
    workload: str,
) -> None:
    """The application's placement: where other sessions start, and where an edit diverges
    (only the chat offers edits: an agent's tool results and a search's notes stay)."""
    for request in generate(small(workload, 300)):
        ends, points = request.message_ends(), request.branch_points()
        tokens = request.tokens()
        shared = {end for i, end in enumerate(ends) if tokens[(ends[i - 1] if i else 0) + 1] == 4}
        assert request.editable is (workload == "chat")
        edited = {ends[-2]} if request.editable and len(ends) >= 2 else set()
        assert set(points) == shared | edited
        assert ends[0] in points  # the system prompt is always one
        assert ends[-1] not in points or ends[-1] in shared  # the newest message is not


def test_a_chat_without_edits_places_no_branch_point_for_them() -> None:
    """An application that offers no edit button never sees an edit: nothing placed for one."""
    trace = generate(attrs.evolve(small("chat", 200), edit_rate=0.0))
    assert not any(request.editable for request in trace)
    assert all(set(r.branch_points()) == set(r.shared_ends()) for r in trace)


def test_chat_parameters_are_honoured() -> None:
    params = small("chat", 4000)
    trace = generate(params)
    assert len(trace) == params.requests
    kinds = Counter(r.kind for r in trace)
    assert set(kinds) == {"first", "turn", "regenerate", "edit"}
    # Mean turns per session, and the regenerate rate per answer, near their values.
    sessions = Counter(r.session for r in trace if r.kind in ("first", "turn"))
    finished = [n for s, n in sessions.items() if s < max(sessions) - params.sessions]
    assert statistics.mean(finished) == pytest.approx(params.turns, rel=0.15)
    assert kinds["regenerate"] / len(trace) == pytest.approx(params.regenerate_rate, rel=0.3)
    outputs = [len(r.output) - 1 for r in trace]
    assert statistics.mean(outputs) == pytest.approx(params.output_tokens, rel=0.15)
    # Every conversation starts from one of the system prompts.
    systems = {tuple(r.tokens()[: r.message_ends()[0]]) for r in trace}
    assert len(systems) == params.system_prompts
    quiet = generate(attrs.evolve(params, regenerate_rate=0.0, edit_rate=0.0))
    assert {r.kind for r in quiet} == {"first", "turn"}


def test_a_chat_turn_extends_the_previous_prompt_and_its_output() -> None:
    last: dict[int, Request] = {}
    for request in generate(small("chat", 2000)):
        before = last.get(request.session)
        if request.kind == "turn" and before is not None:
            shared = before.tokens() + list(before.output)
            assert request.tokens()[: len(shared)] == shared
        if request.kind == "regenerate" and before is not None:
            assert request.tokens() == before.tokens()
        last[request.session] = request


def test_agentic_sessions_share_system_prompts_and_tool_schemas() -> None:
    params = small("agentic", 3000)
    trace = generate(params)
    heads = {tuple(r.tokens()[: r.message_ends()[1]]) for r in trace}
    assert len(heads) == params.system_prompts * params.tool_schemas
    assert Counter(r.kind for r in trace).keys() == {"first", "step", "retry"}


def test_branching_samples_each_prompt_and_keeps_a_beam() -> None:
    params = small("branching", 3000)
    trace = generate(params)
    per_prompt = Counter(id(r.prompt) for r in trace)
    assert set(list(per_prompt.values())[:-2]) == {params.samples}  # the last may be cut
    per_problem = Counter(r.session for r in trace)
    done = [n for s, n in per_problem.items() if s < max(per_problem) - params.sessions]
    expected = params.samples * (1 + params.beam * (round(params.turns) - 1))
    assert set(done) == {expected}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_session_says_it_ends_where_its_application_knows(workload: str) -> None:
    """An agent's last step and a search's last sample end their session; a chat never says
    so, and a session still in flight when the trace stops has not ended."""
    params = small(workload, 600)
    trace = generate(params)
    ends = [i for i, r in enumerate(trace) if r.ends_session]
    if workload == "chat":
        assert not ends
        return
    for i in ends:  # the last of its session
        assert all(r.session != trace[i].session for r in trace[i + 1 :])
    assert len({trace[i].session for i in ends}) == len(ends)
    sessions = {r.session for r in trace}
    assert len(sessions) - params.sessions <= len(ends) < len(sessions)


def test_a_search_says_which_branches_it_dropped_before_the_next_depth() -> None:
    """Each depth's answers are either kept (a later prompt extends them) or dropped: named
    by the session's next request, extended by no prompt."""
    params = small("branching", 1200)
    trace = generate(params)
    extended = {id(segment) for r in trace for segment in r.prompt.chain()}
    assert any(r.abandons for r in trace)
    for i, r in enumerate(trace):
        for branch in r.abandons:
            assert id(branch) not in extended
            earlier = [q for q in trace[:i] if q.session == r.session]
            assert any(q.prompt is branch.parent and q.output == branch.tokens for q in earlier)
    sizes = {len(r.abandons) for r in trace if r.abandons}
    assert sizes <= {params.samples - params.beam, params.samples * params.beam - params.beam}


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"requests": 0}, "'requests'"),
        ({"sessions": 0}, "'sessions'"),
        ({"regenerate_rate": 1.0}, "'regenerate_rate'"),
        ({"edit_rate": -0.1}, "'edit_rate'"),
        ({"turns": 0.5}, "'turns'"),
        ({"turns": float("inf")}, "'turns'"),
        ({"turns": float("nan")}, "'turns'"),
        ({"workload": "batch"}, "'workload'"),
        ({"user_tokens": 2.5}, "'user_tokens'"),
    ],
)
def test_bad_parameters_are_named(change: dict[str, object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        attrs.evolve(TraceParams.default("chat"), **change)  # type: ignore[arg-type]


def test_an_unknown_workload_is_named() -> None:
    with pytest.raises(InvalidArgumentError, match="'workload'"):
        TraceParams.default("batch")


# -- the replay --------------------------------------------------------------------


def test_twenty_thousand_requests_restore_exactly_what_a_fresh_prefill_computes() -> None:
    """Every hit restores exactly the prefix's state, under every rule and both evictions."""
    runs = [
        ("chat", 9000, "app", "benefit", 8),
        ("chat", 2000, "vllm-align", "lru", 8),
        ("agentic", 1500, "app", "lru", 6),
        ("agentic", 1000, "app-branches", "benefit", 6),
        ("agentic", 1000, "trtllm", "benefit", 6),
        ("branching", 4500, "app", "benefit", 4),
        ("branching", 1000, "sglang", "lru", 4),
        ("branching", 1000, "llamacpp", "benefit", 4),
    ]
    total = 0
    for workload, requests, rule, eviction, slots in runs:
        trace = generate(small(workload, requests))
        result = _replay.replay(trace, rule, slots=slots, eviction=eviction, engines=ENGINES)  # type: ignore[arg-type]
        assert result.mismatches == 0, (workload, rule, eviction)
        assert result.hits > requests // 10  # the check ran on many restores
        total += result.requests
    assert total >= 20_000


def test_the_exactness_check_bites(monkeypatch: pytest.MonkeyPatch) -> None:
    """A save of the state one token too far is caught at the next restore of that slot."""
    late = _replay._Live.at
    monkeypatch.setattr(_replay._Live, "at", lambda self, length: late(self, length + 1))
    trace = generate(small("chat", 500))
    result = _replay.replay(trace, "app", slots=8, eviction="lru", engines=ENGINES)
    assert result.hits > 0
    assert result.mismatches == result.hits


@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_oracle_computes_the_least_and_every_rule_gets_equal_slots(workload: str) -> None:
    report = simulate(
        SimulationOptions(params=small(workload, 200), slots=(0, 4, 32), engines=ENGINES)
    )
    assert len(report.results) == 3 * len(RULES) * 2
    for result in report.results:
        assert result.prefill_tokens >= report.oracle.prefill_tokens, result.label
        assert result.prompt_tokens == report.oracle.prompt_tokens
        assert result.slots is not None
        assert result.published - result.evicted <= result.slots  # never more live than slots
        assert result.mismatches == 0
    for result in report.at(0):  # no slots: every lookup misses, every publish is declined
        assert result.prefill_tokens == result.prompt_tokens
        assert result.hits == result.published == 0
    assert [r.slots for r in report.clairvoyant] == [0, 4, 32]
    for result in report.clairvoyant:
        assert result.prefill_tokens >= report.oracle.prefill_tokens
        assert result.mismatches == 0


def test_prefill_tokens_per_rule_at_16_64_and_256_slots() -> None:
    """The comparison the issue asks for, on small traces: printed, and only what must hold."""
    for workload in WORKLOADS:
        report = simulate(
            SimulationOptions(params=small(workload, 80), slots=(16, 64, 256), engines=ENGINES)
        )
        print(report.render())
        lowest = min(r.prefill_tokens for r in report.results)
        assert report.oracle.prefill_tokens <= lowest
        assert all(r.mismatches == 0 for r in report.results)


def test_the_report_has_a_text_form_json_and_plot_data() -> None:
    seen: list[tuple[int, int]] = []
    report = simulate(
        SimulationOptions(
            params=small("branching", 200), slots=(8, 16), rules=("app", "sglang"), engines=ENGINES
        ),
        progress=lambda done, total: seen.append((done, total)),
    )
    text = report.render()
    for shown in (
        "workload branching",
        "oracle",
        "app/benefit",
        "app/lru: ",
        "x the best engine rule (sglang/",
        "x the oracle (unlimited slots), ",
        "x oracle@16 (clairvoyant)",
        "x oracle@8",
        "oracle@N (clairvoyant at N slots",
        "samples: 3",
        "vllm_block_size: 16",
    ):
        assert shown in text  # the results and every parameter that produced them
    data = json.loads(json.dumps(report.to_dict()))
    assert data["params"]["workload"] == "branching"
    assert len(data["results"]) == 2 * 2 * 2
    assert (data["oracle"]["label"], data["oracle"]["slots"]) == ("oracle", None)
    clairvoyant = [(r["label"], r["slots"]) for r in data["clairvoyant"]]
    assert clairvoyant == [("oracle@8", 8), ("oracle@16", 16)]
    assert report.clairvoyant_at(16) is report.clairvoyant[1]
    assert sum(line.startswith("oracle@16 ") for line in text.splitlines()) == 1  # its row
    series = report.series()
    assert set(series) == {"app/lru", "app/benefit", "sglang/lru", "sglang/benefit"}
    assert all([slots for slots, _ in points] == [8, 16] for points in series.values())
    assert seen[-1] == (200 * 11, 200 * 11)  # 8 rule runs, the bound, 2 clairvoyant runs


@pytest.mark.parametrize("workload", WORKLOADS)
def test_replays_in_worker_processes_give_the_same_report(workload: str) -> None:
    options = SimulationOptions(params=small(workload, 150), slots=(4, 16), engines=ENGINES)
    seen: list[tuple[int, int]] = []
    shared = simulate(attrs.evolve(options, jobs=3), lambda done, total: seen.append((done, total)))
    assert shared.to_dict() == simulate(options).to_dict()
    # As each replay finishes: 24 rule replays, then the bound and 2 clairvoyant runs together.
    done = [d for d, total in seen if total == 150 * 27]
    steps = Counter(b - a for a, b in zip([0, *done], done, strict=False))
    assert steps == Counter({150: 24, 150 * 3: 1, 0: 1})  # 0: the final report, repeated


def test_in_one_process_progress_is_reported_request_by_request() -> None:
    seen: list[int] = []
    options = SimulationOptions(
        params=small("chat", 600), slots=(4,), rules=("app",), evictions=("lru",), engines=ENGINES
    )
    simulate(options, lambda done, _: seen.append(done))
    assert seen[:2] == [256, 512]  # the bound's pass, before any replay finished


def test_spawned_workers_give_the_same_report_while_another_thread_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With another thread alive, workers are spawned (a fork could copy it holding a lock)."""
    options = SimulationOptions(
        params=small("chat", 60), slots=(4,), rules=("app", "llamacpp"), engines=ENGINES
    )
    contexts: list[str | None] = []
    get_context = multiprocessing.get_context

    def spy(method: str | None = None) -> multiprocessing.context.BaseContext:
        contexts.append(method)
        return get_context(method)

    monkeypatch.setattr(multiprocessing, "get_context", spy)
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        shared = simulate(attrs.evolve(options, jobs=2))
    finally:
        release.set()
        other.join()
    assert contexts == ["spawn"]
    assert shared.to_dict() == simulate(options).to_dict()


def test_an_error_in_a_worker_is_raised_to_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forked workers run the patched replay: its error comes back as itself."""
    if sys.platform != "linux" or threading.active_count() != 1:
        pytest.skip("workers are forked only on Linux with no other thread running")

    def broken(*_: object, **__: object) -> RuleResult:
        raise InvalidArgumentError("'rule' broken on purpose")

    monkeypatch.setattr(_workers, "replay", broken)
    options = SimulationOptions(params=small("chat", 40), slots=(4,), engines=ENGINES, jobs=2)
    with pytest.raises(InvalidArgumentError, match="broken on purpose"):
        simulate(options)


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    report = simulate(
        SimulationOptions(params=small("chat", 100), slots=(4, 8), rules=("app",), engines=ENGINES)
    )
    path = tmp_path / "prefix.png"
    plot(report, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(InvalidArgumentError, match="'path'"):
        plot(report, tmp_path / "missing" / "prefix.png")


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"slots": (16, -1)}, "'slots'"),
        ({"slots": ()}, "'slots'"),
        ({"slots": [16]}, "'slots'"),
        ({"rules": ("app", "tgi")}, "'rules'"),
        ({"evictions": ("fifo",)}, "'evictions'"),
        ({"params": "chat"}, "'params'"),
        ({"engines": None}, "'engines'"),
        ({"jobs": 0}, "'jobs'"),
        ({"jobs": True}, "'jobs'"),
        ({"jobs": 2.0}, "'jobs'"),
    ],
)
def test_bad_options_are_named(change: dict[str, object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        SimulationOptions(**{"params": small("chat", 10), **change})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"vllm_block_size": 0}, "'vllm_block_size'"),
        ({"vllm_max_num_batched_tokens": 100}, "'vllm_max_num_batched_tokens'"),
        ({"trtllm_interval": -1}, "'trtllm_interval'"),
        ({"llamacpp_tail": True}, "'llamacpp_tail'"),
    ],
)
def test_bad_engine_settings_are_named(change: dict[str, object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        EngineSettings(**change)  # type: ignore[arg-type]


# -- the clairvoyant oracle at equal slots ------------------------------------------------------

SHARED = Segment.after(None, tuple(range(100, 120)), message=True)  # 20 tokens
OTHER = Segment.after(None, tuple(range(200, 230)), message=True)  # 30 tokens


def one_request(parent: Segment, content: tuple[int, ...], output: tuple[int, ...]) -> Request:
    return Request(0, "first", Segment.after(parent, content, message=True), output)


def clairvoyant(trace: list[Request], slots: int) -> RuleResult:
    return replay_clairvoyant(trace, targets(trace), slots=slots)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_never_below_the_unlimited_bound_and_equal_to_it_with_ample_slots(workload: str) -> None:
    trace = generate(small(workload, 300))
    bound = _replay.replay_oracle(trace)
    plan = targets(trace)
    for slots in (0, 1, 2, 4, 16):
        result = replay_clairvoyant(trace, plan, slots=slots)
        assert result.prefill_tokens >= bound.prefill_tokens, slots
        assert result.prompt_tokens == bound.prompt_tokens
        assert result.published - result.evicted <= slots  # never more held than slots
        assert result.mismatches == 0
        assert result.label == f"oracle@{slots}"
    none = replay_clairvoyant(trace, plan, slots=0)
    assert none.prefill_tokens == none.prompt_tokens
    assert none.hits == none.published == 0
    ample = replay_clairvoyant(trace, plan, slots=10**6)
    assert (ample.prefill_tokens, ample.hits, ample.tokens_reused) == (
        bound.prefill_tokens,
        bound.hits,
        bound.tokens_reused,
    )
    assert ample.evicted == ample.mismatches == 0
    assert ample.hits > len(trace) // 2


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_target_is_where_the_unlimited_bound_starts_its_request(workload: str) -> None:
    """Each prefix a request feeds through is exactly where each of its users starts."""
    trace = generate(small(workload, 200))
    plan = targets(trace)
    fed = [r.tokens() + list(r.output[:-1]) for r in trace]
    seen: list[list[int]] = []
    starts = []
    for r, feeds in zip(trace, fed, strict=True):  # the bound's start, by brute force
        tokens = r.tokens()
        best = 0
        for earlier in seen:
            n = 0
            while n < min(len(earlier), len(tokens) - 1) and earlier[n] == tokens[n]:
                n += 1
            best = max(best, n)
        starts.append(best)
        seen.append(feeds)
    assert [name >= 0 for name in plan.target] == [start > 0 for start in starts]
    checked = set()
    for i, feeds in enumerate(fed):
        assert list(plan.fed[i]) == sorted(plan.fed[i])  # root first
        for depth, name in plan.fed[i]:
            for j in plan.uses[name]:
                assert plan.target[j] == name
                assert starts[j] == depth
                assert trace[j].tokens()[:depth] == feeds[:depth]
                checked.add(j)
    # Every target is fed by some request (the earliest that fed it computed it).
    assert checked == {j for j, start in enumerate(starts) if start}
    assert len(checked) > len(trace) // 2


def test_one_slot_keeps_the_snapshot_used_next() -> None:
    a = one_request(SHARED, (1000, 1001), (1002, 3))
    b = one_request(OTHER, (2000, 2001), (2002, 3))
    c = one_request(SHARED, (3000, 3001), (3002, 3))
    d = one_request(OTHER, (4000, 4001), (4002, 3))
    # The shared prompt is used first: the other one, used later, is not placed.
    result = clairvoyant([a, b, c, d], 1)
    assert (result.hits, result.tokens_reused, result.published, result.evicted) == (1, 20, 1, 0)
    assert result.prefill_tokens == 22 + 32 + 2 + 32
    # The other prompt is used first: it replaces the shared one.
    result = clairvoyant([a, b, d, c], 1)
    assert (result.hits, result.tokens_reused, result.published, result.evicted) == (1, 30, 2, 1)
    assert result.prefill_tokens == 22 + 32 + 2 + 22
    assert result.mismatches == 0


def test_a_snapshot_past_its_last_use_gives_way() -> None:
    a = one_request(SHARED, (1000, 1001), (1002, 3))
    c = one_request(SHARED, (3000, 3001), (3002, 3))  # the shared prompt's last use
    b = one_request(OTHER, (2000, 2001), (2002, 3))
    d = one_request(OTHER, (4000, 4001), (4002, 3))
    result = clairvoyant([a, c, b, d], 1)
    assert (result.hits, result.tokens_reused, result.published, result.evicted) == (2, 50, 2, 1)


def test_a_full_set_of_slots_drops_the_snapshot_used_furthest() -> None:
    """Belady's rule counts hits, not tokens: here it drops the longer prefix, used last."""
    third = Segment.after(None, tuple(range(300, 325)), message=True)  # 25 tokens
    firsts = [
        one_request(p, (1000 + k, 1001 + k), (1002 + k, 3))
        for k, p in enumerate((SHARED, OTHER, third))
    ]
    uses = [
        one_request(p, (2000 + k, 2001 + k), (2002 + k, 3))
        for k, p in enumerate((third, SHARED, OTHER))
    ]
    # Two slots: the third prompt is used next, the shared one then, the other one last.
    result = clairvoyant([*firsts, *uses], 2)
    assert (result.hits, result.tokens_reused, result.evicted) == (2, 25 + 20, 1)


def test_a_request_places_only_positions_it_feeds() -> None:
    """A request that restores past a prefix cannot snapshot that prefix."""
    first = one_request(SHARED, (1000, 1001), (1002, 1003, 3))
    history = Segment.after(first.prompt, first.output, message=True)
    turn = one_request(history, (1004, 1005), (1006, 3))  # starts after first's fed tokens
    other = one_request(SHARED, (2000, 2001), (2002, 3))  # wants the shared prompt only
    trace = [first, turn, other]
    # One slot: first places the turn's start (used sooner); the turn restores past the
    # shared prompt, so nobody can place it for the last request.
    result = clairvoyant(trace, 1)
    assert (result.hits, result.tokens_reused) == (1, 24)
    assert result.prefill_tokens == 22 + (len(turn.tokens()) - 24) + 22
    # Two slots: first places both.
    assert clairvoyant(trace, 2).tokens_reused == 24 + 20


def test_the_clairvoyant_exactness_check_bites(monkeypatch: pytest.MonkeyPatch) -> None:
    """A save of the state one token too far is caught at the next restore of that slot."""
    late = _replay._Live.at
    monkeypatch.setattr(_replay._Live, "at", lambda self, length: late(self, length + 1))
    result = clairvoyant(generate(small("chat", 300)), 8)
    assert result.hits > 0
    assert result.mismatches == result.hits
