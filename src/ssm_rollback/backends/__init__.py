"""Snapshot pools: where snapshot memory lives and how the copies are done.

- ``ssm_rollback.backends.fake.FakeSnapshotPool``: pure Python, for tests.
"""
