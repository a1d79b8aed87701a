"""Behaviours of the Hugging Face decoders the mutation check showed untested: the prompt-lookup
rule, the draft checks, the logits a rollback resamples from, the argument checks and the chat
boundaries. Each test names the mutant it kills."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import pytest

pytest.importorskip("transformers")

import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from ssm_rollback import InvalidArgumentError
from ssm_rollback.integrations._hf.drafting import prompt_lookup
from ssm_rollback.integrations.transformers import (
    backtracking_generate,
    message_boundaries,
    speculative_generate,
)
from ssm_rollback.testing import tiny_config, tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
pytestmark = pytest.mark.usefixtures("quiet_warnings")

V = 128
NEW = 6
PROMPT = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 9]])


@functools.cache
def model(model_type: str = "nemotron_h", seed: int = 0, **overrides: int) -> torch.nn.Module:
    return tiny_model(model_type, seed=seed, **overrides)


# -- prompt lookup ----------------------------------------------------------------------------


def test_prompt_lookup_prefers_the_longest_ngram() -> None:
    """The last 2-gram (7, 3) matched at 1 wins over the last 1-gram (3) matched earlier, at 0.
    Kills ``draft_lookup_shortest_ngram_first``."""
    tokens = [3, 7, 3, 5, 7, 3]
    assert prompt_lookup(tokens, 2) == [5, 7]
    assert prompt_lookup(tokens, 2, max_ngram=1) == [7, 3]


# -- a draft function's and an assistant's checks ---------------------------------------------


def test_a_draft_function_returning_one_id_past_k_is_refused() -> None:
    """k + 1 ids are one too many. Kills ``draft_too_many_ok``."""
    with pytest.raises(InvalidArgumentError, match=r"must return at most k=4 token ids, got 5"):
        speculative_generate(
            model(),
            PROMPT,
            max_new_tokens=NEW,
            num_draft_tokens=4,
            draft=lambda t, k: [5] * (k + 1),
        )


def test_an_assistant_with_a_larger_vocabulary_is_refused() -> None:
    """An assistant of twice the target's vocabulary could draft ids the target does not have.
    Kills ``draft_vocab_smaller_ok``."""
    large = model("nemotron_h", 1, vocab_size=2 * V)
    with pytest.raises(InvalidArgumentError, match="'draft' must be a causal LM with the target"):
        speculative_generate(model(), PROMPT, max_new_tokens=NEW, draft=large)


# -- backtracking: the logits a rollback picks from -------------------------------------------


def _reject_once_at_six(back_to: int) -> Callable[[list[int]], int | None]:
    """Refuses the 6th new token once, rolling back to at most ``back_to`` new tokens."""
    rejected: list[int] = []

    def reject(tokens: list[int]) -> int | None:
        if len(tokens) == 6 and not rejected:
            rejected.append(tokens[-1])
            return back_to
        return None

    return reject


def test_a_rollback_picks_the_next_token_from_the_logits_at_the_kept_length() -> None:
    """Greedy, every token a boundary: the 6th new token refused once, with a rollback to 3
    new tokens, decodes the two dropped tokens again and then picks as a rollback that drops
    nothing does (the refused token masked there). Kills ``gen_logits_kept_past_the_cut``
    (a pick from the logits after 4 tokens)."""
    common: dict[str, object] = {
        "max_new_tokens": 8,
        "is_boundary": lambda token: True,
        "capacity": 8,
        "eos_token_id": (),
    }
    kept = backtracking_generate(model(), PROMPT, reject=_reject_once_at_six(5), **common)  # type: ignore[arg-type]
    rolled = backtracking_generate(model(), PROMPT, reject=_reject_once_at_six(3), **common)  # type: ignore[arg-type]
    assert (kept.report.tokens_regenerated, rolled.report.tokens_regenerated) == (0, 2)
    assert rolled.report.rollbacks_served == 1
    assert rolled.sequences.tolist() == kept.sequences.tolist()


# -- argument checks --------------------------------------------------------------------------


def test_a_bool_among_token_ids_is_refused() -> None:
    """``True`` is not id 1. Kills ``args_bool_ids_ok``."""
    with pytest.raises(InvalidArgumentError, match="'ban' must be token ids"):
        backtracking_generate(
            model(), PROMPT, max_new_tokens=NEW, is_boundary={4}, reject=lambda t: 0, ban=[True]
        )


def _speculate_sampled(m: torch.nn.Module, generator: torch.Generator) -> object:
    return speculative_generate(m, PROMPT, max_new_tokens=NEW, generator=generator)


def _backtrack_sampled(m: torch.nn.Module, generator: torch.Generator) -> object:
    return backtracking_generate(
        m, PROMPT, max_new_tokens=NEW, is_boundary={4}, reject=lambda t: None, generator=generator
    )


@pytest.mark.parametrize("decoder", [_speculate_sampled, _backtrack_sampled])
def test_a_generator_on_another_device_than_the_model_is_refused(
    decoder: Callable[[torch.nn.Module, torch.Generator], object],
) -> None:
    """A CPU generator for a model on another device (``meta`` here, which every machine has).
    Kills ``args_generator_device_unchecked``."""
    with torch.device("meta"):
        elsewhere: torch.nn.Module = AutoModelForCausalLM.from_config(tiny_config("nemotron_h"))  # type: ignore[no-untyped-call]
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(InvalidArgumentError, match=r"'generator' must be on the model's device"):
        decoder(elsewhere, generator)


# -- chat boundaries --------------------------------------------------------------------------


class _SkipsEmptyMessages:
    """A chat template that renders a message with no content as nothing, and each other
    message as its role id and one id per character of its content."""

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, object]], **kwargs: object
    ) -> list[int]:
        ids: list[int] = []
        for message in messages:
            content = str(message["content"])
            if content:
                ids += [1 if message["role"] == "user" else 2, *(ord(c) for c in content)]
        return ids + ([3] if kwargs.get("add_generation_prompt") else [])


def test_a_message_rendered_as_nothing_adds_no_repeated_boundary() -> None:
    """An empty message ends where the one before it ends: that position is given once.
    Kills ``chat_repeated_boundary_kept``."""
    chat = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "ok"},
    ]
    ends = message_boundaries(_SkipsEmptyMessages(), chat, add_generation_prompt=True)
    assert ends == (3, 6)
