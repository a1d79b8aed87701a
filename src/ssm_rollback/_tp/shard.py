"""Shard pools for tensor-parallel ranks: each rank's share of the SSM state, split as vLLM does.

``ssm_rollback.distributed`` re-exports ``shard_live_states``, ``shard_of``
and ``shard_pool``; this module holds their arithmetic.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import attrs
import torch

from .._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvariantError,
    check_non_negative_int,
    describe,
    shown,
)
from ..backends._torch_checks import SUPPORTED_DTYPES, check_live_states
from ..backends.torch import TorchSnapshotPool
from ..reserve import config_fields, state_spec_from_hf_config
from ..reserve._families import MAMBA2_GROUPS

__all__ = ["Config", "shard_live_states", "shard_of", "shard_pool"]


Config = Mapping[str, object] | str | os.PathLike[str]


@attrs.frozen
class _Segment:
    """A run of channels (or heads) of the full state, and how ranks split it."""

    size: int
    groups: int = 0  # > 0: ``groups`` groups, replicated when they do not divide tp_size
    whole: bool = False  # every rank holds all of it (a replicated state)


def _segments(config: Config, tensor: str) -> tuple[str, list[_Segment]]:
    """The model's layer kind and the segments of ``tensor``'s first per-sequence dim."""
    spec = state_spec_from_hf_config(config)  # checks the config before anything reads it
    # Read as sizing reads them: a field the config omits takes the model type's default
    # (Nemotron-H's n_groups is 8), so shards and sizes never disagree.
    fields = config_fields(config)
    layer = spec.layers[0]
    shapes = {t.name: t.shape for t in layer.tensors}
    if tensor not in shapes:
        raise InvalidArgumentError(
            f"'tensor' must be one of {sorted(shapes)} ({spec.model_type}), got {shown(tensor)}"
        )
    channels = shapes[tensor][0]
    if layer.kind == "compressed_conv_attention":
        # ZAYA's CCA projections are ReplicatedLinear in vLLM: sizing gives every rank it all.
        return layer.kind, [_Segment(channels, whole=True)]
    if layer.kind == "mamba2" and tensor == "conv":
        groups = fields.int(*MAMBA2_GROUPS)
        state = shapes["ssm"][2]
        inner = channels - 2 * groups * state
        # x, then B and C: one state-sized block per group each
        return layer.kind, [_Segment(inner), *[_Segment(groups * state, groups)] * 2]
    if layer.kind == "gated_delta_net" and tensor == "conv":
        heads, key_dim, value_dim = shapes["recurrent"]
        keys = fields.int("linear_num_key_heads") * key_dim
        return layer.kind, [_Segment(keys), _Segment(keys), _Segment(heads * value_dim)]
    if layer.kind == "kimi_delta_attention" and tensor == "conv":
        # q, k and v: three convs packed in one state, each split by heads (vLLM's fused
        # conv1d weight loader and its conv_state.split(local_projection_size))
        return layer.kind, [_Segment(channels // 3)] * 3
    return layer.kind, [_Segment(channels)]


def _slices(segments: list[_Segment], rank: int, tp: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of rank ``rank``'s share of each segment, in the full dim."""
    out = []
    start = 0
    for seg in segments:
        if seg.whole:
            out.append((start, start + seg.size))
        elif seg.groups and seg.groups % tp:
            if tp % seg.groups:
                raise InvalidArgumentError(
                    f"'tp_size' {tp} must be a multiple of the {seg.groups} groups when they do "
                    f"not divide it (each rank's heads must share one group)"
                )
            width = seg.size // seg.groups  # one group per rank, replicated
            group = rank * seg.groups // tp
            out.append((start + group * width, start + (group + 1) * width))
        else:
            width = seg.size // tp
            out.append((start + rank * width, start + (rank + 1) * width))
        start += seg.size
    return out


def shard_of(
    full: torch.Tensor, config: Config, *, tensor: str, rank: int, tp_size: int, dim: int
) -> torch.Tensor:
    """Rank ``rank``'s shard of a full (one-rank) state tensor, split as vLLM splits it.

    ``tensor`` names the state (``"conv"``, ``"ssm"``, ``"recurrent"``, as in
    ``state_spec_from_hf_config``) and ``dim`` is ``full``'s channel (or head)
    dim. Heads and channels split evenly, each block of a packed conv state on
    its own (Mamba-2's ``x``, ``B``, ``C``; a gated delta-net's or KDA's
    ``q``, ``k``, ``v``); Mamba-2's ``B`` and ``C`` groups are replicated (the
    group of the rank's heads) when they do not divide ``tp_size``, and a
    state vLLM replicates (ZAYA's) is whole on every rank. Returns a new
    tensor.
    """
    tp = check_non_negative_int("tp_size", tp_size)
    rank = check_non_negative_int("rank", rank)
    if not 0 <= rank < tp:
        raise InvalidArgumentError(f"'rank' must be in [0, tp_size {tp}), got {shown(rank)}")
    if not isinstance(full, torch.Tensor):
        raise InvalidArgumentTypeError(f"'full' must be a torch.Tensor, got {describe(full)}")
    dim = check_non_negative_int("dim", dim)
    if dim >= full.dim():
        raise InvalidArgumentError(
            f"'dim' must be a dim of 'full' (shape {tuple(full.shape)}), got {shown(dim)}"
        )
    if type(tensor) is not str:
        raise InvalidArgumentTypeError(f"'tensor' must be a state's name, got {describe(tensor)}")
    kind, segments = _segments(config, tensor)
    if full.shape[dim] != sum(s.size for s in segments):
        raise InvalidArgumentError(
            f"'full' must have the one-rank {tensor} size {sum(s.size for s in segments)} on "
            f"dim {dim} ({kind}), got shape {tuple(full.shape)}"
        )
    slices = _slices(segments, rank, tp)
    per_rank = {
        t.name: t.shape[0] for t in state_spec_from_hf_config(config, tp_size=tp).layers[0].tensors
    }
    if sum(b - a for a, b in slices) != per_rank[tensor]:  # pragma: no cover - reserve disagrees
        raise InvariantError(
            f"the {kind} {tensor} shard must have reserve's per-rank size {per_rank[tensor]}, "
            f"got slices {slices}"
        )
    return torch.cat([full.narrow(dim, a, b - a) for a, b in slices], dim=dim)


def _torch_dtype(name: str) -> torch.dtype:
    """The torch dtype ``name`` says, one a pool keeps state in (``shard_pool`` takes it)."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise InvalidArgumentError(f"'dtype' must name a torch dtype, got {shown(name)}")
    if dtype not in SUPPORTED_DTYPES:
        kept = ", ".join(sorted(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES))
        raise InvalidArgumentError(
            f"'dtype' must be one a pool keeps state in ({kept}), got {shown(name)}: "
            f"shard_pool would refuse the state allocated"
        )
    return dtype


def shard_live_states(
    config: Config,
    *,
    num_sequences: int,
    tp_size: int,
    dtype: str | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, ...]:
    """Zeroed live state for one rank: per state tensor, ``[ssm_layers, num_sequences, *shape]``.

    The shapes are ``state_spec_from_hf_config(config, tp_size=tp_size)``'s per-rank
    ones, in its order (``conv`` first); rows on dim 1, so a pool over them
    takes ``batch_dim=1``. An engine that allocates its own state passes that
    to ``shard_pool`` instead.
    """
    rows = check_non_negative_int("num_sequences", num_sequences)
    spec = state_spec_from_hf_config(config, tp_size=tp_size, dtype=dtype)
    try:
        where = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError) as error:
        raise InvalidArgumentError(
            f"'device' must name a torch device, got {shown(device)}"
        ) from error
    layers = len(spec.layers)
    try:
        return tuple(
            torch.zeros((layers, rows, *t.shape), dtype=_torch_dtype(t.dtype), device=where)
            for t in spec.layers[0].tensors
        )
    except (RuntimeError, AssertionError, MemoryError, TypeError) as error:
        # No such device, no such memory, or a row count past int64 (torch's TypeError).
        first_line = next(iter(str(error).splitlines()), "")  # not torch's C++ frames
        raise InvalidArgumentError(
            f"'num_sequences' {shown(rows)} rows of live state on 'device' {where} could not "
            f"be allocated: {type(error).__name__}: {first_line}"
        ) from error


def shard_pool(
    live_states: Sequence[torch.Tensor],
    config: Config,
    slots_per_sequence: int,
    *,
    tp_size: int,
    intermediate_states: Sequence[torch.Tensor] | None = None,
    shared_slots: int = 0,
) -> TorchSnapshotPool:
    """This rank's ``TorchSnapshotPool`` over its shard of the live state, shapes checked.

    ``live_states`` is one tensor per state tensor of the model's SSM
    layers, ``[ssm_layers, rows, *shape]`` with the per-rank shape that
    ``state_spec_from_hf_config(config, tp_size=tp_size)`` gives (as
    ``shard_live_states`` allocates them); a shape that differs raises
    ``InvalidArgumentError`` naming the tensor. ``intermediate_states`` and
    ``shared_slots`` (the shared slots of prefix snapshots, SPEC 13: every
    rank holds its shard of each) as for ``TorchSnapshotPool``.
    """
    check_live_states(live_states, 1)  # tensors, one device, rows on dim 1: before any shape
    spec = state_spec_from_hf_config(config, tp_size=tp_size)
    expected = [(len(spec.layers), *t.shape) for t in spec.layers[0].tensors]
    names = [t.name for t in spec.layers[0].tensors]
    if len(live_states) != len(expected):
        raise InvalidArgumentError(
            f"'live_states' must hold {len(expected)} tensors ({', '.join(names)}), got "
            f"{len(live_states)}"
        )
    for i, (tensor, shape) in enumerate(zip(live_states, expected, strict=True)):
        got = (tensor.shape[0], *tensor.shape[2:]) if tensor.dim() >= 2 else tuple(tensor.shape)
        if got != shape:
            raise InvalidArgumentError(
                f"'live_states[{i}]' ({names[i]}) must be [{shape[0]}, rows, "
                f"{', '.join(map(str, shape[1:]))}] for tp_size {tp_size}, got "
                f"{list(tensor.shape)}"
            )
    return TorchSnapshotPool(
        live_states,
        slots_per_sequence,
        batch_dim=1,
        intermediate_states=intermediate_states,
        shared_slots=shared_slots,
    )
