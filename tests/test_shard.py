"""The tensor-parallel shard helpers split state exactly as sizing sized it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from ssm_rollback import InvalidArgumentError
from ssm_rollback.distributed import shard_live_states, shard_of, shard_pool
from ssm_rollback.reserve import state_spec_from_hf_config

# A small Nemotron-H whose config leaves n_groups out: NemotronHConfig's default is 8.
_NEMOTRON_H: dict[str, object] = {
    "model_type": "nemotron_h",
    "num_hidden_layers": 2,
    "hybrid_override_pattern": "M*",
    "hidden_size": 64,
    "mamba_num_heads": 16,
    "mamba_head_dim": 4,
    "ssm_state_size": 4,
    "conv_kernel": 4,
    "torch_dtype": "float32",
}


@pytest.mark.parametrize("tp_size", [2, 4, 8])
def test_a_config_without_n_groups_shards_with_the_model_types_default(tp_size: int) -> None:
    """Shards of a config without ``n_groups`` are those of the same config naming the
    default (8), and each has the width ``state_spec_from_hf_config`` sizes per rank."""
    explicit = {**_NEMOTRON_H, "n_groups": 8}
    full_spec = state_spec_from_hf_config(_NEMOTRON_H, layout="transformers")
    conv_channels = {t.name: t.shape for t in full_spec.layers[0].tensors}["conv"][0]
    full = torch.arange(3 * conv_channels * 5).reshape(3, conv_channels, 5)
    rank_spec = state_spec_from_hf_config(_NEMOTRON_H, tp_size=tp_size)
    rank_channels = {t.name: t.shape for t in rank_spec.layers[0].tensors}["conv"][0]
    for rank in range(tp_size):
        shard = shard_of(full, _NEMOTRON_H, tensor="conv", rank=rank, tp_size=tp_size, dim=1)
        named = shard_of(full, explicit, tensor="conv", rank=rank, tp_size=tp_size, dim=1)
        assert torch.equal(shard, named)
        assert shard.shape[1] == rank_channels


@pytest.mark.parametrize(
    ("groups", "tp_size", "x", "bc"),
    [(4, 2, 32, 8), (1, 4, 16, 0)],  # B and C split with the heads; one group replicated
    ids=["groups-split", "one-group-replicated"],
)
def test_each_ranks_shard_is_its_own_slice_of_each_segment(
    groups: int, tp_size: int, x: int, bc: int
) -> None:
    """Nemotron-H's conv state is x (64 channels), then B and C (4 channels a group each):
    rank r holds x's r-th share and B's and C's, or the one group whole on every rank."""
    config = {**_NEMOTRON_H, "n_groups": groups}
    channels = 64 + 2 * 4 * groups
    full = torch.arange(channels).reshape(1, channels)
    width = 4 * groups // tp_size if bc else 4
    for rank in range(tp_size):
        b = 64 + rank * bc
        want = [*range(x * rank, x * rank + x), *range(b, b + width)]
        want += range(b + 4 * groups, b + 4 * groups + width)  # C, after B
        shard = shard_of(full, config, tensor="conv", rank=rank, tp_size=tp_size, dim=1)
        assert shard[0].tolist() == want, rank


# Kimi-Linear: 4 KDA heads of 2 channels; its conv state packs q, k and v (8 channels each).
_KIMI: dict[str, object] = {
    "model_type": "kimi_linear",
    "num_hidden_layers": 2,
    "layer_types": ["linear_attention", "full_attention"],
    "linear_num_heads": 4,
    "linear_head_dim": 2,
    "linear_conv_kernel_dim": 4,
}


@pytest.mark.parametrize("tp_size", [2, 4])
def test_a_kda_conv_shard_is_the_ranks_heads_of_q_k_and_v_each(tp_size: int) -> None:
    """vLLM splits q, k and v by heads and packs them per rank: rank r holds its share of
    each of the three convs, not one run of the packed channels."""
    full = torch.arange(24).reshape(24, 1)
    width = 8 // tp_size
    for rank in range(tp_size):
        shard = shard_of(full, _KIMI, tensor="conv", rank=rank, tp_size=tp_size, dim=0)
        want = [
            c for part in (0, 8, 16) for c in range(part + rank * width, part + (rank + 1) * width)
        ]
        assert shard[:, 0].tolist() == want, rank


_ZAYA: dict[str, object] = {
    "model_type": "zaya",
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 4,
    "cca_time0": 2,
    "cca_time1": 2,
}


@pytest.mark.parametrize("tensor", ["conv", "delayed_value"])
def test_a_replicated_state_is_whole_on_every_rank(tensor: str) -> None:
    """ZAYA's CCA state is replicated (sizing gives every rank all of it): each shard is the
    whole tensor, where shard_of split it and then raised an internal error."""
    one_rank = {t.name: t.shape for t in state_spec_from_hf_config(_ZAYA).layers[0].tensors}
    full = torch.arange(3 * one_rank[tensor][0]).reshape(3, one_rank[tensor][0])
    for rank in range(2):
        shard = shard_of(full, _ZAYA, tensor=tensor, rank=rank, tp_size=2, dim=1)
        assert torch.equal(shard, full)


@pytest.mark.parametrize("tp_size", [2, 4])
def test_every_model_types_shards_have_the_per_rank_shapes_sizing_gives(tp_size: int) -> None:
    """Each rank's shard of each state tensor has the shape sizing gives at tp_size, and the
    ranks' shards of a split tensor hold each channel once."""
    pytest.importorskip("transformers")
    from ssm_rollback.reserve import SUPPORTED_MODEL_TYPES
    from ssm_rollback.testing import tiny_config

    for model_type in SUPPORTED_MODEL_TYPES:
        config = tiny_config(model_type).to_dict()
        if config.get("layer_types") is None:  # Lfm2MoeConfig has no default pattern
            config["layer_types"] = ["conv", "full_attention", "conv", "conv"]
        try:
            per_rank = state_spec_from_hf_config(config, tp_size=tp_size).layers[0].tensors
        except InvalidArgumentError:
            continue  # the tiny config's heads do not divide by tp_size
        for one, mine in zip(
            state_spec_from_hf_config(config).layers[0].tensors, per_rank, strict=True
        ):
            full = torch.arange(one.shape[0]).reshape(one.shape[0], 1)
            shards = [
                shard_of(full, config, tensor=one.name, rank=r, tp_size=tp_size, dim=0)
                for r in range(tp_size)
            ]
            assert all(s.shape[0] == mine.shape[0] for s in shards), (model_type, one.name)
            held = sorted(c for s in shards for c in s[:, 0].tolist())
            if mine.shape[0] * tp_size == one.shape[0]:  # split, not replicated
                assert held == list(range(one.shape[0])), (model_type, one.name)


@pytest.mark.parametrize("rank", [-1, 4, 5])
def test_a_shard_of_a_rank_outside_the_group_is_refused_naming_it(rank: int) -> None:
    full = torch.zeros(1, 72)
    with pytest.raises(InvalidArgumentError, match="'rank' must be"):
        shard_of(full, {**_NEMOTRON_H, "n_groups": 1}, tensor="conv", rank=rank, tp_size=4, dim=1)


# Untyped handles: the cases below pass what the signatures refuse.
_shard_of: Callable[..., object] = shard_of  # type: ignore[explicit-any]
_shard_pool: Callable[..., object] = shard_pool  # type: ignore[explicit-any]


def _conv() -> torch.Tensor:
    spec = state_spec_from_hf_config({**_NEMOTRON_H, "n_groups": 1})
    return torch.zeros(2, spec.layers[0].tensors[0].shape[0], 3)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        # Each raised a foreign error: AttributeError, TypeError, IndexError, unhashable.
        (lambda c: _shard_of([1, 2], c, tensor="conv", rank=0, tp_size=1, dim=0), "'full' must"),
        (lambda c: _shard_of(_conv(), c, tensor="conv", rank=0, tp_size=1, dim="x"), "'dim'"),
        (lambda c: _shard_of(_conv(), c, tensor="conv", rank=0, tp_size=1, dim=True), "'dim'"),
        (
            lambda c: _shard_of(_conv(), c, tensor="conv", rank=0, tp_size=1, dim=9),
            "'dim' must be a",
        ),
        (lambda c: _shard_of(_conv(), c, tensor=[], rank=0, tp_size=1, dim=1), "'tensor' must be"),
        (lambda c: _shard_pool(None, c, 2, tp_size=1), "'live_states' must be a sequence"),
        (lambda c: _shard_pool([1, 2], c, 2, tp_size=1), r"'live_states\[0\]' must be a torch"),
        (lambda c: _shard_pool({0: _conv()}, c, 2, tp_size=1), "'live_states' must be a sequence"),
        (lambda c: shard_live_states(c, num_sequences=1, tp_size=1, device="nope"), "'device'"),
        (lambda c: shard_live_states(c, num_sequences=2**40, tp_size=1), "could not be allocated"),
        # Allocated, then refused by shard_pool: the two helpers disagreed.
        (
            lambda c: shard_live_states(c, num_sequences=1, tp_size=1, dtype="float8_e4m3fn"),
            "'dtype' must be one a pool keeps state in",
        ),
    ],
)
def test_the_shard_helpers_name_a_bad_argument(
    call: Callable[[object], object], match: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        call({**_NEMOTRON_H, "n_groups": 1})
