"""The Hugging Face decoders on tiny random hybrid models: greedy speculative output equals greedy
``model.generate`` token for token, and backtracking rows equal fresh decodes of what they kept.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator

import pytest

pytest.importorskip("transformers")

import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from ssm_rollback import InvalidArgumentError
from ssm_rollback.integrations.transformers import (
    GenerationResult,
    backtracking_generate,
    speculative_generate,
)
from ssm_rollback.testing._tiny import tiny_config

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]

#: Hybrid model types under test: attention + Mamba2, + gated delta-net (MoE too), + short conv.
MODEL_TYPES = (
    "bamba",
    "falcon_h1",
    "granitemoehybrid",
    "jamba",
    "lfm2",
    "mamba2",
    "nemotron_h",
    "qwen3_5_moe_text",
    "qwen3_next",
    "zamba2",
)
NEW = 8


@pytest.fixture(autouse=True)
def _quiet_transformers() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@functools.cache
def model(model_type: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    built: torch.nn.Module = AutoModelForCausalLM.from_config(tiny_config(model_type))  # type: ignore[no-untyped-call]
    return built.eval()


def prompt(seed: int) -> torch.Tensor:
    """A prompt that repeats itself, so that prompt lookup finds matches."""
    ids = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(seed))
    return torch.cat([ids, ids[:, :4]], dim=1)


@functools.cache
def greedy(model_type: str, seed: int) -> torch.Tensor:
    out: torch.Tensor = model(model_type).generate(  # type: ignore[operator]
        prompt(seed), max_new_tokens=NEW, do_sample=False
    )
    return out


@pytest.mark.parametrize(("index", "model_type"), list(enumerate(MODEL_TYPES)))
def test_greedy_speculative_equals_greedy_generate(index: int, model_type: str) -> None:
    """One seed and draft length per type, so that the matrix covers k = 1..6 and stays fast."""
    target = model(model_type)
    for seed, k in ((index, 1 + index % 6),):
        expected = greedy(model_type, seed)
        looked_up = speculative_generate(
            target, prompt(seed), max_new_tokens=NEW, draft="prompt_lookup", num_draft_tokens=k
        )
        assisted = speculative_generate(
            target,
            prompt(seed),
            max_new_tokens=NEW,
            draft=model(model_type, 1),
            num_draft_tokens=k + 1,
        )
        assert looked_up.sequences.tolist() == expected.tolist(), (seed, k, "prompt lookup")
        assert assisted.sequences.tolist() == expected.tolist(), (seed, k, "assistant")
        assert assisted.report.drafts_proposed > 0


@pytest.mark.parametrize("k", [2, 5])
def test_an_oracle_drafter_needs_one_forward_pass_per_k_plus_one_tokens(k: int) -> None:
    expected = greedy("nemotron_h", 0)

    def oracle(tokens: list[int], n: int) -> list[int]:
        return expected[0, len(tokens) : len(tokens) + n].tolist()

    result = speculative_generate(
        model("nemotron_h"), prompt(0), max_new_tokens=NEW, draft=oracle, num_draft_tokens=k
    )
    assert result.sequences.tolist() == expected.tolist()
    assert result.report.drafts_accepted == result.report.drafts_proposed
    assert result.report.forward_passes == 1 + -(-(NEW - 1) // (k + 1))
    assert result.report.rollbacks_served == 0


def test_wrong_drafts_are_undone_exactly() -> None:
    """A drafter that is always wrong after its first token: every step rolls back."""
    expected = greedy("qwen3_next", 1)

    def half_right(tokens: list[int], n: int) -> list[int]:
        right = expected[0, len(tokens) : len(tokens) + n].tolist()
        return [*right[:1], *[(t + 1) % 128 for t in right[1:]]]

    result = speculative_generate(
        model("qwen3_next"), prompt(1), max_new_tokens=NEW, draft=half_right, num_draft_tokens=3
    )
    assert result.sequences.tolist() == expected.tolist()
    assert result.report.rollbacks_served > 0


def test_boundary_snapshots_during_speculation_keep_the_output() -> None:
    expected = greedy("bamba", 2)
    result = speculative_generate(
        model("bamba"),
        prompt(2),
        max_new_tokens=NEW,
        draft="prompt_lookup",
        num_draft_tokens=3,
        is_boundary=lambda token: token % 3 == 0,
        capacity=2,
    )
    assert result.sequences.tolist() == expected.tolist()


def test_model_generate_runs_it_as_custom_generate() -> None:
    result = model("nemotron_h").generate(  # type: ignore[operator]
        prompt(0), max_new_tokens=NEW, custom_generate=speculative_generate, draft="prompt_lookup"
    )
    assert isinstance(result, GenerationResult)
    assert result.sequences.tolist() == greedy("nemotron_h", 0).tolist()


def test_speculative_refuses_a_batch() -> None:
    with pytest.raises(InvalidArgumentError, match="one row"):
        speculative_generate(model("lfm2"), torch.zeros(2, 3, dtype=torch.long), max_new_tokens=2)


def _reject_multiples_of_five(tokens: list[int]) -> int | None:
    return max(len(tokens) - 3, 0) if tokens[-1] % 5 == 0 else None


@pytest.mark.parametrize("model_type", ["nemotron_h"])
def test_backtracking_rows_equal_fresh_decodes_after_every_rollback(model_type: str) -> None:
    result = backtracking_generate(
        model(model_type),
        prompt(3),
        max_new_tokens=10,
        is_boundary=lambda token: token % 4 == 0,
        reject=_reject_multiples_of_five,
        capacity=3,
        generator=torch.Generator().manual_seed(0),
        eos_token_id=(),
        check_rollbacks=True,
    )
    assert result.report.rollbacks_served > 0
    assert result.report.mismatches == 0
    assert result.sequences.shape == (1, 10 + 10)


def test_backtracking_rows_roll_back_on_their_own() -> None:
    """A batch's rows roll back to different lengths; each equals its own batch-1 decode."""
    prompts = torch.cat([prompt(4), prompt(5)])
    common = {
        "max_new_tokens": 8,
        "is_boundary": {0, 4, 8, 12, 16, 20, 24},
        "reject": _reject_multiples_of_five,
        "capacity": 4,
        "eos_token_id": (),
    }
    batch = backtracking_generate(model("falcon_h1"), prompts, **common)  # type: ignore[arg-type]
    rows = [backtracking_generate(model("falcon_h1"), p[None], **common) for p in prompts]  # type: ignore[arg-type]
    assert batch.report.rollbacks_served == sum(r.report.rollbacks_served for r in rows)
    for i, row in enumerate(rows):
        assert batch.sequences[i].tolist() == row.sequences[0].tolist()
