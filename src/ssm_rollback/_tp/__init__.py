"""Tensor-parallel internals behind ``ssm_rollback.distributed``.

``wire`` and ``wire_values`` turn a step's effects into int64 words and
back, ``channel`` moves those words between ranks over what ``groups``
knows of a process group (its backends, its handshake), ``failures`` makes
a step fail on every rank together (the ranks' ``src``, a lost peer),
``agreement`` checks that every rank's pool holds the same snapshots, and
``shard`` cuts live states and pools into each rank's part.
"""
