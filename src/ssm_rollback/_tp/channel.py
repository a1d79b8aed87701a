"""The torch side of ``broadcast_effects``: a buffer per process group, one message per step.

Rules (every rank runs the same communication in the same order, whatever
the input, so an error can never leave a peer waiting):

1. A group's first step is a handshake (``groups.shake_hands``): every
   rank's format word, then every rank's ``src``, one ``all_reduce`` each.
   It raises the same error on every rank and keeps nothing if they differ.
2. After it, a step is one message of the group's buffer of ``capacity``
   words: a header (``status``, the step's number above its low byte, and
   ``length``), then ``length`` payload words - the effects (``_wire``), or
   the sender's refusal message. On gloo the message is a send from the
   sender to every rank (tag ``TAG``): gloo runs a collective on a worker
   thread of its own, a send on the caller's, so fewer thread hand-offs.
   Elsewhere (NCCL) it is an ``all_reduce`` of the sender's words and zeros
   from the others, with every rank's ``src`` after the header: every rank
   checks every step's ``src`` in the step's own collective.
3. A payload that does not fit sets ``FOLLOWS`` in the header; then every
   rank takes a second message (a ``broadcast`` after an ``all_reduce``) of
   a buffer grown to hold it, and keeps that buffer.
4. Every rank, the sender included, decodes the words in its own buffer
   once its message is through: all return equal effects or all raise.
5. On gloo ``src`` is checked only in the handshake (every step would take
   a message from every rank: 6-45% more time a step, measured). A rank
   that passes another or a bad one later leaves the ranks waiting on it
   waiting until the group's timeout; a backend call that fails - that, or
   a dead peer - is ``DistributedError``, and the channel refuses every
   later step.
6. Every call counts as a step, also one that raised before its message,
   and a message of another step is refused (``DistributedError``): a rank
   that skipped a step never takes that step's message as its next one.
"""

from __future__ import annotations

import struct
import sys
import weakref
from array import array
from collections.abc import Callable, Iterable
from typing import Final, final

import attrs
import torch
import torch.distributed as dist

from .._core.effect_dict import Effect
from .._errors import InvalidArgumentError, InvalidArgumentTypeError, shown
from . import wire as _wire
from .failures import DistributedError, lost, src_refusal

# sends_on by name: a seam the tests turn off to run NCCL's all_reduce on gloo.
from .groups import buffer_device, group_label, sends_on, shake_hands

__all__ = [
    "FOLLOWS",
    "HEADER",
    "MAX_WORDS",
    "OK",
    "REFUSED",
    "TAG",
    "channel_capacity",
    "sends_on",
    "step",
]

OK: Final = 0
REFUSED: Final = 1
#: Header flag (rule 3): the payload comes in a second message, of a grown buffer.
FOLLOWS: Final = 2
HEADER: Final = 2  # status, length
#: Where an int64's most significant byte sits among its eight bytes on this machine.
_TOP_BYTE: Final = 7 if sys.byteorder == "little" else 0
#: The first buffer's capacity, in words; it doubles (at least) whenever a step does not fit.
FIRST_CAPACITY: Final = 1024
#: The longest payload a step may have (128 MiB): longer is refused, a longer header corrupt.
MAX_WORDS: Final = 1 << 24
#: The tag of a step's sends on gloo: ``b"SSMR"``, apart from an engine's own messages.
TAG: Final = 0x53534D52


def header_words(status: int, length: int) -> tuple[int, int]:
    """The header the sender writes (a seam the tests corrupt)."""
    return status, length


@final
@attrs.define(eq=False)
class _Channel:
    """A process group's persistent buffer; every rank holds one of the same capacity."""

    # Weak: a destroyed group must be freed when torch lets go of it, not at exit.
    _group: weakref.ReferenceType[dist.ProcessGroup]
    _label: str
    _device: torch.device
    _rank: int
    _group_rank: int
    _ranks: tuple[int, ...]  # the group's global ranks, in group order
    _sends: bool  # rule 2: the step's message as sends from the sender (gloo), else a collective
    _host: array[int] = attrs.field(factory=lambda: array("q"))
    _view: memoryview = attrs.field(factory=lambda: memoryview(b""))
    _wire: torch.Tensor = attrs.field(factory=lambda: torch.empty(0, dtype=torch.int64))
    _tensor: torch.Tensor = attrs.field(factory=lambda: torch.empty(0, dtype=torch.int64))
    _broken: DistributedError | None = None  # rule 5: the failure that ended this group
    _steps: int = 0  # rule 6: the steps this rank has begun on the group
    # Where the payload starts: after the header, and on a collective the ranks' words.
    _at: int = attrs.field(init=False)
    _roots: dict[int, int] = attrs.field(init=False)  # a rank's global rank -> its group rank

    def __attrs_post_init__(self) -> None:
        self._at = HEADER if self._sends else HEADER + len(self._ranks)
        self._roots = {rank: at for at, rank in enumerate(self._ranks)}

    @property
    def capacity(self) -> int:
        return len(self._host)

    def grow(self, capacity: int) -> None:
        """A new, zeroed buffer of ``capacity`` words (every rank grows alike, rule 3)."""
        self._host = array("q", bytes(8 * capacity))
        # The view pins the array: it cannot be resized under the tensor that shares its memory.
        self._view = memoryview(self._host)
        self._tensor = torch.frombuffer(self._host, dtype=torch.int64)
        on_cpu = self._device.type == "cpu"
        self._wire = self._tensor if on_cpu else self._tensor.to(self._device)

    def step(
        self, effects: Iterable[Effect] | None, src: int, error: InvalidArgumentError | None
    ) -> tuple[Effect, ...]:
        """Rules 2-6 on this rank; ``effects`` matter only on ``src``."""
        if self._broken is not None:
            raise DistributedError(
                f"{self._label} cannot take another step after: {self._broken}",
                self._label,
                self._broken.rank,
            ) from self._broken
        self._steps += 1
        if not self._sends:
            return self._reduced(effects, src, error)
        if error is not None:  # rule 5: the ranks waiting on this one wait for the timeout
            raise error
        root = self._root(src)
        payload = self._post(effects) if self._rank == src else []
        # The sender decodes only once its message is out: decoding while the wire carries it
        # slows the send where busy threads outnumber cores (workers' step 14-17% longer).
        self._message(root)
        return self._read(src, root, payload)

    def _reduced(
        self, effects: Iterable[Effect] | None, src: int, error: InvalidArgumentError | None
    ) -> tuple[Effect, ...]:
        """Rule 2 on a collective: the payload and every rank's ``src`` in one ``all_reduce``."""
        payload: list[int] = []
        if src == self._rank:
            payload = self._post(effects)
        else:  # zeros, so the sum is the sender's words (and each rank's own word)
            self._wire.zero_()
        words = [0] * len(self._ranks)
        words[self._group_rank] = src
        self._write(HEADER, words)
        group = self._live_group()
        self._run(lambda: group.allreduce([self._wire]), None, "did not take part in the step")
        if self._wire is not self._tensor:
            self._tensor.copy_(self._wire)
        refusal = src_refusal(self._view[HEADER : self._at].tolist(), self._ranks, error)
        if refusal is not None:
            raise refusal
        return self._read(src, self._root(src), payload)

    def _root(self, src: int) -> int:
        """``src``'s rank in the group; not in it, every rank refuses alike."""
        root = self._roots.get(src)
        if root is None:
            raise InvalidArgumentError(
                f"'src' must be a rank of the group (ranks {list(self._ranks)}), got {shown(src)}"
            )
        return root

    def _read(self, src: int, root: int, payload: list[int]) -> tuple[Effect, ...]:
        """Rules 3-4: the words in this rank's buffer as effects, or the error every rank raises."""
        at = self._at
        word, length = self._view[:HEADER].tolist()
        status, stamp = word & 0xFF, word >> 8
        if status & ~FOLLOWS in (OK, REFUSED) and stamp != self._steps:  # rule 6
            what = f"sent step {stamp}'s message, this rank's step is {self._steps}"
            why = "one of them skipped a step (raised before it, or never called)"
            raise self._lost(self._ranks[root], what, None, why)
        if status in (OK | FOLLOWS, REFUSED | FOLLOWS) and 0 <= length <= MAX_WORDS:
            self.grow(max(2 * self.capacity, 1 << (at + length - 1).bit_length()))
            if self._rank == src:
                self._write(at, payload[:length])
            self._message(root)
            status &= ~FOLLOWS
        if status not in (OK, REFUSED) or not 0 <= length <= self.capacity - at:
            raise _wire.WireError(
                f"the step's header must hold a status in {{{OK}, {REFUSED}}} (flag {FOLLOWS}: "
                f"a length up to {MAX_WORDS} follows; else up to {self.capacity - at}), got "
                f"status {status} and length {length}: a corrupted header"
            )
        # A tuple straight from the buffer: decode slices its columns from it without a copy.
        words = struct.unpack_from(f"{length}q", self._host, 8 * at)
        if status == REFUSED:
            message = bytes(w & 0xFF for w in words).decode("utf-8", "replace")
            raise InvalidArgumentError(f"rank {src} refused the step's effects: {message}")
        return _wire.decode(words, checked=self._all_non_negative(at, length))

    def _all_non_negative(self, at: int, length: int) -> bool:
        """Rule 5 of the format at C speed: every payload word is ``>= 0``.

        An int64 is negative exactly when the top bit of its most significant byte is
        set: the payload's top bytes, every eighth byte, are all ASCII. No per-word work
        and no torch call; ``False`` makes decode look closer and name the word.
        """
        payload = self._view.cast("B")[8 * at : 8 * (at + length)].tobytes()
        return payload[_TOP_BYTE::8].isascii()

    def _post(self, effects: Iterable[Effect] | None) -> list[int]:
        """The sender's side: write the header and, if it fits, the payload; return the payload."""
        refused, payload = _wire.sender_words(effects, MAX_WORDS)
        if self._at + len(payload) > self.capacity and refused is None:
            # Checked now: once the header says more follows, every rank waits for it.
            found = _wire.out_of_range(payload)
            if found is not None:
                refused, payload = _wire.refusal(found)
        try:
            fits = self._put_payload(payload)
        except struct.error as cause:  # a value int64 cannot carry, as encode would refuse it
            found = _wire.out_of_range(payload)
            refused, payload = _wire.refusal(
                found or InvalidArgumentTypeError(f"'effects': {cause}")
            )
            fits = self._put_payload(payload)
        status = OK if refused is None else REFUSED
        status, length = header_words(status if fits else status | FOLLOWS, len(payload))
        self._write(0, (self._steps << 8 | status, length))
        return payload

    def _put_payload(self, payload: list[int]) -> bool:
        fits = self._at + len(payload) <= self.capacity
        if fits:
            self._write(self._at, payload)
        return fits

    def _live_group(self) -> dist.ProcessGroup:
        group = self._group()
        assert group is not None  # the caller holds it: it is this step's group
        return group

    def _message(self, root: int) -> None:
        """Rule 2's message of the buffer from group rank ``root``; then every rank holds it."""
        # The group's own calls: dist.broadcast's and dist.send's checks, made once per group
        # here, cost more than the message itself on a small step.
        group = self._live_group()
        if not self._sends:
            what = "did not take part in the step"
            self._run(lambda: group.broadcast(self._wire, root), None, what)
            if self._wire is not self._tensor and self._group_rank != root:
                self._tensor.copy_(self._wire)
        elif self._group_rank != root:
            what = "sent no step (it is this rank's 'src')"
            self._run(lambda: group.recv([self._wire], root, TAG), self._ranks[root], what)
        else:
            failed: tuple[int, RuntimeError] | None = None
            works = []
            for peer in range(group.size()):
                try:  # a send can fail as it starts (a pair closed by an earlier timeout)
                    if peer != root:
                        works.append((peer, group.send([self._wire], peer, TAG)))
                except RuntimeError as error:
                    failed = failed or (peer, error)
            for peer, work in works:
                try:  # every send waited for, so none is left in flight when one fails
                    work.wait()
                except RuntimeError as error:
                    failed = failed or (peer, error)
            if failed is not None:
                what = f"took no step from rank {self._rank} (its 'src')"
                raise self._lost(self._ranks[failed[0]], what, failed[1]) from failed[1]

    def _run(self, start: Callable[[], dist.Work], rank: int | None, what: str) -> None:
        """Start a call on the group and wait for it; a backend failure, as it starts (a pair
        an earlier timeout closed) or while it runs, is rule 5's ``DistributedError``."""
        try:
            start().wait()
        except RuntimeError as cause:  # gloo's own, or DistBackendError: rule 5
            raise self._lost(rank, what, cause) from cause

    def _lost(
        self, rank: int | None, what: str, cause: RuntimeError | None, *why: str
    ) -> DistributedError:
        self._broken = lost(self._label, rank, what, cause, *why)
        return self._broken

    def _write(self, at: int, words: list[int] | tuple[int, ...]) -> None:
        # struct packs a list of ints several times faster than array() or torch.tensor()
        struct.pack_into(f"{len(words)}q", self._host, 8 * at, *words)
        if self._wire is not self._tensor:  # a device buffer (NCCL): the host's words go with it
            self._wire[at : at + len(words)].copy_(self._tensor[at : at + len(words)])


# Keyed weakly by the group: a destroyed and re-created group is a new object,
# so it shakes hands anew, and a dead group's buffer goes with it.
_CHANNELS: Final[weakref.WeakKeyDictionary[dist.ProcessGroup, _Channel]] = (
    weakref.WeakKeyDictionary()
)


def _channel(
    group: dist.ProcessGroup | None, src: int, error: InvalidArgumentError | None
) -> _Channel:
    """The group's channel, after the handshake (rule 1) on its first step."""
    resolved = dist.group.WORLD if group is None else group
    assert resolved is not None  # the caller checked that a process group is initialised
    found = _CHANNELS.get(resolved) if isinstance(resolved, dist.ProcessGroup) else None
    if found is not None:
        return found
    me = dist.get_rank(resolved)  # -1 where this rank is not in the group
    if me < 0 or not isinstance(resolved, dist.ProcessGroup):
        raise InvalidArgumentError(
            f"'group' must hold this rank ({dist.get_rank()}) to broadcast effects over it"
        )
    config = str(dist.get_backend_config(resolved))
    device = buffer_device(config)
    ranks = shake_hands(resolved, src, error, device)
    label, sends = group_label(resolved), sends_on(config, device)
    channel = _Channel(weakref.ref(resolved), label, device, dist.get_rank(), me, ranks, sends)
    channel.grow(FIRST_CAPACITY)
    _CHANNELS[resolved] = channel
    return channel


def step(
    effects: Iterable[Effect] | None,
    *,
    src: int,
    error: InvalidArgumentError | None,
    group: dist.ProcessGroup | None,
) -> tuple[Effect, ...]:
    """One step of ``broadcast_effects`` over an initialised process group (rules 1-6).

    ``src`` is ``failures.src_word``'s word and ``error`` its error (for ``INVALID``).
    """
    return _channel(group, src, error).step(effects, src, error)


def channel_capacity(group: dist.ProcessGroup | None) -> int:
    """The words a step's message carries on ``group`` now (0 before its first step)."""
    resolved = dist.group.WORLD if group is None else group
    found = _CHANNELS.get(resolved) if isinstance(resolved, dist.ProcessGroup) else None
    return 0 if found is None else found.capacity
