"""``HybridPrefixCache`` on tiny random models: hits give what a full prefill gives, within bytes.

Greedy output from a prepared cache equals plain ``model.generate`` on every
swept model type, through ``prepare`` + ``generate`` and both decoders; the
logits after a hit equal a fresh prefill's within a tolerance measured per
type; a state machine publishes and hits random prompts under random byte
budgets and checks bytes, the index and every prepared cache against a fresh
prefill after each step.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

pytest.importorskip("transformers")

import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from transformers import PreTrainedTokenizerFast
from transformers.cache_utils import Cache
from transformers.utils import logging as hf_logging

from ssm_rollback import InvalidArgumentError
from ssm_rollback.integrations.transformers import (
    HybridPrefixCache,
    PrefixCacheReport,
    backtracking_generate,
    message_boundaries,
    speculative_generate,
)
from ssm_rollback.testing import TESTED_MODEL_TYPES, tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
pytestmark = pytest.mark.usefixtures("quiet_warnings")

#: Max abs difference of the next-token logits after a hit from a fresh prefill's, per swept
#: type: about 3x the worst measured over three seeds (bamba's and jamba's own cached forwards
#: differ from a fresh prefill by that much with no prefix cache at all).
TOLERANCE = {
    "bamba": 1e-2,  # measured 2.8e-3
    "falcon_h1": 1e-6,  # 1.2e-7
    "jamba": 3e-5,  # 9.0e-6
    "lara_mini": 1e-6,  # 1.5e-7
    "lfm2": 1e-6,  # 2.4e-7
    "lfm3": 2e-6,  # 4.0e-7
    "mamba2": 5e-6,  # 1.3e-6
    "nemotron_h": 1e-6,  # 1.8e-7
    "qwen3_5_text": 1e-6,  # 1.5e-7
    "zamba2": 1e-6,  # 2.4e-7
}
#: Tested types the prefix cache refuses, and why (the rest serve; the sweep takes ten).
REFUSED = {
    "bailing_hybrid": "its multi-token cached forward raises in transformers",
    "kimi_linear": "its multi-token cached forward raises in transformers",
    "falcon_mamba": "Mamba1's multi-token scan starts from a zero state, not the cached one",
    "mamba": "Mamba1's multi-token scan starts from a zero state, not the cached one",
    "glm5_next_text": "transformers has no causal-LM class for it",
}
TRUNK = 10
NEW = 4
BIG = 1 << 24


@functools.cache
def model(model_type: str) -> torch.nn.Module:
    return tiny_model(model_type)


def ids(*parts: list[int]) -> torch.Tensor:
    return torch.tensor([[t for part in parts for t in part]])


def randoms(n: int, seed: int) -> list[int]:
    out: list[int] = torch.randint(
        0, 128, (n,), generator=torch.Generator().manual_seed(seed)
    ).tolist()
    return out


def plain(m: torch.nn.Module, prompt: torch.Tensor, **kwargs: object) -> list[list[int]]:
    out: torch.Tensor = m.generate(  # type: ignore[operator]
        prompt,
        attention_mask=torch.ones_like(prompt),  # a prompt may hold the pad id
        max_new_tokens=NEW,
        do_sample=False,
        **kwargs,
    )
    return out.tolist()


def next_logits(m: torch.nn.Module, prompt: torch.Tensor, cache: Cache | None) -> torch.Tensor:
    with torch.no_grad():
        out = m(prompt) if cache is None else m(prompt[:, -1:], cache=cache)
    logits: torch.Tensor = out.logits[0, -1]
    return logits


def no_reject(tokens: list[int]) -> int | None:
    return None


def test_the_sweep_and_the_refused_cover_the_tested_types() -> None:
    assert len(TOLERANCE) >= 8
    assert set(TOLERANCE) <= set(TESTED_MODEL_TYPES)
    assert not set(TOLERANCE) & set(REFUSED)


@pytest.mark.parametrize("model_type", sorted(TOLERANCE))
def test_greedy_from_a_hit_equals_plain_generate(model_type: str) -> None:
    """Small prompts: a trunk published by one prompt, hit by another, through every path."""
    m = model(model_type)
    trunk = randoms(TRUNK, 1)
    first, second = ids(trunk, randoms(4, 2)), ids(trunk, randoms(3, 3))
    expected = plain(m, second)
    cache = HybridPrefixCache(m, max_bytes=BIG)
    cache.prepare(first, publish_at=(TRUNK,))
    assert cache.report.hits == 0

    diff = float(
        (next_logits(m, second, cache.prepare(second)) - next_logits(m, second, None)).abs().max()
    )
    assert diff <= TOLERANCE[model_type], (model_type, diff)
    assert plain(m, second, cache=cache.prepare(second)) == expected
    assert plain(m, second, cache=cache.prepare(second, prefill_rest=False)) == expected
    assert (
        speculative_generate(m, second, max_new_tokens=NEW, prefix_cache=cache).sequences.tolist()
        == expected
    )
    result = backtracking_generate(
        m, second, max_new_tokens=NEW, is_boundary=set(), reject=no_reject, prefix_cache=cache
    )
    assert result.sequences.tolist() == expected
    assert cache.report.hits == 5
    assert cache.report.tokens_reused == 5 * TRUNK
    cache.check_valid()


@pytest.mark.parametrize("model_type", ["kimi_linear", "mamba"])
def test_a_model_that_cannot_continue_a_prefill_is_refused(model_type: str) -> None:
    with pytest.raises(
        InvalidArgumentError, match=rf"'model' must run a multi-token .* {model_type}"
    ):
        HybridPrefixCache(model(model_type), max_bytes=BIG)


# -- one model, in depth -----------------------------------------------------------------

M = "nemotron_h"
TOL = TOLERANCE[M]


def layer_tensors(cache: Cache) -> Iterator[torch.Tensor]:
    for layer in cache.layers:
        for value in vars(layer).values():
            values = value.values() if isinstance(value, dict) else [value]
            yield from (v for v in values if isinstance(v, torch.Tensor))


def test_bytes_held_are_the_tensor_bytes_of_the_prefix() -> None:
    m = model(M)
    prompt = ids(randoms(15, 4))
    cache = HybridPrefixCache(m, max_bytes=BIG)
    cache.prepare(prompt, publish_at=(9,))
    with torch.no_grad():
        fresh = m(prompt[:, :9]).cache
    assert cache.report.bytes_held == sum(
        t.numel() * t.element_size() for t in layer_tensors(fresh)
    )
    assert cache.report.entries == 1


def test_regenerate_reuses_all_but_the_last_token_and_computes_nothing() -> None:
    m = model(M)
    prompt = ids(randoms(12, 5))
    cache = HybridPrefixCache(m, max_bytes=BIG)
    cache.prepare(prompt, publish_at=(11,))
    computed = cache.report.tokens_computed
    assert plain(m, prompt, cache=cache.prepare(prompt)) == plain(m, prompt)
    assert cache.report.tokens_computed == computed
    assert cache.report.tokens_reused == 11


def test_a_one_token_prompt_gets_an_empty_cache() -> None:
    m = model(M)
    prompt = ids([7])
    cache = HybridPrefixCache(m, max_bytes=BIG)
    prepared = cache.prepare(prompt)
    assert prepared.get_seq_length() == 0
    assert plain(m, prompt, cache=prepared) == plain(m, prompt)


def test_decoding_on_a_prepared_cache_leaves_the_stored_prefix_intact() -> None:
    """The cache handed out is a copy: scribbling over it changes no stored tensor."""
    m = model(M)
    prompt = ids(randoms(12, 6))
    cache = HybridPrefixCache(m, max_bytes=BIG)
    cache.prepare(prompt, publish_at=(8,))
    prepared = cache.prepare(prompt)
    for tensor in layer_tensors(prepared):
        if tensor.is_floating_point():
            tensor.fill_(3.0)
    again = cache.prepare(prompt)
    assert torch.allclose(next_logits(m, prompt, again), next_logits(m, prompt, None), atol=TOL)


def test_a_prefill_never_evicts_what_it_stands_on_a_later_one_may() -> None:
    """Pins: the hit a prefill stands on stays; a publish that cannot fit beside it is declined."""
    m = model(M)
    trunk = randoms(6, 7)
    probe = HybridPrefixCache(m, max_bytes=BIG)
    probe.prepare(ids(trunk, [1]), publish_at=(6,))
    one = probe.report.bytes_held  # the bytes of a 6-token prefix
    cache = HybridPrefixCache(m, max_bytes=one + one // 2)
    cache.prepare(ids(trunk, [1]), publish_at=(6,))
    longer = ids(trunk, randoms(8, 8))
    cache.prepare(longer, publish_at=(12,))  # hits the trunk; 12 tokens do not fit beside it
    report = cache.report
    assert (report.hits, report.declined, report.evictions, report.entries) == (1, 1, 0, 1)
    other = ids(randoms(9, 9))
    cache.prepare(other, publish_at=(6,))  # the trunk is unpinned now: evicted for this one
    assert (cache.report.evictions, cache.report.entries) == (1, 1)
    prepared = cache.prepare(torch.cat([other[:, :6], ids([2])], 1))
    assert cache.report.hits == 2
    assert torch.allclose(
        next_logits(m, other, cache.prepare(other)), next_logits(m, other, None), atol=TOL
    )
    assert prepared.get_seq_length() == 6
    cache.check_valid()


def test_publish_at_in_any_order_stores_each_positions_own_state() -> None:
    m = model(M)
    prompt = ids(randoms(14, 15))
    cache = HybridPrefixCache(m, max_bytes=BIG)
    cache.prepare(prompt, publish_at=(9, 4, 9))
    assert sorted(entry.length for entry in cache.entries()) == [4, 9]
    branch = torch.cat([prompt[:, :4], ids(randoms(3, 16))], 1)
    prepared = cache.prepare(branch)
    assert cache.report.tokens_reused == 4
    assert torch.allclose(next_logits(m, branch, prepared), next_logits(m, branch, None), atol=TOL)


def test_a_publish_too_big_for_the_budget_evicts_nothing() -> None:
    m = model(M)
    probe = HybridPrefixCache(m, max_bytes=BIG)
    probe.prepare(ids(randoms(2, 17)), publish_at=(1,))
    cache = HybridPrefixCache(m, max_bytes=2 * probe.report.bytes_held + 100)  # two slots
    cache.prepare(ids(randoms(5, 17)), publish_at=(4,))
    cache.prepare(ids(randoms(90, 18)), publish_at=(80,))  # 80 tokens of KV: cannot fit at all
    report = cache.report
    assert (cache.capacity, report.entries, report.evictions, report.declined) == (2, 1, 0, 1)
    cache.check_valid()


def test_a_failed_prefill_leaves_no_entry_without_its_copy() -> None:
    """Fault: the model raises in the second chunk; what was stored before it stays, whole."""
    m = model(M)
    prompt = ids(randoms(14, 10))
    cache = HybridPrefixCache(m, max_bytes=BIG)
    calls = []

    def fail_second(module: torch.nn.Module, args: object) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected")

    handle = m.register_forward_pre_hook(fail_second)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            cache.prepare(prompt, publish_at=(4, 9))
    finally:
        handle.remove()
    cache.check_valid()
    assert [entry.length for entry in cache.entries()] == [4]
    assert cache.report.bytes_held > 0
    before = cache.report.tokens_reused
    prepared = cache.prepare(prompt)
    assert cache.report.tokens_reused - before == 4
    assert torch.allclose(next_logits(m, prompt, prepared), next_logits(m, prompt, None), atol=TOL)


def test_zero_bytes_disables_the_cache() -> None:
    m = model(M)
    prompt = ids(randoms(8, 11))
    cache = HybridPrefixCache(m, max_bytes=0)
    cache.prepare(prompt, publish_at=(4,))
    cache.prepare(prompt, publish_at=(4,))
    assert cache.capacity == 0
    assert cache.report == PrefixCacheReport(misses=2, tokens_computed=14, declined=2)


def test_backtracking_rows_each_start_from_the_cache() -> None:
    """Two left-padded rows sharing a trunk: each row hits, output as without the cache."""
    m = model(M)
    trunk = randoms(TRUNK, 12)
    rows = torch.tensor([[0, *trunk, 5, 6], [*trunk, 7, 8, 9]])
    mask = torch.tensor([[0] + [1] * (TRUNK + 2), [1] * (TRUNK + 3)])
    cache = HybridPrefixCache(m, max_bytes=BIG)
    cache.prepare(ids(trunk, [1]), publish_at=(TRUNK,))
    kwargs = {
        "max_new_tokens": NEW,
        "is_boundary": set(),
        "reject": no_reject,
        "attention_mask": mask,
    }
    expected = backtracking_generate(m, rows, **kwargs)  # type: ignore[arg-type]
    got = backtracking_generate(m, rows, prefix_cache=cache, **kwargs)  # type: ignore[arg-type]
    assert got.sequences.tolist() == expected.sequences.tolist()
    assert cache.report.hits == 2


# -- bad arguments: named errors, nothing changed ---------------------------------------


@pytest.mark.parametrize(
    ("max_bytes", "error"),
    [(-1, InvalidArgumentError), (True, TypeError), (1.5, TypeError), ("1", TypeError)],
)
def test_bad_max_bytes_is_refused(max_bytes: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="'max_bytes' must be an int >= 0"):
        HybridPrefixCache(model(M), max_bytes=max_bytes)  # type: ignore[arg-type]


def test_a_budget_past_any_machine_holds_at_most_the_indexs_most_prefixes() -> None:
    """``max_bytes=10**30`` raised ``OverflowError`` sizing the index; it holds 2**24 now."""
    cache = HybridPrefixCache(model(M), max_bytes=10**30)
    assert cache.capacity == 2**24
    assert cache.max_bytes == 10**30


def test_a_non_model_is_refused() -> None:
    with pytest.raises(TypeError, match="'model' must be a transformers causal LM"):
        HybridPrefixCache(object(), max_bytes=BIG)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("input_ids", "publish_at", "match"),
    [
        (torch.zeros(2, 5, dtype=torch.long), (), "'input_ids' must hold one row"),
        (torch.tensor([[1, 2, 500]]), (), r"'input_ids' must be token ids in \[0, 128\)"),
        (torch.zeros(1, 0, dtype=torch.long), (), "'input_ids' must be integer token ids"),
        (torch.tensor([[1.0, 2.0]]), (), "'input_ids' must be integer token ids"),
        (torch.tensor([[1, 2, 3]]), (3,), "'publish_at' must hold positions < len"),
        (torch.tensor([[1, 2, 3]]), (-1,), r"'publish_at\[0\]' must be an int >= 0, got -1"),
        (torch.tensor([[1, 2, 3]]), "x", "'publish_at'"),
    ],
)
def test_bad_prepare_arguments_change_nothing(
    input_ids: object, publish_at: object, match: str
) -> None:
    cache = HybridPrefixCache(model(M), max_bytes=BIG)
    cache.prepare(ids(randoms(6, 13)), publish_at=(3,))
    before = cache.report
    with pytest.raises(InvalidArgumentError, match=match):
        cache.prepare(input_ids, publish_at=publish_at)  # type: ignore[arg-type]
    assert cache.report == before
    cache.check_valid()


def test_prefix_cache_of_the_decoders_is_checked() -> None:
    m = model(M)
    prompt = ids(randoms(6, 14))
    with pytest.raises(TypeError, match="'prefix_cache' must be a HybridPrefixCache or None"):
        speculative_generate(m, prompt, max_new_tokens=2, prefix_cache=object())
    other = HybridPrefixCache(model("lfm2"), max_bytes=BIG)
    with pytest.raises(
        InvalidArgumentError, match="'prefix_cache' must hold prefixes of the model"
    ):
        backtracking_generate(
            m, prompt, max_new_tokens=2, is_boundary=set(), reject=no_reject, prefix_cache=other
        )
    assert other.report == PrefixCacheReport(max_bytes=BIG)


# -- the state machine: random publishes under random budgets ----------------------------


@functools.cache
def fresh_logits(tokens: tuple[int, ...]) -> torch.Tensor:
    return next_logits(model(M), torch.tensor([tokens]), None)


class PrefixCacheMachine(RuleBasedStateMachine):
    """Prompts over two trunks and a few branches, random ``publish_at``, a random budget.

    After each ``prepare``: the hit is exactly the longest stored prefix (a
    plain dict of what was published, less what is no longer held), the
    prepared cache gives a fresh prefill's logits (a stale prefix would not),
    and bytes held stay within the budget.
    """

    # An entry of the tiny Nemotron-H holds about 11.3 kB of SSM state and 256 B per token:
    # budgets from none to about four entries.
    @initialize(budget=st.integers(0, 8), extra=st.integers(0, 3000))
    def make(self, budget: int, extra: int) -> None:
        self.model = model(M)
        self.cache = HybridPrefixCache(self.model, max_bytes=budget * 6000 + extra)
        self.published: dict[int, tuple[int, ...]] = {}  # ticket -> tokens

    @rule(
        trunk=st.sampled_from([randoms(8, 20), randoms(8, 21)]),
        branch=st.lists(st.sampled_from([randoms(3, 22), randoms(3, 23)]), max_size=2),
        tail=st.lists(st.integers(0, 127), min_size=1, max_size=3),
        picks=st.sets(st.integers(0, 20), max_size=3),
    )
    def prepare(
        self, trunk: list[int], branch: list[list[int]], tail: list[int], picks: set[int]
    ) -> None:
        tokens = [*trunk, *(t for part in branch for t in part), *tail]
        prompt = torch.tensor([tokens])
        publish_at = sorted(p for p in picks if p < len(tokens))
        live = {e.ticket: self.published[e.ticket] for e in self.cache.entries()}
        expected = max(
            (len(t) for t in live.values() if len(t) < len(tokens) and list(t) == tokens[: len(t)]),
            default=0,
        )
        before = self.cache.report.tokens_reused
        prepared = self.cache.prepare(prompt, publish_at=publish_at)
        assert self.cache.report.tokens_reused - before == expected
        assert prepared.get_seq_length() == len(tokens) - 1
        for entry in self.cache.entries():
            self.published.setdefault(entry.ticket, tuple(tokens[: entry.length]))
        got = next_logits(self.model, prompt, prepared)
        assert float((got - fresh_logits(tuple(tokens))).abs().max()) <= TOL

    @invariant()
    def within_budget(self) -> None:
        self.cache.check_valid()
        assert self.cache.report.bytes_held <= self.cache.max_bytes


PrefixCacheMachine.TestCase.settings = settings(
    max_examples=max(1, settings().max_examples // 30), stateful_step_count=6
)
TestPrefixCacheMachine = PrefixCacheMachine.TestCase


# -- message boundaries -----------------------------------------------------------------

WORDS = ["hello", "there", "how", "are", "you", "fine", "thanks", "bye", "again"]
SPECIAL = ["<system>", "<user>", "<assistant>", "</s>"]
TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}<assistant> {% endif %}"
)
#: Renders an assistant message's content only while it is the last message.
DROPPING = (
    "{% for m in messages %}<{{ m['role'] }}> "
    "{% if m['role'] != 'assistant' or loop.last %}{{ m['content'] }} {% endif %}</s> "
    "{% endfor %}{% if add_generation_prompt %}<assistant> {% endif %}"
)
CHAT = [
    {"role": "system", "content": "hello there"},
    {"role": "user", "content": "how are you"},
    {"role": "assistant", "content": "fine thanks"},
    {"role": "user", "content": "bye again"},
]


@functools.cache
def tokenizer(template: str = TEMPLATE) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {word: i for i, word in enumerate(["[UNK]", *SPECIAL, *WORDS])}
    inner = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=inner, chat_template=template)  # type: ignore[no-untyped-call]


def test_message_boundaries_are_where_each_message_ends() -> None:
    tok = tokenizer()
    rendered: list[int] = tok.apply_chat_template(
        CHAT, add_generation_prompt=True, return_dict=False
    )  # type: ignore[assignment]
    ends = message_boundaries(tok, CHAT, add_generation_prompt=True)
    assert ends == (4, 9, 13, 17)
    assert all(rendered[end - 1] == tok.convert_tokens_to_ids("</s>") for end in ends)
    assert ends[-1] < len(rendered)


def test_a_message_rendered_otherwise_once_followed_has_no_boundary() -> None:
    tok = tokenizer(DROPPING)
    assert message_boundaries(tok, CHAT, add_generation_prompt=True) == (4, 9, 15)


def test_message_boundaries_feed_publish_at_and_the_next_turn_hits() -> None:
    tok, m = tokenizer(), model(M)
    first: list[int] = tok.apply_chat_template(
        CHAT[:2], add_generation_prompt=True, return_dict=False
    )  # type: ignore[assignment]
    cache = HybridPrefixCache(m, max_bytes=BIG)
    cache.prepare(first, publish_at=message_boundaries(tok, CHAT[:2], add_generation_prompt=True))
    second: list[int] = tok.apply_chat_template(CHAT, add_generation_prompt=True, return_dict=False)  # type: ignore[assignment]
    cache.prepare(second)
    assert cache.report.tokens_reused == 9  # the end of the user's first message


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((object(), CHAT), {}, "'tokenizer' must be a transformers tokenizer"),
        ((None, "hello"), {}, "'messages' must be a sequence of message dicts"),
        ((None, ["hello"]), {}, "'messages' must hold message dicts, got 'hello'"),
        ((None, CHAT), {"tokenize": False}, "'template_kwargs' must not set 'tokenize'"),
    ],
)
def test_bad_message_boundaries_arguments(
    args: tuple[object, object], kwargs: dict[str, object], match: str
) -> None:
    tok = tokenizer() if args[0] is None else args[0]
    with pytest.raises(InvalidArgumentError, match=match):
        message_boundaries(tok, args[1], **kwargs)  # type: ignore[arg-type]
