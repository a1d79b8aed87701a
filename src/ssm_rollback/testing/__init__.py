"""Test kit for schedulers and backends: reference models and stateful machines.

Needs ``hypothesis`` (the ``dev`` extra). ``SsmDecodeRingMachine`` checks a
ring against ``ReferenceRing``, the plainest port of the original ring;
subclass it to check rings your scheduler builds.
"""

from __future__ import annotations

from ._reference import ReferenceRing
from ._ring_machine import INVALID_INDICES, SsmDecodeRingMachine

__all__ = ["INVALID_INDICES", "ReferenceRing", "SsmDecodeRingMachine"]
