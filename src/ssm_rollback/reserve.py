"""How many snapshot slots each sequence gets: state sizes from model configs, depth from memory.

Two questions a scheduler answers before it allocates anything:

1. *How big is one snapshot?* ``state_spec_from_hf_config`` reads a Hugging
   Face ``config.json`` and lists every SSM layer's state tensors per
   sequence - the way vLLM / SGLang store them (``layout="engine"``: conv
   state with ``conv_kernel - 1`` columns, sharded over tensor-parallel
   ranks, groups replicated when they do not divide by ``tp_size``) or the
   way ``transformers`` caches do (``layout="transformers"``: ``conv_kernel``
   columns, one rank).
2. *How many can it afford?* ``decode_rollback_ring_slots`` turns free memory
   into a ring depth: ``fit = free_bytes // (max_sequences *
   bytes_per_snapshot)``, ``slots = min(max_slots, fit)``; a ``--ring-slots``
   flag (``override``) beats the ``SSM_ROLLBACK_RING_SLOTS`` variable, which
   beats the policy.

The core never imports torch: dtypes are names (``"bfloat16"``).
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Final, Literal, TypeAlias

import attrs

from ._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    check_non_negative_int,
    describe,
)

__all__ = [
    "DEFAULT_MAX_SLOTS",
    "ENV_VAR",
    "SHIPPED_MODELS",
    "SUPPORTED_MODEL_TYPES",
    "DepthRule",
    "RingDepth",
    "SsmLayerSpec",
    "SsmStateSpec",
    "StateTensorSpec",
    "decode_rollback_ring_slots",
    "shipped_config",
    "state_spec_from_hf_config",
]

#: Slots per sequence when memory is plentiful.
DEFAULT_MAX_SLOTS: Final = 8
#: The environment variable that overrides the policy (the flag beats it).
ENV_VAR: Final = "SSM_ROLLBACK_RING_SLOTS"

Layout: TypeAlias = Literal["engine", "transformers"]
LayerKind: TypeAlias = Literal["mamba1", "mamba2", "gated_delta_net", "short_conv"]

_DTYPE_BYTES: Final[Mapping[str, int]] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
_DTYPE_ALIASES: Final[Mapping[str, str]] = {
    "float": "float32",
    "fp32": "float32",
    "half": "float16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "double": "float64",
}


#: More layers than any published model by far; beyond it a count is a typo, and listing
#: that many layers would hang rather than fail.
_MAX_LAYERS: Final = 100_000
#: A causal conv of width 1 keeps no past columns: the engines would hold an empty state.
_MIN_CONV_KERNEL: Final = 2


def _check_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"'{name}' must be an int >= 1, got {describe(value)}")
    if value < 1:
        raise InvalidArgumentError(f"'{name}' must be an int >= 1, got {value!r}")
    return int(value)


# -- the spec -------------------------------------------------------------------------------
# The validators make a spec of zero or negative bytes impossible to build, so every consumer
# may divide by ``bytes_per_snapshot``.


def _check_shape(_: object, attribute: attrs.Attribute[tuple[int, ...]], value: object) -> None:
    if (
        not isinstance(value, tuple)
        or not value
        or any(isinstance(size, bool) or not isinstance(size, int) or size < 1 for size in value)
    ):
        raise InvalidArgumentError(
            f"'{attribute.name}' must be a non-empty tuple of ints >= 1, got {value!r}"
        )


def _check_dtype(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or value not in _DTYPE_BYTES:
        raise InvalidArgumentError(
            f"'{attribute.name}' must be one of {', '.join(sorted(_DTYPE_BYTES))}, got {value!r}"
        )


def _check_non_empty(
    _: object, attribute: attrs.Attribute[tuple[object, ...]], value: object
) -> None:
    if not isinstance(value, tuple) or not value:
        raise InvalidArgumentError(f"'{attribute.name}' must be a non-empty tuple, got {value!r}")


@attrs.frozen
class StateTensorSpec:
    """One state tensor of one layer, for one sequence on one rank."""

    name: str
    shape: tuple[int, ...] = attrs.field(validator=_check_shape)
    dtype: str = attrs.field(validator=_check_dtype)

    @property
    def nbytes(self) -> int:
        """Bytes of this tensor for one sequence."""
        count = 1
        for size in self.shape:
            count *= size
        return count * _DTYPE_BYTES[self.dtype]


@attrs.frozen
class SsmLayerSpec:
    """The recurrent state of one SSM layer."""

    index: int
    kind: LayerKind
    tensors: tuple[StateTensorSpec, ...] = attrs.field(validator=_check_non_empty)

    @property
    def nbytes(self) -> int:
        """Bytes of this layer's state for one sequence."""
        return sum(t.nbytes for t in self.tensors)


@attrs.frozen
class SsmStateSpec:
    """Every SSM layer's state tensors per sequence, and what one snapshot slot costs."""

    model_type: str
    layout: Layout
    tp_size: int
    num_layers: int
    layers: tuple[SsmLayerSpec, ...] = attrs.field(validator=_check_non_empty)

    @property
    def bytes_per_snapshot(self) -> int:
        """One slot: all SSM layers of one sequence on one tensor-parallel rank."""
        return sum(layer.nbytes for layer in self.layers)


# -- reading configs -------------------------------------------------------------------------


def _load(config: Mapping[str, object] | str | os.PathLike[str]) -> Mapping[str, object]:
    if isinstance(config, Mapping):
        return config
    if not isinstance(config, str | os.PathLike):
        raise InvalidArgumentTypeError(
            f"'config' must be a config.json mapping or a path, got {type(config).__name__}"
        )
    if not os.fspath(config):  # Path("") is the working directory: never what was meant
        raise InvalidArgumentError("'config' must be a config.json mapping or a path, got ''")
    path = Path(config)
    if path.is_dir():
        path = path / "config.json"
    try:
        raw = path.read_bytes()
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise InvalidArgumentError(
            f"'config' must be a readable file, got {path}: {error}"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidArgumentError(f"'config' must be UTF-8, got {path}: {error}") from None
    try:
        data = json.loads(text)
    # ValueError covers JSONDecodeError and integers past Python's digit limit; deep nesting
    # overflows the decoder's stack.
    except (ValueError, RecursionError) as error:
        raise InvalidArgumentError(f"'config' must be JSON, got {path}: {error}") from None
    if not isinstance(data, dict):
        raise InvalidArgumentError(
            f"'config' must hold a JSON object, got a JSON {type(data).__name__} in {path}"
        )
    return data


@attrs.frozen
class _Fields:
    """Typed, named access to a config's fields, with errors that name the field."""

    data: Mapping[str, object]
    model_type: str

    def has(self, name: str) -> bool:
        return self.data.get(name) is not None

    def name(self, *names: str) -> str:
        """The first of ``names`` the config has (the one ``int`` reads), else the first."""
        return next((name for name in names if self.has(name)), names[0])

    def int(self, *names: str, default: int | None = None, minimum: int = 1) -> int:
        """The first of ``names`` present, an ``int >= minimum``; sizes default to ``>= 1``."""
        for name in names:
            value = self.data.get(name)
            if value is not None:
                expected = f"config field '{name}' must be an int >= {minimum} ({self.model_type})"
                if isinstance(value, bool) or not isinstance(value, int):
                    raise InvalidArgumentTypeError(f"{expected}, got {describe(value)}")
                if value < minimum:
                    raise InvalidArgumentError(f"{expected}, got {value!r}")
                return int(value)
        if default is not None:
            return default
        raise InvalidArgumentError(
            f"config field '{names[0]}' is missing ({self.model_type} needs it)"
        )

    def list(self, name: str) -> list[object] | None:
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, list):
            raise InvalidArgumentTypeError(
                f"config field '{name}' must be a list ({self.model_type}), got {describe(value)}"
            )
        return value

    def str(self, name: str) -> str | None:
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise InvalidArgumentTypeError(
                f"config field '{name}' must be a string ({self.model_type}), got {describe(value)}"
            )
        return value


def _dtype_name(value: object, source: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(
            f"'{source}' must be a dtype name such as 'bfloat16', got {describe(value)}"
        )
    name = value.removeprefix("torch.").lower()
    name = _DTYPE_ALIASES.get(name, name)
    if name not in _DTYPE_BYTES:
        raise InvalidArgumentError(
            f"'{source}' must be one of {', '.join(sorted(_DTYPE_BYTES))}, got {value!r}"
        )
    return name


def _divide(value: int, tp_size: int, field: str, model_type: str) -> int:
    if value % tp_size:
        raise InvalidArgumentError(
            f"'tp_size' {tp_size} must divide config field '{field}' = {value} ({model_type})"
        )
    return value // tp_size


# -- which layers are SSM, per model type ---------------------------------------------------

_ATTENTION_NAMES: Final = frozenset({"attention", "full_attention", "*", "sliding_attention"})
_SSM_NAMES: Final = frozenset({"mamba", "linear_attention", "m", "conv", "hybrid"})
_OTHER_NAMES: Final = frozenset({"mlp", "moe", "-", "e", "dummy"})


def _pattern_ssm_layers(pattern: list[object], field: str, model_type: str) -> list[int]:
    if not pattern:
        raise InvalidArgumentError(
            f"config field '{field}' must list >= 1 layers ({model_type}), got {pattern!r}"
        )
    layers = []
    for index, kind in enumerate(pattern):
        name = str(kind).lower()
        if name in _SSM_NAMES:
            layers.append(index)
        elif name not in _ATTENTION_NAMES | _OTHER_NAMES:
            raise InvalidArgumentError(
                f"config field '{field}' has an unknown layer kind {kind!r} at {index} "
                f"({model_type})"
            )
    return layers


def _from_pattern(f: _Fields, *fields: str) -> list[int] | None:
    for field in fields:
        value = f.data.get(field)
        if isinstance(value, str):  # the Hub's "M-M*-..." strings
            return _pattern_ssm_layers(list(value), field, f.model_type)
        pattern = f.list(field)
        if pattern is not None:
            return _pattern_ssm_layers(pattern, field, f.model_type)
    return None


_PATTERN_FIELDS: Final = ("layers_block_type", "hybrid_override_pattern", "layer_types")


def _num_layers(f: _Fields) -> int:
    """The layer count, checked against every other field that states it."""
    counts = [(name, f.int(name)) for name in ("num_hidden_layers", "n_layer") if f.has(name)]
    patterns = [
        (field, len(pattern))
        for field in _PATTERN_FIELDS
        if isinstance(pattern := f.data.get(field), list | str)
    ]
    if counts:
        source, count = counts[0]
        stated = f"'{source}' = {count}"
    elif patterns:  # transformers derives the count from the pattern
        source, count = patterns[0]
        stated = f"'{source}' has {count}"
        if count == 0:
            raise InvalidArgumentError(
                f"config field '{source}' must list >= 1 layers ({f.model_type}), got []"
            )
    else:
        return f.int("num_hidden_layers")  # raises, naming the field
    if count > _MAX_LAYERS:
        raise InvalidArgumentError(
            f"config field '{source}' must be at most {_MAX_LAYERS} layers ({f.model_type}), "
            f"got {count}"
        )
    for name, other in counts[1:]:
        if other != count:
            raise InvalidArgumentError(
                f"config field '{name}' = {other} disagrees with {stated} ({f.model_type})"
            )
    for field, length in patterns:
        if length != count:
            raise InvalidArgumentError(
                f"config field '{field}' has {length} entries, but {stated} "
                f"({f.model_type}): a layer pattern has one entry per layer"
            )
    return count


def _all_layers(f: _Fields) -> list[int]:
    return list(range(_num_layers(f)))


def _jamba_layers(f: _Fields) -> list[int]:
    pattern = _from_pattern(f, "layers_block_type", "layer_types")
    if pattern is not None:
        return pattern
    period = f.int("attn_layer_period")
    offset = f.int("attn_layer_offset", minimum=0)
    if offset >= period:  # no layer would be attention: the period is not what was meant
        raise InvalidArgumentError(
            f"config field 'attn_layer_offset' must be less than 'attn_layer_period' = {period} "
            f"({f.model_type}), got {offset}"
        )
    return [i for i in _all_layers(f) if i % period != offset]


def _bamba_layers(f: _Fields) -> list[int]:
    pattern = _from_pattern(f, "layer_types", "layers_block_type")
    if pattern is not None:
        return pattern
    attention = _layer_indices(f, "attn_layer_indices")
    return [i for i in _all_layers(f) if i not in attention]


def _layer_indices(f: _Fields, name: str) -> set[int]:
    count = _num_layers(f)
    indices = set()
    for value in f.list(name) or []:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgumentTypeError(
                f"config field '{name}' must be a list of ints ({f.model_type}), "
                f"got {describe(value)} in it"
            )
        if not 0 <= value < count:
            raise InvalidArgumentError(
                f"config field '{name}' must hold layer indices in [0, {count}) "
                f"({f.model_type}), got {value}"
            )
        indices.add(int(value))
    return indices


def _nemotron_layers(f: _Fields) -> list[int]:
    layers = _from_pattern(f, "layers_block_type", "hybrid_override_pattern")
    if layers is None:
        raise InvalidArgumentError(
            f"config field 'hybrid_override_pattern' is missing ({f.model_type} needs it, or "
            f"'layers_block_type')"
        )
    return layers


def _granite_layers(f: _Fields) -> list[int]:
    layers = _from_pattern(f, "layer_types", "layers_block_type")
    if layers is None:
        raise InvalidArgumentError(
            f"config field 'layer_types' is missing ({f.model_type} needs it)"
        )
    return layers


def _zamba2_layers(f: _Fields) -> list[int]:
    # Every Zamba2 layer has a Mamba-2 mixer; "hybrid" layers add the shared attention.
    return _all_layers(f)


def _qwen3_next_layers(f: _Fields) -> list[int]:
    layers = _from_pattern(f, "layer_types")
    if layers is not None:
        return layers
    interval = f.int("full_attention_interval", default=4)
    return [i for i in _all_layers(f) if (i + 1) % interval]


def _lfm2_layers(f: _Fields) -> list[int]:
    layers = _from_pattern(f, "layer_types")
    if layers is not None:
        return layers
    attention = _layer_indices(f, "full_attn_idxs")
    return [i for i in _all_layers(f) if i not in attention]


# -- state tensors per mixer kind ----------------------------------------------------------------


_Mixer: TypeAlias = Callable[["_Fields", int, Layout, str, str], tuple[StateTensorSpec, ...]]


def _conv(channels: int, kernel: int, layout: Layout, dtype: str) -> StateTensorSpec:
    """The conv state: the engines keep ``kernel - 1`` columns, transformers all ``kernel``."""
    return StateTensorSpec("conv", (channels, kernel - 1 if layout == "engine" else kernel), dtype)


def _mamba1(
    f: _Fields, tp: int, layout: Layout, conv_dtype: str, ssm_dtype: str
) -> tuple[StateTensorSpec, ...]:
    hidden = f.int("hidden_size", "d_model")
    expand = f.int("mamba_expand", "expand", default=2)
    intermediate = f.int("intermediate_size", default=expand * hidden)
    if f.model_type == "jamba":  # Jamba's intermediate_size is the MLP's, not the mixer's
        intermediate = expand * hidden
    inner = _divide(intermediate, tp, "intermediate_size", f.model_type)
    kernel = f.int("mamba_d_conv", "conv_kernel", minimum=_MIN_CONV_KERNEL)
    state = f.int("mamba_d_state", "state_size")
    return (
        _conv(inner, kernel, layout, conv_dtype),
        StateTensorSpec("ssm", (inner, state), ssm_dtype),
    )


_MAMBA2_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    "heads": ("mamba_num_heads", "mamba_n_heads", "n_mamba_heads", "num_heads"),
    "head_dim": ("mamba_head_dim", "mamba_d_head", "mamba_headdim", "head_dim"),
    "state": ("ssm_state_size", "mamba_d_state", "state_size"),
    "groups": ("n_groups", "mamba_n_groups", "mamba_ngroups"),
    "kernel": ("conv_kernel", "mamba_d_conv"),
}


def _mamba2(
    f: _Fields, tp: int, layout: Layout, conv_dtype: str, ssm_dtype: str
) -> tuple[StateTensorSpec, ...]:
    heads = f.int(*_MAMBA2_FIELDS["heads"])
    head_dim = f.int(*_MAMBA2_FIELDS["head_dim"])
    state = f.int(*_MAMBA2_FIELDS["state"])
    groups = f.int(*_MAMBA2_FIELDS["groups"], default=1)
    kernel = f.int(*_MAMBA2_FIELDS["kernel"], minimum=_MIN_CONV_KERNEL)
    intermediate = heads * head_dim
    if f.has("mamba_d_ssm"):  # Falcon-H1 names the mixer width separately
        intermediate = f.int("mamba_d_ssm")
    heads_field = f.name(*_MAMBA2_FIELDS["heads"])
    groups_field = f.name(*_MAMBA2_FIELDS["groups"])
    if heads % groups:
        raise InvalidArgumentError(
            f"config field '{groups_field}' = {groups} must divide '{heads_field}' = {heads} "
            f"({f.model_type}): each group serves whole heads"
        )
    local_heads = _divide(heads, tp, heads_field, f.model_type)
    if groups % tp:
        if groups > tp:  # replicating up to tp_size groups would drop some
            raise InvalidArgumentError(
                f"config field '{groups_field}' = {groups} and 'tp_size' = {tp} "
                f"({f.model_type}): the groups must divide by tp_size, or be fewer "
                f"(then every rank holds a replica)"
            )
        # vLLM / SGLang replicate the groups so every head shard has its group.
        groups = tp
    conv_dim = _divide(intermediate + 2 * groups * state, tp, "conv_dim", f.model_type)
    return (
        _conv(conv_dim, kernel, layout, conv_dtype),
        StateTensorSpec("ssm", (local_heads, head_dim, state), ssm_dtype),
    )


def _gated_delta_net(
    f: _Fields, tp: int, layout: Layout, conv_dtype: str, ssm_dtype: str
) -> tuple[StateTensorSpec, ...]:
    k_heads = f.int("linear_num_key_heads")
    v_heads = f.int("linear_num_value_heads")
    k_dim = f.int("linear_key_head_dim")
    v_dim = f.int("linear_value_head_dim")
    kernel = f.int("linear_conv_kernel_dim", minimum=_MIN_CONV_KERNEL)
    if v_heads % k_heads:
        raise InvalidArgumentError(
            f"config field 'linear_num_key_heads' = {k_heads} must divide "
            f"'linear_num_value_heads' = {v_heads} ({f.model_type}): each key head serves "
            f"whole value heads"
        )
    _divide(k_heads, tp, "linear_num_key_heads", f.model_type)
    local_v_heads = _divide(v_heads, tp, "linear_num_value_heads", f.model_type)
    conv_dim = _divide(2 * k_heads * k_dim + v_heads * v_dim, tp, "conv_dim", f.model_type)
    return (
        _conv(conv_dim, kernel, layout, conv_dtype),
        StateTensorSpec("recurrent", (local_v_heads, k_dim, v_dim), ssm_dtype),
    )


def _short_conv(
    f: _Fields, tp: int, layout: Layout, conv_dtype: str, ssm_dtype: str
) -> tuple[StateTensorSpec, ...]:
    hidden = _divide(f.int("hidden_size"), tp, "hidden_size", f.model_type)
    kernel = f.int("conv_L_cache", minimum=_MIN_CONV_KERNEL)
    return (_conv(hidden, kernel, layout, conv_dtype),)


_MIXERS: Final[Mapping[LayerKind, _Mixer]] = {
    "mamba1": _mamba1,
    "mamba2": _mamba2,
    "gated_delta_net": _gated_delta_net,
    "short_conv": _short_conv,
}

_MODEL_TYPES: Final[Mapping[str, tuple[LayerKind, Callable[[_Fields], list[int]]]]] = {
    "mamba": ("mamba1", _all_layers),
    "falcon_mamba": ("mamba1", _all_layers),
    "jamba": ("mamba1", _jamba_layers),
    "mamba2": ("mamba2", _all_layers),
    "bamba": ("mamba2", _bamba_layers),
    "nemotron_h": ("mamba2", _nemotron_layers),
    "falcon_h1": ("mamba2", _all_layers),  # attention and Mamba-2 side by side in every layer
    "granitemoehybrid": ("mamba2", _granite_layers),
    "zamba2": ("mamba2", _zamba2_layers),
    "qwen3_next": ("gated_delta_net", _qwen3_next_layers),
    "lfm2": ("short_conv", _lfm2_layers),
}

#: The model types ``state_spec_from_hf_config`` knows.
SUPPORTED_MODEL_TYPES: Final = tuple(sorted(_MODEL_TYPES))

#: Full-size configs shipped with the package, by name (``shipped_config``, ``plan --model``).
SHIPPED_MODELS: Final = (
    "falcon-h1-7b",
    "granite-4.0-h-small",
    "jamba-1.5-mini",
    "mamba2-2.7b",
    "nemotron-h-8b",
    "qwen3-next-80b-a3b",
)


def shipped_config(name: str) -> dict[str, object]:
    """The shipped ``config.json`` fields of a full-size model; ``_source`` says where from."""
    if name not in SHIPPED_MODELS:
        raise InvalidArgumentError(
            f"'name' must be one of {', '.join(SHIPPED_MODELS)}, got {name!r}"
        )
    text = resources.files("ssm_rollback").joinpath("configs", f"{name}.json").read_text("utf-8")
    data: dict[str, object] = json.loads(text)
    return data


def state_spec_from_hf_config(
    config: Mapping[str, object] | str | os.PathLike[str],
    *,
    tp_size: int = 1,
    dtype: str | None = None,
    layout: Layout = "engine",
) -> SsmStateSpec:
    """Every SSM layer's state tensors per sequence, from a Hugging Face ``config.json``.

    ``config`` is the parsed JSON or a path to it (or to its folder).
    ``dtype`` overrides the config's (``torch_dtype`` / ``dtype``, else
    ``bfloat16``); the SSM state honours ``mamba_ssm_cache_dtype`` where the
    config has one. Unknown model types, missing fields, a ``tp_size``
    that does not divide the heads and degenerate values (a zero size,
    kernel or period; a layer pattern whose length disagrees with the layer
    count; heads that the groups do not divide) raise ``InvalidArgumentError``
    naming the field: no config yields a zero or negative byte count.
    """
    data = _load(config)
    tp = _check_positive("tp_size", tp_size)
    if layout not in ("engine", "transformers"):
        raise InvalidArgumentError(f"'layout' must be 'engine' or 'transformers', got {layout!r}")
    if layout == "transformers" and tp != 1:
        raise InvalidArgumentError(
            f"'tp_size' must be 1 for layout 'transformers' (its caches hold one rank), got {tp}"
        )
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in _MODEL_TYPES:
        raise InvalidArgumentError(
            f"config field 'model_type' must be one of {', '.join(SUPPORTED_MODEL_TYPES)}, "
            f"got {model_type!r}"
        )
    f = _Fields(data, model_type)
    kind, ssm_layers = _MODEL_TYPES[model_type]
    # The pattern's own faults (an unknown kind, no SSM layer) say more than its length.
    layers = ssm_layers(f)
    if not layers:
        raise InvalidArgumentError(
            f"config has no SSM layers ({model_type}): a pure-attention model needs no snapshots"
        )
    num_layers = _num_layers(f)
    if dtype is not None:
        conv_dtype = _dtype_name(dtype, "dtype")
    else:
        named = f.str("torch_dtype") or f.str("dtype")
        conv_dtype = _dtype_name(named, "torch_dtype") if named else "bfloat16"
    ssm_named = f.str("mamba_ssm_cache_dtype")
    ssm_dtype = _dtype_name(ssm_named, "mamba_ssm_cache_dtype") if ssm_named else conv_dtype
    tensors = _MIXERS[kind](f, tp, layout, conv_dtype, ssm_dtype)
    return SsmStateSpec(
        model_type=model_type,
        layout=layout,
        tp_size=tp,
        num_layers=num_layers,
        layers=tuple(SsmLayerSpec(i, kind, tensors) for i in layers),
    )


# -- the depth policy ------------------------------------------------------------------------------


class DepthRule(enum.Enum):
    """What decided the ring depth."""

    #: The ``override`` argument (the ``--ring-slots`` flag).
    OVERRIDE = "override"
    #: The ``SSM_ROLLBACK_RING_SLOTS`` environment variable.
    ENV = "env"
    #: Memory allows at least ``max_slots``: the maximum.
    MAXIMUM = "maximum"
    #: Memory allows fewer than ``max_slots``: as many as fit.
    MEMORY = "memory"


@attrs.frozen
class RingDepth:
    """The chosen ring depth and what it costs."""

    slots: int
    rule: DepthRule
    bytes_per_slot: int
    bytes_total: int
    #: How many slots per sequence fit in ``free_bytes``.
    fit: int


def _parse_override(value: object, source: str) -> int:
    if isinstance(value, bool):
        raise InvalidArgumentTypeError(f"{source} must be an integer >= 0, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise InvalidArgumentError(f"{source} must be an integer >= 0, got {value}")
        return value
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise InvalidArgumentError(f"{source} must be an integer >= 0, got an empty string")
        # isdecimal alone admits other scripts' digits ("\u0663"), which no shell user meant.
        if not (text.isascii() and text.isdecimal()):
            raise InvalidArgumentError(f"{source} must be an integer >= 0, got {value!r}")
        try:
            return int(text)
        except ValueError:  # past Python's digit limit for int()
            raise InvalidArgumentError(
                f"{source} must be an integer >= 0, got a {len(text)}-digit string"
            ) from None
    raise InvalidArgumentTypeError(
        f"{source} must be an integer >= 0, got {value!r} of type {type(value).__name__}"
    )


def decode_rollback_ring_slots(
    spec: SsmStateSpec,
    *,
    max_sequences: int,
    free_bytes: int,
    max_slots: int = DEFAULT_MAX_SLOTS,
    override: int | str | None = None,
    env: Mapping[str, str] | None = None,
) -> RingDepth:
    """Snapshot slots per sequence: the flag, else the environment, else what memory allows.

    Without overrides ``slots = min(max_slots, fit)`` with ``fit =
    free_bytes // (max_sequences * spec.bytes_per_snapshot)`` (headroom is the
    caller's business). ``override`` (the CLI flag) beats
    ``SSM_ROLLBACK_RING_SLOTS`` in ``env`` (default ``os.environ``); either
    may exceed ``max_slots`` but must fit in ``free_bytes``. A malformed or
    unaffordable override raises ``InvalidArgumentError`` naming its source;
    so does any other argument of the wrong type or range (``env`` must be a
    mapping, ``max_sequences`` at least 1).
    """
    if not isinstance(spec, SsmStateSpec):
        raise InvalidArgumentTypeError(f"'spec' must be an SsmStateSpec, got {type(spec).__name__}")
    sequences = _check_positive("max_sequences", max_sequences)
    free = check_non_negative_int("free_bytes", free_bytes)
    maximum = check_non_negative_int("max_slots", max_slots)
    environment = os.environ if env is None else env
    if not isinstance(environment, Mapping):
        raise InvalidArgumentTypeError(
            f"'env' must be a mapping of environment variables such as os.environ, "
            f"got {describe(env)}"
        )
    per_slot = spec.bytes_per_snapshot
    # The spec's validators already refuse this; a spec built around them must not divide by 0.
    if per_slot <= 0:
        raise InvalidArgumentError(
            f"'spec' must describe at least one byte per snapshot, got {per_slot} "
            f"({spec.model_type}, {len(spec.layers)} SSM layers)"
        )
    fit = free // (sequences * per_slot)

    chosen: tuple[int, DepthRule, str] | None = None
    if override is not None:
        chosen = (
            _parse_override(override, "'override' (the --ring-slots flag)"),
            DepthRule.OVERRIDE,
            "--ring-slots",
        )
    elif ENV_VAR in environment:
        chosen = (_parse_override(environment[ENV_VAR], ENV_VAR), DepthRule.ENV, ENV_VAR)
    if chosen is not None:
        slots, rule, source = chosen
        if slots > fit:
            raise InvalidArgumentError(
                f"{source} = {slots} does not fit: {slots} slots x {sequences} sequences x "
                f"{per_slot} bytes = {slots * sequences * per_slot} bytes, but free_bytes is "
                f"{free} (at most {fit} slots fit)"
            )
    elif fit >= maximum:
        slots, rule = maximum, DepthRule.MAXIMUM
    else:
        slots, rule = fit, DepthRule.MEMORY
    return RingDepth(slots, rule, per_slot, slots * sequences * per_slot, fit)
