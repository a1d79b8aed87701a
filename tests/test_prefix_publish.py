"""Publishing the state a decode ends on: the next turn hits at the end of the previous answer.

After ``prepare`` + ``model.generate`` the caller stores the cache with
``publish_generated``; both decoders store theirs themselves. Each stores
the state under exactly the tokens every cache layer holds, so the next
turn, whose prompt extends prompt + answer, starts from there; its greedy
output still equals plain ``model.generate``'s and the logits after that hit
equal a fresh prefill's within the type's tolerance.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("transformers")

import torch
from transformers.cache_utils import Cache
from transformers.utils import logging as hf_logging

from ssm_rollback import InvalidArgumentError
from ssm_rollback._errors import InvalidArgumentTypeError
from ssm_rollback.integrations._hf.cache_copy import _tensors
from ssm_rollback.integrations.transformers import (
    HybridPrefixCache,
    backtracking_generate,
    speculative_generate,
)
from ssm_rollback.testing import tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
pytestmark = pytest.mark.usefixtures("quiet_warnings")

#: Max abs difference of the next-token logits after a hit from a fresh prefill's (the values
#: of test_prefix_cache.py for these types).
TOLERANCE = {"mamba2": 5e-6, "nemotron_h": 1e-6, "zamba2": 1e-6}
NEW = 6
BIG = 1 << 24
PATHS = ("generate", "speculative", "backtracking")


@functools.cache
def model(model_type: str) -> torch.nn.Module:
    return tiny_model(model_type)


def randoms(n: int, seed: int) -> list[int]:
    out: list[int] = torch.randint(
        0, 128, (n,), generator=torch.Generator().manual_seed(seed)
    ).tolist()
    return out


def plain(m: torch.nn.Module, prompt: list[int]) -> list[int]:
    ids = torch.tensor([prompt])
    out: torch.Tensor = m.generate(  # type: ignore[operator]
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False
    )
    return list(out[0].tolist())


def no_reject(tokens: list[int]) -> int | None:
    return None


def generated(
    m: torch.nn.Module, cache: HybridPrefixCache, prompt: list[int]
) -> tuple[torch.Tensor, Cache]:
    """A greedy ``model.generate`` from ``cache.prepare``: its output and the cache it was given."""
    ids = torch.tensor([prompt])
    prepared = cache.prepare(ids)
    out: torch.Tensor = m.generate(  # type: ignore[operator]
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=NEW,
        do_sample=False,
        cache=prepared,
    )
    return out, prepared


def turn(m: torch.nn.Module, cache: HybridPrefixCache, prompt: list[int], path: str) -> list[int]:
    """One greedy turn through ``path`` from the prefix cache, its end state published."""
    ids = torch.tensor([prompt])
    if path == "generate":
        out, prepared = generated(m, cache, prompt)
        assert cache.publish_generated(out, prepared) == out.shape[1] - 1
        return list(out[0].tolist())
    ones = torch.ones_like(ids)  # every id a real token: the pad id is never masked
    if path == "speculative":
        result = speculative_generate(
            m, ids, attention_mask=ones, max_new_tokens=NEW, prefix_cache=cache
        )
    else:
        result = backtracking_generate(
            m,
            ids,
            attention_mask=ones,
            max_new_tokens=NEW,
            is_boundary=set(),
            reject=no_reject,
            prefix_cache=cache,
        )
    return list(result.sequences[0].tolist())


def chat(model_type: str, path: str) -> tuple[HybridPrefixCache, list[int], list[int], int]:
    """Turn one, then turn two's prompt (turn one's output and a new message); the length the
    answer's state was published under."""
    m = model(model_type)
    cache = HybridPrefixCache(m, max_bytes=BIG)
    first = randoms(12, 1)
    said = turn(m, cache, first, path)
    (entry,) = cache.entries()
    return cache, first, [*said, *randoms(4, 2)], entry.length


@pytest.mark.parametrize("path", PATHS)
def test_the_follow_up_hit_lands_at_the_end_of_the_previous_answer(path: str) -> None:
    cache, first, second, published = chat("nemotron_h", path)
    answer_end = len(first) + NEW
    # generate never feeds its last token; backtracking feeds every token it keeps; a
    # speculative decode ends on what its last verify pass committed (a bonus token is not fed).
    assert {"generate": answer_end - 1, "backtracking": answer_end}.get(path, published) == (
        published
    )
    assert len(first) < published <= answer_end
    before = cache.report
    cache.prepare(torch.tensor([second]))
    after = cache.report
    assert (after.hits - before.hits, after.tokens_reused - before.tokens_reused) == (1, published)
    assert after.tokens_computed - before.tokens_computed == len(second) - 1 - published
    cache.check_valid()


@pytest.mark.parametrize("path", PATHS)
def test_greedy_after_the_follow_up_hit_equals_plain_generate(path: str) -> None:
    m = model("nemotron_h")
    cache, first, second, _ = chat("nemotron_h", path)
    assert second[: len(first) + NEW] == plain(m, first)
    hits = cache.report.hits
    assert turn(m, cache, second, path) == plain(m, second)
    assert cache.report.hits == hits + 1
    assert cache.report.bytes_held <= cache.max_bytes
    cache.check_valid()


@pytest.mark.parametrize("model_type", sorted(TOLERANCE))
@pytest.mark.parametrize("path", PATHS)
def test_logits_after_the_follow_up_hit_equal_a_fresh_prefill(model_type: str, path: str) -> None:
    m = model(model_type)
    cache, _, second, published = chat(model_type, path)
    ids = torch.tensor([second])
    prepared = cache.prepare(ids)
    assert cache.report.tokens_reused == published
    with torch.no_grad():
        from_hit = m(ids[:, -1:], cache=prepared).logits[0, -1]
        fresh = m(ids).logits[0, -1]
    diff = float((from_hit - fresh).abs().max())
    assert diff <= TOLERANCE[model_type], (model_type, path, diff)


def test_publish_generated_refuses_a_cache_that_does_not_stand_after_the_output() -> None:
    m = model("nemotron_h")
    cache = HybridPrefixCache(m, max_bytes=BIG)
    prompt = torch.tensor([randoms(10, 3)])
    prepared = cache.prepare(prompt)  # holds 9 tokens, not the 10 + NEW - 1 of an output
    out = torch.tensor([[*randoms(10, 3), *randoms(NEW, 4)]])
    with pytest.raises(InvalidArgumentError, match="'cache' must stand after exactly the 15"):
        cache.publish_generated(out, prepared)
    assert (len(cache), cache.report.published) == (0, 0)
    assert cache.publish_generated(prompt[:, :1], prepared) == 0  # nothing before a lone token
    assert cache.publish_generated(prompt, prepared) == 9  # stands after all but the last
    assert cache.publish_generated(prompt, prepared) == 0  # held already: refreshed
    assert [entry.length for entry in cache.entries()] == [9]
    cache.check_valid()


def test_a_publish_after_decode_stays_within_the_byte_budget() -> None:
    m = model("nemotron_h")
    probe = HybridPrefixCache(m, max_bytes=BIG)
    probe.prepare(torch.tensor([randoms(13, 5)]), publish_at=[12])
    budget = probe.report.bytes_held  # room for one 12-token prefix, not two
    cache = HybridPrefixCache(m, max_bytes=budget + budget // 2)
    for seed in range(3):
        speculative_generate(
            m, torch.tensor([randoms(8, seed)]), max_new_tokens=NEW, prefix_cache=cache
        )
        assert cache.report.bytes_held <= cache.max_bytes
        cache.check_valid()
    assert cache.report.published == 3
    assert cache.report.evictions == 2
    assert len(cache) == 1


def test_a_prefill_chunk_computes_one_row_of_logits() -> None:
    """Nothing reads a prefill chunk's logits: ``prepare`` asks the model for one row only."""
    m = model("nemotron_h")
    rows: list[int] = []
    head = m.get_output_embeddings()  # type: ignore[operator]
    assert isinstance(head, torch.nn.Module)
    hook = head.register_forward_hook(lambda _, args, out: rows.append(out.shape[1]))
    try:
        HybridPrefixCache(m, max_bytes=BIG).prepare(torch.tensor([randoms(20, 6)]), publish_at=[9])
    finally:
        hook.remove()
    assert rows[-2:] == [1, 1]  # the chunks [0, 9) and [9, 19); the one before is the probe


# -- followed_by: the message end computed after the answer, off the next turn's path ----------

CLOSE = [7, 3]  # what a chat template renders after the answer (its end of message)


def answered(m: torch.nn.Module, cache: HybridPrefixCache) -> tuple[torch.Tensor, Cache]:
    """Turn one through ``model.generate``, its state not published yet."""
    return generated(m, cache, randoms(12, 1))


def forward_widths(m: torch.nn.Module) -> tuple[list[int], torch.utils.hooks.RemovableHandle]:
    widths: list[int] = []

    def count(_: object, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        ids = args[0] if args else kwargs.get("input_ids")
        assert isinstance(ids, torch.Tensor)
        widths.append(ids.shape[-1])

    return widths, m.register_forward_pre_hook(count, with_kwargs=True)


def test_followed_by_stores_the_message_end_in_one_forward_pass() -> None:
    m = model("nemotron_h")
    cache = HybridPrefixCache(m, max_bytes=BIG)
    out, prepared = answered(m, cache)
    held = [tensor.clone() for tensor in _tensors(prepared)]
    widths, hook = forward_widths(m)
    try:
        stored = cache.publish_generated(out, prepared, followed_by=torch.tensor(CLOSE))
    finally:
        hook.remove()
    assert stored == out.shape[1] + len(CLOSE)
    assert widths == [1 + len(CLOSE)]  # the answer's last token and the close, one pass
    assert [entry.length for entry in cache.entries()] == [stored]  # not the answer end too
    assert all(map(torch.equal, _tensors(prepared), held))  # the caller's cache as it was
    cache.check_valid()


def test_the_next_turn_starts_at_the_message_end_and_equals_plain_generate() -> None:
    m = model("nemotron_h")
    cache = HybridPrefixCache(m, max_bytes=BIG)
    out, prepared = answered(m, cache)
    stored = cache.publish_generated(out, prepared, followed_by=CLOSE)
    second = [*out[0].tolist(), *CLOSE, *randoms(4, 2)]
    before = cache.report
    widths, hook = forward_widths(m)
    try:
        ids = torch.tensor([second])
        next_cache = cache.prepare(ids)
    finally:
        hook.remove()
    assert widths == [len(second) - 1 - stored]  # the new message, one pass
    assert cache.report.tokens_reused - before.tokens_reused == stored
    with torch.no_grad():
        from_hit = m(ids[:, -1:], cache=next_cache).logits[0, -1]
        fresh = m(ids).logits[0, -1]
    assert float((from_hit - fresh).abs().max()) <= TOLERANCE["nemotron_h"]
    assert turn(m, cache, second, "generate") == plain(m, second)


def test_followed_by_counts_what_it_computes_and_refreshes_a_held_message_end() -> None:
    m = model("nemotron_h")
    cache = HybridPrefixCache(m, max_bytes=BIG)
    out, prepared = answered(m, cache)
    computed = cache.report.tokens_computed
    assert cache.publish_generated(out, prepared, followed_by=CLOSE) > 0
    assert cache.report.tokens_computed == computed + 1 + len(CLOSE)
    assert cache.publish_generated(out, prepared, followed_by=CLOSE) == 0  # held: refreshed
    assert (len(cache), cache.report.published) == (1, 1)


def test_followed_by_after_a_one_token_output_starts_from_nothing() -> None:
    m = model("nemotron_h")
    cache = HybridPrefixCache(m, max_bytes=BIG)
    one = torch.tensor([[5]])
    assert cache.publish_generated(one, cache.prepare(one), followed_by=CLOSE) == 3
    ids = torch.tensor([[5, *CLOSE, 9]])
    cache.prepare(ids)
    assert cache.report.tokens_reused == 3


@pytest.mark.parametrize(
    ("followed_by", "error", "message"),
    [
        ("ab", InvalidArgumentTypeError, "'followed_by' must be a list, tuple or 1-D tensor"),
        ({7}, InvalidArgumentTypeError, "'followed_by' must be a list, tuple or 1-D tensor"),
        ([7, 128], InvalidArgumentError, r"'followed_by' must be token ids in \[0, 128\), got 128"),
        ([7, -1], InvalidArgumentError, "'followed_by' must be token ids"),
        ([True], InvalidArgumentTypeError, "'followed_by' must be"),
        (torch.tensor([[7]]), InvalidArgumentTypeError, "'followed_by' must be a 1-D tensor"),
    ],
)
def test_a_bad_followed_by_is_refused_with_nothing_stored(
    followed_by: object, error: type[Exception], message: str
) -> None:
    m = model("nemotron_h")
    cache = HybridPrefixCache(m, max_bytes=BIG)
    out, prepared = answered(m, cache)
    before = cache.report
    with pytest.raises(error, match=message):
        cache.publish_generated(out, prepared, followed_by=followed_by)
    assert cache.report == before


@pytest.mark.parametrize(
    ("sequences", "message"),
    [
        (torch.tensor([[1.0, 2.0]]), "'sequences' must be integer token ids"),
        (torch.tensor([[1, 2, 500]]), r"'sequences' must be token ids in \[0, 128\)"),
        (torch.zeros(2, 5, dtype=torch.long), "'sequences' must hold one row"),
    ],
)
def test_bad_sequences_are_refused_by_their_own_name(sequences: torch.Tensor, message: str) -> None:
    """They were named 'input_ids', an argument publish_generated does not have."""
    m = model("nemotron_h")
    cache = HybridPrefixCache(m, max_bytes=BIG)
    _, prepared = answered(m, cache)
    before = cache.report
    with pytest.raises(InvalidArgumentError, match=message):
        cache.publish_generated(sequences, prepared)
    assert cache.report == before


def test_followed_by_refuses_a_cache_that_does_not_stand_after_the_output() -> None:
    m = model("nemotron_h")
    cache = HybridPrefixCache(m, max_bytes=BIG)
    out, prepared = answered(m, cache)
    before = cache.report
    with pytest.raises(InvalidArgumentError, match="'cache' must stand after exactly the 18"):
        cache.publish_generated(torch.cat([out, out[:, -1:]], dim=1), prepared, followed_by=CLOSE)
    assert cache.report == before


def test_followed_by_computes_nothing_when_nothing_can_be_stored() -> None:
    m = model("nemotron_h")
    cache = HybridPrefixCache(m, max_bytes=0)
    out, prepared = answered(m, cache)
    widths, hook = forward_widths(m)
    try:
        assert cache.publish_generated(out, prepared, followed_by=CLOSE) == 0
    finally:
        hook.remove()
    assert widths == []
    assert (len(cache), cache.report.published, cache.report.tokens_computed) == (0, 0, 11)
