"""Test kit for schedulers and backends: reference models, stateful machines, conformance.

Needs ``hypothesis`` and ``pytest`` (the ``dev`` extra).

- ``SsmDecodeRingMachine`` checks a ring against ``ReferenceRing``, the
  plainest port of the original ring; subclass it to check rings your
  scheduler builds.
- ``SnapshotPoolConformance`` is the suite every ``SnapshotPool`` passes;
  subclass it as ``TestMyPool`` and say how to build a pool and read a row.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._pool_conformance import SnapshotPoolConformance
    from ._reference import ReferenceRing
    from ._ring_machine import INVALID_INDICES, SsmDecodeRingMachine

__all__ = ["INVALID_INDICES", "ReferenceRing", "SnapshotPoolConformance", "SsmDecodeRingMachine"]

# Imported on first use, so that ``ssm_rollback.testing._tiny`` (which the demo
# uses) loads without hypothesis and pytest, which the demo's extra lacks.
_LAZY = {
    "INVALID_INDICES": "._ring_machine",
    "ReferenceRing": "._reference",
    "SnapshotPoolConformance": "._pool_conformance",
    "SsmDecodeRingMachine": "._ring_machine",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value: object = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
