"""The files a flag names: regular files only, and never more than a size limit.

A path can name a FIFO (a read waits for a writer forever), ``/dev/zero`` or
``/dev/urandom`` (a read never ends), a directory, or a file larger than
memory. The path is looked at first, so that a device is not even opened;
then the file is opened (``O_NONBLOCK``: a FIFO put there in the meantime
does not wait for a writer) and the open descriptor is looked at again
(``fstat``: what was opened, not what the path named a moment before); at
most ``limit + 1`` bytes are read, as a file may grow after that. Symbolic
links are followed: a Hugging Face cache's ``config.json`` is one.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Final

from .._errors import shown
from ._common import FlagError

__all__ = ["MAX_CONFIG_BYTES", "MAX_TRACE_BYTES", "read_file", "read_json_file"]

#: A config.json is a few KiB (a few hundred with an embedded tokenizer map): 16 MiB is plenty.
MAX_CONFIG_BYTES: Final = 16 * 2**20
#: A JSONL trace: about 40 bytes an event, so some six million events.
MAX_TRACE_BYTES: Final = 256 * 2**20

_OPEN_FLAGS: Final = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_CHUNK: Final = 2**20


def read_file(
    flag: str, path: str, *, limit: int, directory_file: str | None = None
) -> tuple[str, bytes]:
    """The file ``path`` names and its bytes; anything else is a ``FlagError`` for ``flag``.

    ``directory_file`` is read instead when ``path`` is a directory (a model
    directory holds ``config.json``).
    """
    if not path:  # the empty path would be read as the working directory
        raise FlagError(flag, "must name a file, got an empty path")
    # os.path.isdir: Path.is_dir raises for a name too long or with a NUL in it.
    if directory_file is not None and os.path.isdir(path):
        path = os.path.join(path, directory_file)
    try:
        status = os.stat(path)
    except (OSError, ValueError) as error:  # ValueError: a NUL in the path
        raise _unreadable(flag, path, error) from None
    _check_regular(flag, path, status, limit)
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
    except OSError as error:
        raise _unreadable(flag, path, error) from None
    try:
        _check_regular(flag, path, os.fstat(descriptor), limit)
        return path, _read_at_most(flag, path, descriptor, limit)
    except OSError as error:
        raise _unreadable(flag, path, error) from None
    finally:
        os.close(descriptor)


def read_json_file(flag: str, path: str, *, directory_file: str | None = None) -> object:
    """The JSON value in the config file ``path`` names, strictly UTF-8; else a ``FlagError``.

    ``directory_file`` as for ``read_file``; at most ``MAX_CONFIG_BYTES`` are read.
    """
    path, data = read_file(flag, path, limit=MAX_CONFIG_BYTES, directory_file=directory_file)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FlagError(
            flag, f"{shown(path)} is not UTF-8 text (byte {error.start}: {error.reason})"
        ) from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (json.JSONDecodeError, ValueError) as error:
        raise FlagError(flag, f"{shown(path)} is not JSON: {error}") from None
    except RecursionError:
        raise FlagError(flag, f"{shown(path)} nests JSON too deeply") from None


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _unreadable(flag: str, path: str, error: OSError | ValueError) -> FlagError:
    reason = error.strerror if isinstance(error, OSError) else error
    return FlagError(flag, f"cannot read {path!r}: {reason}")


def _check_regular(flag: str, path: str, status: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise FlagError(flag, f"{shown(path)} is {_kind(status.st_mode)}, not a regular file")
    if status.st_size > limit:
        raise FlagError(
            flag, f"{shown(path)} is {status.st_size:,} bytes, larger than the {_mib(limit)} limit"
        )


def _read_at_most(flag: str, path: str, descriptor: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(descriptor, min(_CHUNK, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    # It grew since fstat, or its size is not its length (as in /proc).
    raise FlagError(flag, f"{shown(path)} holds more than the {_mib(limit)} limit")


def _mib(limit: int) -> str:
    if limit % 2**20:
        return f"{limit:,} bytes"
    return f"{limit // 2**20} MiB ({limit:,} bytes)"


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")
