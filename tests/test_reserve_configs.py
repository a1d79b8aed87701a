"""Missing fields take transformers' defaults; VL and mamba_ssm configs; speculative depth."""

from __future__ import annotations

import pytest

from ssm_rollback import InvalidArgumentError
from ssm_rollback.reserve import (
    SUPPORTED_MODEL_TYPES,
    DepthRule,
    _layers,
    decode_rollback_ring_slots,
    shipped_config,
    state_spec_from_hf_config,
)
from ssm_rollback.reserve._defaults import DEFAULTS
from ssm_rollback.reserve._fields import Fields


def test_every_supported_type_has_a_row_of_defaults() -> None:
    assert set(DEFAULTS) == set(SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize("model_type", SUPPORTED_MODEL_TYPES)
def test_the_defaults_are_the_transformers_config_classes(model_type: str) -> None:
    pytest.importorskip("transformers")
    from transformers import CONFIG_MAPPING

    made = CONFIG_MAPPING[model_type]()
    for field, value in DEFAULTS[model_type].items():
        assert getattr(made, field) == value, (model_type, field)


def test_a_missing_field_takes_the_class_default_not_a_guess() -> None:
    config = {k: v for k, v in shipped_config("nemotron-h-8b").items() if k != "n_groups"}
    spec = state_spec_from_hf_config(config)
    assert spec.layers[0].tensors[0].shape == (8_192 + 2 * 8 * 128, 3)  # NemotronHConfig: 8


def test_falcon_h1_without_a_head_size_takes_auto_as_transformers_does() -> None:
    config = {k: v for k, v in shipped_config("falcon-h1-7b").items() if k != "mamba_d_head"}
    assert state_spec_from_hf_config(config) == state_spec_from_hf_config(
        shipped_config("falcon-h1-7b")
    )
    config["mamba_d_head"] = "auto"  # FalconH1Config: mamba_d_ssm // mamba_n_heads = 128
    spec = state_spec_from_hf_config(config)
    assert spec.layers[0].tensors[1].shape == (24, 128, 256)


_LFM2 = {"model_type": "lfm2", "hidden_size": 64, "num_hidden_layers": 4, "conv_L_cache": 3}


def test_lfm2_without_a_pattern_is_all_attention_as_lfm2config_makes_it() -> None:
    # Lfm2Config: full_attn_idxs defaults to every layer, so no conv layer holds a state.
    with pytest.raises(InvalidArgumentError, match=r"no SSM layers \(lfm2\)"):
        state_spec_from_hf_config(_LFM2)
    every_conv = state_spec_from_hf_config({**_LFM2, "full_attn_idxs": []})
    assert [layer.index for layer in every_conv.layers] == [0, 1, 2, 3]
    some = state_spec_from_hf_config({**_LFM2, "full_attn_idxs": [1, 3]})
    assert [layer.index for layer in some.layers] == [0, 2]


def test_lfm2_moe_without_layer_types_is_refused_by_name() -> None:
    # Lfm2MoeConfig has no default pattern (its model cannot be built) and no full_attn_idxs.
    for extra in ({}, {"full_attn_idxs": [1]}):
        config = {**_LFM2, "model_type": "lfm2_moe", **extra}
        with pytest.raises(InvalidArgumentError, match="'layer_types' is missing"):
            state_spec_from_hf_config(config)


def test_lfm2_layers_agree_with_lfm2config() -> None:
    pytest.importorskip("transformers")
    from transformers import Lfm2Config

    extras: tuple[dict[str, object], ...] = ({}, {"full_attn_idxs": []}, {"full_attn_idxs": [0, 2]})
    for extra in extras:
        raw = {**_LFM2, **extra}
        made = Lfm2Config(**{k: v for k, v in raw.items() if k != "model_type"})  # type: ignore[arg-type]
        conv = [i for i, kind in enumerate(made.layer_types or []) if kind == "conv"]
        try:
            sized = [layer.index for layer in state_spec_from_hf_config(raw).layers]
        except InvalidArgumentError:
            sized = []
        assert sized == conv, extra
        if conv:
            assert state_spec_from_hf_config(made.to_dict()) == state_spec_from_hf_config(raw)


def test_a_vl_config_is_sized_by_its_text_config() -> None:
    text = {k: v for k, v in shipped_config("nemotron-h-8b").items() if k != "torch_dtype"}
    vl = {"model_type": "NemotronH_Nano_VL_V2", "torch_dtype": "bfloat16", "text_config": text}
    assert state_spec_from_hf_config(vl) == state_spec_from_hf_config(
        shipped_config("nemotron-h-8b")
    )


def test_a_mamba_ssm_config_is_read_with_its_module_defaults() -> None:
    # state-spaces/mamba2-2.7b's config.json: d_model, n_layer, ssm_cfg {"layer": "Mamba2"}.
    published = {
        "d_model": 2_560,
        "n_layer": 64,
        "vocab_size": 50_277,
        "ssm_cfg": {"layer": "Mamba2"},
    }
    assert state_spec_from_hf_config(published).bytes_per_snapshot == (
        state_spec_from_hf_config(shipped_config("mamba2-2.7b")).bytes_per_snapshot
    )
    mamba1 = state_spec_from_hf_config({"d_model": 768, "n_layer": 24, "ssm_cfg": {}})
    assert mamba1.model_type == "mamba"
    assert mamba1.layers[0].tensors[1].shape == (1_536, 16)
    hybrid = {**published, "attn_layer_idx": [9, 18]}
    assert len(state_spec_from_hf_config(hybrid).layers) == 62


def test_qwen3_5_reads_its_mamba_ssm_dtype_in_both_engines() -> None:
    config = {
        "model_type": "qwen3_5_text",
        "torch_dtype": "bfloat16",
        "num_hidden_layers": 8,
        "mamba_ssm_dtype": "float32",
    }
    for layout in ("vllm", "sglang"):
        state = state_spec_from_hf_config(config, layout=layout).layers[0].tensors[1]
        assert state.dtype == "float32"
        assert "mamba_ssm_dtype" in state.dtype_rule


def test_the_depth_policy_takes_the_speculative_buffers_first() -> None:
    spec = state_spec_from_hf_config(shipped_config("nemotron-h-8b"), num_speculative_tokens=3)
    per_slot, extra = spec.bytes_per_snapshot, spec.speculative_bytes_per_sequence
    free = 4 * (extra + 2 * per_slot) + per_slot - 1
    depth = decode_rollback_ring_slots(spec, max_sequences=4, free_bytes=free, env={})
    assert (depth.slots, depth.rule, depth.fit) == (2, DepthRule.MEMORY, 2)
    assert depth.speculative_bytes == 4 * extra
    assert depth.bytes_total + depth.speculative_bytes <= free
    starved = decode_rollback_ring_slots(spec, max_sequences=4, free_bytes=4 * extra - 1, env={})
    assert (starved.slots, starved.fit) == (0, 0)


def test_plan_reports_the_speculative_bytes_and_a_depth_that_fits_after_them() -> None:
    import io
    import json

    from ssm_rollback.cli import main

    out = io.StringIO()
    argv = ["plan", "--model", "nemotron-h-8b", "--free-memory", "100GiB", "--max-seqs", "256"]
    assert main([*argv, "--spec-tokens", "3", "--json"], out) == 0
    report = json.loads(out.getvalue())
    assert report["speculative_bytes_per_sequence"] == 312_311_808
    assert report["speculative_bytes"] == 256 * 312_311_808
    assert report["slots"] == 1
    assert report["bytes_total"] + report["speculative_bytes"] <= 100 * 2**30
    out = io.StringIO()
    assert main([*argv, "--layout", "sglang", "--ssm-dtype", "bfloat16", "--json"], out) == 0
    assert json.loads(out.getvalue())["bytes_per_slot"] == 24 * (61_440 + 2_097_152)
    assert main([*argv, "--layout", "sglang", "--conv-dtype", "int3"], io.StringIO()) == 2


# -- the default layer patterns, where a config names no per-layer list -------------------------


def fields(model_type: str, **data: object) -> Fields:
    return Fields(data, model_type)


def test_jamba_refuses_an_attention_offset_equal_to_its_period() -> None:
    """``offset == period`` would make no layer attention: refused, as ``offset > period``."""
    assert _layers.jamba_layers(
        fields("jamba", num_hidden_layers=8, attn_layer_period=4, attn_layer_offset=3)
    ) == [0, 1, 2, 4, 5, 6]
    for offset in (4, 5):
        config = fields("jamba", num_hidden_layers=8, attn_layer_period=4, attn_layer_offset=offset)
        with pytest.raises(InvalidArgumentError, match="'attn_layer_offset' must be less than"):
            _layers.jamba_layers(config)


def test_default_patterns_put_attention_where_each_config_class_does() -> None:
    """OLMo-Hybrid at i % 4 == 3 (else the last layer), Qwen3-Next every fourth layer counted
    from 1, Kimi at 4, 8, ... but not 0, Bailing at (i + 1) % group == 0."""
    assert _layers.olmo_hybrid_layers(fields("olmo_hybrid", num_hidden_layers=8)) == [
        0, 1, 2, 4, 5, 6
    ]  # fmt: skip
    assert _layers.olmo_hybrid_layers(fields("olmo_hybrid", num_hidden_layers=3)) == [0, 1]
    assert _layers.qwen3_next_layers(
        fields("qwen3_next", num_hidden_layers=8, full_attention_interval=4)
    ) == [0, 1, 2, 4, 5, 6]
    assert _layers.kimi_layers(fields("kimi_linear", num_hidden_layers=9)) == [0, 1, 2, 3, 5, 6, 7]
    bailing = fields("bailing_hybrid", num_hidden_layers=10, layer_group_size=4)
    assert _layers.bailing_layers(bailing) == [0, 1, 2, 4, 5, 6, 8, 9]


def test_vllms_bailing_layers_past_the_last_whole_group_are_attention() -> None:
    bailing = fields("bailing_hybrid", num_hidden_layers=10, layer_group_size=4)
    assert _layers.bailing_vllm_layers(bailing) == [0, 1, 2, 4, 5, 6]  # 8 and 9: no whole group


def test_a_layer_count_past_the_limit_is_refused_and_the_limit_itself_taken() -> None:
    limit = _layers.MAX_LAYERS
    assert _layers.num_layers(fields("mamba", num_hidden_layers=limit)) == limit
    with pytest.raises(InvalidArgumentError, match=f"must be at most {limit} layers"):
        _layers.num_layers(fields("mamba", num_hidden_layers=limit + 1))
