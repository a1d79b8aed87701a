"""``HybridPrefixCache`` misuse: refused by name, with nothing stored and nothing changed.

``publish_state`` takes its ``tokens`` as every other token argument of the
prefix cache does (a list, a tuple, a 1-D tensor or array) and names them
``'tokens'`` when they are bad. ``publish_state`` and ``publish_generated``
store only one row of the served model's own cache: a batch's cache, or a
cache of another model (other layers, other shapes, another dtype), is
refused before anything is stored, where it used to be stored and to fail
later in ``generate`` with a foreign error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

pytest.importorskip("transformers")

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import Cache, LinearAttentionCacheLayerMixin
from transformers.utils import logging as hf_logging

from ssm_rollback import (
    InvalidArgumentError,
    PrefixEntry,
    SsmDecodeRing,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    apply_effects,
)
from ssm_rollback._errors import InvalidArgumentTypeError
from ssm_rollback.integrations.transformers import (
    HybridCacheSnapshotPool,
    HybridPrefixCache,
    PrefixCacheReport,
    crop_attention,
)
from ssm_rollback.testing import tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
pytestmark = pytest.mark.usefixtures("quiet_warnings")

M = "nemotron_h"
BIG = 1 << 24
NEW = 3
#: Swept types whose own ``generate`` caches must be taken (test_prefix_cache.py's sweep).
SWEPT = (
    "bamba",
    "falcon_h1",
    "jamba",
    "lara_mini",
    "lfm2",
    "lfm3",
    "mamba2",
    "nemotron_h",
    "qwen3_5_text",
    "zamba2",
)


@functools.cache
def model(model_type: str) -> torch.nn.Module:
    return tiny_model(model_type)


def randoms(n: int, seed: int) -> list[int]:
    out: list[int] = torch.randint(
        0, 128, (n,), generator=torch.Generator().manual_seed(seed)
    ).tolist()
    return out


def generated(m: torch.nn.Module, prompt: torch.Tensor) -> tuple[torch.Tensor, Cache]:
    """Greedy ``model.generate`` on a cache of the caller's own (as users make one)."""
    config = m.config
    assert isinstance(config, PretrainedConfig)
    cache = DynamicCache(config=config)
    out: torch.Tensor = m.generate(  # type: ignore[operator]
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=NEW,
        do_sample=False,
        cache=cache,
    )
    return out, cache


def served() -> HybridPrefixCache:
    """A prefix cache of ``M`` holding one prefix, so that a refusal has something to keep."""
    prefixes = HybridPrefixCache(model(M), max_bytes=BIG)
    prefixes.prepare(torch.tensor([randoms(8, 1)]), publish_at=(5,))
    return prefixes


def state(prefixes: HybridPrefixCache) -> tuple[PrefixCacheReport, tuple[PrefixEntry, ...]]:
    prefixes.check_valid()
    return prefixes.report, prefixes.entries()


# -- finding 6: publish_state's tokens ---------------------------------------------------------


#: The kinds of token ids the prefix cache takes, made from a 1-D tensor.
KINDS: dict[str, Callable[[torch.Tensor], object]] = {
    "list": lambda row: row.tolist(),
    "tuple": lambda row: tuple(row.tolist()),
    "tensor": lambda row: row,
    "array": lambda row: row.numpy(),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_publish_state_takes_tokens_as_a_tensor_or_an_array(kind: str) -> None:
    out, cache = generated(model(M), torch.tensor([randoms(12, 2)]))
    row, made = out[0, :-1], KINDS[kind]
    prefixes = HybridPrefixCache(model(M), max_bytes=BIG)
    assert prefixes.publish_state(made(row), cache) == 12 + NEW - 1  # type: ignore[arg-type]
    assert prefixes.publish_state(made(row[:0]), cache) == 0  # type: ignore[arg-type]
    follow_up = torch.cat([out, torch.tensor([[4, 5]])], dim=1)
    prefixes.prepare(follow_up)
    assert prefixes.report.tokens_reused == 12 + NEW - 1
    prefixes.check_valid()


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        pytest.param(
            lambda row: row[None],
            InvalidArgumentTypeError,
            "'tokens' must be a 1-D tensor of",
            id="2-D tensor",
        ),
        pytest.param(
            lambda row: row[None].numpy(),
            InvalidArgumentTypeError,
            "'tokens' must be a 1-D",
            id="2-D array",
        ),
        pytest.param(
            lambda row: [row.tolist()],
            InvalidArgumentTypeError,
            r"'tokens' must be token ids \(",
            id="list of a list",
        ),
        pytest.param(
            lambda row: row.float(),
            InvalidArgumentTypeError,
            r"'tokens' must be token ids \(",
            id="float tensor",
        ),
        pytest.param(
            lambda row: row > 0,
            InvalidArgumentTypeError,
            r"'tokens' must be token ids \(",
            id="bool tensor",
        ),
        pytest.param(
            lambda row: [*row.tolist()[:-1], 500],
            InvalidArgumentError,
            r"'tokens' .*\[0, 128\)",
            id="outside the vocabulary",
        ),
        pytest.param(
            lambda row: "abc",
            InvalidArgumentTypeError,
            "'tokens' must be a list, tuple or 1-D",
            id="str",
        ),
        pytest.param(
            lambda row: None,
            InvalidArgumentTypeError,
            "'tokens' must be a list, tuple or 1-D",
            id="None",
        ),
    ],
)
def test_publish_state_refuses_bad_tokens_by_name_changing_nothing(
    make: Callable[[torch.Tensor], object], error: type[Exception], message: str
) -> None:
    out, cache = generated(model(M), torch.tensor([randoms(12, 2)]))
    prefixes = served()
    before = state(prefixes)
    with pytest.raises(error, match=message):
        prefixes.publish_state(make(out[0, :-1]), cache)  # type: ignore[arg-type]
    assert state(prefixes) == before


# -- finding 7: a cache that is not one row of the served model's ------------------------------


def test_a_batch_cache_is_refused_by_name_with_nothing_stored() -> None:
    """Row 0's tokens with the batch-2 cache they were generated in: the stored prefix would
    make the next ``generate`` fail on a batch-1 prompt."""
    m = model(M)
    out, cache = generated(m, torch.tensor([randoms(12, 2), randoms(12, 3)]))
    prefixes = served()
    before = state(prefixes)
    batch = r"'cache' must hold one row \(batch size 1.*got batch size 2 .*: nothing stored"
    with pytest.raises(InvalidArgumentError, match=batch):
        prefixes.publish_state(out[0, :-1], cache)
    with pytest.raises(InvalidArgumentError, match=batch):
        prefixes.publish_generated(out[:1], cache)
    with pytest.raises(InvalidArgumentError, match=batch):
        prefixes.publish_generated(out[:1], cache, followed_by=[4])
    assert state(prefixes) == before
    follow_up = torch.cat([out[:1], torch.tensor([[4, 5]])], dim=1)
    expected = generated(m, follow_up)[0]
    assert torch.equal(generated_from(prefixes, follow_up), expected)


def generated_from(prefixes: HybridPrefixCache, prompt: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = prefixes.model.generate(  # type: ignore[operator]
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=NEW,
        do_sample=False,
        cache=prefixes.prepare(prompt),
    )
    return out


#: Models whose caches the ``M`` prefix cache must refuse, and what the refusal says.
OTHERS: dict[str, tuple[Callable[[], torch.nn.Module], str]] = {
    "zamba2": (
        lambda: model("zamba2"),
        "with a DynamicLayer as layer 1, got a LinearAttentionLayer",
    ),
    "five layers": (
        lambda: tiny_model(M, layers_block_type=["mamba", "attention", "mamba", "moe", "mamba"]),
        "with 4 layers, got 5",
    ),
    "one kv head": (
        lambda: tiny_model(M, num_key_value_heads=1),
        r"layers\[1\]\.keys shaped \(1, 2, \*, 16\) float32 on cpu, got \(1, 1, 14, 16\)",
    ),
    "bfloat16": (
        lambda: tiny_model(M).to(torch.bfloat16),
        r"layers\[0\]\.conv_states\[0\] shaped \(1, 96, 4\) float32 on cpu, got .* bfloat16",
    ),
}


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_another_models_cache_is_refused_by_name_with_nothing_stored(name: str) -> None:
    """Its layers, their kinds or their state tensors differ from the served model's: stored, it
    would make the next ``generate`` fail (or decode from a state the model never makes)."""
    make, message = OTHERS[name]
    out, cache = generated(make(), torch.tensor([randoms(12, 2)]))
    prefixes = served()
    before = state(prefixes)
    refused = rf"'cache' must be a cache of the nemotron_h model .*{message}.*: nothing stored"
    with pytest.raises(InvalidArgumentError, match=refused):
        prefixes.publish_state(out[0, :-1], cache)
    with pytest.raises(InvalidArgumentError, match=refused):
        prefixes.publish_generated(out, cache)
    with pytest.raises(InvalidArgumentError, match=refused):
        prefixes.publish_generated(out, cache, followed_by=[4])  # refused before its forward
    assert state(prefixes) == before
    follow_up = torch.cat([out, torch.tensor([[4, 5]])], dim=1)
    assert torch.equal(generated_from(prefixes, follow_up), generated(model(M), follow_up)[0])


def test_a_cache_missing_a_state_tensor_is_refused_by_name_with_nothing_stored() -> None:
    out, cache = generated(model(M), torch.tensor([randoms(12, 2)]))
    layer = cache.layers[0]
    assert isinstance(layer, LinearAttentionCacheLayerMixin)
    del layer.recurrent_states[0]
    prefixes = served()
    before = state(prefixes)
    with pytest.raises(
        InvalidArgumentError,
        match=r"'cache' must be a cache of the nemotron_h model .* with state tensors "
        r"\['conv_states\[0\]', 'cumulative_length_linear', 'recurrent_states\[0\]'\] in "
        r"layer 0, got \['conv_states\[0\]', 'cumulative_length_linear'\]: nothing stored",
    ):
        prefixes.publish_generated(out, cache)
    assert state(prefixes) == before


@pytest.mark.parametrize("model_type", SWEPT)
def test_a_models_own_generate_cache_is_stored(model_type: str) -> None:
    """The layout check takes a cache the user made for ``generate``, on every swept type."""
    m = model(model_type)
    out, cache = generated(m, torch.tensor([randoms(12, 2)]))
    prefixes = HybridPrefixCache(m, max_bytes=BIG)
    assert prefixes.publish_generated(out, cache) == 12 + NEW - 1
    prefixes.check_valid()


# -- a cache whose recurrent state and attention stand after different tokens ------------------


def test_a_cache_cropped_without_its_snapshot_is_refused_with_nothing_stored() -> None:
    """``crop_attention`` winds the KV and the token counts back and leaves the recurrent
    state: ``publish_state`` read only the counts, stored the state after 14 tokens as the
    prefix of 12, and a later hit decoded other tokens than ``generate``."""
    m = model(M)
    out, cache = generated(m, torch.tensor([randoms(12, 2)]))  # stands after 12 + NEW - 1
    prefixes = served()
    before = state(prefixes)
    crop_attention(cache, 12)
    behind = r"recurrent state after 14 tokens and attention after 12: .*nothing stored"
    with pytest.raises(InvalidArgumentError, match=behind):
        prefixes.publish_state(out[0, :12], cache)
    with pytest.raises(InvalidArgumentError, match=behind):
        prefixes.publish_generated(out[:, :13], cache)
    assert state(prefixes) == before


def prefilled() -> tuple[torch.nn.Module, torch.Tensor, DynamicCache, HybridCacheSnapshotPool]:
    """``M`` after a 12-token prompt, in a cache of its own, and a one-slot pool over it."""
    m = model(M)
    config = m.config
    assert isinstance(config, PretrainedConfig)
    prompt = torch.tensor([randoms(12, 2)])
    cache = DynamicCache(config=config)
    with torch.no_grad():
        m(prompt, cache=cache)
    return m, prompt, cache, HybridCacheSnapshotPool(cache, 1)


@pytest.mark.parametrize("restore_first", [True, False], ids=["restore-crop", "crop-restore"])
def test_a_cache_rolled_back_by_a_restore_and_a_crop_is_stored_and_hits_exactly(
    restore_first: bool,
) -> None:
    """A rollback restores the snapshot and crops the KV, in either order: then it is taken,
    and a hit on it gives ``generate``'s tokens. Half way, it is refused."""
    m, prompt, cache, pool = prefilled()
    ring = SsmDecodeRing(1)
    ring.record(12)
    entry = ring.entry_for(12)
    assert entry is not None
    apply_effects(pool, [SsmSnapshotSave(0, entry.snapshot_slot, 12, entry.ticket)], [ring])
    with torch.no_grad():
        m(torch.tensor([[4, 5, 6]]), cache=cache)  # on to 15 tokens
    restore = SsmSnapshotRestore(0, entry.snapshot_slot, 12, entry.ticket)
    prefixes = HybridPrefixCache(m, max_bytes=BIG)
    if restore_first:
        pool.restore([restore])
        with pytest.raises(InvalidArgumentError, match="recurrent state after 12 tokens and "):
            prefixes.publish_state([*prompt[0].tolist(), 4, 5, 6], cache)
        crop_attention(cache, 12)
    else:
        crop_attention(cache, 12)
        with pytest.raises(InvalidArgumentError, match="recurrent state after 15 tokens and "):
            prefixes.publish_state(prompt[0], cache)
        pool.restore([restore])
    assert prefixes.entries() == ()
    assert prefixes.publish_state(prompt[0], cache) == 12
    follow_up = torch.cat([prompt, torch.tensor([[7, 8]])], dim=1)
    assert torch.equal(generated_from(prefixes, follow_up), generated(m, follow_up)[0])


def test_a_restore_of_a_slot_saved_around_the_pool_is_taken_and_tracked_no_further() -> None:
    """A snapshot saved through ``torch_pool`` has no length in the cache pool: its restore
    copied, then raised a KeyError; now it restores, and the row's offset stays unknown
    to the pool (publish_state goes by the crop alone, and refuses rather than guess)."""
    m, prompt, cache, pool = prefilled()
    pool.torch_pool.save([SsmSnapshotSave(0, 0, 12, 1)])
    saved = [state.clone() for state in pool.torch_pool.live_states]
    with torch.no_grad():
        m(torch.tensor([[4, 5, 6]]), cache=cache)
    pool.restore([SsmSnapshotRestore(0, 0, 12, 1)])
    assert all(map(torch.equal, saved, pool.torch_pool.live_states))
    crop_attention(cache, 12)
    prefixes = HybridPrefixCache(m, max_bytes=BIG)
    with pytest.raises(InvalidArgumentError, match="recurrent state after 15 tokens"):
        prefixes.publish_state(prompt[0], cache)


def test_a_snapshot_saved_half_way_through_a_rollback_restores_where_it_stood() -> None:
    """Saved after the crop and before the restore, a snapshot holds the recurrent state after
    all 15 tokens: restoring it later must not make the cache look rolled back to 12."""
    m, prompt, cache, pool = prefilled()
    with torch.no_grad():
        m(torch.tensor([[4, 5, 6]]), cache=cache)  # on to 15 tokens
    crop_attention(cache, 12)  # the KV at 12, the recurrent state still after 15
    ring = SsmDecodeRing(1)
    ring.record(12)
    entry = ring.entry_for(12)
    assert entry is not None
    apply_effects(pool, [SsmSnapshotSave(0, entry.snapshot_slot, 12, entry.ticket)], [ring])
    pool.restore([SsmSnapshotRestore(0, entry.snapshot_slot, 12, entry.ticket)])
    prefixes = HybridPrefixCache(m, max_bytes=BIG)
    with pytest.raises(InvalidArgumentError, match="recurrent state after 15 tokens"):
        prefixes.publish_state(prompt[0], cache)
