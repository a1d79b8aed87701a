"""``prepare(..., prefill_rest=False)`` and the decoders: a new tail is one forward pass, not two.

By default ``prepare`` computes the prompt up to its last token and
``generate`` then computes that token: two forward passes after a hit, each
with its fixed cost. ``prefill_rest=False`` stops at the last ``publish_at``
position past the hit (or at the hit) and ``generate``'s own first pass
computes the rest; the decoders with ``prefix_cache=`` always start that way.
Output stays plain ``model.generate``'s.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("transformers")

import torch
from transformers.cache_utils import Cache
from transformers.utils import logging as hf_logging

from ssm_rollback._errors import InvalidArgumentTypeError
from ssm_rollback.integrations._hf.cache_copy import cache_lengths
from ssm_rollback.integrations.transformers import (
    HybridPrefixCache,
    backtracking_generate,
    speculative_generate,
)
from ssm_rollback.testing import tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
pytestmark = pytest.mark.usefixtures("quiet_warnings")

M = "nemotron_h"
TRUNK = 10
NEW = 5
BIG = 1 << 24


@functools.cache
def model(model_type: str) -> torch.nn.Module:
    return tiny_model(model_type)


def randoms(n: int, seed: int) -> list[int]:
    out: list[int] = torch.randint(
        0, 128, (n,), generator=torch.Generator().manual_seed(seed)
    ).tolist()
    return out


def generate(m: torch.nn.Module, prompt: list[int], **kwargs: object) -> list[int]:
    ids = torch.tensor([prompt])
    out: torch.Tensor = m.generate(  # type: ignore[operator]
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False, **kwargs
    )
    return list(out[0].tolist())


def no_reject(tokens: list[int]) -> int | None:
    return None


def decode(m: torch.nn.Module, prompt: list[int], path: str, cache: HybridPrefixCache) -> list[int]:
    ids = torch.tensor([prompt])
    if path == "speculative":
        result = speculative_generate(m, ids, max_new_tokens=NEW, prefix_cache=cache)
    else:
        result = backtracking_generate(
            m, ids, max_new_tokens=NEW, is_boundary=set(), reject=no_reject, prefix_cache=cache
        )
    return list(result.sequences[0].tolist())


@functools.cache
def trunk() -> list[int]:
    return randoms(TRUNK, 1)


def published(m: torch.nn.Module) -> HybridPrefixCache:
    """A prefix cache holding the trunk alone."""
    cache = HybridPrefixCache(m, max_bytes=BIG)
    cache.prepare([*trunk(), 0], publish_at=(TRUNK,))
    assert [entry.length for entry in cache.entries()] == [TRUNK]
    return cache


class Widths:
    """The width of every forward pass of a model while entered; ``starts``: the tokens its
    cache held before each (0 for none)."""

    def __init__(self, m: torch.nn.Module) -> None:
        self.model = m
        self.seen: list[int] = []
        self.starts: list[int] = []

    def __enter__(self) -> Widths:
        self.hook = self.model.register_forward_pre_hook(self.count, with_kwargs=True)
        return self

    def __exit__(self, *_: object) -> None:
        self.hook.remove()

    def count(self, _: object, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        ids = args[0] if args else kwargs.get("input_ids")
        assert isinstance(ids, torch.Tensor)
        self.seen.append(ids.shape[-1])
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        self.starts.append(max(cache_lengths(cache), default=0) if isinstance(cache, Cache) else 0)

    def from_(self, start: int) -> list[int]:
        """The widths of the passes that started after ``start`` tokens."""
        return [w for w, s in zip(self.seen, self.starts, strict=True) if s == start]


def test_the_tail_after_a_hit_is_generates_first_pass_alone() -> None:
    m = model(M)
    cache = published(m)
    prompt = [*trunk(), *randoms(7, 2)]
    before = cache.report
    with Widths(m) as passes:
        prepared = cache.prepare(prompt, prefill_rest=False)
        out = generate(m, prompt, cache=prepared)
    assert passes.seen == [len(prompt) - TRUNK] + [1] * (NEW - 1)  # the tail, one pass
    assert out == generate(m, prompt)
    assert cache.report.tokens_computed == before.tokens_computed  # generate computed it
    assert cache.report.tokens_reused - before.tokens_reused == TRUNK


def test_the_default_still_leaves_only_the_last_token() -> None:
    m = model(M)
    cache = published(m)
    prompt = [*trunk(), *randoms(7, 2)]
    with Widths(m) as passes:
        out = generate(m, prompt, cache=cache.prepare(prompt))
    assert passes.seen[:2] == [len(prompt) - 1 - TRUNK, 1]
    assert out == generate(m, prompt)


def test_it_stops_at_the_last_publish_past_the_hit() -> None:
    m = model(M)
    cache = published(m)
    prompt = [*trunk(), *randoms(9, 3)]
    with Widths(m) as passes:
        prepared = cache.prepare(prompt, publish_at=(TRUNK + 6, TRUNK + 3), prefill_rest=False)
    assert passes.seen == [3, 3]  # to each publish, and no further
    assert cache_lengths(prepared) == {TRUNK + 6}
    assert sorted(entry.length for entry in cache.entries()) == [TRUNK, TRUNK + 3, TRUNK + 6]
    assert generate(m, prompt, cache=prepared) == generate(m, prompt)


def test_with_no_hit_and_no_publish_it_computes_nothing() -> None:
    m = model(M)
    cache = HybridPrefixCache(m, max_bytes=BIG)
    prompt = randoms(8, 4)
    with Widths(m) as passes:
        prepared = cache.prepare(prompt, prefill_rest=False)
    assert passes.seen == []
    assert prepared.get_seq_length() == 0
    assert generate(m, prompt, cache=prepared) == generate(m, prompt)
    assert cache.report.misses == 1
    assert cache.report.tokens_computed == 0


@pytest.mark.parametrize("path", ["speculative", "backtracking"])
def test_the_decoders_feed_the_tail_and_the_last_token_in_one_pass(path: str) -> None:
    m = model(M)
    cache = published(m)
    prompt = [*trunk(), *randoms(7, 2)]
    with Widths(m) as passes:
        out = decode(m, prompt, path, cache)
    assert passes.from_(TRUNK) == [len(prompt) - TRUNK]  # one pass from the hit: all the rest
    assert out == generate(m, prompt)
    assert cache.report.hits == 1


@pytest.mark.parametrize("path", ["speculative", "backtracking"])
def test_the_decoders_on_a_miss_prefill_once(path: str) -> None:
    m = model(M)
    cache = HybridPrefixCache(m, max_bytes=BIG)
    prompt = randoms(9, 5)
    with Widths(m) as passes:
        out = decode(m, prompt, path, cache)
    # The whole prompt in one pass (the speculative decoder's probe of the model adds a 1-
    # and a 2-token pass on a cache of its own).
    assert [w for w in passes.from_(0) if w > 2] == [len(prompt)]
    assert out == generate(m, prompt)


@pytest.mark.parametrize("value", [1, 0, None, "no"])
def test_a_bad_prefill_rest_is_refused_with_nothing_changed(value: object) -> None:
    m = model(M)
    cache = published(m)
    before = cache.report
    with pytest.raises(InvalidArgumentTypeError, match="'prefill_rest' must be a bool"):
        cache.prepare([*trunk(), 5, 6], publish_at=(TRUNK + 1,), prefill_rest=value)  # type: ignore[arg-type]
    assert cache.report == before
    assert [entry.length for entry in cache.entries()] == [TRUNK]
    cache.check_valid()


@pytest.mark.parametrize("path", ["speculative", "backtracking"])
def test_the_decoders_prompt_pass_computes_one_row_of_logits(path: str) -> None:
    """Only the prompt's last logits are read: the model is asked for that row alone."""
    m = model(M)
    prompt = randoms(9, 6)
    rows: list[int] = []
    head = m.get_output_embeddings()  # type: ignore[operator]
    assert isinstance(head, torch.nn.Module)
    hook = head.register_forward_hook(lambda _, args, out: rows.append(out.shape[1]))
    try:
        with Widths(m) as passes:
            decode(m, prompt, path, HybridPrefixCache(m, max_bytes=BIG))
    finally:
        hook.remove()
    assert rows[passes.seen.index(len(prompt))] == 1
