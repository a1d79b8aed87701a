"""The Hugging Face pool through the shipped test kit, and the refusals a mutant once slipped past.

``HybridCacheSnapshotPool`` runs the same conformance suite and pool state
machine as the fake and torch pools, over the recurrent state of a real tiny
Bamba cache; then the cases the v0.1 suite never exercised: a restore after
the cache's tensors were replaced, ``crop_attention`` meeting a layer it
cannot crop after one it can, and a sliding-window cache cropped past its
length.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import pytest

pytest.importorskip("transformers")

import torch
from hypothesis import settings
from transformers import AutoModelForCausalLM
from transformers.cache_utils import Cache

from ssm_rollback import InvalidArgumentError, SsmSnapshotRestore, SsmSnapshotSave
from ssm_rollback.integrations.transformers import HybridCacheSnapshotPool, crop_attention
from ssm_rollback.testing import (
    PoolAdapter,
    SnapshotPoolConformance,
    SnapshotPoolMachine,
    tiny_config,
)

_PREFILLED: dict[tuple[str, int], Cache] = {}


def prefilled(model_type: str, rows: int, prompt: int = 4) -> Cache:
    """A fresh copy of a tiny random model's cache after prefilling ``rows`` prompts."""
    key = (model_type, rows)
    if key not in _PREFILLED:
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = AutoModelForCausalLM.from_config(tiny_config(model_type)).eval()  # type: ignore[no-untyped-call]
            ids = torch.randint(0, 64, (rows, prompt))
            with torch.no_grad():
                _PREFILLED[key] = model(ids, use_cache=True).cache
    return copy.deepcopy(_PREFILLED[key])


class CacheAdapter(PoolAdapter[HybridCacheSnapshotPool]):
    """Pools over a prefilled tiny Bamba cache; a row's marker fills its every state tensor."""

    def make_pool(self, num_sequences: int, slots_per_sequence: int) -> HybridCacheSnapshotPool:
        return HybridCacheSnapshotPool(prefilled("bamba", num_sequences), slots_per_sequence)

    def set_live(self, pool: HybridCacheSnapshotPool, seq: int, value: int) -> None:
        for state in pool.torch_pool.live_states:
            state[seq].fill_(value)

    def get_live(self, pool: HybridCacheSnapshotPool, seq: int) -> int:
        values: set[float] = set()
        for state in pool.torch_pool.live_states:
            values.update(state[seq].float().flatten().tolist())
        assert len(values) == 1, f"row {seq} holds a mix of states: {sorted(values)[:4]}"
        return int(values.pop())

    def fail_saves(
        self, pool: HybridCacheSnapshotPool, predicate: Callable[[SsmSnapshotSave], bool]
    ) -> bool:
        pool.fail_when(predicate)
        return True


class TestCachePoolConformance(CacheAdapter, SnapshotPoolConformance[HybridCacheSnapshotPool]):
    pass


TestCachePoolMachine = SnapshotPoolMachine.for_adapter(CacheAdapter()).TestCase
# Each example builds a pool over a copied cache: fewer examples than the
# plain pools run, still every rule many times over.
TestCachePoolMachine.settings = settings(max_examples=min(settings().max_examples, 60))


def test_a_restore_after_the_cache_reordered_its_state_is_refused() -> None:
    cache = prefilled("bamba", 2)
    pool = HybridCacheSnapshotPool(cache, 2)
    assert pool.save([SsmSnapshotSave(0, 0, 1, 1), SsmSnapshotSave(1, 0, 1, 1)]).ok
    cache.reorder_cache(torch.LongTensor([1, 0]))  # beam search: new state tensors
    live = [t.clone() for t in pool.torch_pool.live_states]
    with pytest.raises(InvalidArgumentError, match=r"changed since the pool was made: layers\["):
        pool.restore([SsmSnapshotRestore(0, 0, 1, 1)])
    assert all(torch.equal(a, b) for a, b in zip(pool.torch_pool.live_states, live, strict=True))
    assert (pool.stored_position(0, 0), pool.stored_ticket(0, 0)) == (1, 1)


def test_crop_checks_every_layer_before_cropping_any() -> None:
    config = tiny_config("llama")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(config).eval()  # type: ignore[no-untyped-call]
    with torch.no_grad():
        cache = model(torch.zeros(1, 6, dtype=torch.long), use_cache=True).cache
    cache.layers.append(object())  # a layer it cannot crop, after croppable ones
    with pytest.raises(InvalidArgumentError, match=r"layer \d+ is a object"):
        crop_attention(cache, 2)
    assert cache.get_seq_length() == 6  # the croppable layers before it were left alone


def test_a_sliding_window_only_cache_refuses_a_crop_past_its_length() -> None:
    config = tiny_config("mistral")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(config).eval()  # type: ignore[no-untyped-call]
    with torch.no_grad():
        cache = model(torch.zeros(1, 5, dtype=torch.long), use_cache=True).cache
    with pytest.raises(InvalidArgumentError, match="'length' must be <= the cache's length 5"):
        crop_attention(cache, 6)
    assert cache.get_seq_length() == 5
    crop_attention(cache, 3)
    assert cache.get_seq_length() == 3
