"""The Hugging Face decoders' contract: the default ban, ``generate``'s length, list prompts."""

from __future__ import annotations

import functools
import warnings

import pytest

pytest.importorskip("transformers")

import torch
from transformers import GenerationConfig
from transformers.utils import logging as hf_logging

from ssm_rollback import InvalidArgumentError
from ssm_rollback.integrations.transformers import (
    backtracking_generate,
    speculative_generate,
)
from ssm_rollback.testing import tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
PROMPT = [1, 2, 3, 4, 5, 6]


@functools.cache
def nemotron_h() -> torch.nn.Module:
    return tiny_model("nemotron_h")


# -- the default ban -------------------------------------------------------------------------------


@pytest.mark.parametrize("first", [1, 3])
def test_the_default_ban_holds_the_rejected_token_at_its_position(first: int) -> None:
    """Once the ban masked only the pick right after the boundary: greedy decoding came back
    to the rejected token at its position, rolled back again, and spent all 64 rollbacks."""
    refused: list[tuple[tuple[int, ...], int]] = []

    def reject(tokens: list[int]) -> int | None:
        if tokens[-1] % 7:
            return None
        refused.append((tuple(tokens[:-1]), tokens[-1]))
        return len(tokens)

    result = backtracking_generate(
        nemotron_h(),
        torch.tensor([[first, *PROMPT[1:]]]),
        max_new_tokens=24,
        is_boundary=lambda token: token % 3 == 0,
        reject=reject,
        eos_token_id=(),
    )
    output = result.sequences[0, len(PROMPT) :].tolist()
    assert len(output) == 24
    assert refused, "the case must reject something"
    for before, token in refused:
        at = len(before)
        assert output[:at] != list(before) or output[at] != token, (at, token)
    assert len(set(refused)) == len(refused), "a token was refused twice after the same tokens"
    assert result.report.rollbacks_served == len(refused) <= 6
    assert result.report.rollbacks_over_budget == 0


def test_an_explicit_ban_masks_the_pick_after_the_rollback_as_before() -> None:
    """With ``ban``, the pick right after a rollback avoids it; later picks are free."""
    seen: list[list[int]] = []

    def reject(tokens: list[int]) -> int | None:
        seen.append(tokens)
        return 0 if len(seen) == 1 else None

    plain = backtracking_generate(
        nemotron_h(), [PROMPT], max_new_tokens=3, is_boundary=set(), reject=lambda t: None
    )
    first = int(plain.sequences[0, len(PROMPT)])
    result = backtracking_generate(
        nemotron_h(), [PROMPT], max_new_tokens=3, is_boundary=set(), reject=reject, ban=[first]
    )
    assert int(result.sequences[0, len(PROMPT)]) != first


# -- model.generate's length -----------------------------------------------------------------------

DECODERS = [
    pytest.param(speculative_generate, {"draft": "prompt_lookup"}, id="speculative"),
    pytest.param(
        backtracking_generate, {"is_boundary": {3}, "reject": lambda t: None}, id="backtracking"
    ),
]


def _max_length_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "max_length" in str(w.message)]


@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS)
@pytest.mark.parametrize("new", [4, 21])  # under and past generate's default of 20 new tokens
def test_generate_with_max_new_tokens_warns_of_no_default_max_length(
    decoder: object, kwargs: dict[str, object], new: int
) -> None:
    """``generate`` once handed ``max_new_tokens`` straight to the decoder, as a keyword of its
    signature, left the config at the default ``max_length`` and warned that it used it."""
    prompt = torch.tensor([PROMPT])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = nemotron_h().generate(  # type: ignore[operator]
            prompt, max_new_tokens=new, custom_generate=decoder, **kwargs
        )
    assert _max_length_warnings(caught) == []
    assert result.sequences.shape == (1, len(PROMPT) + new)
    greedy = nemotron_h().generate(prompt, max_new_tokens=new, do_sample=False)  # type: ignore[operator]
    assert result.sequences.tolist() == greedy.tolist()


@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS)
def test_a_direct_call_warns_of_no_default_max_length(
    decoder: object, kwargs: dict[str, object]
) -> None:
    assert callable(decoder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = decoder(nemotron_h(), torch.tensor([PROMPT]), max_new_tokens=3, **kwargs)
    assert _max_length_warnings(caught) == []
    assert result.sequences.shape == (1, len(PROMPT) + 3)


@pytest.mark.usefixtures("quiet_warnings")  # generate warns that it used its default length
@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS)
def test_without_a_length_a_direct_call_makes_generates_default_20_new_tokens(
    decoder: object, kwargs: dict[str, object]
) -> None:
    """With no length set anywhere, ``generate`` makes ``max_length`` (20) new tokens, the whole
    capped at ``max_position_embeddings``: a direct call given a config without a length once
    made 20 less the prompt, and one given no config at all was refused."""
    assert callable(decoder)
    prompt = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12, 13, 14]])
    short = tiny_model("nemotron_h", max_position_embeddings=24)
    for lm, new in ((nemotron_h(), 20), (short, 14)):
        for settings in (
            {"generation_config": GenerationConfig(do_sample=False, eos_token_id=127)},  # type: ignore[no-untyped-call]
            {"do_sample": False, "eos_token_id": 127},
        ):
            expected = lm.generate(prompt, **settings)  # type: ignore[operator]
            assert expected.shape == (1, 10 + new)
            got = decoder(lm, prompt, **kwargs, **settings)
            assert got.sequences.tolist() == expected.tolist()
    # A max_length that is set stays the whole length, as in generate.
    got = decoder(short, prompt, max_length=15, eos_token_id=127, **kwargs)
    assert got.sequences.shape == (1, 15)


# -- list prompts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS)
def test_a_list_prompt_decodes_as_the_tensor_does(
    decoder: object, kwargs: dict[str, object]
) -> None:
    assert callable(decoder)
    expected = decoder(nemotron_h(), torch.tensor([PROMPT]), max_new_tokens=4, **kwargs)
    for given in (PROMPT, [PROMPT], tuple(PROMPT)):
        result = decoder(nemotron_h(), given, max_new_tokens=4, **kwargs)
        assert result.sequences.tolist() == expected.sequences.tolist(), given
        assert result.report == expected.report


def test_a_list_batch_pads_as_the_tensor_does() -> None:
    rows = [[11, 12, 13, 14], [0, 0, 21, 22]]
    mask = [[1, 1, 1, 1], [0, 0, 1, 1]]
    as_lists = backtracking_generate(
        nemotron_h(),
        rows,
        attention_mask=torch.tensor(mask),
        max_new_tokens=3,
        is_boundary={4},
        reject=lambda t: None,
    )
    as_tensor = backtracking_generate(
        nemotron_h(),
        torch.tensor(rows),
        attention_mask=torch.tensor(mask),
        max_new_tokens=3,
        is_boundary={4},
        reject=lambda t: None,
    )
    assert as_lists.sequences.tolist() == as_tensor.sequences.tolist()


# -- prompts holding the pad id --------------------------------------------------------------------


@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS)
def test_a_direct_call_without_a_mask_pads_where_the_pad_id_is_as_generate_does(
    decoder: object, kwargs: dict[str, object]
) -> None:
    """Without ``attention_mask``, ``generate`` masks the pad id's positions (the model's pad
    id is 0, its EOS 2): the decoders once decoded them as real tokens, and their output
    differed from generate's."""
    assert callable(decoder)
    lm = nemotron_h()

    def both(ids: torch.Tensor, **settings: object) -> tuple[list[int], list[int]]:
        expected = lm.generate(ids, max_new_tokens=4, do_sample=False, **settings)  # type: ignore[operator]
        got = decoder(lm, ids, max_new_tokens=4, **kwargs, **settings)
        return got.sequences.tolist(), expected.tolist()

    padded = torch.tensor([[0, 0, 0, 0, 0, 100, 101], [11, 12, 13, 14, 15, 16, 17]])
    got, expected = both(padded)
    assert got == expected
    assert got[0] != both(padded, attention_mask=torch.ones_like(padded))[1][0]
    # A pad id passed as a keyword is the one masked; one that is also an EOS id masks nothing.
    got, expected = both(padded + 3, pad_token_id=3)
    assert got == expected
    got, expected = both(padded, pad_token_id=0, eos_token_id=[5, 0])
    assert got == expected == both(padded, attention_mask=torch.ones_like(padded))[1]
    # A pad id after a real token would leave a hole in the mask: refused, with the way out.
    with pytest.raises(InvalidArgumentError, match=r"derived from pad id 0.*ones_like"):
        decoder(lm, torch.tensor([[5, 0, 6]]), max_new_tokens=2, **kwargs)
