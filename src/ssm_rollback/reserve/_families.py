"""Per-family shape rules: what state one layer keeps, per sequence and rank.

A family rule reads the mixer's sizes (through ``Fields``, which supplies the
``transformers`` class defaults) and returns a ``MixerShape``: the conv
channels and kernel, and the recurrent state's shape, already divided over
the tensor-parallel ranks. ``layer_tensors`` then lays that out the way a
layout stores it, speculative buffers included. The engines' rules cited are
vLLM's ``MambaStateShapeCalculator`` (``mamba_utils.py``) and SGLang's
``Mamba2StateShape.create`` (``configs/mamba_utils.py``) with its
``MambaPool`` (``mem_cache/memory_pool.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, Literal, TypeAlias

import attrs

from .._errors import InvalidArgumentError
from ._fields import Fields, divide
from ._spec import LayerKind, StateTensorSpec

__all__ = ["FAMILIES", "MAMBA2_GROUPS", "MixerShape", "layer_tensors"]

#: A causal conv of width 1 keeps no past columns: the engines would hold an empty state.
MIN_CONV_KERNEL: Final = 2

#: How a Mamba-2 model type names its mixer width: ``heads * head_dim`` (Nemotron-H),
#: ``mamba_d_ssm`` (Falcon-H1) or ``expand * hidden_size`` (the rest).
Width: TypeAlias = Literal["heads", "d_ssm", "expand"]


@attrs.frozen
class MixerShape:
    """One layer's state per sequence and rank, before a layout lays it out."""

    conv_channels: int
    kernel: int
    #: ``"ssm"`` or ``"recurrent"``; ``None`` for a conv-only mixer.
    state_name: str | None
    state: tuple[int, ...]
    #: vLLM widens this conv state by the draft tokens (Mamba-1's rule takes no ``num_spec``).
    widens_conv: bool = True
    #: Conv columns every layout keeps, where the mixer's history is not ``kernel - 1`` vs
    #: ``kernel`` (ZAYA's two stacked convs: ``cca_time0 - 1 + cca_time1 - 1`` everywhere).
    columns: int | None = None


def _mamba1(f: Fields, tp: int, width: Width) -> MixerShape:
    hidden = f.int("hidden_size", "d_model")
    expand = f.int("mamba_expand", "expand")
    intermediate = f.int("intermediate_size", default=expand * hidden)
    if f.model_type == "jamba":  # Jamba's intermediate_size is the MLP's, not the mixer's
        intermediate = expand * hidden
    inner = divide(intermediate, tp, "intermediate_size", f.model_type)
    kernel = f.int("mamba_d_conv", "conv_kernel", minimum=MIN_CONV_KERNEL)
    state = f.int("mamba_d_state", "state_size")
    return MixerShape(inner, kernel, "ssm", (inner, state), widens_conv=False)


_MAMBA2_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    "heads": ("mamba_num_heads", "mamba_n_heads", "n_mamba_heads", "num_heads"),
    "head_dim": ("mamba_head_dim", "mamba_d_head", "mamba_headdim", "head_dim"),
    "state": ("ssm_state_size", "mamba_d_state", "state_size"),
    "groups": ("n_groups", "mamba_n_groups", "mamba_ngroups"),
    "kernel": ("conv_kernel", "mamba_d_conv"),
    "expand": ("mamba_expand", "expand"),
}


#: The names a config gives the Mamba-2 group count, in the order sizing reads them.
MAMBA2_GROUPS: Final = _MAMBA2_FIELDS["groups"]


def _mamba2_width(f: Fields, width: Width, heads: int, head_dim: int) -> int:
    if width == "heads":
        return heads * head_dim
    expand = f.int(*_MAMBA2_FIELDS["expand"])
    if width == "d_ssm" and (f.has("mamba_d_ssm") or "mamba_d_ssm" not in f.data):
        return f.int("mamba_d_ssm")  # FalconH1Config: an explicit null means expand * hidden
    return expand * f.int("hidden_size")


def _mamba2_head_dim(f: Fields, width: Width, heads: int) -> int:
    names = _MAMBA2_FIELDS["head_dim"]
    if any(f.has(name) for name in names) and f.data.get("mamba_d_head") != "auto":
        return f.int(*names)
    # FalconH1Config's "auto" and Zamba2Config: the mixer width over the heads
    if f.model_type == "falcon_h1":
        return _mamba2_width(f, width, heads, 1) // heads
    if f.model_type == "zamba2":
        return f.int(*_MAMBA2_FIELDS["expand"]) * f.int("hidden_size") // heads
    return f.int(*names)


def _mamba2(f: Fields, tp: int, width: Width) -> MixerShape:
    heads = f.int(*_MAMBA2_FIELDS["heads"])
    head_dim = _mamba2_head_dim(f, width, heads)
    state = f.int(*_MAMBA2_FIELDS["state"])
    groups = f.int(*_MAMBA2_FIELDS["groups"])
    kernel = f.int(*_MAMBA2_FIELDS["kernel"], minimum=MIN_CONV_KERNEL)
    intermediate = _mamba2_width(f, width, heads, head_dim)
    heads_field = f.name(*_MAMBA2_FIELDS["heads"])
    groups_field = f.name(*_MAMBA2_FIELDS["groups"])
    if width != "heads" and heads * head_dim != intermediate:
        raise InvalidArgumentError(
            f"config fields '{heads_field}' = {heads} x '{f.name(*_MAMBA2_FIELDS['head_dim'])}' "
            f"= {head_dim} must equal the mixer width {intermediate} ({f.model_type})"
        )
    if heads % groups:
        raise InvalidArgumentError(
            f"config field '{groups_field}' = {groups} must divide '{heads_field}' = {heads} "
            f"({f.model_type}): each group serves whole heads"
        )
    local_heads = divide(heads, tp, heads_field, f.model_type)
    if groups % tp:
        # vLLM's MambaMixer2 asserts n_groups % tp == 0 or n_groups == 1; a single group is
        # replicated so every head shard has it (extra_groups_for_head_shards).
        if groups != 1:
            raise InvalidArgumentError(
                f"config field '{groups_field}' = {groups} and 'tp_size' = {tp} "
                f"({f.model_type}): the groups must divide by tp_size, or be a single group "
                f"(then every rank holds a replica)"
            )
        groups = tp
    conv = divide(intermediate + 2 * groups * state, tp, "conv_dim", f.model_type)
    return MixerShape(conv, kernel, "ssm", (local_heads, head_dim, state))


def _olmo_hybrid_sizes(f: Fields) -> tuple[int, int, int, int]:
    """OlmoHybridConfig's derived defaults: heads from the attention heads, dims from the width."""
    k_heads = f.int("linear_num_key_heads", "num_attention_heads")
    v_heads = f.int("linear_num_value_heads", "num_attention_heads")
    if f.has("linear_key_head_dim"):
        k_dim = f.int("linear_key_head_dim")
    else:  # int(0.75 * hidden_size / linear_num_key_heads), as __post_init__ computes it
        k_dim = int(0.75 * f.int("hidden_size") / k_heads)
        if k_dim < 1:
            raise InvalidArgumentError(
                f"config field 'linear_key_head_dim' is missing and 0.75 * 'hidden_size' / "
                f"'linear_num_key_heads' = {k_heads} rounds to 0 ({f.model_type})"
            )
    v_dim = f.int("linear_value_head_dim", default=2 * k_dim)
    return k_heads, v_heads, k_dim, v_dim


def _gated_delta_net(f: Fields, tp: int, width: Width) -> MixerShape:
    if f.model_type == "olmo_hybrid":
        k_heads, v_heads, k_dim, v_dim = _olmo_hybrid_sizes(f)
    else:
        k_heads = f.int("linear_num_key_heads")
        v_heads = f.int("linear_num_value_heads")
        k_dim = f.int("linear_key_head_dim")
        v_dim = f.int("linear_value_head_dim")
    kernel = f.int("linear_conv_kernel_dim", minimum=MIN_CONV_KERNEL)
    if v_heads % k_heads:
        raise InvalidArgumentError(
            f"config field 'linear_num_key_heads' = {k_heads} must divide "
            f"'linear_num_value_heads' = {v_heads} ({f.model_type}): each key head serves "
            f"whole value heads"
        )
    divide(k_heads, tp, "linear_num_key_heads", f.model_type)
    local_v_heads = divide(v_heads, tp, "linear_num_value_heads", f.model_type)
    conv = divide(2 * k_heads * k_dim + v_heads * v_dim, tp, "conv_dim", f.model_type)
    return MixerShape(conv, kernel, "recurrent", (local_v_heads, k_dim, v_dim))


def _kimi_delta_attention(f: Fields, tp: int, width: Width) -> MixerShape:
    # KimiDeltaAttention (kimi_linear, bailing_hybrid): q, k and v are each heads x head_dim
    # wide and share one short conv; the recurrent state is heads x head_dim x head_dim.
    # vLLM's kda_state_shape, SGLang's KimiLinearStateShape.create and the transformers
    # modeling code agree on these sizes. A Hub config names them head_dim,
    # num_attention_heads and short_conv_kernel_size (Bailing) or in linear_attn_config
    # (Kimi, lifted by ``normalize``); transformers writes linear_head_dim, linear_num_heads
    # and linear_conv_kernel_dim (BailingHybridConfig then reuses head_dim for the MLA rope).
    # Kimi's own head_dim and num_attention_heads are the MLA attention's, never the KDA's.
    hub = f.model_type == "bailing_hybrid"
    heads_names = ("linear_num_heads", "num_attention_heads") if hub else ("linear_num_heads",)
    dim_names = ("linear_head_dim", "head_dim") if hub else ("linear_head_dim",)
    kernel_names = ("linear_conv_kernel_dim", "short_conv_kernel_size")
    heads = f.int(*heads_names)
    head_dim = f.int(*dim_names)
    kernel = f.int(*kernel_names if hub else kernel_names[:1], minimum=MIN_CONV_KERNEL)
    local_heads = divide(heads, tp, f.name(*heads_names), f.model_type)
    state = (local_heads, head_dim, head_dim)
    return MixerShape(local_heads * 3 * head_dim, kernel, "recurrent", state)


def _compressed_conv_attention(f: Fields, tp: int, width: Width) -> MixerShape:
    # ZAYA's CCA: the raw q/k projections' history for two stacked convs (cca_time0 - 1 +
    # cca_time1 - 1 columns of (heads + kv heads) x head_dim channels) and the previous
    # token's delayed half of the values (kv heads x head_dim // 2). transformers' ZayaCCA and
    # vLLM's _cca_state_shapes agree; vLLM's CCA projections are ReplicatedLinear, so every
    # rank holds the whole state whatever tp_size is.
    heads = f.int("num_attention_heads")
    kv_heads = f.int("num_key_value_heads")
    head_dim = f.int("head_dim")
    time0 = f.int("cca_time0")
    time1 = f.int("cca_time1")
    history = time0 - 1 + time1 - 1
    if history < 1:
        raise InvalidArgumentError(
            f"config fields 'cca_time0' = {time0} and 'cca_time1' = {time1} keep no conv "
            f"history ({f.model_type}): at least one must be >= 2"
        )
    delayed = kv_heads * head_dim // 2
    if delayed < 1:
        raise InvalidArgumentError(
            f"config fields 'num_key_value_heads' x 'head_dim' = {kv_heads * head_dim} must be "
            f">= 2 ({f.model_type}): half of it is the delayed value state"
        )
    return MixerShape(
        (heads + kv_heads) * head_dim, history + 1, "delayed_value", (delayed,), columns=history
    )


def _short_conv(f: Fields, tp: int, width: Width) -> MixerShape:
    hidden = divide(f.int("hidden_size"), tp, "hidden_size", f.model_type)
    kernel = f.int("conv_L_cache", minimum=MIN_CONV_KERNEL)
    return MixerShape(hidden, kernel, None, ())


FAMILIES: Final[Mapping[LayerKind, Callable[[Fields, int, Width], MixerShape]]] = {
    "mamba1": _mamba1,
    "mamba2": _mamba2,
    "gated_delta_net": _gated_delta_net,
    "kimi_delta_attention": _kimi_delta_attention,
    "short_conv": _short_conv,
    "compressed_conv_attention": _compressed_conv_attention,
}


def layer_tensors(
    shape: MixerShape,
    layout: str,
    conv: tuple[str, str],
    ssm: tuple[str, str],
    draft_tokens: int,
) -> tuple[tuple[StateTensorSpec, ...], tuple[StateTensorSpec, ...]]:
    """The state tensors one slot holds, and the engine's speculative buffers.

    ``conv`` and ``ssm`` are ``(dtype, rule)``. The engines keep ``kernel -
    1`` conv columns, ``transformers`` all ``kernel``.
    """
    channels, kernel = shape.conv_channels, shape.kernel
    columns = kernel if layout == "transformers" else kernel - 1
    if shape.columns is not None:
        columns = shape.columns
    tensors = [StateTensorSpec("conv", (channels, columns), *conv)]
    if shape.state_name is not None:
        tensors.append(StateTensorSpec(shape.state_name, shape.state, *ssm))
    return tuple(tensors), _speculative(shape, layout, conv, ssm, draft_tokens)


def _speculative(
    shape: MixerShape, layout: str, conv: tuple[str, str], ssm: tuple[str, str], k: int
) -> tuple[StateTensorSpec, ...]:
    if k == 0 or layout == "transformers":  # transformers keeps no per-draft buffers
        return ()
    channels, kernel, out = shape.conv_channels, shape.kernel, []
    if layout == "vllm":
        # mamba2/gated_delta_net/short_conv_state_shape(num_spec=k): conv_kernel - 1 + k
        # columns; MambaSpec.max_memory_usage_bytes: 1 + num_speculative_blocks pages.
        wide = kernel - 1 + (k if shape.widens_conv else 0)
        if shape.widens_conv:
            out.append(StateTensorSpec("conv_draft_columns", (channels, k), *conv))
        out.append(StateTensorSpec("draft_blocks_conv", (k, channels, wide), *conv))
        if shape.state_name is not None:
            out.append(StateTensorSpec("draft_blocks_" + shape.state_name, (k, *shape.state), *ssm))
        return tuple(out)
    # SGLang's MambaPool: speculative_num_draft_tokens = k + 1 for a linear draft chain;
    # intermediate_ssm_state_cache holds one state per draft token, and on CUDA the
    # deduplicated intermediate conv window holds draft_tokens + (kernel - 1) - 1 columns.
    drafts = k + 1
    if shape.state_name is not None:
        out.append(
            StateTensorSpec("intermediate_" + shape.state_name, (drafts, *shape.state), *ssm)
        )
    out.append(StateTensorSpec("intermediate_conv_window", (channels, drafts + kernel - 2), *conv))
    return tuple(out)
