"""vLLM: prefix snapshots (attention KV + SSM state) as a KV connector (SPEC 16).

Register with ``KVTransferConfig(kv_connector="SsmPrefixConnector",
kv_connector_module_path="ssm_rollback.integrations.vllm", kv_role="kv_both",
kv_connector_extra_config={"prefix_slots": N})``; see ``docs/vllm.md``.
Needs the ``vllm`` extra (its own environment: vLLM pins its own
``transformers``). The connector classes import vLLM when first named, so
the scheduler-side bookkeeping can be tested without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._options import DEFAULT_PREFIX_SLOTS, UnsupportedEngineError

if TYPE_CHECKING:
    from ._connector import SsmPrefixConnector, SsmPrefixMetadata

__all__ = [
    "DEFAULT_PREFIX_SLOTS",
    "SsmPrefixConnector",
    "SsmPrefixMetadata",
    "UnsupportedEngineError",
]


def __getattr__(name: str) -> object:
    if name in ("SsmPrefixConnector", "SsmPrefixMetadata"):
        from . import _connector

        return getattr(_connector, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
