"""The torch side of ``broadcast_effects``: a buffer per process group, one message per step.

Rules (every rank runs the same communication in the same order, whatever
the input, so an error can never leave a peer waiting):

1. The first step on a process group is a handshake: one ``all_reduce`` of
   every rank's format word. Mixed formats raise ``WireError`` on every
   rank and nothing is kept, so the next step shakes hands again.
2. After it, a step is one message of the group's buffer of ``capacity``
   words from the sender to every rank: a header (``status``, ``length``),
   then ``length`` payload words - the effects (``_wire``), or the sender's
   refusal message. On gloo the message is a send from the sender to each
   rank (tag ``TAG``) and a receive on each; elsewhere (NCCL) a
   ``broadcast``. Gloo runs a collective on a worker thread of its own, a
   send or receive on the caller's thread: fewer thread hand-offs a step.
3. A payload that does not fit sets ``FOLLOWS`` in the header; then every
   rank takes a second message of a buffer grown to hold it, and keeps that
   buffer. Every rank reads the same header, so every rank makes the same
   second call (or none).
4. Every rank, the sender included, decodes the words in its own buffer
   once its message is through: all return equal effects or all raise.
"""

from __future__ import annotations

import struct
import sys
import weakref
from array import array
from collections.abc import Iterable
from typing import Final, final

import attrs
import torch
import torch.distributed as dist

from .._core.effect_dict import Effect
from .._errors import InvalidArgumentError, InvalidArgumentTypeError, SsmRollbackError
from . import wire as _wire

__all__ = [
    "FOLLOWS",
    "HEADER",
    "MAX_WORDS",
    "OK",
    "REFUSED",
    "TAG",
    "buffer_device",
    "channel_capacity",
    "group_active",
    "group_device",
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


def _backends(config: str) -> dict[str, str]:
    """A group's backend by device type, from ``dist.get_backend_config`` (``"cpu:gloo"``)."""
    found: dict[str, str] = {}
    for part in config.split(","):
        kind, _, name = part.rpartition(":")
        for device_type in (kind,) if kind else ("cpu", "cuda"):  # a bare name serves both
            found[device_type] = name
    return found


def group_active(group: dist.ProcessGroup | None) -> bool:
    """Whether collectives run at all: without an initialised process group, one rank."""
    return dist.is_available() and dist.is_initialized()


def group_device(group: dist.ProcessGroup | None) -> torch.device:
    """Where this group's collectives want their tensors: the CPU if it has a CPU backend."""
    return buffer_device(str(dist.get_backend_config(group)))


def buffer_device(config: str) -> torch.device:
    """Where a group's buffers live: the CPU wherever the group has a CPU backend, else CUDA."""
    backends = _backends(config)
    if "cpu" not in backends and "cuda" in backends:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def sends_on(config: str, device: torch.device) -> bool:
    """Whether a group's steps travel as sends (rule 2): a buffer on the CPU, on gloo.

    ``config`` is ``dist.get_backend_config``'s (``get_backend`` says
    ``"undefined"`` for a group started without naming one). A seam: the
    tests turn it off to run the broadcast, NCCL's path, on gloo.
    """
    return device.type == "cpu" and _backends(config).get("cpu") == "gloo"


@final
@attrs.define(eq=False)
class _Channel:
    """A process group's persistent buffer; every rank holds one of the same capacity."""

    # Weak: a destroyed group must be freed when torch lets go of it, not at exit.
    _group: weakref.ReferenceType[dist.ProcessGroup]
    _device: torch.device
    _rank: int
    _group_rank: int
    _sends: bool  # rule 2: the step's message as sends from the sender (gloo), else a broadcast
    _host: array[int] = attrs.field(factory=lambda: array("q"))
    _view: memoryview = attrs.field(factory=lambda: memoryview(b""))
    _wire: torch.Tensor = attrs.field(factory=lambda: torch.empty(0, dtype=torch.int64))
    _tensor: torch.Tensor = attrs.field(factory=lambda: torch.empty(0, dtype=torch.int64))
    _roots: dict[int, int] = attrs.field(factory=dict)  # src's global rank -> its group rank

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

    def step(self, effects: Iterable[Effect] | None, src: int) -> tuple[Effect, ...]:
        """Rules 2-4 on this rank; ``effects`` matter only on ``src``."""
        root = self._roots.get(src)
        if root is None:  # checked before any collective: every rank refuses alike
            root = self._roots[src] = _group_rank(self._live_group(), src)
        payload = self._post(effects) if self._rank == src else []
        # The sender decodes only once its message is out. Decoding while the wire carries
        # it would overlap nothing the workers wait on (they decode after receiving), and
        # where busy threads outnumber cores it slows the send itself (measured: the
        # workers' step took 14-17% longer on two cores).
        self._send(root)
        return self._read(src, root, payload)

    def _read(self, src: int, root: int, payload: list[int]) -> tuple[Effect, ...]:
        """Rules 3-4: the words in this rank's buffer as effects, or the error every rank raises."""
        status, length = self._view[:HEADER].tolist()
        if status in (OK | FOLLOWS, REFUSED | FOLLOWS) and 0 <= length <= MAX_WORDS:
            self.grow(max(2 * self.capacity, 1 << (HEADER + length - 1).bit_length()))
            if self._rank == src:
                self._write(HEADER, payload[:length])
            self._send(root)
            status &= ~FOLLOWS
        if status not in (OK, REFUSED) or not 0 <= length <= self.capacity - HEADER:
            raise _wire.WireError(
                f"the step's header must hold a status in {{{OK}, {REFUSED}}} (flag {FOLLOWS}: "
                f"a length up to {MAX_WORDS} follows; else up to {self.capacity - HEADER}), got "
                f"status {status} and length {length}: a corrupted header"
            )
        # A tuple straight from the buffer: decode slices its columns from it without a copy.
        words = struct.unpack_from(f"{length}q", self._host, 8 * HEADER)
        if status == REFUSED:
            message = bytes(w & 0xFF for w in words).decode("utf-8", "replace")
            raise InvalidArgumentError(f"rank {src} refused the step's effects: {message}")
        return _wire.decode(words, checked=self._all_non_negative(length))

    def _all_non_negative(self, length: int) -> bool:
        """Rule 5 of the format at C speed: every payload word is ``>= 0``.

        An int64 is negative exactly when the top bit of its most significant
        byte is set, so the payload's top bytes, taken every eighth byte, are
        all ASCII. A copy and a strided slice of bytes, no per-word work and no
        torch call (whose dispatch costs more than the check itself on a step
        that starts cold). ``False`` makes decode look closer and name the word.
        """
        payload = self._view.cast("B")[8 * HEADER : 8 * (HEADER + length)].tobytes()
        return payload[_TOP_BYTE::8].isascii()

    def _post(self, effects: Iterable[Effect] | None) -> list[int]:
        """The sender's side: write the header and, if it fits, the payload; return the payload."""
        status, payload = _encode(effects)
        if HEADER + len(payload) > self.capacity and status == OK:
            # Checked now: once the header says more follows, every rank waits for it.
            error = _wire.out_of_range(payload)
            if error is not None:
                status, payload = _refusal(error)
        try:
            fits = self._put_payload(payload)
        except struct.error as cause:  # a value int64 cannot carry, as encode would refuse it
            found = _wire.out_of_range(payload)
            status, payload = _refusal(found or InvalidArgumentTypeError(f"'effects': {cause}"))
            fits = self._put_payload(payload)
        self._write(0, header_words(status if fits else status | FOLLOWS, len(payload)))
        return payload

    def _put_payload(self, payload: list[int]) -> bool:
        fits = HEADER + len(payload) <= self.capacity
        if fits:
            self._write(HEADER, payload)
        return fits

    def _live_group(self) -> dist.ProcessGroup:
        group = self._group()
        assert group is not None  # the caller holds it: it is this step's group
        return group

    def _send(self, root: int) -> None:
        """Rule 2's message of the buffer from group rank ``root``; then every rank holds it."""
        # The group's own calls: dist.broadcast's and dist.send's checks, made once per group
        # here, cost more than the message itself on a small step.
        group = self._live_group()
        if not self._sends:
            group.broadcast(self._wire, root).wait()
            if self._wire is not self._tensor and self._group_rank != root:
                self._tensor.copy_(self._wire)
        elif self._group_rank != root:
            group.recv([self._wire], root, TAG).wait()
        else:
            peers = [peer for peer in range(group.size()) if peer != root]
            for work in [group.send([self._wire], peer, TAG) for peer in peers]:
                work.wait()

    def _write(self, at: int, words: list[int] | tuple[int, ...]) -> None:
        # struct packs a list of ints several times faster than array() or torch.tensor()
        struct.pack_into(f"{len(words)}q", self._host, 8 * at, *words)
        if self._wire is not self._tensor:  # a device buffer (NCCL): the host's words go with it
            self._wire[at : at + len(words)].copy_(self._tensor[at : at + len(words)])


def _encode(effects: Iterable[Effect] | None) -> tuple[int, list[int]]:
    """The sender's status and payload: the effects' words, or its refusal message."""
    try:
        # The range check is the packing's (struct refuses what int64 cannot carry).
        words = _wire.encode(() if effects is None else effects, ranged=False)
    except SsmRollbackError as error:
        return _refusal(error)
    except Exception as error:  # the caller's iterable broke: refused on every rank, no hang
        return _refusal(
            InvalidArgumentError(f"iterating 'effects' raised {type(error).__name__}: {error}")
        )
    if len(words) > MAX_WORDS:
        return _refusal(
            InvalidArgumentError(
                f"'effects' must encode to at most {MAX_WORDS} words, got {len(words)}"
            )
        )
    return OK, words


def _group_rank(group: dist.ProcessGroup, src: int) -> int:
    try:
        return dist.get_group_rank(group, src)
    except (ValueError, RuntimeError):  # every rank of the group refuses alike
        raise InvalidArgumentError(f"'src' must be a rank of the group, got {src}") from None


def _refusal(error: SsmRollbackError) -> tuple[int, list[int]]:
    return REFUSED, list(str(error).encode("utf-8"))


# Keyed weakly by the group: a destroyed and re-created group is a new object,
# so it shakes hands anew, and a dead group's buffer goes with it.
_CHANNELS: Final[weakref.WeakKeyDictionary[dist.ProcessGroup, _Channel]] = (
    weakref.WeakKeyDictionary()
)


def _channel(group: dist.ProcessGroup | None) -> _Channel:
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
    formats = torch.zeros(dist.get_world_size(resolved), dtype=torch.int64)
    formats[me] = _wire.MAGIC
    formats = formats.to(device)
    dist.all_reduce(formats, group=resolved)
    seen: list[int] = formats.tolist()
    if any(f != _wire.MAGIC for f in seen):
        raise _wire.WireError(
            f"every rank must speak wire format {_wire.MAGIC:#x}, got formats by rank "
            f"{[hex(f) for f in seen]}: mixed library versions"
        )
    channel = _Channel(weakref.ref(resolved), device, dist.get_rank(), me, sends_on(config, device))
    channel.grow(FIRST_CAPACITY)
    _CHANNELS[resolved] = channel
    return channel


def step(
    effects: Iterable[Effect] | None, *, src: int, group: dist.ProcessGroup | None
) -> tuple[Effect, ...]:
    """One step of ``broadcast_effects`` over an initialised process group (rules 1-4)."""
    return _channel(group).step(effects, src)


def channel_capacity(group: dist.ProcessGroup | None) -> int:
    """The words a step's broadcast carries on ``group`` now (0 before its first step)."""
    resolved = dist.group.WORLD if group is None else group
    found = _CHANNELS.get(resolved) if isinstance(resolved, dist.ProcessGroup) else None
    return 0 if found is None else found.capacity
