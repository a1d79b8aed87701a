"""Roll hybrid attention + SSM models back to an earlier boundary token.

The public surface is exactly ``__all__``; everything else is private.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ._core.boundaries import snapshot_boundaries
from ._core.effect_dict import (
    Effect,
    SaveBatch,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
    effect_from_dict,
)
from ._core.prefix import (
    PrefillChunk,
    PrefillPlan,
    PrefixEntry,
    PrefixHit,
    PrefixHold,
    PrefixSnapshotIndex,
    PrefixStats,
)
from ._core.ring import SsmDecodeRing, SsmRingEntry
from ._errors import (
    InvalidArgumentError,
    InvariantError,
    OutOfOrderError,
    SsmRollbackError,
    StaleSnapshotError,
    UnknownSnapshotError,
)
from .pool import (
    SaveOutcome,
    SharedSnapshotPool,
    SlotTags,
    SnapshotPool,
    VerifyBufferPool,
    apply_effects,
)
from .rollback import (
    DeclineReason,
    ReplaySegment,
    RollbackDeclined,
    RollbackPlan,
    VerifyBatch,
    VerifyPlan,
    commit_rollback,
    commit_verified,
    commit_verified_batch,
    find_last_boundary_with_snapshot,
    plan_rollback,
    rollback_to_boundary,
    snapshot_boundary_if_ssm,
)

try:
    __version__ = version("ssm-rollback")
except PackageNotFoundError:  # pragma: no cover - running from a bare source tree
    __version__ = "0+unknown"

__all__ = [
    "DeclineReason",
    "Effect",
    "InvalidArgumentError",
    "InvariantError",
    "OutOfOrderError",
    "PrefillChunk",
    "PrefillPlan",
    "PrefixEntry",
    "PrefixHit",
    "PrefixHold",
    "PrefixSnapshotIndex",
    "PrefixStats",
    "ReplaySegment",
    "RollbackDeclined",
    "RollbackPlan",
    "SaveBatch",
    "SaveOutcome",
    "SharedSnapshotPool",
    "SlotTags",
    "SnapshotPool",
    "SsmDecodeRing",
    "SsmPrefixRestore",
    "SsmPrefixSave",
    "SsmRingEntry",
    "SsmRollbackError",
    "SsmSnapshotRestore",
    "SsmSnapshotSave",
    "SsmStateAccept",
    "StaleSnapshotError",
    "UnknownSnapshotError",
    "VerifyBatch",
    "VerifyBufferPool",
    "VerifyPlan",
    "apply_effects",
    "commit_rollback",
    "commit_verified",
    "commit_verified_batch",
    "effect_from_dict",
    "find_last_boundary_with_snapshot",
    "plan_rollback",
    "rollback_to_boundary",
    "snapshot_boundaries",
    "snapshot_boundary_if_ssm",
]
