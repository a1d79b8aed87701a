"""The Hugging Face decoders honour ``generate()``'s contract: streamer, config, sampling settings.

Each test names a case that failed before: a ``streamer`` that got only the
prompt and never ``end()`` (a ``TextIteratorStreamer`` consumer waited
forever), sampling settings and logits processors that were refused, and an
``assistant_model`` that ``generate`` kept from the decoder and so was
silently ignored.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    PreTrainedTokenizerFast,
    TextIteratorStreamer,
)
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.utils import logging as hf_logging

from ssm_rollback import InvalidArgumentError
from ssm_rollback.integrations.transformers import (
    GenerationResult,
    backtracking_generate,
    speculative_generate,
)
from ssm_rollback.testing import tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
pytestmark = pytest.mark.usefixtures("quiet_warnings")

V = 128
NEW = 6
PROMPT = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 9]])
Decoder = Callable[..., GenerationResult]  # type: ignore[explicit-any]


def never(tokens: list[int]) -> int | None:
    return None


#: Each decoder with the keywords it needs, for a direct call and through model.generate.
DECODERS: list[tuple[Decoder, dict[str, object]]] = [
    (speculative_generate, {}),
    (backtracking_generate, {"is_boundary": {4}, "reject": never}),
]
IDS = ["speculative", "backtracking"]


@functools.cache
def model() -> torch.nn.Module:
    return tiny_model("nemotron_h")


@functools.cache
def greedy() -> list[int]:
    return plain_generate()


def plain_generate(**settings: object) -> list[int]:
    out: torch.Tensor = model().generate(PROMPT, max_new_tokens=NEW, do_sample=False, **settings)  # type: ignore[operator]
    return list(out[0].tolist())


def run(decoder: Decoder, via: str, kwargs: dict[str, object], **more: object) -> GenerationResult:
    """``decoder`` called directly, or as ``model.generate``'s ``custom_generate``."""
    if via == "direct":
        return decoder(model(), PROMPT, **kwargs, **more)
    result: GenerationResult = model().generate(  # type: ignore[operator]
        PROMPT, custom_generate=decoder, **kwargs, **more
    )
    return result


class Recording:
    """A streamer that records what it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []

    def put(self, value: torch.Tensor) -> None:
        self.calls.append(("put", value.reshape(-1).tolist()))

    def end(self) -> None:
        self.calls.append(("end", []))


def word_level_tokenizer() -> PreTrainedTokenizerFast:
    """A tokenizer over the tiny vocabulary, built here: id ``i`` is the word ``t{i}``."""
    vocab = {f"t{i}": i for i in range(V)}
    backend = Tokenizer(WordLevel(vocab, unk_token="t0"))
    backend.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend)  # type: ignore[no-untyped-call]


# -- 1. the streamer -------------------------------------------------------------------------------


@pytest.mark.parametrize("via", ["direct", "generate"])
@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS, ids=IDS)
def test_a_text_iterator_streamer_gets_every_token_and_ends(
    decoder: Decoder, kwargs: dict[str, object], via: str
) -> None:
    """Before: through generate the consumer got the prompt and then waited for ever (here:
    until the streamer's timeout); directly the keyword was refused."""
    tokenizer = word_level_tokenizer()
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, timeout=120)
    chunks: list[str] = []
    ended: list[bool] = []

    def consume() -> None:
        chunks.extend(streamer)  # stops at end(); raises queue.Empty after the timeout
        ended.append(True)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    try:
        result = run(decoder, via, kwargs, max_new_tokens=NEW, streamer=streamer)
    finally:
        consumer.join(timeout=300)
    assert ended == [True]
    new = result.sequences[0, PROMPT.shape[1] :].tolist()
    assert "".join(chunks).split() == [f"t{t}" for t in new]


def _oracle(tokens: list[int], k: int) -> list[int]:
    """Drafts the greedy continuation, wrong at every fourth position: accepted runs and
    rejections both."""
    ahead = greedy()[len(tokens) : len(tokens) + k]
    return [t if (len(tokens) + i) % 4 else 0 for i, t in enumerate(ahead)]


@pytest.mark.parametrize("via", ["direct", "generate"])
def test_a_streamer_gets_the_prompt_then_each_accepted_token_then_one_end(via: str) -> None:
    recording = Recording()
    result = run(
        speculative_generate, via, {"draft": _oracle}, max_new_tokens=NEW, streamer=recording
    )
    new = result.sequences[0, PROMPT.shape[1] :].tolist()
    assert result.report.drafts_accepted > 0
    assert recording.calls == [
        ("put", PROMPT[0].tolist()),
        *[("put", [token]) for token in new],
        ("end", []),
    ]


@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS, ids=IDS)
def test_a_streamer_ends_once_at_an_eos(decoder: Decoder, kwargs: dict[str, object]) -> None:
    eos = greedy()[PROMPT.shape[1] + 2]
    recording = Recording()
    result = decoder(
        model(), PROMPT, max_new_tokens=NEW, eos_token_id=eos, streamer=recording, **kwargs
    )
    new = result.sequences[0, PROMPT.shape[1] :].tolist()
    assert new[-1] == eos
    assert len(new) == 3
    assert recording.calls == [
        ("put", PROMPT[0].tolist()),
        *[("put", [token]) for token in new],
        ("end", []),
    ]


def test_backtracking_streams_only_tokens_no_rollback_takes_back() -> None:
    """Tokens after the oldest snapshot may still be rolled back: they are held until final."""
    recording = Recording()
    result = backtracking_generate(
        model(),
        PROMPT,
        max_new_tokens=8,
        is_boundary=lambda token: token % 2 == 0,
        reject=lambda tokens: max(len(tokens) - 2, 0) if tokens[-1] % 5 == 0 else None,
        capacity=2,
        eos_token_id=(),
        streamer=recording,
    )
    new = result.sequences[0, PROMPT.shape[1] :].tolist()
    puts = [call[1] for call in recording.calls[1:-1]]
    assert [t for put in puts for t in put] == new
    assert recording.calls[-1] == ("end", [])


@pytest.mark.parametrize("via", ["direct", "generate"])
@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS, ids=IDS)
def test_a_streamer_ends_when_the_decoder_raises(
    decoder: Decoder, kwargs: dict[str, object], via: str
) -> None:
    recording = Recording()
    with pytest.raises(InvalidArgumentError, match="'capacity'"):
        run(decoder, via, kwargs, max_new_tokens=NEW, capacity=-1, streamer=recording)
    assert recording.calls[-1] == ("end", [])
    assert [call[0] for call in recording.calls].count("end") == 1

    def failing(tokens: list[int], k: int) -> list[int]:
        if len(tokens) > PROMPT.shape[1] + 2:
            raise RuntimeError("drafter broke")
        return []

    recording = Recording()
    with pytest.raises(RuntimeError, match="drafter broke"):
        speculative_generate(model(), PROMPT, max_new_tokens=NEW, draft=failing, streamer=recording)
    assert recording.calls[-1] == ("end", [])
    assert len(recording.calls) == 5


def test_a_streamer_without_put_and_end_is_named() -> None:
    with pytest.raises(InvalidArgumentError, match="'streamer' must have put"):
        speculative_generate(model(), PROMPT, max_new_tokens=NEW, streamer=object())


@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS, ids=IDS)
def test_a_custom_generate_functions_own_streamer_gets_the_prompt_tokens_and_end(
    decoder: Decoder, kwargs: dict[str, object]
) -> None:
    """A function given as ``custom_generate`` that passes the decoder a ``streamer`` of its own:
    that one streams (it was dropped, without even an ``end()``)."""
    mine = Recording()

    def wrapper(model: torch.nn.Module, input_ids: torch.Tensor, **more: object) -> object:
        return decoder(model, input_ids, streamer=mine, **kwargs, **more)

    result = model().generate(  # type: ignore[operator]
        PROMPT, max_new_tokens=NEW, custom_generate=wrapper
    )
    new = result.sequences[0, PROMPT.shape[1] :].tolist()
    assert result.sequences[0].tolist() == greedy()
    assert mine.calls == [("put", PROMPT[0].tolist()), *[("put", [t]) for t in new], ("end", [])]


@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS, ids=IDS)
def test_a_streamer_given_to_generate_and_by_its_custom_generate_function_is_refused(
    decoder: Decoder, kwargs: dict[str, object]
) -> None:
    """Two streamers: refused by name; ``generate``'s, which holds the prompt, is ended."""
    theirs, mine = Recording(), Recording()

    def wrapper(model: torch.nn.Module, input_ids: torch.Tensor, **more: object) -> object:
        return decoder(model, input_ids, streamer=mine, **kwargs, **more)

    with pytest.raises(InvalidArgumentError, match="'streamer' must be given once"):
        model().generate(  # type: ignore[operator]
            PROMPT, max_new_tokens=NEW, custom_generate=wrapper, streamer=theirs
        )
    assert theirs.calls == [("put", PROMPT[0].tolist()), ("end", [])]
    assert mine.calls == []


# -- 2. the generation config ----------------------------------------------------------------------


@pytest.mark.parametrize("via", ["direct", "generate"])
@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS, ids=IDS)
def test_a_generation_config_and_its_settings_are_honoured(
    decoder: Decoder, kwargs: dict[str, object], via: str
) -> None:
    """Before: suppress_tokens and repetition_penalty were refused as logits processors."""
    suppressed = greedy()[PROMPT.shape[1] : PROMPT.shape[1] + 2]
    settings = {"suppress_tokens": suppressed, "repetition_penalty": 3.0}
    expected = plain_generate(**settings)
    assert expected != greedy()
    config = GenerationConfig(max_new_tokens=NEW, **settings)  # type: ignore[no-untyped-call]
    got = run(decoder, via, kwargs, generation_config=config)
    assert got.sequences[0].tolist() == expected
    # Keywords override the config, as in generate: no penalty, nothing suppressed.
    plain = run(decoder, via, kwargs, generation_config=config, suppress_tokens=[])
    assert plain.sequences[0].tolist() == plain_generate(repetition_penalty=3.0)
    short = run(decoder, via, kwargs, generation_config=config, max_new_tokens=2)
    assert short.sequences.shape == (1, PROMPT.shape[1] + 2)


@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS, ids=IDS)
def test_generate_passes_its_logits_processor_to_backtracking(
    decoder: Decoder, kwargs: dict[str, object]
) -> None:
    """Before: backtracking_generate raised a TypeError on logits_processor through generate."""
    banned = greedy()[PROMPT.shape[1]]

    class Ban(LogitsProcessor):
        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.Tensor:
            return scores.index_fill(-1, torch.tensor([banned]), float("-inf"))

    expected = plain_generate(logits_processor=LogitsProcessorList([Ban()]))
    for via in ("direct", "generate"):
        got = run(
            decoder, via, kwargs, max_new_tokens=NEW, logits_processor=LogitsProcessorList([Ban()])
        )
        assert got.sequences[0].tolist() == expected, via


# -- 3. sampling settings --------------------------------------------------------------------------


@pytest.mark.parametrize("via", ["direct", "generate"])
@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS, ids=IDS)
def test_sampling_with_top_k_one_is_greedy_at_every_verify_position(
    decoder: Decoder, kwargs: dict[str, object], via: str
) -> None:
    """top_k=1 leaves one token per position: sampled, every verify position must still give
    greedy's token, which holds only if the warpers reach each one. Before: refused."""
    more = {"draft": _oracle} if decoder is speculative_generate else {}
    got = run(decoder, via, {**kwargs, **more}, max_new_tokens=NEW, do_sample=True, top_k=1)
    assert got.sequences[0].tolist() == greedy()
    if decoder is speculative_generate:
        assert got.report.drafts_accepted > 0


def test_sampled_speculative_keeps_the_processed_target_distribution() -> None:
    """With temperature, top-k and top-p, the token that comes out of a verify position (an
    accepted draft, or the residual sample) is distributed as the target's processed scores,
    the distribution transformers' own sampling draws from."""
    from ssm_rollback.integrations._hf.scoring import Scoring
    from ssm_rollback.integrations._hf.speculative import _accept

    gen = torch.Generator().manual_seed(0)
    vocab, trials = 8, 20_000
    processors = LogitsProcessorList(
        [TemperatureLogitsWarper(0.7), TopKLogitsWarper(5), TopPLogitsWarper(0.9)]
    )
    scoring = Scoring(processors, True, gen)
    logits = torch.randn(2, vocab, generator=gen) * 1.5
    before = [1, 2, 3]
    scores = scoring.process(before, [4], logits)
    reference = processors(torch.tensor([before]), logits[:1].clone())  # type: ignore[arg-type]
    assert torch.equal(scores[0], reference[0])
    p = torch.softmax(scores[0], -1)
    assert int((p > 0).sum()) < vocab  # the warpers cut the tail
    q = torch.softmax(torch.randn(vocab, generator=gen), -1)
    for dists in ([q], None):
        counts = torch.zeros(vocab)
        for _ in range(trials):
            draft = 2 if dists is None else int(torch.multinomial(q, 1, generator=gen))
            n, bonus = _accept(scores, [draft], dists, gen, True)
            counts[draft if n == 1 else bonus] += 1
        total_variation = float((counts / trials - p).abs().sum() / 2)
        assert total_variation < 0.02, (dists is None, total_variation)


def test_do_sample_without_a_generator_samples_as_generate_does() -> None:
    """Before: refused ("no 'generator'"). Now torch's global generator, as generate uses."""
    torch.manual_seed(5)
    first = speculative_generate(model(), PROMPT, max_new_tokens=NEW, do_sample=True)
    torch.manual_seed(5)
    again = speculative_generate(model(), PROMPT, max_new_tokens=NEW, do_sample=True)
    assert first.sequences.tolist() == again.sequences.tolist()
    assert first.sequences.shape == (1, PROMPT.shape[1] + NEW)


# -- 4. no keyword silently ignored ----------------------------------------------------------------


@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS, ids=IDS)
def test_a_misspelt_keyword_is_named(decoder: Decoder, kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidArgumentError, match="'num_draft_token'"):
        decoder(model(), PROMPT, max_new_tokens=NEW, num_draft_token=8, **kwargs)


@pytest.mark.parametrize(("decoder", "kwargs"), DECODERS, ids=IDS)
def test_an_assistant_model_generate_keeps_from_the_decoder_is_named(
    decoder: Decoder, kwargs: dict[str, object]
) -> None:
    """Before: generate does not hand a callable custom_generate its assistant_model, and the
    decoders decoded without it."""
    with pytest.raises(InvalidArgumentError, match="'assistant_model' must be None"):
        run(decoder, "generate", kwargs, max_new_tokens=NEW, assistant_model=model())
