"""Adapters for inference stacks that keep SSM state in structures of their own.

- ``ssm_rollback.integrations.transformers``: Hugging Face ``transformers`` caches.
- ``ssm_rollback.integrations.grammar``: xgrammar and llguidance matchers rolled
  back together with the model state.
- ``ssm_rollback.integrations.vllm``: prefix snapshots inside vLLM, as a KV
  connector (the ``vllm`` extra, in an environment of its own).
"""
