"""A trace's requests: prompts as chains of chat-template messages, shared between requests.

Each prompt is a chain of messages in a chat template (a role header, the
content, an end token); messages shared between requests are the same
``Segment`` objects, so a trace of long prompts costs only its distinct
tokens. A ``Request`` says which positions an application knows (its
message ends) and where it expects others to diverge (its branch points).
"""

from __future__ import annotations

from itertools import chain
from typing import Literal

import attrs

__all__ = [
    "ASSISTANT",
    "END",
    "NEWLINE",
    "START",
    "SYSTEM",
    "TOOL",
    "USER",
    "Request",
    "RequestKind",
    "Segment",
]

RequestKind = Literal["first", "turn", "regenerate", "edit", "step", "retry", "sample"]

# Template tokens: a message is [START, role, NEWLINE] + content + [END].
START, NEWLINE, END = 1, 2, 3
SYSTEM, USER, ASSISTANT, TOOL = 4, 5, 6, 7  # the roles


@attrs.frozen(eq=False)
class Segment:
    """One message (or a bare role header) of a prompt, after the segment ``parent``."""

    parent: Segment | None = attrs.field(repr=False)
    tokens: tuple[int, ...] = attrs.field(repr=False)
    #: The prompt length at this segment's end; whether that end closes a message.
    end: int
    message: bool

    @classmethod
    def after(cls, parent: Segment | None, tokens: tuple[int, ...], *, message: bool) -> Segment:
        """The segment holding ``tokens`` right after ``parent``."""
        return cls(parent, tokens, (0 if parent is None else parent.end) + len(tokens), message)

    def prefix(self) -> list[int]:
        """The token ids from the prompt start to this segment's end."""
        return list(chain.from_iterable(segment.tokens for segment in self.chain()))

    def chain(self) -> list[Segment]:
        """The segments from the prompt start to this one."""
        segments = []
        node: Segment | None = self
        while node is not None:
            segments.append(node)
            node = node.parent
        segments.reverse()
        return segments


@attrs.frozen
class Request:
    """One request: its session, why it was sent, its prompt and the output it decodes."""

    session: int
    kind: RequestKind
    prompt: Segment = attrs.field(repr=False)
    output: tuple[int, ...] = attrs.field(repr=False)
    #: Whether its application lets a person rewrite the newest message (a chat's edit
    #: button); an agent's tool results and a search's verifier notes are never rewritten.
    editable: bool = attrs.field(default=False, kw_only=True)
    #: Whether its application knows no request of the session follows it (an agent whose
    #: answer called no tool, a search past its last depth); a chat never knows, as people
    #: leave without saying so.
    ends_session: bool = attrs.field(default=False, kw_only=True)
    #: Whether its session can end without its application learning it: a chat's user
    #: leaves without saying so. Its application then weighs the session's entries by the
    #: chance it comes back (``_liveness``).
    ends_silently: bool = attrs.field(default=False, kw_only=True)
    #: Whether its application knows the session's next request will come and go on from
    #: this one's output: an agent's answer that called a tool, whose result comes back as
    #: the next step. A chat's user may leave; a search goes on from one of several samples.
    resumes: bool = attrs.field(default=False, kw_only=True)
    #: The branches (a prompt and its answer, as one message segment) its application
    #: dropped since the session's previous request: the samples a search did not keep.
    abandons: tuple[Segment, ...] = attrs.field(default=(), kw_only=True, repr=False)

    def tokens(self) -> list[int]:
        """The prompt's token ids."""
        return self.prompt.prefix()

    def message_ends(self) -> tuple[int, ...]:
        """Where the prompt's messages end: the positions an application knows."""
        return tuple(segment.end for segment in self.prompt.chain() if segment.message)

    def branch_points(self) -> tuple[int, ...]:
        """The message ends where an application expects other requests to diverge.

        The ends of the shared messages (system prompt, tool schemas: other
        sessions start there) and, when the request is ``editable``, of the
        history before the newest message (an edit rewrites that message).
        Where nothing is ever rewritten, that end is left out: placing it was
        measured to compute more prefill, since its snapshot, one message
        short of the prompt, crowded out the ones later requests hit. The
        history's older message ends are
        left out: the conversation went on past each of them, so the request
        that could branch there is an edit of an old message, which none of
        the workloads sends. Publishing them all was measured to compute more
        prefill, not less: every miss re-placed a conversation's whole history
        and evicted what the next turns needed.
        """
        messages = [segment for segment in self.prompt.chain() if segment.message]
        newest = {messages[-2].end} if self.editable and len(messages) >= 2 else set()
        return tuple(sorted({*self.shared_ends(), *newest}))

    def shared_ends(self) -> tuple[int, ...]:
        """The ends of the messages other sessions send too (system prompt, tool schemas)."""
        return tuple(
            segment.end
            for segment in self.prompt.chain()
            if segment.message and segment.tokens[:2] == (START, SYSTEM)
        )
