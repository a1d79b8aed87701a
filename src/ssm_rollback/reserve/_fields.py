"""Reading a ``config.json``: loading it, and typed field access whose errors name the field."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs

from .._errors import InvalidArgumentError, InvalidArgumentTypeError, describe, shown
from ._spec import DTYPE_BYTES, MAX_BYTES, number

__all__ = ["Fields", "check_positive", "divide", "dtype_name", "load"]

_DTYPE_ALIASES: Final[Mapping[str, str]] = {
    "float": "float32",
    "fp32": "float32",
    "half": "float16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "double": "float64",
}


def check_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"'{name}' must be an int >= 1, got {describe(value)}")
    if value < 1:
        raise InvalidArgumentError(f"'{name}' must be an int >= 1, got {shown(value)}")
    return int(value)


#: A config.json is a few KiB; the CLI's flags read at most as much.
MAX_CONFIG_BYTES: Final = 16 * 2**20


def load(config: Mapping[str, object] | str | os.PathLike[str]) -> Mapping[str, object]:
    """The config as a mapping: ``config`` itself, or the JSON object in that file or folder."""
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
        # A FIFO or a device such as /dev/zero would be read without end: look first.
        status = path.stat()
        regular = stat.S_ISREG(status.st_mode) and status.st_size <= MAX_CONFIG_BYTES
        raw = path.read_bytes() if regular else b""
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise InvalidArgumentError(
            f"'config' must be a readable file, got {path}: {error}"
        ) from None
    if not stat.S_ISREG(status.st_mode):
        raise InvalidArgumentError(f"'config' must be a regular file (a config.json), got {path}")
    if not regular:
        raise InvalidArgumentError(
            f"'config' must be at most {MAX_CONFIG_BYTES:,} bytes, got {path} of "
            f"{status.st_size:,} bytes"
        )
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


def dtype_name(value: object, source: str, *, field: bool = False) -> str:
    """A dtype name (``"torch.bfloat16"``, ``"bf16"``) as the spec spells it; ``source`` names
    the argument, or with ``field`` the config field, it came from."""
    named = f"config field '{source}'" if field else f"'{source}'"
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(
            f"{named} must be a dtype name such as 'bfloat16', got {describe(value)}"
        )
    name = value.removeprefix("torch.").lower()
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise InvalidArgumentError(
            f"{named} must be one of {', '.join(sorted(DTYPE_BYTES))}, got {shown(value)}"
        )
    return name


def divide(value: int, tp_size: int, field: str, model_type: str) -> int:
    if value % tp_size:
        raise InvalidArgumentError(
            f"'tp_size' {shown(tp_size)} must divide config field '{field}' = {value} "
            f"({model_type})"
        )
    return value // tp_size


def _checked_int(model_type: str, name: str, value: object, minimum: int) -> int:
    expected = f"config field '{name}' must be an int >= {minimum} ({model_type})"
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"{expected}, got {describe(value)}")
    if value < minimum:
        raise InvalidArgumentError(f"{expected}, got {shown(value)}")
    # Every size field is a dimension of some state tensor (or counts layers): past
    # MAX_BYTES alone it is more than any machine holds.
    if value > MAX_BYTES:
        raise InvalidArgumentError(
            f"config field '{name}' must be an int from {minimum} to 2**50 ({model_type}; no "
            f"machine holds more), got {number(value)}"
        )
    return int(value)


@attrs.frozen
class Fields:
    """Typed, named access to a config's fields, with errors that name the field.

    ``defaults`` holds the model type's ``transformers`` config-class defaults:
    a field the config leaves out takes that value, as ``transformers`` (and
    the engines, which load configs through it) would.
    """

    data: Mapping[str, object]
    model_type: str
    defaults: Mapping[str, object] = attrs.field(factory=dict)

    def has(self, name: str) -> bool:
        return self.data.get(name) is not None

    def name(self, *names: str) -> str:
        """The first of ``names`` the config has (the one ``int`` reads), else the first."""
        return next((name for name in names if self.has(name)), names[0])

    def int(self, *names: str, default: int | None = None, minimum: int = 1) -> int:
        """The first of ``names`` present, an ``int >= minimum``; sizes default to ``>= 1``.

        Missing, it is the class default of the first of ``names`` that has
        one, else ``default``, else an error naming the field.
        """
        for name in names:
            value = self.data.get(name)
            if value is not None:
                return _checked_int(self.model_type, name, value, minimum)
        for name in names:
            if name in self.defaults:
                return _checked_int(self.model_type, name, self.defaults[name], minimum)
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
        """A string field, else its class default, else ``None``."""
        value = self.data.get(name)
        if value is None:
            value = self.defaults.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise InvalidArgumentTypeError(
                f"config field '{name}' must be a string ({self.model_type}), got {describe(value)}"
            )
        return value
