"""What a rank knows of its process group: its backends, where its buffers go, its handshake.

``channel`` keeps a buffer per group on top of these; ``agreement`` uses
``group_active`` and ``group_device`` for its gathers.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .._errors import InvalidArgumentError, InvalidArgumentTypeError
from . import wire as _wire
from .failures import lost, src_refusal

__all__ = [
    "buffer_device",
    "group_active",
    "group_device",
    "group_label",
    "sends_on",
    "shake_hands",
]


def _backends(config: str) -> dict[str, str]:
    """A group's backend by device type, from ``dist.get_backend_config`` (``"cpu:gloo"``)."""
    found: dict[str, str] = {}
    for part in config.split(","):
        kind, _, name = part.rpartition(":")
        for device_type in (kind,) if kind else ("cpu", "cuda"):  # a bare name serves both
            found[device_type] = name
    return found


def group_active(group: dist.ProcessGroup | None) -> bool:
    """Whether collectives run at all: without an initialised process group, one rank.

    A ``group`` that is no ``ProcessGroup`` is refused here, with a group or without
    (``new_group`` hands a rank outside the group its ``NON_GROUP_MEMBER`` marker: taken).
    """
    if group is not None and not (
        dist.is_available()
        and (isinstance(group, dist.ProcessGroup) or group is dist.GroupMember.NON_GROUP_MEMBER)
    ):
        raise InvalidArgumentTypeError(
            f"'group' must be a torch.distributed ProcessGroup or None, got {type(group).__name__}"
        )
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
    """Whether a group's steps travel as sends (``channel`` rule 2): a CPU buffer, on gloo.

    ``config`` is ``dist.get_backend_config``'s (``get_backend`` says
    ``"undefined"`` for a group started without naming one).
    """
    return device.type == "cpu" and _backends(config).get("cpu") == "gloo"


def group_label(group: dist.ProcessGroup) -> str:
    """``process group '1'``, with its description where it has one (``'0' (default_pg)``)."""
    description = getattr(group, "group_desc", "")
    known = description and description != "undefined"
    return f"process group {group.group_name!r}" + (f" ({description})" if known else "")


def shake_hands(
    group: dist.ProcessGroup,
    src: int,
    error: InvalidArgumentError | None,
    device: torch.device,
) -> tuple[int, ...]:
    """A group's first step (``channel`` rule 1): every rank's format, then every rank's ``src``.

    Returns the group's global ranks in group order; raises the same error
    on every rank: ``WireError`` for mixed formats, ``InvalidArgumentError``
    for mixed or bad ``src`` (``failures.src_refusal``).
    """
    formats = _one_word_each(group, _wire.MAGIC, device)
    if any(f != _wire.MAGIC for f in formats):
        raise _wire.WireError(
            f"every rank must speak wire format {_wire.MAGIC:#x}, got formats by rank "
            f"{[hex(f) for f in formats]}: mixed library versions"
        )
    ranks = tuple(dist.get_process_group_ranks(group))
    refusal = src_refusal(_one_word_each(group, src, device), ranks, error)
    if refusal is not None:
        raise refusal
    return ranks


def _one_word_each(group: dist.ProcessGroup, word: int, device: torch.device) -> list[int]:
    """Every rank's ``word`` in group order: one ``all_reduce`` of a word per rank.

    The same size in every format version, so a peer of another version is
    caught, not left waiting on a collective of another shape.
    """
    words = torch.zeros(group.size(), dtype=torch.int64)
    words[dist.get_rank(group)] = word
    words = words.to(device)
    try:
        dist.all_reduce(words, group=group)
    except RuntimeError as cause:
        what = "did not take part in the group's first step"
        raise lost(group_label(group), None, what, cause) from cause
    found: list[int] = words.tolist()
    return found
