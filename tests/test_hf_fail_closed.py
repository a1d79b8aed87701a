"""The Hugging Face decoders honour or refuse every argument: nothing is dropped silently.

Each test names a case that failed open or raised a foreign error before: an
``attention_mask`` with left padding that was ignored, keywords that were
swallowed, a ``reject`` that refuses everything and never ended, token ids
outside the vocabulary that indexed from the end or crashed in torch, and a
model whose own multi-token cached forward pass dies inside attention.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

import pytest

pytest.importorskip("transformers")

import torch
from transformers import DynamicCache
from transformers.utils import logging as hf_logging

from ssm_rollback import InvalidArgumentError
from ssm_rollback.integrations.transformers import (
    GenerationResult,
    HybridPrefixCache,
    backtracking_generate,
    speculative_generate,
)
from ssm_rollback.testing import tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
pytestmark = pytest.mark.usefixtures("quiet_warnings")

V = 128
NEW = 6


@functools.cache
def model(model_type: str = "nemotron_h", seed: int = 0, **overrides: int) -> torch.nn.Module:
    return tiny_model(model_type, seed=seed, **overrides)


def greedy(m: torch.nn.Module, ids: torch.Tensor, **kwargs: object) -> list[list[int]]:
    out: torch.Tensor = m.generate(ids, max_new_tokens=NEW, do_sample=False, **kwargs)  # type: ignore[operator]
    return out.tolist()


PROMPT = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 9]])
#: Two rows, the second left-padded by three positions (its pad id is a real token: masked).
PADDED = torch.tensor([[11, 12, 13, 14, 15, 16, 17], [0, 0, 0, 21, 22, 23, 24]])
MASK = torch.tensor([[1] * 7, [0, 0, 0, 1, 1, 1, 1]])


def never(tokens: list[int]) -> int | None:
    return None


class Decoder(Protocol):
    """A decoder under test, called on a model and its prompt."""

    def __call__(
        self, m: torch.nn.Module, ids: torch.Tensor, /, **kwargs: object
    ) -> GenerationResult: ...


def _speculate(m: torch.nn.Module, ids: torch.Tensor, **kwargs: object) -> GenerationResult:
    return speculative_generate(m, ids, max_new_tokens=NEW, **kwargs)  # type: ignore[arg-type]


def _backtrack(m: torch.nn.Module, ids: torch.Tensor, **kwargs: object) -> GenerationResult:
    return backtracking_generate(
        m,
        ids,
        max_new_tokens=NEW,
        is_boundary={4, 8},
        reject=never,
        **kwargs,  # type: ignore[arg-type]
    )


# -- 1. attention_mask -------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["nemotron_h", "lfm2"])
def test_backtracking_honours_a_left_padded_attention_mask(model_type: str) -> None:
    """Before, the mask was refused as an unknown keyword directly and, through generate, the
    padding was decoded as prompt tokens; now each row decodes as generate's padded batch."""
    m = model(model_type)
    expected = greedy(m, PADDED, attention_mask=MASK)
    direct = _backtrack(m, PADDED, attention_mask=MASK)
    through = m.generate(  # type: ignore[operator]
        PADDED,
        attention_mask=MASK,
        max_new_tokens=NEW,
        custom_generate=backtracking_generate,
        is_boundary={4, 8},
        reject=never,
    )
    assert direct.sequences.tolist() == expected
    assert through.sequences.tolist() == expected


def test_backtracking_refuses_right_padding_and_holes() -> None:
    for mask in ([[1, 1, 1, 1, 1, 1, 0], [1] * 7], [[1] * 7, [1, 0, 1, 1, 1, 1, 1]]):
        with pytest.raises(InvalidArgumentError, match="'attention_mask' must pad on the left"):
            _backtrack(model(), PADDED, attention_mask=torch.tensor(mask))


@pytest.mark.parametrize("model_type", ["nemotron_h", "lfm2"])
@pytest.mark.parametrize("draft", ["prompt_lookup", "model"])
def test_speculative_honours_a_left_padded_attention_mask(model_type: str, draft: str) -> None:
    """Before, a batch was refused ("one row") and so was any padding; now each row decodes
    on its own, its padding dropped, and the batch comes back as generate's padded one."""
    m = model(model_type)
    expected = greedy(m, PADDED, attention_mask=MASK)
    drafted: dict[str, object] = {"draft": m} if draft == "model" else {}
    direct = _speculate(m, PADDED, attention_mask=MASK, **drafted)
    through = m.generate(  # type: ignore[operator]
        PADDED,
        attention_mask=MASK,
        max_new_tokens=NEW,
        custom_generate=speculative_generate,
        **drafted,
    )
    assert direct.sequences.tolist() == expected
    assert through.sequences.tolist() == expected
    if draft == "model":  # the assistant drafts every row from that row's own tokens
        assert direct.report.drafts_accepted == direct.report.drafts_proposed > 0
    assert direct.report.tokens == 2 * NEW


def test_speculative_processors_see_a_padded_row_as_generate_does() -> None:
    """The processors see a left-padded row as given (its pad ids in front), as generate's do;
    a repetition penalty ignores those pad positions, as generate's does from the mask."""
    m = model()
    penalty = {"repetition_penalty": 3.0, "attention_mask": MASK}
    assert _speculate(m, PADDED, **penalty).sequences.tolist() == greedy(m, PADDED, **penalty)


def test_speculative_takes_an_all_ones_attention_mask() -> None:
    ones = torch.ones_like(PROMPT)
    result = speculative_generate(model(), PROMPT, max_new_tokens=NEW, attention_mask=ones)
    assert result.sequences.tolist() == greedy(model(), PROMPT)


# -- 2. keywords ---------------------------------------------------------------------------


def _filled_cache() -> DynamicCache:
    with torch.no_grad():
        cache: DynamicCache = model()(PROMPT, use_cache=True).cache
    return cache


@pytest.mark.parametrize("decoder", [_speculate, _backtrack])
@pytest.mark.parametrize(
    ("keyword", "value", "named"),
    [
        ("foo", 1, "'foo'"),
        ("temprature", 0.5, "'temprature'"),
        ("past_key_values", "filled", "'past_key_values' must be empty"),
        ("cache", "filled", "'cache' must be empty"),
        ("pad_token_id", "x", "'pad_token_id'"),
        ("pad_token_id", -1, "'pad_token_id'"),
        ("use_cache", False, "'use_cache'"),
        ("position_ids", torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10]]), "'position_ids'"),
        ("logits_processor", [object()], "logits processors"),
        ("stopping_criteria", [object()], "'stopping_criteria'"),
    ],
)
def test_every_keyword_is_used_or_refused_by_name(
    decoder: Decoder, keyword: str, value: object, named: str
) -> None:
    """Before, speculative_generate swallowed all of these in ``**generate_kwargs``."""
    kwargs = {keyword: _filled_cache() if value == "filled" else value}
    with pytest.raises(InvalidArgumentError, match=named):
        decoder(model(), PROMPT, **kwargs)


@pytest.mark.parametrize("decoder", [speculative_generate, backtracking_generate])
@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"num_beams": 2}, "greedy decoding or sampling"),
        ({"output_attentions": True, "return_dict_in_generate": True}, "output_attentions"),
        ({"max_time": 5.0}, "generation_config.max_time"),
        ({"guidance_scale": 2.0}, "'guidance_scale' must be None or 1"),
    ],
)
def test_generate_settings_a_decoder_cannot_honour_are_refused(
    decoder: object, setting: dict[str, object], named: str
) -> None:
    """Through model.generate: before, beam search, extra outputs, a time limit and sampling
    without a generator were silently decoded greedily (backtracking raised a TypeError)."""
    extra = {"is_boundary": {4}, "reject": never} if decoder is backtracking_generate else {}
    with pytest.raises(InvalidArgumentError, match=named):
        model().generate(  # type: ignore[operator]
            PROMPT, max_new_tokens=NEW, custom_generate=decoder, **setting, **extra
        )


@pytest.mark.parametrize("decoder", [speculative_generate, backtracking_generate])
def test_generate_passes_its_length_and_ids_through(decoder: object) -> None:
    """``max_length`` instead of ``max_new_tokens``, and ``eos_token_id``: as plain generate.
    Before, speculative_generate raised a TypeError without max_new_tokens."""
    extra = {"is_boundary": {4}, "reject": never} if decoder is backtracking_generate else {}
    m = model()
    for kwargs in ({"max_length": 12}, {"max_new_tokens": 5, "eos_token_id": 60}):
        expected: torch.Tensor = m.generate(PROMPT, do_sample=False, **kwargs)  # type: ignore[operator]
        got = m.generate(PROMPT, custom_generate=decoder, **kwargs, **extra)  # type: ignore[operator]
        assert got.sequences.tolist() == expected.tolist(), kwargs


# -- 3. the rollback budget --------------------------------------------------------------


def test_a_reject_that_refuses_everything_ends_within_its_rollback_budget() -> None:
    """Every candidate refused, a boundary at every token: before, the row rolled back forever
    (thousands of rejects at length 4). Now each row serves ``max_rollbacks`` rollbacks, then
    declines the rest and keeps decoding; the report counts them."""
    calls = 0

    def refuse_everything(tokens: list[int]) -> int:
        nonlocal calls
        calls += 1
        assert calls < 2_000, "the row never ends"
        return max(len(tokens) - 2, 0)  # back past the newest token: the row never grows

    for rows, budget, expected_served in ((2, 3, 2 * 3), (1, None, 64)):
        calls = 0
        kwargs = {} if budget is None else {"max_rollbacks": budget}
        result = backtracking_generate(
            model(),
            PROMPT.expand(rows, -1),
            max_new_tokens=NEW,
            is_boundary=lambda token: True,
            reject=refuse_everything,
            capacity=NEW,
            eos_token_id=(),
            **kwargs,  # type: ignore[arg-type]
        )
        report = result.report
        assert result.sequences.shape == (rows, PROMPT.shape[1] + NEW)
        assert report.rollbacks_served == expected_served
        assert report.rollbacks_over_budget > 0
        assert report.rollbacks_declined >= report.rollbacks_over_budget


def test_max_rollbacks_zero_declines_every_rollback() -> None:
    result = backtracking_generate(
        model(),
        PROMPT,
        max_new_tokens=NEW,
        is_boundary=lambda token: True,
        reject=lambda tokens: max(len(tokens) - 2, 0),
        max_rollbacks=0,
        eos_token_id=(),
    )
    assert result.report.rollbacks_served == 0
    assert result.report.rollbacks_over_budget == NEW - 1  # the first candidate has no boundary


# -- 4. token ids and the like -------------------------------------------------------------


def _draft_returning(value: object) -> Callable[[list[int], int], object]:
    return lambda tokens, k: value


BAD_BACKTRACKING: list[tuple[dict[str, object], str]] = [
    ({"ban": [-1]}, "'ban' must be token ids in"),
    ({"ban": torch.tensor([0.5])}, "'ban' must be token ids"),
    ({"ban": [V + 5]}, "'ban' must be token ids in"),
    ({"ban": ["a"]}, "'ban' must be token ids"),
    ({"ban": "ab"}, "'ban' must be a collection"),
    (
        {"ban": torch.ones(V - 1, dtype=torch.bool)},
        r"'ban' as a bool mask must have shape \(128,\)",
    ),
    ({"ban": torch.ones(2, V, dtype=torch.bool)}, r"'ban' as a bool mask must have shape"),
    ({"eos_token_id": "x"}, "'eos_token_id'"),
    ({"eos_token_id": -1}, "'eos_token_id'"),
    ({"is_boundary": {"x"}}, "'is_boundary'"),
    ({"is_boundary": {V}}, "'is_boundary'"),
    ({"is_boundary": lambda token: "yes"}, "'is_boundary' must return a bool"),
    ({"generator": 1}, "'generator'"),
    ({"max_rollbacks": -1}, "'max_rollbacks'"),
    ({"check_rollbacks": "yes"}, "'check_rollbacks'"),
    ({"progress": 1}, "'progress'"),
    ({"reject": lambda tokens: "x"}, r"'reject\(\)'"),
]


@pytest.mark.parametrize(("kwargs", "named"), BAD_BACKTRACKING)
def test_backtracking_names_each_bad_argument(kwargs: dict[str, object], named: str) -> None:
    """Before: ban=[-1] banned the last id, a float ban banned id 0, the others raised
    IndexError, ValueError or TypeError from torch or Python, or were taken as truthy."""
    call: dict[str, object] = {"is_boundary": {4}, "reject": lambda tokens: 0, **kwargs}
    before = repr(kwargs)  # what a ban list or mask held
    with pytest.raises(InvalidArgumentError, match=named):
        backtracking_generate(model(), PROMPT, max_new_tokens=NEW, **call)  # type: ignore[arg-type]
    assert repr(kwargs) == before


BAD_SPECULATIVE: list[tuple[dict[str, object], str]] = [
    ({"draft": _draft_returning("abc")}, r"'draft\(tokens, k\)' must return a list"),
    ({"draft": _draft_returning(None)}, r"'draft\(tokens, k\)' must return a list"),
    (
        {"draft": _draft_returning(torch.tensor([[5, 6]]))},
        r"'draft\(tokens, k\)' must return a 1-D",
    ),
    ({"draft": _draft_returning([5.7])}, r"'draft\(tokens, k\)' must return token ids"),
    ({"draft": _draft_returning(torch.tensor([5.0]))}, r"'draft\(tokens, k\)' must return token"),
    ({"draft": _draft_returning([V])}, r"'draft\(tokens, k\)' must return token ids in"),
    ({"draft": _draft_returning([5] * 9)}, r"must return at most k=4"),
    ({"draft": "lookup"}, "'draft' must be 'prompt_lookup'"),
    ({"draft": torch.nn.Linear(2, 2)}, "'draft' must be a transformers causal LM"),
    ({"eos_token_id": "x"}, "'eos_token_id'"),
    ({"eos_token_id": [2, V]}, "'eos_token_id'"),
    ({"is_boundary": {"x"}, "capacity": 2}, "'is_boundary'"),
    ({"generator": 1}, "'generator'"),
    ({"pad_token_id": "x"}, "'pad_token_id'"),
    ({"num_draft_tokens": 1.5}, "'num_draft_tokens'"),
]


@pytest.mark.parametrize(("kwargs", "named"), BAD_SPECULATIVE)
def test_speculative_names_each_bad_argument(kwargs: dict[str, object], named: str) -> None:
    """Before: a float draft was truncated by int(), a 2-D draft tensor or a string crashed in
    int(), None raised a TypeError, 'x' ids a ValueError, generator=1 a TypeError in torch."""
    with pytest.raises(InvalidArgumentError, match=named):
        speculative_generate(model(), PROMPT, max_new_tokens=NEW, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("ids", [torch.tensor([[5, V]]), torch.tensor([[-1, 5]])])
@pytest.mark.parametrize("decoder", [_speculate, _backtrack])
def test_prompt_ids_outside_the_vocabulary_are_named(ids: torch.Tensor, decoder: Decoder) -> None:
    """Before: an IndexError from the embedding (or, for -1, an id read from the end)."""
    with pytest.raises(InvalidArgumentError, match="'input_ids' must be token ids in"):
        decoder(model(), ids)


def test_an_assistant_with_another_vocabulary_is_named() -> None:
    """An assistant of half the target's vocabulary: before, an IndexError in its embedding."""
    small = model("nemotron_h", 1, vocab_size=V // 2)
    with pytest.raises(InvalidArgumentError, match="'draft' must be a causal LM with the target"):
        speculative_generate(model(), PROMPT, max_new_tokens=NEW, draft=small)


# -- 5. a model whose multi-token cached forward is broken ----------------------------------


@pytest.mark.parametrize("model_type", ["kimi_linear", "bailing_hybrid"])
def test_speculative_names_a_model_whose_multi_token_cached_forward_is_broken(
    model_type: str,
) -> None:
    """Before: a RuntimeError from inside SDPA ("The size of tensor a (4) must match ...")."""
    broken = model(model_type)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 5, 6]])
    with pytest.raises(InvalidArgumentError, match="multi-token cached forward pass is broken"):
        speculative_generate(broken, ids, max_new_tokens=NEW, draft=lambda tokens, k: [7] * k)
    with pytest.raises(InvalidArgumentError, match=r"'draft' is a .* multi-token cached forward"):
        speculative_generate(model(), ids, max_new_tokens=NEW, draft=broken)
    # One token per forward pass works: no drafts, and the backtracking decoder.
    expected = greedy(broken, ids)
    assert (
        speculative_generate(broken, ids, max_new_tokens=NEW, num_draft_tokens=0).sequences.tolist()
        == expected
    )
    assert _backtrack(broken, ids).sequences.tolist() == expected


@pytest.mark.parametrize(
    ("kwargs", "alone"),
    [({"capacity": 4}, "capacity"), ({"is_boundary": {7}}, "is_boundary")],
)
def test_speculative_boundary_snapshots_need_both_capacity_and_a_predicate(
    kwargs: dict[str, object], alone: str
) -> None:
    """Either alone kept no snapshot and said nothing (SPEC 15: no keyword swallowed)."""
    with pytest.raises(InvalidArgumentError, match=f"'{alone}' keeps boundary snapshots only"):
        speculative_generate(model(), PROMPT, max_new_tokens=4, **kwargs)  # type: ignore[arg-type]
    result = speculative_generate(model(), PROMPT, max_new_tokens=4, capacity=4, is_boundary={7})
    assert result.sequences.shape[1] == PROMPT.shape[1] + 4


def test_token_ids_on_the_meta_device_are_refused_by_name() -> None:
    """A meta tensor has a shape and no values: the prompt checks read them and leaked torch's
    NotImplementedError or RuntimeError; the prefix index already named its ``tokens``."""
    m = model()
    meta = torch.zeros(1, 4, dtype=torch.long, device="meta")
    prefixes = HybridPrefixCache(m, max_bytes=1 << 22)
    real = torch.tensor([[3, 4, 5, 6]])
    calls: dict[str, Callable[[], object]] = {
        "'input_ids' must hold token ids": lambda: prefixes.prepare(meta),
        "'sequences' must hold token ids": lambda: prefixes.publish_generated(meta, DynamicCache()),
        "'input_ids' must hold token ids, got a tensor on the meta": lambda: speculative_generate(
            m, meta, max_new_tokens=2
        ),
        "'attention_mask' must be a tensor": lambda: speculative_generate(
            m, real, attention_mask=torch.ones(1, 4, device="meta"), max_new_tokens=2
        ),
        "'tokens' must be token ids": lambda: prefixes.publish_state(meta[0], DynamicCache()),
        "'followed_by' must be token ids": lambda: prefixes.publish_generated(
            real, DynamicCache(), followed_by=meta[0]
        ),
    }
    for message, call in calls.items():
        with pytest.raises(InvalidArgumentError, match=message):
            call()
    assert prefixes.entries() == ()
