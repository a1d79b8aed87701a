"""The simulation's application demotes what a conversation moved past (``_sessions``)."""

from __future__ import annotations

import attrs
import pytest

from ssm_rollback import PrefixEntry, PrefixSnapshotIndex
from ssm_rollback._apps.prefix_sim import (
    RULES,
    EngineSettings,
    Request,
    RequestKind,
    Segment,
    TraceParams,
    generate,
)
from ssm_rollback._apps.prefix_sim._replay import replay
from ssm_rollback._apps.prefix_sim._requests import (
    ASSISTANT,
    END,
    NEWLINE,
    START,
    SYSTEM,
    USER,
)
from ssm_rollback._apps.prefix_sim._rules import APP_RULES
from ssm_rollback._apps.prefix_sim._sessions import SessionEntries

SYSTEM_PROMPT = Segment.after(None, (START, SYSTEM, NEWLINE, *range(100, 120), END), message=True)


def request(history: Segment, kind: RequestKind, first: int, output: int) -> Request:
    """A user message of three tokens from ``first`` after ``history``, answered from
    ``output``."""
    message = Segment.after(
        history, (START, USER, NEWLINE, first, first + 1, first + 2, END), message=True
    )
    prompt = Segment.after(message, (START, ASSISTANT, NEWLINE), message=False)
    return Request(0, kind, prompt, (output, output + 1, END))


class Chat:
    """One session's requests through an index, placing what ``app-branches`` places."""

    def __init__(self, capacity: int) -> None:
        self.index = PrefixSnapshotIndex(capacity)
        self.sessions = SessionEntries(self.index)

    def serve(self, r: Request) -> tuple[dict[str, PrefixEntry], int]:
        """Place the shared end, the prompt end minus one and the output end; settle."""
        tokens = [*r.tokens(), *r.output]
        prompt = len(r.tokens())
        wanted = {"system": SYSTEM_PROMPT.end, "prompt": prompt - 1, "output": len(tokens) - 1}
        placed = {}
        for name, length in wanted.items():
            save = self.index.publish(0, tokens, length)
            if save is not None:
                placed[name] = PrefixEntry(save.length, save.slot, save.ticket)
        demoted = self.sessions.settle(r, tokens, wanted.values(), placed.values())
        return placed, demoted


def test_a_turn_demotes_the_previous_requests_own_entries_not_the_shared_prompt() -> None:
    chat = Chat(5)
    first = request(SYSTEM_PROMPT, "first", 1000, 2000)
    one, demoted = chat.serve(first)
    assert demoted == 0
    turn = request(Segment.after(first.prompt, first.output, message=True), "turn", 1100, 2100)
    two, demoted = chat.serve(turn)
    assert demoted == 2  # turn one's prompt end minus one and its output end
    assert set(chat.index.entries()) == {*one.values(), *two.values()}  # demoted, still held
    # Full: the next publish evicts a demoted entry, not the older shared system prompt.
    assert chat.index.publish(0, [9, 9, 9, 9], 3) is not None
    left = set(chat.index.entries())
    assert one["system"] in left
    assert set(two.values()) <= left
    assert len({one["prompt"], one["output"]} & left) == 1
    chat.index.check_valid()


def test_a_regenerate_keeps_the_prompt_end_and_demotes_the_answer_it_replaces() -> None:
    chat = Chat(4)
    first = request(SYSTEM_PROMPT, "first", 1000, 2000)
    one, _ = chat.serve(first)
    again = Request(0, "regenerate", first.prompt, (3000, 3001, END))
    two, demoted = chat.serve(again)
    assert set(two) == {"output"}  # the prompt end minus one was held already
    assert demoted == 1  # the first answer's end
    assert chat.index.publish(0, [9, 9, 9], 2) is not None  # full: the demoted answer goes
    assert one["output"] not in chat.index.entries()
    assert {one["system"], one["prompt"], two["output"]} <= set(chat.index.entries())


@pytest.mark.parametrize("kind", ["first", "sample"])
def test_a_first_request_or_a_sample_demotes_nothing(kind: RequestKind) -> None:
    """A best-of-n sample: its siblings' branches are alive (a search keeps several)."""
    chat = Chat(8)
    first = request(SYSTEM_PROMPT, "first", 1000, 2000)
    chat.serve(first)
    _, demoted = chat.serve(Request(0, kind, first.prompt, (3000, 3001, END)))
    assert demoted == 0


@pytest.mark.parametrize("workload", ["chat", "agentic"])
def test_only_the_application_rules_demote_and_every_restore_stays_exact(workload: str) -> None:
    params = TraceParams.default(workload, requests=300)
    trace = generate(
        attrs.evolve(params, system_tokens=40, user_tokens=10, output_tokens=12, sessions=8)
    )
    engines = EngineSettings(vllm_block_size=16, vllm_max_num_batched_tokens=64)
    for rule in RULES:
        result = replay(trace, rule, slots=16, eviction="benefit", engines=engines)
        assert result.mismatches == 0
        assert (result.demoted > 0) == (rule in APP_RULES), (rule, result.demoted)


def test_a_branching_search_demotes_only_what_it_dropped_or_finished() -> None:
    trace = generate(TraceParams.default("branching", requests=200))
    engines = EngineSettings()
    result = replay(trace, "app-branches", slots=16, eviction="benefit", engines=engines)
    assert result.demoted > 0
    unknowing = [attrs.evolve(r, abandons=(), ends_session=False) for r in trace]
    result = replay(unknowing, "app-branches", slots=16, eviction="benefit", engines=engines)
    assert result.demoted == 0


def test_a_search_demotes_the_answers_of_the_branches_it_dropped() -> None:
    """Two samples of one prompt; the search keeps the first: the second's answer end is
    demoted, the shared prompt end minus one and the kept answer are not."""
    chat = Chat(5)
    first = request(SYSTEM_PROMPT, "first", 1000, 2000)
    one, _ = chat.serve(first)
    second = Request(0, "sample", first.prompt, (3000, 3001, END))
    two, _ = chat.serve(second)
    assert len(chat.index.entries()) == 4  # the system prompt, the prompt end, two answers
    dropped = Segment.after(second.prompt, second.output, message=True)
    kept = Segment.after(first.prompt, first.output, message=True)
    deeper = request(kept, "sample", 1100, 2100)
    assert chat.sessions.abandon(attrs.evolve(deeper, abandons=(dropped,))) == 1
    assert two["output"] in chat.index.entries()  # demoted, still held
    chat.index.publish(0, [9, 9, 9, 9], 3)
    chat.index.publish(0, [8, 8, 8, 8], 3)  # full: the demoted answer goes first
    left = set(chat.index.entries())
    assert two["output"] not in left
    assert {one["system"], one["prompt"], one["output"]} <= left
    chat.index.check_valid()


def test_a_session_known_to_end_demotes_all_it_placed_but_the_shared_prompt() -> None:
    chat = Chat(4)
    last = attrs.evolve(request(SYSTEM_PROMPT, "first", 1000, 2000), ends_session=True)
    placed, demoted = chat.serve(last)
    assert demoted == 2  # its prompt end minus one and its output end
    for junk in (9, 8, 7):  # the last two fill it: both demoted ones go, not the system prompt
        chat.index.publish(0, [junk] * 3, 2)
    assert set(chat.index.entries()) & set(placed.values()) == {placed["system"]}
    assert chat.sessions.abandon(request(SYSTEM_PROMPT, "first", 1, 2)) == 0


def test_an_agent_holds_its_answers_end_until_its_next_step() -> None:
    """After a request that says its session goes on from its output (an agent's tool call),
    the application holds that output's end: placements evict other entries or are declined;
    the session's next request releases it, and a session's last holds nothing."""
    chat = Chat(4)
    step = attrs.evolve(request(SYSTEM_PROMPT, "first", 1000, 2000), resumes=True)
    placed, _ = chat.serve(step)
    for junk in (9, 8, 7, 6):  # the output end, least recently used at 6, is held: 9 goes
        chat.index.publish(0, [junk] * 3, 2)
    assert placed["output"] in chat.index.entries()
    assert placed["system"] not in chat.index.entries()
    nxt = request(Segment.after(step.prompt, step.output, message=True), "step", 1100, 2100)
    chat.sessions.resume(nxt)  # released: the next step's own plan pins its hit
    for junk in (5, 4, 3, 2):
        chat.index.publish(0, [junk] * 3, 2)
    assert placed["output"] not in chat.index.entries()
    last = attrs.evolve(nxt, ends_session=True)
    chat.serve(last)
    chat.sessions.resume(request(SYSTEM_PROMPT, "first", 1, 2))  # nothing held: nothing to do
    chat.index.check_valid()


def test_only_an_agents_requests_say_the_session_goes_on_from_them() -> None:
    """``resumes``: an agent's every request but a finished session's last; never a chat's
    (its user may leave) nor a search's (it goes on from one of several samples)."""
    for workload in ("chat", "branching"):
        assert not any(r.resumes for r in generate(TraceParams.default(workload, requests=300)))
    trace = generate(TraceParams.default("agentic", requests=300))
    assert all(r.resumes != r.ends_session for r in trace)
    assert sum(r.ends_session for r in trace) > 0


def test_holding_the_answer_end_keeps_sixteen_agents_from_evicting_one_another() -> None:
    """16 agents in flight on 16 shared slots: each step's answer end was evicted before the
    next step of its session came (7,458,412 tokens computed, 1.47x SGLang's rule); held, the
    steps hit it (2,068,068, measured over the default trace in docs/prefix.md)."""
    trace = generate(TraceParams.default("agentic", requests=400))
    engines = EngineSettings()
    held = replay(trace, "app-branches", slots=16, eviction="benefit", engines=engines)
    unheld = [attrs.evolve(r, resumes=False) for r in trace]
    thrashing = replay(unheld, "app-branches", slots=16, eviction="benefit", engines=engines)
    sglang = replay(trace, "sglang", slots=16, eviction="benefit", engines=engines)
    assert held.mismatches == thrashing.mismatches == 0
    assert held.declined > 0
    assert held.prefill_tokens < sglang.prefill_tokens < thrashing.prefill_tokens
