"""Tensor-parallel internals behind ``ssm_rollback.distributed``.

``wire`` and ``wire_values`` turn a step's effects into int64 words and
back, ``channel`` moves those words between ranks, ``agreement`` checks
that every rank's pool holds the same snapshots, and ``shard`` cuts live
states and pools into each rank's part.
"""
