"""What one sequence's recurrent state is made of: tensors, layers, the whole spec.

The validators make a spec of zero or negative bytes impossible to build, so
every consumer may divide by ``bytes_per_snapshot``; sizing refuses one past
``MAX_BYTES`` per sequence (``oversized``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, TypeAlias

import attrs

from .._errors import InvalidArgumentError, shown

__all__ = [
    "DTYPE_BYTES",
    "MAX_BYTES",
    "LayerKind",
    "Layout",
    "SsmLayerSpec",
    "SsmStateSpec",
    "StateTensorSpec",
    "number",
    "oversized",
]

#: ``"engine"`` is the v0.1 name of ``"vllm"``; a spec always names the layout it resolved to.
Layout: TypeAlias = Literal["vllm", "engine", "sglang", "transformers"]
LayerKind: TypeAlias = Literal[
    "mamba1",
    "mamba2",
    "gated_delta_net",
    "kimi_delta_attention",
    "short_conv",
    "compressed_conv_attention",
]

#: No machine holds more than this (1 PiB) for one sequence: a larger byte count, or a
#: larger size in a config, is a typo or a hostile file, not a plan.
MAX_BYTES: Final = 2**50

DTYPE_BYTES: Final[Mapping[str, int]] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


def _check_shape(_: object, attribute: attrs.Attribute[tuple[int, ...]], value: object) -> None:
    if (
        not isinstance(value, tuple)
        or not value
        or any(isinstance(size, bool) or not isinstance(size, int) or size < 1 for size in value)
    ):
        raise InvalidArgumentError(
            f"'{attribute.name}' must be a non-empty tuple of ints >= 1, got {shown(value)}"
        )


def _check_dtype(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or value not in DTYPE_BYTES:
        raise InvalidArgumentError(
            f"'{attribute.name}' must be one of {', '.join(sorted(DTYPE_BYTES))}, "
            f"got {shown(value)}"
        )


def _check_non_empty(
    _: object, attribute: attrs.Attribute[tuple[object, ...]], value: object
) -> None:
    if not isinstance(value, tuple) or not value:
        raise InvalidArgumentError(
            f"'{attribute.name}' must be a non-empty tuple, got {shown(value)}"
        )


@attrs.frozen
class StateTensorSpec:
    """One state tensor of one layer, for one sequence on one rank.

    ``dtype_rule`` says which rule chose ``dtype`` (an argument, a config
    field, an engine default), so a surprising figure can be traced.
    """

    name: str
    shape: tuple[int, ...] = attrs.field(validator=_check_shape)
    dtype: str = attrs.field(validator=_check_dtype)
    dtype_rule: str = ""

    @property
    def nbytes(self) -> int:
        """Bytes of this tensor for one sequence."""
        count = 1
        for size in self.shape:
            count *= size
        return count * DTYPE_BYTES[self.dtype]


@attrs.frozen
class SsmLayerSpec:
    """The recurrent state of one SSM layer, and what speculative decoding adds to it."""

    index: int
    kind: LayerKind
    tensors: tuple[StateTensorSpec, ...] = attrs.field(validator=_check_non_empty)
    #: The engine's extra buffers for speculative decoding; empty without draft tokens.
    speculative: tuple[StateTensorSpec, ...] = ()

    @property
    def nbytes(self) -> int:
        """Bytes of this layer's state for one sequence."""
        return sum(t.nbytes for t in self.tensors)

    @property
    def speculative_nbytes(self) -> int:
        """Bytes the engine adds for speculative decoding, for one sequence."""
        return sum(t.nbytes for t in self.speculative)


@attrs.frozen
class SsmStateSpec:
    """Every SSM layer's state tensors per sequence, and what one snapshot slot costs."""

    model_type: str
    layout: Layout
    tp_size: int
    num_layers: int
    layers: tuple[SsmLayerSpec, ...] = attrs.field(validator=_check_non_empty)
    #: Draft tokens per verify step the speculative buffers are sized for.
    num_speculative_tokens: int = 0

    @property
    def bytes_per_snapshot(self) -> int:
        """One slot: all SSM layers of one sequence on one tensor-parallel rank."""
        return sum(layer.nbytes for layer in self.layers)

    @property
    def speculative_bytes_per_sequence(self) -> int:
        """What the engine allocates for speculative decoding per sequence and rank."""
        return sum(layer.speculative_nbytes for layer in self.layers)

    @property
    def dtype_rules(self) -> Mapping[str, str]:
        """Each state tensor's name and the rule that chose its dtype."""
        return {t.name: f"{t.dtype}: {t.dtype_rule}" for t in self.layers[0].tensors}


def oversized(spec: SsmStateSpec) -> tuple[Literal["snapshot", "speculative"], str] | None:
    """Which per-sequence byte count of ``spec`` is past ``MAX_BYTES``, said for an error."""
    per_slot = spec.bytes_per_snapshot
    if per_slot > MAX_BYTES:
        tensor = max((t for layer in spec.layers for t in layer.tensors), key=lambda t: t.nbytes)
        shape = "x".join(map(number, tensor.shape))
        return "snapshot", (
            f"{number(per_slot)} bytes per snapshot ({len(spec.layers)} SSM layers; the largest "
            f"tensor, {tensor.name!r}, is {shape} {tensor.dtype}), more than the 2**50 bytes "
            f"(1 PiB) a machine holds"
        )
    speculative = spec.speculative_bytes_per_sequence
    if speculative > MAX_BYTES:
        return "speculative", (
            f"{number(speculative)} bytes of speculative buffers per sequence for "
            f"{number(spec.num_speculative_tokens)} draft tokens, more than the 2**50 bytes "
            f"(1 PiB) a machine holds"
        )
    return None


def number(value: int) -> str:
    """``value`` for a message: its digits, grouped, or its magnitude where they would not do
    (Python refuses to print an int of more than 4300 digits)."""
    if value < 10**40:
        return f"{value:,}"
    return f"about 10**{int(value.bit_length() * 0.30103)}"  # log10(2): digits from bits
