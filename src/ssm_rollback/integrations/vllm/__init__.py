"""vLLM: prefix snapshots (attention KV + SSM state) as a KV connector (SPEC 16).

Register with ``KVTransferConfig(kv_connector="SsmPrefixConnector",
kv_connector_module_path="ssm_rollback.integrations.vllm", kv_role="kv_both",
kv_connector_extra_config={"prefix_slots": N})``; see ``docs/vllm.md``.
Needs the ``vllm`` extra (its own environment: vLLM pins its own
``transformers``).
"""

from __future__ import annotations

from ._connector import SsmPrefixConnector, SsmPrefixMetadata
from ._options import DEFAULT_PREFIX_SLOTS, UnsupportedEngineError

__all__ = [
    "DEFAULT_PREFIX_SLOTS",
    "SsmPrefixConnector",
    "SsmPrefixMetadata",
    "UnsupportedEngineError",
]
