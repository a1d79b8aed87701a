"""Test kit for schedulers and backends: reference models, stateful machines, conformance.

Needs ``hypothesis`` and ``pytest`` (the ``dev`` extra).

- ``SsmDecodeRingMachine`` checks a ring against ``ReferenceRing``, the
  plainest port of the original ring; subclass it to check rings your
  scheduler builds.
- ``SnapshotPoolConformance`` is the suite every ``SnapshotPool`` passes;
  subclass it as ``TestMyPool`` and say how to build a pool and read a row.
"""

from __future__ import annotations

from ._pool_conformance import SnapshotPoolConformance
from ._reference import ReferenceRing
from ._ring_machine import INVALID_INDICES, SsmDecodeRingMachine

__all__ = ["INVALID_INDICES", "ReferenceRing", "SnapshotPoolConformance", "SsmDecodeRingMachine"]
