"""Adapters for inference stacks that keep SSM state in structures of their own.

- ``ssm_rollback.integrations.transformers``: Hugging Face ``transformers`` caches.
- ``ssm_rollback.integrations.grammar``: xgrammar and llguidance matchers rolled
  back together with the model state.
"""
