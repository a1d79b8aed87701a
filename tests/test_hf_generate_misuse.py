"""The ``generate()`` contract where a misuse probe found the decoders off it.

Each test names what it caught: an EOS given as a keyword that ``min_new_tokens``
did not hold back, and a pad id that never reached ``generate``'s mask (both
keywords of the decoders' own signature, which ``generate`` hands over instead of
keeping in its config); length and EOS criteria of the caller's own taken as
``generate``'s; ``max_time``, ``stop_strings`` and ``token_healing`` ignored in a
direct call; rows padded with the smallest EOS id, not the first; a pad id past
int64 refused only after decoding; processors of a direct call built for the default
``max_length``; ``prefix_allowed_tokens_fn`` told row 0 for every row; a call that
raised on a later row having published the earlier ones; int8 ids compared in
int8; a streamer never ended when ``custom_generate`` wraps a decoder; token ids
past the vocabulary in settings refused only by the processors, mid-decode;
``max_new_tokens=0`` decoding nothing and returning the prompt, where ``generate`` raises;
a repetition penalty that penalised a left-padded row's padding (directly) or leaked
transformers' ValueError (through ``generate``); processors holding the whole batch's prompt
that leaked torch's errors on a batch of two; SynthID watermarking, whose processor keeps
state, decoded off ``generate``'s output instead of being refused; a direct call that took
``GenerationConfig(use_cache=False)``.
"""

from __future__ import annotations

import functools
from typing import Protocol

import pytest

pytest.importorskip("transformers")

import torch
from transformers import (
    GenerationConfig,
    SynthIDTextWatermarkingConfig,
    WatermarkingConfig,
)
from transformers.generation.logits_process import SynthIDTextWatermarkLogitsProcessor
from transformers.generation.stopping_criteria import (
    EosTokenCriteria,
    MaxLengthCriteria,
    StoppingCriteriaList,
)
from transformers.utils import logging as hf_logging

from ssm_rollback import InvalidArgumentError
from ssm_rollback.integrations.transformers import (
    HybridPrefixCache,
    backtracking_generate,
    speculative_generate,
)
from ssm_rollback.testing import tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
pytestmark = pytest.mark.usefixtures("quiet_warnings")

PROMPT = torch.tensor([[5, 6, 7, 8, 5, 6]])
ONES = torch.ones_like(PROMPT)
KEEP_ALL: dict[str, object] = {"is_boundary": lambda t: False, "reject": lambda t: None}


class Decode(Protocol):
    def __call__(self, ids: torch.Tensor, /, **settings: object) -> object: ...


@functools.cache
def model() -> torch.nn.Module:
    return tiny_model("nemotron_h")


def call(function: object, *args: object, **kwargs: object) -> object:
    """``function(*args, **kwargs)``: a decoder or ``model.generate`` given settings of many
    types through one keyword mapping."""
    return function(*args, **kwargs)  # type: ignore[operator]


def generate(ids: torch.Tensor, **settings: object) -> object:
    return call(model().generate, ids, **settings)


def _sequences(out: object) -> list[list[int]]:
    tensor = getattr(out, "sequences", out)
    assert isinstance(tensor, torch.Tensor)
    rows: list[list[int]] = tensor.tolist()
    return rows


def _decoders() -> dict[str, Decode]:
    """Each decoder directly and through ``model.generate(custom_generate=...)``."""
    lm = model()

    def direct(decoder: object, **own: object) -> Decode:
        def decode(ids: torch.Tensor, /, **settings: object) -> object:
            return call(decoder, lm, ids, **own, **settings)

        return decode

    def through(decoder: object, **own: object) -> Decode:
        def decode(ids: torch.Tensor, /, **settings: object) -> object:
            return generate(ids, custom_generate=decoder, **own, **settings)

        return decode

    return {
        "speculative": direct(speculative_generate),
        "backtracking": direct(backtracking_generate, **KEEP_ALL),
        "generate(speculative)": through(speculative_generate),
        "generate(backtracking)": through(backtracking_generate, **KEEP_ALL),
    }


DECODERS = sorted(_decoders())


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("eos", [63, [61, 42]], ids=["one", "two"])
def test_min_new_tokens_holds_back_an_eos_token_id_given_as_a_keyword(
    decoder: str, eos: int | list[int]
) -> None:
    """The model's first token is 63, then 61: with the EOS held back they are not the end."""
    settings = {"max_new_tokens": 5, "eos_token_id": eos, "min_new_tokens": 4}
    expected = generate(PROMPT, attention_mask=ONES, do_sample=False, **settings)
    got = _decoders()[decoder](PROMPT, attention_mask=ONES, **settings)
    assert _sequences(got) == _sequences(expected)
    assert len(_sequences(got)[0]) == len(PROMPT[0]) + 5


@pytest.mark.parametrize("decoder", ["generate(speculative)", "generate(backtracking)"])
def test_a_pad_token_id_through_generate_reaches_its_attention_mask(decoder: str) -> None:
    """Row 1 is padded with id 3 and no mask is given: generate masks id 3 as padding."""
    batch = torch.tensor([[5, 6, 7, 8, 5, 6], [3, 3, 9, 10, 11, 12]])
    expected = generate(batch, max_new_tokens=4, do_sample=False, pad_token_id=3)
    got = _decoders()[decoder](batch, max_new_tokens=4, pad_token_id=3)
    assert _sequences(got) == _sequences(expected)


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_row_that_ends_first_is_padded_with_the_first_eos_id(decoder: str) -> None:
    """No pad id anywhere and EOS ids [84, 3]: generate pads with 84 (not the smaller 3)."""
    lm = model()
    batch = torch.tensor([[5, 6, 7, 8, 5, 6], [0, 0, 9, 10, 11, 12]])
    mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    config = GenerationConfig(max_new_tokens=5, eos_token_id=[84, 3], do_sample=False)  # type: ignore[no-untyped-call]
    own = lm.generation_config
    assert isinstance(own, GenerationConfig)
    kept, own.pad_token_id = own.pad_token_id, None
    try:
        expected = generate(batch, attention_mask=mask, generation_config=config)
        got = _decoders()[decoder](batch, attention_mask=mask, generation_config=config)
    finally:
        own.pad_token_id = kept
    assert _sequences(got) == _sequences(expected)
    assert _sequences(got)[1][-1] == 84


@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
def test_processors_of_a_direct_call_read_the_calls_whole_length(decoder: str) -> None:
    """forced_eos_token_id forces id 7 at the last position: max_length must be prompt + 5."""
    settings = {"max_new_tokens": 5, "forced_eos_token_id": 7}
    expected = generate(PROMPT, attention_mask=ONES, do_sample=False, **settings)
    got = _decoders()[decoder](PROMPT, **settings)
    assert _sequences(got) == _sequences(expected)
    assert _sequences(got)[0][-1] == 7


@pytest.mark.parametrize("decoder", ["generate(speculative)", "generate(backtracking)"])
def test_prefix_allowed_tokens_fn_is_told_each_rows_index(decoder: str) -> None:
    batch = torch.tensor([[5, 6, 7, 8, 5, 6], [9, 9, 9, 10, 11, 12]])
    ones = torch.ones_like(batch)

    def allowed(batch_id: int, ids: torch.Tensor) -> list[int]:
        return [10 + batch_id]

    settings: dict[str, object] = {"max_new_tokens": 3, "prefix_allowed_tokens_fn": allowed}
    expected = generate(batch, attention_mask=ones, do_sample=False, **settings)
    got = _decoders()[decoder](batch, attention_mask=ones, **settings)
    assert _sequences(got) == _sequences(expected)
    assert [row[-3:] for row in _sequences(got)] == [[10] * 3, [11] * 3]


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize(
    "criterion",
    [EosTokenCriteria(eos_token_id=61), MaxLengthCriteria(max_length=8)],
    ids=["eos", "length"],
)
def test_a_length_or_eos_criterion_of_your_own_is_refused(decoder: str, criterion: object) -> None:
    """generate puts such a criterion in place of its own: the decoders would ignore it."""
    criteria = StoppingCriteriaList([criterion])
    with pytest.raises(InvalidArgumentError, match="'stopping_criteria' may hold only"):
        _decoders()[decoder](
            PROMPT, attention_mask=ONES, max_new_tokens=5, stopping_criteria=criteria
        )


@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
@pytest.mark.parametrize(
    ("setting", "match"),
    [
        ({"max_time": 1e-9}, "'generation_config.max_time' must be None"),
        ({"stop_strings": ["x"]}, "'generation_config.stop_strings' must be None"),
        ({"token_healing": True}, "'generation_config.token_healing' must be False"),
    ],
    ids=["max_time", "stop_strings", "token_healing"],
)
def test_settings_the_decoders_cannot_honour_are_refused_in_a_direct_call(
    decoder: str, setting: dict[str, object], match: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        _decoders()[decoder](PROMPT, max_new_tokens=5, **setting)


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[object] = []

    def put(self, value: torch.Tensor) -> None:
        self.calls.append(value.reshape(-1).tolist())

    def end(self) -> None:
        self.calls.append("end")


@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
@pytest.mark.parametrize(
    ("setting", "name"),
    [
        ({"bad_words_ids": [[1000]]}, "bad_words_ids"),
        ({"sequence_bias": {(1000,): -5.0}}, "sequence_bias"),
        ({"sequence_bias": [[[3, 1000], -5.0]]}, "sequence_bias"),
        ({"forced_bos_token_id": -1}, "forced_bos_token_id"),
        ({"forced_eos_token_id": 128}, "forced_eos_token_id"),
    ],
    ids=["bad_words", "bias", "bias-pairs", "forced_bos", "forced_eos"],
)
def test_a_token_setting_past_the_vocabulary_is_refused_before_decoding(
    decoder: str, setting: dict[str, object], name: str
) -> None:
    prefixes = HybridPrefixCache(model(), max_bytes=1 << 20)
    streamer = _Recorder()
    with pytest.raises(InvalidArgumentError, match=f"'generation_config.{name}' must name token"):
        _decoders()[decoder](
            PROMPT, max_new_tokens=3, prefix_cache=prefixes, streamer=streamer, **setting
        )
    assert streamer.calls == ["end"]  # no prompt streamed: nothing had started
    assert (prefixes.report.hits, prefixes.report.misses, len(prefixes.entries())) == (0, 0, 0)


@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
@pytest.mark.parametrize("pad", [2**63, 2**64], ids=["2**63", "2**64"])
def test_a_pad_token_id_past_int64_is_refused_before_decoding(decoder: str, pad: int) -> None:
    prefixes = HybridPrefixCache(model(), max_bytes=1 << 20)
    with pytest.raises(
        InvalidArgumentError, match=r"'pad_token_id' must be an int in \[0, 2\*\*63"
    ):
        _decoders()[decoder](PROMPT, max_new_tokens=3, pad_token_id=pad, prefix_cache=prefixes)
    assert (prefixes.report.misses, prefixes.report.published) == (0, 0)


def test_a_call_that_raises_on_a_later_row_publishes_nothing() -> None:
    """Row 1's draft function answers -1: the call is refused, and row 0's decode, done by
    then, is not published either."""
    lm = model()
    batch = torch.tensor([[5, 6, 7, 8, 5, 6], [9, 9, 9, 10, 11, 12]])

    def draft(tokens: list[int], k: int) -> list[int]:
        return [-1] if tokens[:6] == batch[1].tolist() else []

    prefixes = HybridPrefixCache(lm, max_bytes=1 << 22)
    with pytest.raises(InvalidArgumentError, match=r"'draft\(tokens, k\)' must return"):
        speculative_generate(lm, batch, max_new_tokens=5, draft=draft, prefix_cache=prefixes)
    assert (prefixes.report.published, prefixes.entries()) == (0, ())

    calls = {"rows": 0}

    def reject(tokens: list[int]) -> int | None:
        calls["rows"] += len(tokens) == 1
        return -1 if calls["rows"] == 2 else None

    with pytest.raises(InvalidArgumentError, match=r"'reject\(\)' must be an int >= 0"):
        backtracking_generate(
            lm,
            batch,
            max_new_tokens=5,
            is_boundary=lambda t: False,
            reject=reject,
            prefix_cache=prefixes,
        )
    assert (prefixes.report.published, prefixes.entries()) == (0, ())


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.uint8])
def test_narrow_integer_input_ids_are_read_as_token_ids(dtype: torch.dtype) -> None:
    """In int8, ``ids >= 128`` wrapped to ``ids >= -128``: every id was "out of range"."""
    expected = speculative_generate(model(), PROMPT, max_new_tokens=3).sequences
    got = speculative_generate(model(), PROMPT.to(dtype), max_new_tokens=3).sequences
    assert got.tolist() == _sequences(expected)


def test_a_decoder_wrapped_in_a_function_of_your_own_still_ends_the_streamer() -> None:
    """generate puts the prompt and leaves end() to its custom_generate; the decoder finds
    generate's streamer through the wrapper, so a consumer is not left waiting."""

    def my_decoder(model: torch.nn.Module, input_ids: torch.Tensor, **kw: object) -> object:
        return speculative_generate(model, input_ids, num_draft_tokens=2, **kw)  # type: ignore[arg-type]

    class Wrapper:
        def __call__(self, model: torch.nn.Module, input_ids: torch.Tensor, **kw: object) -> object:
            return my_decoder(model, input_ids, **kw)

    for custom in (my_decoder, Wrapper(), functools.partial(my_decoder)):
        streamer = _Recorder()
        out = generate(
            PROMPT, attention_mask=ONES, max_new_tokens=4, streamer=streamer, custom_generate=custom
        )
        new = _sequences(out)[0][len(PROMPT[0]) :]
        assert streamer.calls == [PROMPT[0].tolist(), *([t] for t in new), "end"]


@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
def test_max_new_tokens_of_zero_is_refused_as_generate_refuses_it(decoder: str) -> None:
    """A direct call returned the prompt for ``max_new_tokens=0``, where ``generate`` raises."""
    with pytest.raises(ValueError, match="max_new_tokens"):  # generate's own refusal
        generate(PROMPT, max_new_tokens=0)
    prefixes = HybridPrefixCache(model(), max_bytes=1 << 20)
    streamer = _Recorder()
    with pytest.raises(InvalidArgumentError, match="'max_new_tokens' must be an int >= 1, got 0"):
        _decoders()[decoder](PROMPT, max_new_tokens=0, prefix_cache=prefixes, streamer=streamer)
    assert streamer.calls == ["end"]  # nothing streamed
    assert (prefixes.report.misses, prefixes.report.published) == (0, 0)


def test_repetition_penalty_on_a_left_padded_batch_equals_generate() -> None:
    """generate's repetition penalty ignores each row's left padding (from the mask). Before, a
    direct call built it without the mask and penalised the pad positions, and through
    generate its per-row padding met a batch of one: transformers' ValueError leaked."""
    row = [13, 14, 15, 16]
    first = _sequences(generate(torch.tensor([row]), max_new_tokens=1, do_sample=False))[0][-1]
    # Row 1's two pad positions hold the token it picks first: penalised, it picks another.
    batch = torch.tensor([[21, 22, 23, 24, 25, 26], [first, first, *row]])
    settings = {
        "attention_mask": torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]]),
        "max_new_tokens": 4,
        "repetition_penalty": 5.0,
    }
    expected = _sequences(generate(batch, do_sample=False, **settings))
    assert expected[1][6] == first
    for decoder in DECODERS:
        assert _sequences(_decoders()[decoder](batch, **settings)) == expected, decoder


@pytest.mark.parametrize(
    "setting",
    [{"encoder_repetition_penalty": 3.0}, {"encoder_no_repeat_ngram_size": 1}],
    ids=["encoder_repetition_penalty", "encoder_no_repeat_ngram_size"],
)
def test_prompt_processors_on_a_batch_of_two_equal_generate(setting: dict[str, object]) -> None:
    """These processors hold the whole batch's prompts; each row is scored as a batch of one.
    Before, torch's RuntimeError (a gather of [2, 6] ids) and a ZeroDivisionError leaked."""
    batch = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    settings = {"attention_mask": torch.ones_like(batch), "max_new_tokens": 4, **setting}
    expected = _sequences(generate(batch, do_sample=False, **settings))
    for decoder in DECODERS:
        assert _sequences(_decoders()[decoder](batch, **settings)) == expected, decoder


#: SynthID's watermark: its processor keeps a state that each call advances.
SYNTHID = SynthIDTextWatermarkingConfig(keys=[654, 400, 836, 123, 340], ngram_len=3)


@pytest.mark.parametrize("decoder", DECODERS)
def test_synthid_watermarking_is_refused_by_name_before_decoding(decoder: str) -> None:
    """Before, drafts, verify positions and the rows of a batch all advanced the one processor's
    state, and the output differed from generate's (which calls it once per token)."""
    prefixes = HybridPrefixCache(model(), max_bytes=1 << 20)
    with pytest.raises(InvalidArgumentError, match=r"'generation_config\.watermarking_config'"):
        _decoders()[decoder](
            PROMPT,
            attention_mask=ONES,
            max_new_tokens=4,
            watermarking_config=SYNTHID,
            prefix_cache=prefixes,
        )
    assert (prefixes.report.misses, prefixes.report.published) == (0, 0)


@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
def test_a_synthid_processor_of_your_own_is_refused_by_name(decoder: str) -> None:
    processor = SYNTHID.construct_processor(128, torch.device("cpu"))
    assert isinstance(processor, SynthIDTextWatermarkLogitsProcessor)
    with pytest.raises(InvalidArgumentError, match="'logits_processor' must not hold SynthID"):
        _decoders()[decoder](PROMPT, max_new_tokens=4, logits_processor=[processor])


@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
def test_kgw_watermarking_keeps_no_state_and_equals_generate(decoder: str) -> None:
    """KGW's processor reseeds its generator from the tokens at every call: taken, exact."""
    batch = torch.tensor([[5, 6, 7, 8, 5, 6], [11, 12, 13, 14, 15, 16]])
    settings = {
        "attention_mask": torch.ones_like(batch),
        "max_new_tokens": 5,
        "watermarking_config": WatermarkingConfig(bias=4.0),
    }
    expected = _sequences(generate(batch, do_sample=False, **settings))
    assert _sequences(_decoders()[decoder](batch, **settings)) == expected


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_generation_config_without_cache_is_refused_by_name(decoder: str) -> None:
    """Before, a direct call took GenerationConfig(use_cache=False) and decoded through a cache
    (the use_cache=False keyword, and the config through generate, were refused)."""
    config = GenerationConfig(use_cache=False, max_new_tokens=3)  # type: ignore[no-untyped-call]
    with pytest.raises(
        InvalidArgumentError, match=r"'(generation_config\.)?use_cache' must be True"
    ):
        _decoders()[decoder](PROMPT, attention_mask=ONES, generation_config=config)


@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
def test_a_model_whose_own_config_has_no_cache_decodes_as_generate_does(decoder: str) -> None:
    """Checkpoints often save use_cache=False: generate then decodes without a cache, to the
    same tokens. A direct call refused it, naming a generation_config the caller never gave."""
    m = tiny_model("nemotron_h", use_cache=False)
    expected = m.generate(  # type: ignore[operator]
        PROMPT, attention_mask=ONES, max_new_tokens=4, do_sample=False, use_cache=True
    ).tolist()
    function, own = (
        (speculative_generate, {})
        if decoder == "speculative"
        else (backtracking_generate, KEEP_ALL)
    )
    for extra in ({}, {"use_cache": True}):
        out = call(function, m, PROMPT, attention_mask=ONES, max_new_tokens=4, **own, **extra)
        assert _sequences(out) == expected
