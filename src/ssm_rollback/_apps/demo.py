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
time the rollbacks saved against recomputing from the prompt. The decoding
loop is the public ``backtracking_generate``; this module only sets it up.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import torch
from transformers.utils import logging as hf_logging

from ..integrations.transformers import backtracking_generate
from ..testing import tiny_config, tiny_model

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


def run_demo(options: DemoOptions, progress: Callable[[int, int], None]) -> DemoReport:
    """Decode ``options.length`` tokens with boundary rollback; ``progress(done, total)``."""
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    config = tiny_config(options.model_type)
    vocab: int = config.get_text_config(decoder=True).vocab_size
    model = tiny_model(options.model_type, seed=options.seed)
    rng = torch.Generator().manual_seed(options.seed)
    banned = torch.tensor([token % 11 == 5 for token in range(vocab)])  # what a validator rejects

    def reject(tokens: list[int]) -> int | None:
        # A banned token sends the row back before the token that precedes it.
        return max(len(tokens) - 2, 0) if banned[tokens[-1]] else None

    prompt = torch.randint(0, vocab, (1, PROMPT_LEN), generator=rng)
    result = backtracking_generate(
        model,
        prompt,
        attention_mask=torch.ones_like(prompt),  # random ids, the pad id among them: all real
        max_new_tokens=options.length,
        is_boundary=lambda token: token % 8 == 0,  # "punctuation"
        reject=reject,
        capacity=options.capacity,
        ban=banned,
        generator=rng,
        eos_token_id=(),  # the demo decodes ``length`` tokens, EOS or not
        check_rollbacks=True,
        progress=progress,
    )
    done = result.report
    return DemoReport(
        options.model_type,
        options.capacity,
        options.seed,
        tokens=done.tokens,
        boundaries=done.boundaries,
        snapshots=done.snapshots,
        rollbacks_served=done.rollbacks_served,
        rollbacks_declined=done.rollbacks_declined,
        tokens_regenerated=done.tokens_regenerated,
        mismatches=done.mismatches,
        rollback_seconds=done.rollback_seconds,
        recompute_seconds=done.recompute_seconds,
    )
