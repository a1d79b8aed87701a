"""The main job: boundary-rollback decoding on a tiny random hybrid model, checked bit for bit.

A tiny, randomly initialised hybrid model (built from a ``transformers``
config in this package; nothing is downloaded) decodes one sequence. Some
token ids are boundaries (think punctuation); others are banned (think a
grammar or a tool-call validator saying no). When a banned token is sampled,
the sequence is rolled back to its last boundary that still has a snapshot:
the SSM state is restored from the snapshot, the attention KV cropped, and
the next token resampled with the banned ones masked out. Every rollback is
then checked against a fresh decode of the kept prefix from the prompt: the
logits must be bitwise equal. The report counts what happened and how much
time the rollbacks saved against recomputing from the prompt.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs
import torch
from transformers import AutoModelForCausalLM, PretrainedConfig
from transformers.cache_utils import Cache
from transformers.utils import logging as hf_logging

from ._ring import SsmDecodeRing
from .integrations.transformers import HybridCacheSnapshotPool, crop_attention
from .pool import apply_effects
from .rollback import RollbackPlan, rollback_to_boundary, snapshot_boundary_if_ssm
from .testing._tiny import tiny_config

__all__ = ["DEFAULT_MODEL_TYPE", "DemoOptions", "DemoReport", "run_demo"]

DEFAULT_MODEL_TYPE = "nemotron_h"
PROMPT_LEN = 8


@attrs.frozen
class DemoOptions:
    """What the demo decodes: model type, ring capacity, generated length, seed."""

    model_type: str = DEFAULT_MODEL_TYPE
    capacity: int = 4
    length: int = 64
    seed: int = 0


@attrs.define
class DemoReport:
    """What happened, for the summary table and ``--json``."""

    model_type: str
    capacity: int
    seed: int
    tokens: int = 0
    boundaries: int = 0
    snapshots: int = 0
    rollbacks_served: int = 0
    rollbacks_declined: int = 0
    tokens_regenerated: int = 0
    mismatches: int = 0
    rollback_seconds: float = 0.0
    recompute_seconds: float = 0.0

    @property
    def time_saved_seconds(self) -> float:
        """Recomputing each kept prefix from the prompt, minus restoring and cropping instead."""
        return self.recompute_seconds - self.rollback_seconds

    def to_dict(self) -> dict[str, object]:
        data = attrs.asdict(self)
        data["time_saved_seconds"] = self.time_saved_seconds
        return data


class _Model:
    """A tiny model and one-token-at-a-time forward passes over a cache."""

    def __init__(self, config: PretrainedConfig, seed: int) -> None:
        torch.manual_seed(seed)
        model: torch.nn.Module = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
        self.model = model.eval()

    def forward(self, ids: list[int], cache: Cache | None) -> tuple[torch.Tensor, Cache]:
        with torch.no_grad():
            inputs = torch.tensor([ids], dtype=torch.long)
            out = self.model(inputs, use_cache=True, **({} if cache is None else {"cache": cache}))
        logits: torch.Tensor = out.logits[0, -1]
        return logits, out.cache

    def fresh(self, prompt: list[int], tokens: list[int]) -> torch.Tensor:
        """Logits after the prompt and then ``tokens`` one at a time, from scratch."""
        logits, cache = self.forward(prompt, None)
        for token in tokens:
            logits, cache = self.forward([token], cache)
        return logits


def run_demo(options: DemoOptions, progress: Callable[[int, int], None]) -> DemoReport:
    """Decode ``options.length`` tokens with boundary rollback; ``progress(done, total)``."""
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    config = tiny_config(options.model_type)
    vocab: int = config.get_text_config(decoder=True).vocab_size
    model = _Model(config, options.seed)
    rng = torch.Generator().manual_seed(options.seed)
    is_boundary = [token % 8 == 0 for token in range(vocab)]  # "punctuation"
    banned = torch.tensor([token % 11 == 5 for token in range(vocab)])  # what a validator rejects

    prompt = torch.randint(0, vocab, (PROMPT_LEN,), generator=rng).tolist()
    logits, cache = model.forward(prompt, None)
    pool = HybridCacheSnapshotPool(cache, options.capacity)
    rings = [SsmDecodeRing(options.capacity)]
    report = DemoReport(options.model_type, options.capacity, options.seed)
    output: list[int] = []
    boundaries: list[int] = []
    logits_after = [logits]  # logits_after[n]: the next-token logits after n tokens

    def sample(scores: torch.Tensor, mask_banned: bool) -> int:
        scores = scores[:vocab]  # a padded LM head may score ids the embedding lacks
        if mask_banned:
            scores = scores.masked_fill(banned, float("-inf"))
        return int(torch.multinomial(torch.softmax(scores.float(), -1), 1, generator=rng))

    while len(output) < options.length:
        token = sample(logits_after[-1], mask_banned=False)
        checked = False
        if banned[token]:
            plan = (
                rollback_to_boundary(
                    rings[0], boundaries, seq=0, current_len=len(output), at_most=len(output) - 1
                )
                if output
                else None
            )
            if isinstance(plan, RollbackPlan):
                started = time.perf_counter()
                apply_effects(pool, plan.effects, rings)
                crop_attention(cache, PROMPT_LEN + plan.keep_len)
                report.rollback_seconds += time.perf_counter() - started
                del output[plan.keep_len :], logits_after[plan.keep_len + 1 :]
                del boundaries[boundaries.index(plan.keep_len) + 1 :]
                report.rollbacks_served += 1
                report.tokens_regenerated += plan.tokens_dropped
                checked = True
            else:
                report.rollbacks_declined += 1
            token = sample(logits_after[-1], mask_banned=True)

        output.append(token)
        if is_boundary[token]:
            boundaries.append(len(output))
        save = snapshot_boundary_if_ssm(
            rings[0],
            seq=0,
            token_position=len(output),
            is_boundary=is_boundary[token],
            in_thinking=False,
        )
        logits, cache = model.forward([token], cache)
        logits_after.append(logits)
        if save is not None:
            apply_effects(pool, [save], rings)
            report.snapshots += 1
        if checked:
            # What an engine without snapshots would do instead: prefill the kept prefix again.
            started = time.perf_counter()
            model.forward(prompt + output[:-1], None)
            report.recompute_seconds += time.perf_counter() - started
            # The check: a fresh step-by-step decode of the same tokens, bit for bit.
            report.mismatches += not torch.equal(logits, model.fresh(prompt, output))
        progress(len(output), options.length)

    report.tokens = len(output)
    report.boundaries = len(boundaries)
    return report
