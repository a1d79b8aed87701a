"""Hugging Face internals behind ``ssm_rollback.integrations.transformers``.

``cache_pool`` (the snapshot pool over a cache), ``crop`` (attention KV
truncation), ``stream`` (one decode stream: cache, ring, pool), ``decoding``
(the counters and the result type), ``arguments`` (the decoders' own
arguments, checked), ``prompts`` (``input_ids`` and a left-padding mask),
``generate_args`` (what ``model.generate`` passes a ``custom_generate``
function), ``scoring`` (``generate``'s logits processors, greedy or sampled
picks), ``streaming`` (the ``streamer``, and the ``generate`` call),
``probe`` (whether a model's multi-token cached forward works),
``generation`` (``backtracking_generate``), ``speculative``
(``speculative_generate``), ``scan_chunks`` (narrowed scans for short
forwards), ``prefix_cache`` (``HybridPrefixCache`` and its ``prefix_report``, over ``cache_copy``'s
whole-cache copies; ``prefix_models`` says which models it serves,
``prefix_use`` starts the decoders from it) and ``chat``
(``message_boundaries``).
"""
