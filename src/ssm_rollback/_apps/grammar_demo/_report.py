"""What ``ssm-rollback demo --grammar`` reports: per call, and summed over the calls."""

from __future__ import annotations

import json

import attrs

from ._judge import Rejection
from ._tool_call import TOOL_CALL_SCHEMA, Policy, schema_problems

__all__ = ["CallOutcome", "GrammarDemoReport", "judge_output"]


@attrs.frozen
class CallOutcome:
    """One decoded tool call and what the checks found in it."""

    text: str
    policy: Policy
    #: The call ended with EOS within the token limit.
    finished: bool
    #: Parses as JSON, conforms to the schema (checked in plain Python), and a fresh
    #: grammar matcher accepts every token of it, EOS included.
    schema_valid: bool
    #: Schema-valid and every value approved by the run-time policy.
    approved: bool
    rejections: tuple[Rejection, ...]
    #: Values kept after the retry limit (the call is then not approved).
    gave_up: int

    def to_dict(self) -> dict[str, object]:
        return {
            "text": self.text,
            "policy": self.policy.to_dict(),
            "finished": self.finished,
            "schema_valid": self.schema_valid,
            "approved": self.approved,
            "rejections": [r.to_dict() for r in self.rejections],
            "gave_up": self.gave_up,
        }


def judge_output(
    body: bytes, *, finished: bool, matcher_accepts: bool, policy: Policy
) -> tuple[bool, bool]:
    """``(schema_valid, approved)`` for a call's bytes (EOS excluded)."""
    try:
        call = json.loads(body)
    except ValueError:
        return False, False
    valid = finished and matcher_accepts and not schema_problems(call, TOOL_CALL_SCHEMA)
    return valid, valid and not policy.problems(call)


@attrs.frozen
class GrammarDemoReport:
    """The run, summed over its calls; ``calls`` holds each call's outcome."""

    model_type: str
    engine: str
    capacity: int
    seed: int
    calls: tuple[CallOutcome, ...]
    tokens: int
    rollbacks_served: int
    rollbacks_declined: int
    tokens_regenerated: int
    #: Served rollbacks whose next logits differ from a fresh decode of the kept tokens.
    mismatches: int
    #: Matcher states compared with a fresh matcher fed the kept tokens (after each
    #: rollback and at the end of each call), and how many masks differed.
    matcher_checks: int
    matcher_mismatches: int
    seconds: float

    @property
    def schema_valid(self) -> int:
        return sum(call.schema_valid for call in self.calls)

    @property
    def approved(self) -> int:
        return sum(call.approved for call in self.calls)

    @property
    def values_rejected(self) -> int:
        return sum(len(call.rejections) for call in self.calls)

    @property
    def gave_up(self) -> int:
        return sum(call.gave_up for call in self.calls)

    @property
    def ok(self) -> bool:
        """Every call schema-valid and approved, and every rollback checked equal."""
        every = len(self.calls)
        return (
            self.schema_valid == every
            and self.approved == every
            and self.mismatches == 0
            and self.matcher_mismatches == 0
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "model_type": self.model_type,
            "engine": self.engine,
            "capacity": self.capacity,
            "seed": self.seed,
            "calls": len(self.calls),
            "schema_valid": self.schema_valid,
            "validator_approved": self.approved,
            "values_rejected": self.values_rejected,
            "gave_up": self.gave_up,
            "tokens": self.tokens,
            "rollbacks_served": self.rollbacks_served,
            "rollbacks_declined": self.rollbacks_declined,
            "tokens_regenerated": self.tokens_regenerated,
            "mismatches": self.mismatches,
            "matcher_checks": self.matcher_checks,
            "matcher_mismatches": self.matcher_mismatches,
            "seconds": self.seconds,
            "ok": self.ok,
            "outputs": [call.to_dict() for call in self.calls],
        }
