"""Test kit for schedulers and backends: reference models, stateful machines, conformance.

Needs ``hypothesis`` and ``pytest`` (the ``dev`` extra).

- ``SsmDecodeRingMachine`` checks a ring against ``ReferenceRing``, the
  plainest port of the original ring; subclass it to check rings your
  scheduler builds.
- ``SnapshotPoolConformance`` is the suite every ``SnapshotPool`` passes;
  subclass it as ``TestMyPool`` and say how to build a pool and read a row
  (it is a ``PoolAdapter``).
- ``SnapshotPoolMachine`` drives a pool through random batches against a
  plain dict model: ``SnapshotPoolMachine.for_adapter(TestMyPool()).TestCase``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._pool_conformance import PoolAdapter, SnapshotPoolConformance
    from ._pool_machine import SnapshotPoolMachine
    from ._reference import ReferenceRing
    from ._ring_machine import INVALID_INDICES, SsmDecodeRingMachine

__all__ = [
    "INVALID_INDICES",
    "PoolAdapter",
    "ReferenceRing",
    "SnapshotPoolConformance",
    "SnapshotPoolMachine",
    "SsmDecodeRingMachine",
]

# Imported on first use, so that ``ssm_rollback.testing._tiny`` (which the demo
# uses) loads without hypothesis and pytest, which the demo's extra lacks.
_LAZY = {
    "INVALID_INDICES": "._ring_machine",
    "PoolAdapter": "._pool_conformance",
    "ReferenceRing": "._reference",
    "SnapshotPoolConformance": "._pool_conformance",
    "SnapshotPoolMachine": "._pool_machine",
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
