"""The placement rules the simulation compares, as the scheduler of each would apply them.

A rule says which positions of a request to share: inside the prompt (for
``plan_prefill(..., publish_at=)``, from ``ssm_rollback.prefix``) and from
the prompt end on (decode-time ``publish``, up to ``length + output - 1``:
the last sampled token is never fed). Each engine's settings default to
that engine's documented defaults and can be overridden.
"""

from __future__ import annotations

from typing import Final, Literal

import attrs

from ... import prefix
from ..._errors import InvalidArgumentError
from ._params import at_least

__all__ = ["APP_RULES", "RULES", "EngineSettings", "RuleName"]

RuleName = Literal["app", "app-branches", "vllm-align", "sglang", "trtllm", "llamacpp"]
RULES: Final[tuple[RuleName, ...]] = (
    "app",
    "app-branches",
    "vllm-align",
    "sglang",
    "trtllm",
    "llamacpp",
)
#: The application's rules: ``app`` publishes at every message end (SPEC 13), ``app-branches``
#: only at the message ends where the application expects requests to branch off
#: (``Request.branch_points``). Both publish the prompt end minus one and each output's end.
APP_RULES: Final[frozenset[str]] = frozenset({"app", "app-branches"})


@attrs.frozen(kw_only=True)
class EngineSettings:
    """The engine rules' settings (``ssm_rollback.prefix`` says where each default comes from)."""

    vllm_block_size: int = attrs.field(default=prefix.VLLM_BLOCK_SIZE, validator=at_least(1))
    vllm_max_num_batched_tokens: int = attrs.field(
        default=prefix.VLLM_MAX_NUM_BATCHED_TOKENS, validator=at_least(1)
    )
    sglang_chunked_prefill_size: int = attrs.field(
        default=prefix.SGLANG_CHUNKED_PREFILL_SIZE, validator=at_least(1)
    )
    trtllm_interval: int = attrs.field(default=prefix.TRTLLM_INTERVAL, validator=at_least(0))
    trtllm_tokens_per_block: int = attrs.field(
        default=prefix.TRTLLM_TOKENS_PER_BLOCK, validator=at_least(1)
    )
    llamacpp_tail: int = attrs.field(default=prefix.LLAMACPP_TAIL, validator=at_least(1))

    def __attrs_post_init__(self) -> None:
        if self.vllm_max_num_batched_tokens < self.vllm_block_size:  # vLLM refuses it too
            raise InvalidArgumentError(
                f"'vllm_max_num_batched_tokens' must be >= vllm_block_size "
                f"{self.vllm_block_size}, got {self.vllm_max_num_batched_tokens}"
            )

    def describe(self) -> str:
        """One line per setting, for the report."""
        return "\n".join(f"{f.name}: {getattr(self, f.name)}" for f in attrs.fields(type(self)))

    def prefill(
        self,
        rule: RuleName,
        length: int,
        start: int,
        message_ends: tuple[int, ...],
        branch_points: tuple[int, ...] = (),
    ) -> tuple[int, ...]:
        """The prompt positions ``rule`` shares in a prompt of ``length``, hit at ``start``."""
        if rule == "app":
            return prefix.app(length, message_ends=message_ends)
        if rule == "app-branches":
            return prefix.app(length, message_ends=branch_points)
        if rule == "vllm-align":
            return prefix.vllm_align(
                length,
                start=start,
                block_size=self.vllm_block_size,
                max_num_batched_tokens=self.vllm_max_num_batched_tokens,
            )
        if rule == "sglang":
            return prefix.sglang(
                length, start=start, chunked_prefill_size=self.sglang_chunked_prefill_size
            )
        if rule == "trtllm":
            return prefix.trtllm(
                length,
                periodic_snapshot_interval=self.trtllm_interval,
                tokens_per_block=self.trtllm_tokens_per_block,
            )
        return prefix.llamacpp(length, start=start, tail=self.llamacpp_tail)

    def decode(self, rule: RuleName, length: int, total: int) -> tuple[int, ...]:
        """The positions ``rule`` shares from the prompt end on; ``total`` counts the output."""
        if rule in APP_RULES:  # the end of the output
            return (total - 1,)
        if rule == "vllm-align":  # every block boundary decoding reaches, the prompt end included
            block = self.vllm_block_size
            return tuple(range(-(-length // block) * block, total, block))
        if rule == "sglang":  # the prompt end after prefill, everything fed when it finishes
            return tuple(sorted({length, total - 1}))
        if rule == "trtllm":  # an interval point that falls on the prompt end
            interval = self.trtllm_interval
            return (length,) if interval and length % interval == 0 else ()
        return ()
