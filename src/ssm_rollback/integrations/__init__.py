"""Adapters for inference stacks that keep SSM state in structures of their own.

- ``ssm_rollback.integrations.transformers``: Hugging Face ``transformers`` caches.
"""
