"""Roll hybrid attention + SSM models back to an earlier boundary token.

The public surface is exactly ``__all__``; everything else is private.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ._errors import (
    InvalidArgumentError,
    InvariantError,
    OutOfOrderError,
    SsmRollbackError,
    StaleSnapshotError,
    UnknownSnapshotError,
)
from ._ring import SsmDecodeRing, SsmRingEntry

try:
    __version__ = version("ssm-rollback")
except PackageNotFoundError:  # pragma: no cover - running from a bare source tree
    __version__ = "0+unknown"

__all__ = [
    "InvalidArgumentError",
    "InvariantError",
    "OutOfOrderError",
    "SsmDecodeRing",
    "SsmRingEntry",
    "SsmRollbackError",
    "StaleSnapshotError",
    "UnknownSnapshotError",
]
