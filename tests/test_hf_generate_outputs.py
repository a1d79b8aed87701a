"""``return_dict_in_generate`` with ``output_scores`` / ``output_logits`` on both decoders.

The decoders return ``transformers``' own ``GenerateDecoderOnlyOutput`` with
the report attached; their ``scores`` and ``logits`` are what plain greedy
``model.generate`` returns for the same tokens (one ``(batch, vocab)``
tensor per new token), directly and through ``custom_generate``, through
verify positions, rollbacks and a batch whose rows end apart. A row whose
accepted drafts hold an EOS ends there: output, stream and report alike.
"""

from __future__ import annotations

import copy
import functools
import pickle
from collections.abc import Callable

import pytest

pytest.importorskip("transformers")

import torch
from transformers import DynamicCache
from transformers.generation.utils import GenerateDecoderOnlyOutput
from transformers.utils import logging as hf_logging

from ssm_rollback import InvalidArgumentError
from ssm_rollback.integrations.transformers import (
    GenerationReport,
    GenerationResult,
    HybridPrefixCache,
    backtracking_generate,
    speculative_generate,
)
from ssm_rollback.testing import tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
pytestmark = pytest.mark.usefixtures("quiet_warnings")

NEW = 6
ASKED = {"return_dict_in_generate": True, "output_scores": True, "output_logits": True}
#: A setting whose processor changes the scores: they are the processed ones, not the logits.
PENALTY = {"repetition_penalty": 1.5}


@functools.cache
def model() -> torch.nn.Module:
    return tiny_model("nemotron_h")


def prompt(seed: int = 1, n: int = 10) -> torch.Tensor:
    return torch.randint(0, 128, (1, n), generator=torch.Generator().manual_seed(seed))


def reference(ids: torch.Tensor, **kwargs: object) -> GenerateDecoderOnlyOutput:
    out: GenerateDecoderOnlyOutput = model().generate(  # type: ignore[operator]
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=NEW,
        do_sample=False,
        **ASKED,
        **kwargs,
    )
    return out


def never(tokens: list[int]) -> int | None:
    return None


def decode(decoder: str, via: str, ids: torch.Tensor, **kwargs: object) -> GenerationResult:
    """A greedy decode asking for scores and logits, directly or through ``custom_generate``."""
    fn: Callable[..., GenerationResult] = (  # type: ignore[explicit-any]
        speculative_generate if decoder == "speculative" else backtracking_generate
    )
    more: dict[str, object] = {"draft": model()} if decoder == "speculative" else {}
    if decoder == "backtracking":
        more.update(is_boundary=set(), reject=never)
    more.update(kwargs)
    if via == "direct":
        return fn(model(), ids, max_new_tokens=NEW, **ASKED, **more)
    out: GenerationResult = model().generate(  # type: ignore[operator]
        ids, max_new_tokens=NEW, custom_generate=fn, **ASKED, **more
    )
    return out


def steps(per_token: tuple[torch.Tensor, ...] | None) -> tuple[torch.Tensor, ...]:
    """``scores`` or ``logits``, there."""
    assert per_token is not None
    return per_token


def assert_close(
    ours: tuple[torch.Tensor, ...] | None, theirs: tuple[torch.Tensor, ...] | None
) -> None:
    ours, theirs = steps(ours), steps(theirs)
    assert len(ours) == len(theirs)
    for mine, expected in zip(ours, theirs, strict=True):
        assert mine.shape == expected.shape
        assert mine.dtype == expected.dtype == torch.float32
        torch.testing.assert_close(mine, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("via", ["direct", "custom_generate"])
@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
@pytest.mark.parametrize("settings", [{}, PENALTY], ids=["plain", "penalised"])
def test_scores_and_logits_equal_plain_generate(
    decoder: str, via: str, settings: dict[str, object]
) -> None:
    ids = prompt()
    expected = reference(ids, **settings)
    out = decode(decoder, via, ids, **settings)
    assert isinstance(out, GenerateDecoderOnlyOutput)
    assert isinstance(out.report, GenerationReport)
    assert out.sequences.tolist() == expected.sequences.tolist()
    assert_close(out.scores, expected.scores)
    assert_close(out.logits, expected.logits)
    assert out.report.tokens == NEW
    if decoder == "speculative":
        assert out.report.drafts_accepted > 0  # the scores of accepted drafts are covered
    if settings:
        assert not torch.equal(steps(out.scores)[-1], steps(out.logits)[-1])  # processed, not raw


def test_without_the_flags_there_are_no_scores() -> None:
    out = speculative_generate(model(), prompt(), max_new_tokens=NEW)
    assert out.scores is None
    assert out.logits is None
    only = speculative_generate(model(), prompt(), max_new_tokens=NEW, output_logits=True)
    assert only.scores is None
    assert only.logits is not None
    assert len(steps(only.logits)) == NEW


def test_scores_after_a_rollback_are_those_of_the_kept_tokens() -> None:
    """A rollback drops the scores of the tokens it drops; each kept token's scores are the
    ones it was picked from (the ban included), so the greedy token is their argmax."""
    ids = prompt(2)

    fired: list[int] = []

    def reject_third(tokens: list[int]) -> int | None:
        if len(tokens) == 3 and not fired:
            fired.append(tokens[-1])
            return 1
        return None

    out = backtracking_generate(
        model(),
        ids,
        max_new_tokens=NEW,
        is_boundary=lambda t: True,
        capacity=NEW,
        reject=reject_third,
        output_scores=True,
        output_logits=True,
    )
    assert out.report.rollbacks_served == 1
    new = out.sequences[0, ids.shape[1] :].tolist()
    assert len(steps(out.scores)) == len(steps(out.logits)) == len(new) == NEW
    assert [int(s[0].argmax()) for s in steps(out.scores)] == new


def test_a_row_that_ends_first_puts_its_weight_on_the_pad_id() -> None:
    first = reference(prompt(3)).sequences[0, 10].item()  # row 0's first token, made its EOS
    ids = torch.cat([prompt(3), prompt(4)])
    out = backtracking_generate(
        model(),
        ids,
        max_new_tokens=NEW,
        is_boundary=set(),
        reject=never,
        eos_token_id=int(first),
        pad_token_id=0,
        attention_mask=torch.ones_like(ids),  # id 0 is a real token of these prompts
        output_scores=True,
    )
    scores = steps(out.scores)
    assert len(scores) > 1
    assert all(step.shape == (2, scores[0].shape[1]) for step in scores)
    past_end = scores[1][0]
    assert float(past_end[0]) == 0.0
    assert bool(torch.isinf(past_end[1:]).all())
    assert int(scores[0][0].argmax()) == first


class Recording:
    """A streamer that records what it is given."""

    def __init__(self) -> None:
        self.calls: list[list[int] | str] = []

    def put(self, value: torch.Tensor) -> None:
        self.calls.append(value.reshape(-1).tolist())

    def end(self) -> None:
        self.calls.append("end")


def test_an_eos_inside_accepted_drafts_ends_the_row_and_the_stream() -> None:
    """A drafter that knows the greedy output proposes row 0's EOS (its third token) and
    more: the row once went on past it (the stream got the tokens after it, a third forward
    pass ran, and 8 drafts were counted accepted for a 3-token output)."""
    batch = torch.tensor([[5, 6, 7, 8, 9, 10], [40, 41, 42, 43, 44, 45]])
    plain = {"attention_mask": torch.ones_like(batch), "max_new_tokens": 10, "do_sample": False}
    greedy: list[list[int]] = model().generate(batch, **plain).tolist()  # type: ignore[operator]
    eos = greedy[0][8]
    assert eos not in greedy[0][6:8] + greedy[1][6:]
    ahead = {tuple(row[:6]): row[6:] + [1] * 10 for row in greedy}

    def oracle(tokens: list[int], k: int) -> list[int]:
        return ahead[tuple(tokens[:6])][len(tokens) - 6 : len(tokens) - 6 + k]

    settings = {"max_new_tokens": 10, "eos_token_id": eos, "num_draft_tokens": 6, "draft": oracle}
    speculative: Callable[..., GenerationResult] = speculative_generate  # type: ignore[explicit-any]
    ours, theirs = Recording(), Recording()
    one = speculative(model(), batch[:1], streamer=ours, **ASKED, **settings)
    expected = model().generate(  # type: ignore[operator]
        batch[:1],
        eos_token_id=eos,
        streamer=theirs,
        **{**plain, **ASKED, "attention_mask": torch.ones_like(batch[:1])},
    )
    assert one.sequences.tolist() == expected.sequences.tolist() == [greedy[0][:9]]
    assert ours.calls == theirs.calls == [batch[0].tolist(), *[[t] for t in greedy[0][6:9]], "end"]
    assert_close(one.scores, expected.scores)
    report = one.report
    # Prefill and one verify step; returning the cache (return_dict_in_generate) then steps
    # back over the fed EOS, where generate leaves its cache: one pass more, and only then.
    assert (report.tokens, report.forward_passes, report.drafts_accepted) == (3, 3, 2)
    assert report.rollbacks_served == report.tokens_regenerated == 0
    bare = speculative(model(), batch[:1], **settings).report
    assert (bare.tokens, bare.forward_passes, bare.drafts_accepted) == (3, 2, 2)

    # In a batch row 1 goes on (6 drafts and a bonus, then the last 2 drafts) as row 0 ends.
    prefixes = HybridPrefixCache(model(), max_bytes=1 << 22)
    both = speculative(model(), batch, prefix_cache=prefixes, **settings)
    padded = model().generate(batch, eos_token_id=eos, **plain)  # type: ignore[operator]
    assert both.sequences.tolist() == padded.tolist()
    report = both.report
    assert (report.tokens, report.forward_passes, report.drafts_accepted) == (13, 5, 10)
    # Row 0's state stands after its output, the EOS included: the next turn starts there.
    turn = torch.cat([one.sequences, torch.tensor([[11, 12]])], dim=1)
    after = speculative_generate(model(), turn, max_new_tokens=3, prefix_cache=prefixes)
    assert prefixes.report.tokens_reused == 9
    fresh = model().generate(  # type: ignore[operator]
        turn, attention_mask=torch.ones_like(turn), max_new_tokens=3, do_sample=False
    )
    assert after.sequences.tolist() == fresh.tolist()


@pytest.mark.parametrize("setting", ["output_attentions", "output_hidden_states"])
def test_outputs_the_decoders_do_not_build_are_refused(setting: str) -> None:
    decoder: Callable[..., GenerationResult] = speculative_generate  # type: ignore[explicit-any]
    with pytest.raises(InvalidArgumentError, match=setting):
        decoder(
            model(), prompt(), max_new_tokens=NEW, return_dict_in_generate=True, **{setting: True}
        )


@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
def test_a_generation_result_copies_deep_copies_and_pickles(decoder: str) -> None:
    """As ``generate``'s own output does: the fields, the report and any attribute of the
    caller's own come back equal (``transformers`` rebuilds a ``ModelOutput`` from its field
    values as positional arguments, which a ``GenerationResult`` does not take)."""
    out = decode(decoder, "direct", prompt())
    out.note = "mine"
    for copied in (copy.copy(out), copy.deepcopy(out), pickle.loads(pickle.dumps(out))):
        assert type(copied) is GenerationResult
        assert list(copied.keys()) == list(out.keys()) == ["sequences", "scores", "logits", "cache"]
        assert copied.sequences.tolist() == out.sequences.tolist()
        for mine, theirs in ((copied.scores, out.scores), (copied.logits, out.logits)):
            assert all(torch.equal(a, b) for a, b in zip(steps(mine), steps(theirs), strict=True))
        assert copied.report == out.report
        assert copied.report.forward_passes > 0
        assert copied.note == "mine"  # type: ignore[attr-defined]


def empty_cache() -> DynamicCache:
    return DynamicCache(config=model().config)  # type: ignore[arg-type]


def _reject_every_third(tokens: list[int]) -> int | None:
    return max(len(tokens) - 2, 0) if len(tokens) % 3 == 0 else None


@pytest.mark.parametrize("via", ["direct", "custom_generate"])
@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
def test_the_cache_passed_is_decoded_in_and_returned_as_generate_leaves_it(
    decoder: str, via: str
) -> None:
    """As ``generate`` does: a one-row call decodes in the cache passed and returns it under
    ``cache``, holding every token but the last, so that ``generate`` continues from it (it was
    left empty, and no cache was returned)."""
    ids = prompt()
    more: dict[str, object] = {"draft": "prompt_lookup"}  # mostly refused: rollbacks
    if decoder == "backtracking":
        more = {"is_boundary": {3, 7}}
    if decoder == "backtracking":
        more["reject"] = _reject_every_third  # rollbacks, and their replays, before the end
    passed = empty_cache()
    out = decode(decoder, via, ids, cache=passed, **more)
    assert out.cache is passed
    assert out.past_key_values is passed
    assert passed.get_seq_length() == out.sequences.shape[1] - 1
    ones = {"do_sample": False, "max_new_tokens": 3}
    after = model().generate(  # type: ignore[operator]
        out.sequences, attention_mask=torch.ones_like(out.sequences), cache=passed, **ones
    )
    fresh = model().generate(  # type: ignore[operator]
        out.sequences, attention_mask=torch.ones_like(out.sequences), **ones
    )
    assert after.tolist() == fresh.tolist()
    # Without one passed, the cache decoded in comes back, standing at the same place.
    own = decode(decoder, via, ids, **more)
    assert isinstance(own.cache, DynamicCache)
    assert own.cache.get_seq_length() == own.sequences.shape[1] - 1


@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
def test_a_cache_passed_for_a_batch_or_with_a_prefix_cache_is_named(decoder: str) -> None:
    batch = torch.cat([prompt(1), prompt(2)])
    with pytest.raises(InvalidArgumentError, match="'cache' must be None for a batch of 2"):
        decode(decoder, "direct", batch, cache=empty_cache())
    prefixes = HybridPrefixCache(model(), max_bytes=1 << 20)
    with pytest.raises(InvalidArgumentError, match="'cache' must be None with prefix_cache"):
        decode(
            decoder,
            "direct",
            prompt(),
            cache=empty_cache(),
            prefix_cache=prefixes,
        )
    assert decode(decoder, "direct", batch).cache is None


@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
def test_a_cache_not_made_for_the_model_is_named_before_any_work(decoder: str) -> None:
    """``DynamicCache()`` without the model's config has no layer for the SSM state: the
    forward pass raised an IndexError (generate's too); another model's layers decoded on
    (speculative) or failed only at the end, naming no argument (backtracking)."""
    with pytest.raises(InvalidArgumentError, match=r"'cache' must be an empty cache made for"):
        decode(decoder, "direct", prompt(), cache=DynamicCache())
    other = DynamicCache(config=tiny_model("jamba").config)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"got 4 layers \(layer \d is a "):
        decode(decoder, "direct", prompt(), cache=other)


@pytest.mark.parametrize("via", ["direct", "custom_generate"])
@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
def test_a_left_padded_row_returns_no_cache_and_refuses_one(decoder: str, via: str) -> None:
    """The row decodes without its padding, where generate's cache holds the padded positions:
    the cache returned left the padding out, and generate continued from it to other tokens
    than from its own."""
    ids = torch.cat([torch.zeros(1, 3, dtype=torch.long), prompt()], dim=1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(prompt())], dim=1)
    out = decode(decoder, via, ids, attention_mask=mask)
    assert out.cache is None
    expected = model().generate(  # type: ignore[operator]
        ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False
    )
    assert out.sequences.tolist() == expected.tolist()
    if via == "direct":
        with pytest.raises(InvalidArgumentError, match="'cache' must be None for a left-padded"):
            decode(decoder, via, ids, attention_mask=mask, cache=empty_cache())
