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
- ``tiny_config(model_type)`` builds the config of a tiny, randomly initialised
  model of any model type in ``TESTED_MODEL_TYPES`` (``hybrid_model_types()``:
  those with recurrent state in this ``transformers``); it needs only
  ``transformers`` (the ``transformers`` extra), not hypothesis or pytest;
  ``tiny_model(model_type, seed=0)`` builds the model itself (and needs torch).
  ``DEMO_MODEL_TYPES`` are the ones ``ssm-rollback demo`` offers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._model_types import DEMO_MODEL_TYPES, TESTED_MODEL_TYPES

if TYPE_CHECKING:
    from ._pool_conformance import PoolAdapter, SnapshotPoolConformance
    from ._pool_machine import SnapshotPoolMachine
    from ._reference import ReferenceRing
    from ._ring_machine import INVALID_INDICES, SsmDecodeRingMachine
    from ._tiny import hybrid_model_types, tiny_config, tiny_model

__all__ = [
    "DEMO_MODEL_TYPES",
    "INVALID_INDICES",
    "TESTED_MODEL_TYPES",
    "PoolAdapter",
    "ReferenceRing",
    "SnapshotPoolConformance",
    "SnapshotPoolMachine",
    "SsmDecodeRingMachine",
    "hybrid_model_types",
    "tiny_config",
    "tiny_model",
]

# Imported on first use: the machines and the conformance suite need hypothesis and
# pytest, which the demo's extra lacks, and the tiny models need transformers, which a
# backend author running the conformance suite may lack.
_LAZY = {
    "INVALID_INDICES": "._ring_machine",
    "PoolAdapter": "._pool_conformance",
    "ReferenceRing": "._reference",
    "SnapshotPoolConformance": "._pool_conformance",
    "SnapshotPoolMachine": "._pool_machine",
    "SsmDecodeRingMachine": "._ring_machine",
    "hybrid_model_types": "._tiny",
    "tiny_config": "._tiny",
    "tiny_model": "._tiny",
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
