"""A chat application weighs its conversations by the chance each comes back (``_liveness``).

A chat never learns that a conversation ended. Before a request that would
evict, the simulation's application (``SessionEntries.make_room``) demotes
the entries of other conversations that it expects least from: the tokens
each saves its conversation's next request, times the chance, learnt from
its own traffic, that the conversation is still alive after being idle so
long.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_rollback import PrefixEntry, PrefixSnapshotIndex
from ssm_rollback._apps.prefix_sim import (
    EngineSettings,
    Request,
    RequestKind,
    Segment,
    TraceParams,
    generate,
)
from ssm_rollback._apps.prefix_sim._liveness import Liveness
from ssm_rollback._apps.prefix_sim._replay import replay
from ssm_rollback._apps.prefix_sim._requests import ASSISTANT, END, NEWLINE, START, SYSTEM, USER
from ssm_rollback._apps.prefix_sim._sessions import SessionEntries

SYSTEM_PROMPT = Segment.after(None, (START, SYSTEM, NEWLINE, *range(100, 120), END), message=True)


def chat_request(
    session: int,
    kind: RequestKind,
    *,
    history: Segment = SYSTEM_PROMPT,
    message: int = 3,
    output: int = 3,
    first: int = 1000,
) -> Request:
    """A user message of ``message`` tokens from ``first`` after ``history``, answered in
    ``output`` tokens (the last one ``END``); a chat's, which can end silently."""
    user = Segment.after(
        history, (START, USER, NEWLINE, *range(first, first + message), END), message=True
    )
    prompt = Segment.after(user, (START, ASSISTANT, NEWLINE), message=False)
    answer = (*range(first + 500, first + 500 + output - 1), END)
    return Request(session, kind, prompt, answer, ends_silently=True)


class App:
    """Requests through an index as ``replay`` serves them under the ``app-branches`` rule:
    make room, plan the prefill (placing the shared end, ``extra`` positions and the prompt
    end minus one), release, publish the output end, settle."""

    def __init__(self, capacity: int) -> None:
        self.index = PrefixSnapshotIndex(capacity)
        self.sessions = SessionEntries(self.index)

    def serve(
        self, r: Request, *, extra: tuple[int, ...] = ()
    ) -> tuple[dict[int, PrefixEntry], int]:
        """The entries the request placed, by position, and how many were demoted."""
        self.sessions.resume(r)
        prompt = r.tokens()
        tokens = [*prompt, *r.output]
        at = (*r.shared_ends(), *extra, r.prompt.end - 1)
        found = self.index.match(prompt)
        start = 0 if found is None else found.length
        placing, demoted = self.sessions.make_room(r, tokens, (*at, len(tokens) - 1), found)
        plan = self.index.plan_prefill(0, prompt, publish_at=[p for p in at if p in placing])
        saves = [chunk.save for chunk in plan.chunks if chunk.save is not None]
        self.index.release(plan)
        if len(tokens) - 1 in placing:
            save = self.index.publish(0, tokens, len(tokens) - 1)
            saves += [save] if save is not None else []
        placed = {s.length: PrefixEntry(s.length, s.slot, s.ticket) for s in saves}
        wanted = [p for p in (*at, len(tokens) - 1) if p in placing or p <= start]
        demoted += self.sessions.settle(r, tokens, wanted, placed.values())
        self.index.check_valid()
        return placed, demoted


def turn_after(r: Request, session: int, first: int) -> Request:
    """The next turn of ``r``'s conversation."""
    history = Segment.after(r.prompt, r.output, message=True)
    return chat_request(session, "turn", history=history, first=first)


def test_every_session_counts_as_alive_before_a_gap_is_seen() -> None:
    liveness = Liveness()
    liveness.observe(chat_request(0, "first"))
    liveness.observe(chat_request(1, "first"))
    assert liveness.alive(0) == liveness.alive(1) == 1.0
    assert liveness.share("on") == liveness.share("again") == liveness.share("edit") == 1 / 3


def test_the_chance_a_session_is_alive_is_bayes_over_the_gaps_and_follow_ups_seen() -> None:
    """Five requests, three of them firsts (q = 0.4), gaps of 2 and 3 requests."""
    liveness = Liveness()
    arrivals: list[tuple[int, RequestKind]] = [
        (0, "first"),
        (1, "first"),
        (0, "turn"),
        (2, "first"),
        (1, "edit"),
    ]
    for session, kind in arrivals:
        liveness.observe(chat_request(session, kind))
    # Session 0, idle 2: one gap in two was longer, chance 0.4 * 0.5 against 0.6 ended.
    assert liveness.alive(0) == pytest.approx(0.2 / (0.2 + 0.6))
    assert (
        liveness.alive(2) == liveness.alive(1) == pytest.approx(0.4)
    )  # idle 1 and 0: every gap longer
    assert liveness.share("on") == liveness.share("edit") == 2 / 5
    assert liveness.share("again") == 1 / 5


@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=60))
def test_a_session_idle_longer_is_never_likelier_to_come_back(
    arrivals: list[tuple[int, bool]],
) -> None:
    liveness = Liveness()
    last: dict[int, int] = {}
    for clock, (session, again) in enumerate(arrivals):
        kind: RequestKind = "regenerate" if again and session in last else "turn"
        liveness.observe(chat_request(session, "first" if session not in last else kind))
        last[session] = clock
        by_idle = sorted(last, key=lambda s: -last[s])  # the most recent first
        chances = [liveness.alive(s) for s in by_idle]
        assert all(0.0 <= c <= 1.0 for c in chances)
        assert chances == sorted(chances, reverse=True)


def test_nothing_is_demoted_while_free_slots_suffice() -> None:
    app = App(5)
    app.serve(chat_request(1, "first"))  # the system prompt, the prompt end, the output end
    placed, demoted = app.serve(chat_request(2, "first", first=2000))
    assert demoted == 0
    assert len(placed) == 2
    assert len(app.index) == 5


def test_nothing_more_is_demoted_while_the_entries_demoted_already_make_the_room() -> None:
    """A turn demotes its conversation's passed entries; the next request's two placements
    evict those two, and the turn's own entries stay."""
    app = App(5)
    first = chat_request(1, "first")
    app.serve(first)
    turn, moved_past = app.serve(turn_after(first, 1, 1100))
    assert moved_past == 2
    assert len(app.index.demoted()) == 2
    _, demoted = app.serve(chat_request(2, "first", first=2000))
    assert demoted == 0
    assert set(turn.values()) <= set(app.index.entries())
    assert app.index.demoted() == ()


def test_a_passed_entry_another_conversation_places_again_is_its_own_and_no_longer_demoted() -> (
    None
):
    """Two conversations open with the same message and get the same (greedy) answer. The
    second places again the entries the first moved past: the index no longer has them
    demoted, and the room a later request needs is made by demoting, not by the index's
    own policy evicting the first conversation's living turn."""
    app = App(6)
    first = chat_request(1, "first")
    app.serve(first)
    turn, _ = app.serve(turn_after(first, 1, 1100))
    assert len(app.index.demoted()) == 2
    twin, _ = app.serve(chat_request(2, "first"))  # the same tokens as the first's
    assert twin == {}  # nothing new: both entries were there, demoted
    assert app.index.demoted() == ()
    adopted = set(app.sessions._own[2])
    assert len(adopted) == 2
    before = set(app.index.entries())
    _, demoted = app.serve(chat_request(3, "first", first=3000, output=40))
    gone = before - set(app.index.entries())
    assert demoted == len(gone) == 1
    assert gone <= adopted  # the twin's, worth least; not the living turn's
    assert set(turn.values()) <= set(app.index.entries())


def test_a_full_index_demotes_the_entries_that_would_save_least() -> None:
    """Three conversations, room for two more entries: the third's request demotes the one
    entry of the others that saves least, the second's answer end (one token over its
    prompt end), and keeps the first's long answer and both prompt ends."""
    app = App(6)
    one, _ = app.serve(chat_request(1, "first", output=40))
    two, _ = app.serve(chat_request(2, "first", output=2, first=2000))
    _, demoted = app.serve(chat_request(3, "first", first=3000))
    assert demoted == 1
    left = set(app.index.entries())
    answer_two = max(two)
    assert two[answer_two] not in left
    assert set(one.values()) | {two[min(two)]} <= left


def test_a_conversation_idle_past_every_gap_seen_goes_before_a_recent_one() -> None:
    """Its answer would save far more, but no conversation seen stayed idle that long: the
    recent conversation's entries, worth less, stay."""
    app = App(5)
    old, _ = app.serve(chat_request(1, "first", message=30, output=60))
    for n in range(10):  # two other conversations, each back after 2 requests
        app.sessions.resume(chat_request(98 + n % 2, "first" if n < 2 else "turn"))
    recent, _ = app.serve(chat_request(2, "first", output=2, first=2000))
    _, demoted = app.serve(chat_request(3, "first", first=3000))
    assert app.sessions._liveness.alive(1) == 0.0 < app.sessions._liveness.alive(2)
    assert demoted == 2
    left = set(app.index.entries())
    del old[SYSTEM_PROMPT.end]  # shared: never a conversation's own
    assert not set(old.values()) & left
    assert set(recent.values()) <= left


def test_what_the_request_restores_is_never_demoted_for_it() -> None:
    """A conversation long idle, whose answer end another request goes on from (a shared
    link to it): the least worth, yet restored, so the other entries make the room."""
    app = App(5)
    first = chat_request(1, "first", output=2)
    mine, _ = app.serve(first)
    for n in range(10):
        app.sessions.resume(chat_request(98 + n % 2, "first" if n < 2 else "turn"))
    app.serve(chat_request(2, "first", first=2000))
    forked = chat_request(
        3, "first", history=Segment.after(first.prompt, first.output, message=True), first=3000
    )
    hit = app.index.match(forked.tokens())
    assert hit is not None
    assert hit.length == max(mine)
    system = app.index.match([*SYSTEM_PROMPT.prefix(), 0])
    assert system is not None
    app.serve(forked)
    assert hit in app.index.entries()
    assert system in app.index.entries()  # the room came from what was weighed, not by policy


def test_a_demoted_entry_the_request_hits_makes_no_room() -> None:
    """An edit of a turn hits the first answer's end, which the turn demoted: pinned by the
    plan and used again, it frees nothing, so the other conversation's least entry is
    demoted for the room, and the index evicts nothing the application did not choose."""
    app = App(7)
    first = chat_request(1, "first")
    app.serve(first)
    app.serve(turn_after(first, 1, 1100))
    other, _ = app.serve(chat_request(2, "first", first=2000))
    passed = set(app.index.demoted())
    edit = attrs.evolve(turn_after(first, 1, 1200), kind="edit")
    hit = app.index.match(edit.tokens())
    assert hit in passed
    before = set(app.index.entries())
    app.serve(edit)
    gone = before - set(app.index.entries())
    assert len(gone) == 2
    assert gone - passed <= set(other.values())


def test_a_request_of_a_session_that_says_when_it_ends_makes_no_room() -> None:
    app = App(5)
    app.serve(chat_request(1, "first"))
    app.serve(chat_request(2, "first", first=2000))
    agent = attrs.evolve(chat_request(3, "first", first=3000), ends_silently=False)
    app.sessions.resume(agent)
    tokens = [*agent.tokens(), *agent.output]
    wanted = (agent.prompt.end - 1, len(tokens) - 1)
    hit = app.index.match(agent.tokens())
    assert app.sessions.make_room(agent, tokens, wanted, hit) == (wanted, 0)


def test_a_position_that_would_save_its_session_nothing_is_not_placed_when_room_is_short() -> None:
    """The ``app`` rule's user-message end, between the system prompt and the prompt end
    minus one: the prompt end serves a regenerate, the output end a turn, so with no room
    it is left out; with room it is placed."""
    r = chat_request(2, "first", first=2000)
    message_end = r.prompt.end - 3
    roomy = App(8)
    roomy.serve(chat_request(1, "first"))
    placed, _ = roomy.serve(r, extra=(message_end,))
    assert message_end in placed
    tight = App(5)
    tight.serve(chat_request(1, "first"))
    placed, demoted = tight.serve(r, extra=(message_end,))
    assert message_end not in placed
    assert demoted == 0  # one slot short for three, and the one it leaves out was that one
    assert {r.prompt.end - 1, len(r.tokens()) + len(r.output) - 1} <= set(placed)


def test_only_a_chats_requests_say_their_session_can_end_silently() -> None:
    chat = generate(TraceParams.default("chat", requests=300))
    assert all(r.ends_silently for r in chat)
    for workload in ("agentic", "branching"):
        assert not any(
            r.ends_silently for r in generate(TraceParams.default(workload, requests=300))
        )


@pytest.mark.parametrize("rule", ["app", "app-branches"])
def test_on_a_chat_the_index_evicts_only_what_the_application_demoted(rule: str) -> None:
    """600 chat requests on 64 shared slots: every eviction was of an entry the application
    demoted (moved past, or weighed least), each demotion counted, every restore exact."""
    trace = generate(TraceParams.default("chat", requests=600))
    result = replay(trace, rule, slots=64, eviction="benefit", engines=EngineSettings())  # type: ignore[arg-type]
    assert result.mismatches == 0
    assert result.evicted > 500
    assert result.evicted <= result.demoted


def test_weighing_conversations_by_their_chance_to_come_back_computes_less() -> None:
    """800 chat requests on 128 shared slots: 81,743 tokens computed against 84,771 by the
    same application unaware that its conversations end silently, every restore exact."""
    trace = generate(TraceParams.default("chat", requests=800))
    unaware = [attrs.evolve(r, ends_silently=False) for r in trace]
    engines = EngineSettings()
    weighed = replay(trace, "app-branches", slots=128, eviction="benefit", engines=engines)
    before = replay(unaware, "app-branches", slots=128, eviction="benefit", engines=engines)
    assert weighed.mismatches == before.mismatches == 0
    assert weighed.prefill_tokens < before.prefill_tokens
    assert weighed.demoted > before.demoted
