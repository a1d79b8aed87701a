"""Hugging Face internals behind ``ssm_rollback.integrations.transformers``.

``cache_pool`` (the snapshot pool over a cache), ``crop`` (attention KV
truncation), ``stream`` (one decode stream: cache, ring, pool), ``decoding``
(shared decode helpers and the result type), ``generation``
(``backtracking_generate``), ``speculative`` (``speculative_generate``) and
``scan_chunks`` (narrowed scans for short forwards).
"""
