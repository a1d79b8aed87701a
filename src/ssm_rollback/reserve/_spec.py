"""What one sequence's recurrent state is made of: tensors, layers, the whole spec.

The validators make a spec of zero or negative bytes, or one whose parts are
not what its fields say (a layer that is not an ``SsmLayerSpec``, a
``tp_size`` of 0), impossible to build, so every consumer may divide by
``bytes_per_snapshot`` and read its fields unchecked; sizing refuses one past
``MAX_BYTES`` per sequence (``oversized``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, Literal, TypeAlias, TypeVar, get_args

import attrs

from .._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    check_int_at_least,
    shown,
)

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

_T = TypeVar("_T")

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


def _check_text(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(
            f"'{attribute.name}' must be a str, got {shown(value)} of type {type(value).__name__}"
        )


def _int_at_least(minimum: int) -> Callable[[object, attrs.Attribute[int], object], None]:
    def check(_: object, attribute: attrs.Attribute[int], value: object) -> None:
        check_int_at_least(attribute.name, value, minimum)

    return check


def _one_of(choices: tuple[str, ...]) -> Callable[[object, attrs.Attribute[str], object], None]:
    def check(_: object, attribute: attrs.Attribute[str], value: object) -> None:
        if not isinstance(value, str) or value not in choices:
            raise InvalidArgumentError(
                f"'{attribute.name}' must be one of {', '.join(map(repr, choices))}, "
                f"got {shown(value)}"
            )

    return check


def _tuple_of(
    kind: type[_T], *, empty: bool = False
) -> Callable[[object, attrs.Attribute[tuple[_T, ...]], object], None]:
    what = f"a {'' if empty else 'non-empty '}tuple of {kind.__name__}"

    def check(_: object, attribute: attrs.Attribute[tuple[_T, ...]], value: object) -> None:
        if not isinstance(value, tuple) or not (value or empty):
            raise InvalidArgumentError(f"'{attribute.name}' must be {what}, got {shown(value)}")
        for item in value:
            if not isinstance(item, kind):
                raise InvalidArgumentTypeError(
                    f"'{attribute.name}' must be {what}, got {shown(item)} of type "
                    f"{type(item).__name__} in it"
                )

    return check


@attrs.frozen
class StateTensorSpec:
    """One state tensor of one layer, for one sequence on one rank.

    ``dtype_rule`` says which rule chose ``dtype`` (an argument, a config
    field, an engine default), so a surprising figure can be traced.
    """

    name: str = attrs.field(validator=_check_text)
    shape: tuple[int, ...] = attrs.field(validator=_check_shape)
    dtype: str = attrs.field(validator=_check_dtype)
    dtype_rule: str = attrs.field(default="", validator=_check_text)

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

    index: int = attrs.field(validator=_int_at_least(0))
    kind: LayerKind = attrs.field(validator=_one_of(get_args(LayerKind)))
    tensors: tuple[StateTensorSpec, ...] = attrs.field(validator=_tuple_of(StateTensorSpec))
    #: The engine's extra buffers for speculative decoding; empty without draft tokens.
    speculative: tuple[StateTensorSpec, ...] = attrs.field(
        default=(), validator=_tuple_of(StateTensorSpec, empty=True)
    )

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

    model_type: str = attrs.field(validator=_check_text)
    layout: Layout = attrs.field(validator=_one_of(get_args(Layout)))
    tp_size: int = attrs.field(validator=_int_at_least(1))
    num_layers: int = attrs.field(validator=_int_at_least(1))
    layers: tuple[SsmLayerSpec, ...] = attrs.field(validator=_tuple_of(SsmLayerSpec))
    #: Draft tokens per verify step the speculative buffers are sized for.
    num_speculative_tokens: int = attrs.field(default=0, validator=_int_at_least(0))

    @layers.validator
    def _check_indices(self, _: attrs.Attribute[tuple[SsmLayerSpec, ...]], value: object) -> None:
        # Runs after the fields' own checks: num_layers is an int >= 1, layers SsmLayerSpecs.
        for layer in self.layers:
            if layer.index >= self.num_layers:
                raise InvalidArgumentError(
                    f"'layers' must hold layer indices in [0, num_layers {self.num_layers}), "
                    f"got index {layer.index}"
                )

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
