"""When to snapshot, which boundary a rollback can reach, and the plan that gets there.

The scheduler keeps, per sequence, its ``boundaries``: the strictly ascending
token positions (output lengths) at which a boundary token was committed.
After committing each token it calls ``snapshot_boundary_if_ssm`` (or
``snapshot_boundaries`` for a whole step); to roll back it calls
``rollback_to_boundary`` and carries out the plan: hand its effects to the
pool (``apply_effects``), truncate its tokens and attention KV to
``plan.keep_len``. A caller that must move more state with the model plans
first (``plan_rollback``, which changes nothing), moves, then commits
(``commit_rollback``). A shortfall (no reachable boundary, no live snapshot,
a disabled ring) is a ``RollbackDeclined`` value, never an exception. A
speculative decoder's verify step commits with ``commit_verified`` (one row)
or ``commit_verified_batch``.
"""

from __future__ import annotations

from ._core.boundaries import snapshot_boundaries
from ._core.rollback import (
    DeclineReason,
    RollbackDeclined,
    RollbackPlan,
    commit_rollback,
    find_last_boundary_with_snapshot,
    plan_rollback,
    rollback_to_boundary,
    snapshot_boundary_if_ssm,
)
from ._core.verify import (
    ReplaySegment,
    VerifyBatch,
    VerifyPlan,
    commit_verified,
    commit_verified_batch,
)

__all__ = [
    "DeclineReason",
    "ReplaySegment",
    "RollbackDeclined",
    "RollbackPlan",
    "VerifyBatch",
    "VerifyPlan",
    "commit_rollback",
    "commit_verified",
    "commit_verified_batch",
    "find_last_boundary_with_snapshot",
    "plan_rollback",
    "rollback_to_boundary",
    "snapshot_boundaries",
    "snapshot_boundary_if_ssm",
]
