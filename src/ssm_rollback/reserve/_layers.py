"""Which layers of a model hold recurrent state, per model type's way of saying so."""

from __future__ import annotations

from typing import Final

from .._errors import InvalidArgumentError, InvalidArgumentTypeError, describe, shown
from ._fields import Fields

__all__ = [
    "MAX_LAYERS",
    "all_layers",
    "bailing_layers",
    "bailing_vllm_layers",
    "bamba_layers",
    "granite_layers",
    "jamba_layers",
    "kimi_layers",
    "lfm2_layers",
    "nemotron_layers",
    "num_layers",
    "olmo_hybrid_layers",
    "qwen3_next_layers",
    "zaya_layers",
]

#: More layers than any published model by far; beyond it a count is a typo, and listing
#: that many layers would hang rather than fail.
MAX_LAYERS: Final = 100_000

_ATTENTION_NAMES: Final = frozenset({"attention", "full_attention", "*", "sliding_attention"})
# ZAYA's "hybrid" and "hybrid_sliding" layers both keep CCA conv state beside their KV cache.
_SSM_NAMES: Final = frozenset(
    {"mamba", "linear_attention", "m", "conv", "hybrid", "hybrid_sliding"}
)
_OTHER_NAMES: Final = frozenset({"mlp", "moe", "-", "e", "dummy"})
_PATTERN_FIELDS: Final = ("layers_block_type", "hybrid_override_pattern", "layer_types")


def _pattern_ssm_layers(pattern: list[object], field: str, model_type: str) -> list[int]:
    if not pattern:
        raise InvalidArgumentError(
            f"config field '{field}' must list >= 1 layers ({model_type}), got {shown(pattern)}"
        )
    layers = []
    for index, kind in enumerate(pattern):
        name = str(kind).lower()
        if name in _SSM_NAMES:
            layers.append(index)
        elif name not in _ATTENTION_NAMES | _OTHER_NAMES:
            raise InvalidArgumentError(
                f"config field '{field}' has an unknown layer kind {shown(kind)} at {index} "
                f"({model_type})"
            )
    return layers


def _from_pattern(f: Fields, *fields: str) -> list[int] | None:
    for field in fields:
        value = f.data.get(field)
        if isinstance(value, str):  # the Hub's "M-M*-..." strings
            return _pattern_ssm_layers(list(value), field, f.model_type)
        pattern = f.list(field)
        if pattern is not None:
            return _pattern_ssm_layers(pattern, field, f.model_type)
    return None


def num_layers(f: Fields) -> int:
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
    if count > MAX_LAYERS:
        raise InvalidArgumentError(
            f"config field '{source}' must be at most {MAX_LAYERS} layers ({f.model_type}), "
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


def all_layers(f: Fields) -> list[int]:
    return list(range(num_layers(f)))


def jamba_layers(f: Fields) -> list[int]:
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
    return [i for i in all_layers(f) if i % period != offset]


def _layer_indices(f: Fields, name: str) -> set[int]:
    count = num_layers(f)
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


def bamba_layers(f: Fields) -> list[int]:
    pattern = _from_pattern(f, "layer_types", "layers_block_type")
    if pattern is not None:
        return pattern
    attention = _layer_indices(f, "attn_layer_indices")
    return [i for i in all_layers(f) if i not in attention]


def nemotron_layers(f: Fields) -> list[int]:
    layers = _from_pattern(f, "layers_block_type", "hybrid_override_pattern")
    if layers is None:
        raise InvalidArgumentError(
            f"config field 'hybrid_override_pattern' is missing ({f.model_type} needs it, or "
            f"'layers_block_type')"
        )
    return layers


def granite_layers(f: Fields) -> list[int]:
    layers = _from_pattern(f, "layer_types", "layers_block_type")
    if layers is None:
        raise InvalidArgumentError(
            f"config field 'layer_types' is missing ({f.model_type} needs it)"
        )
    return layers


def qwen3_next_layers(f: Fields) -> list[int]:
    layers = _from_pattern(f, "layer_types")
    if layers is not None:
        return layers
    # Qwen3.5's classes have no interval field; their default pattern is this one.
    interval = f.int("full_attention_interval", default=4)
    return [i for i in all_layers(f) if (i + 1) % interval]


def lfm2_layers(f: Fields) -> list[int]:
    layers = _from_pattern(f, "layer_types")
    if layers is not None:
        return layers
    if f.model_type == "lfm2_moe":  # Lfm2MoeConfig has no default pattern, nor full_attn_idxs
        raise InvalidArgumentError(
            f"config field 'layer_types' is missing ({f.model_type} needs it)"
        )
    if f.list("full_attn_idxs") is None:
        # Lfm2Config's default full_attn_idxs is every layer: no conv layer at all.
        return []
    attention = _layer_indices(f, "full_attn_idxs")
    return [i for i in all_layers(f) if i not in attention]


def kimi_layers(f: Fields) -> list[int]:
    """KimiLinearConfig: ``layer_types`` (``normalize`` builds it from ``linear_attn_config``)."""
    layers = _from_pattern(f, "layer_types")
    if layers is not None:
        return layers
    # KimiLinearConfig's default pattern: full attention at layers 4, 8, ... (not layer 0).
    return [i for i in all_layers(f) if not (i and i % 4 == 0)]


def olmo_hybrid_layers(f: Fields) -> list[int]:
    layers = _from_pattern(f, "layer_types")
    if layers is not None:
        return layers
    # OlmoHybridConfig's default: full attention at i % 4 == 3, else at the last layer.
    count = num_layers(f)
    attention = {i for i in range(count) if i % 4 == 3} or {count - 1}
    return [i for i in range(count) if i not in attention]


def _layer_group_size(f: Fields) -> int:
    return f.int("layer_group_size")


def bailing_layers(f: Fields) -> list[int]:
    """BailingHybridConfig and SGLang: full attention where ``(i + 1) % layer_group_size == 0``."""
    layers = _from_pattern(f, "layer_types")
    if layers is not None:
        return layers
    group = _layer_group_size(f)
    return [i for i in all_layers(f) if (i + 1) % group]


def bailing_vllm_layers(f: Fields) -> list[int]:
    """vLLM's ``_is_kda_layer`` (bailing_moe_v3.py): also the layers past the last whole group
    are attention, and ``layer_types`` is not read."""
    group = _layer_group_size(f)
    count = num_layers(f)
    grouped = count // group * group
    return [i for i in range(count) if (i + 1) % group and i < grouped]


def zaya_layers(f: Fields) -> list[int]:
    """ZAYA: every layer's attention is CCA, so every layer keeps conv state."""
    layers = _from_pattern(f, "layer_types")
    return all_layers(f) if layers is None else layers
