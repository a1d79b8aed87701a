"""Byte figures against the engines' own state-shape rules, for every shipped model.

Each figure below was computed by hand (not by running the engines' code) from:

- vLLM 0.34 ``MambaStateShapeCalculator`` (``model_executor/layers/mamba/mamba_utils.py``):
  ``mamba2_state_shape`` conv ``((intermediate + 2 * groups * state) / tp, kernel - 1)``
  with ``groups`` raised to ``tp`` by ``extra_groups_for_head_shards`` when they do not
  divide, h-state ``(heads / tp, head_dim, state)``; ``mamba1_state_shape`` conv
  ``(intermediate / tp, kernel - 1)``, h-state ``(intermediate / tp, state)``;
  ``gated_delta_net_state_shape`` conv ``((2 * k_heads * k_dim + v_heads * v_dim) / tp,
  kernel - 1)``, state ``(v_heads / tp, v_dim, k_dim)``. Dtypes from
  ``MambaStateDtypeCalculator._mamba_state_dtype`` (both follow the model dtype under
  ``"auto"``) and ``NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype`` (the config's
  ``mamba_ssm_cache_dtype``, else float32) in ``model_executor/models/config.py``.
- SGLang 0.5.23 ``Mamba2StateShape.create`` (``srt/configs/mamba_utils.py``): the same
  shapes (gated delta-net passes ``n_groups=k_heads``, ``state_size=k_dim``), dtypes from
  ``mamba2_state_dtype``: conv bfloat16 (``SGLANG_MAMBA_CONV_DTYPE`` unset), SSM float32
  (``SGLANG_MAMBA_SSM_DTYPE`` unset; the config's ``mamba_ssm_dtype`` where the model passes
  its config). SGLang has no hybrid state pool for Jamba.

Per sequence and rank, all SSM layers: Falcon-H1-7B 44 layers (intermediate 3,072, 1 group,
24 heads of 128, state 256); Granite-4.0-H-Small 36 (8,192, 1 group, 128 x 64, state 128);
Jamba-1.5-Mini 28 Mamba-1 (8,192, state 16); Mamba2-2.7B 64 (5,120, 1 group, 80 x 64, 128);
Nemotron-H-8B 24 (8,192, 8 groups, 128 x 64, 128; h-state float32 in both engines);
Qwen3-Next-80B-A3B 36 gated delta-net (16 key / 32 value heads of 128). Kernel 4 throughout.
Example, Falcon-H1-7B, vLLM, tp 2: groups 1 -> 2; conv (3,072 + 2 * 2 * 256) / 2 = 2,048
channels x 3 x 2 B = 12,288; h-state 12 x 128 x 256 x 2 B = 786,432; x 44 = 35,143,680.
"""

from __future__ import annotations

import pytest

from ssm_rollback import InvalidArgumentError
from ssm_rollback.reserve import SHIPPED_MODELS, shipped_config, state_spec_from_hf_config
from ssm_rollback.reserve._spec import Layout

# model -> tp -> (vllm bytes, sglang bytes or None where SGLang does not serve the model)
ENGINE_BYTES: dict[str, dict[int, tuple[int, int | None]]] = {
    "falcon-h1-7b": {
        1: (70_152_192, 139_358_208),
        2: (35_143_680, 69_746_688),
        4: (17_639_424, 34_940_928),
        8: (8_887_296, 17_538_048),
    },
    "granite-4.0-h-small": {
        1: (77_322_240, 152_819_712),
        2: (38_688_768, 76_437_504),
        4: (19_372_032, 38_246_400),
        8: (9_713_664, 19_150_848),
    },
    "jamba-1.5-mini": {
        1: (8_716_288, None),
        2: (4_358_144, None),
        4: (2_179_072, None),
        8: (1_089_536, None),
    },
    "mamba2-2.7b": {
        1: (85_950_464, 169_836_544),
        2: (43_024_384, 84_967_424),
        4: (21_561_344, 42_532_864),
        8: (10_829_824, 21_315_584),
    },
    "nemotron-h-8b": {
        1: (102_137_856, 102_137_856),
        2: (51_068_928, 51_068_928),
        4: (25_534_464, 25_534_464),
        8: (12_767_232, 12_767_232),
    },
    "qwen3-next-80b-a3b": {
        1: (39_518_208, 77_266_944),
        2: (19_759_104, 38_633_472),
        4: (9_879_552, 19_316_736),
        8: (4_939_776, 9_658_368),
    },
}
CASES = [(name, tp) for name in SHIPPED_MODELS for tp in (1, 2, 4, 8)]


def test_the_table_covers_every_shipped_model() -> None:
    assert set(ENGINE_BYTES) == set(SHIPPED_MODELS)


@pytest.mark.parametrize(("name", "tp"), CASES)
def test_vllm_layout_equals_vllms_allocation(name: str, tp: int) -> None:
    spec = state_spec_from_hf_config(shipped_config(name), tp_size=tp, layout="vllm")
    assert spec.bytes_per_snapshot == ENGINE_BYTES[name][tp][0]


@pytest.mark.parametrize(("name", "tp"), CASES)
def test_sglang_layout_equals_sglangs_allocation(name: str, tp: int) -> None:
    expected = ENGINE_BYTES[name][tp][1]
    if expected is None:
        with pytest.raises(InvalidArgumentError, match="'sglang' does not serve"):
            state_spec_from_hf_config(shipped_config(name), tp_size=tp, layout="sglang")
        return
    spec = state_spec_from_hf_config(shipped_config(name), tp_size=tp, layout="sglang")
    assert spec.bytes_per_snapshot == expected


def test_the_dtype_rules_are_named() -> None:
    nemotron = state_spec_from_hf_config(shipped_config("nemotron-h-8b"), layout="sglang")
    assert nemotron.dtype_rules == {
        "conv": "bfloat16: SGLang default (SGLANG_MAMBA_CONV_DTYPE unset)",
        "ssm": "float32: SGLang default (SGLANG_MAMBA_SSM_DTYPE unset)",
    }
    config = {**shipped_config("nemotron-h-8b"), "mamba_ssm_dtype": "bfloat16"}
    read = state_spec_from_hf_config(config, layout="sglang").layers[0].tensors[1]
    assert (read.dtype, read.dtype_rule) == ("bfloat16", "SGLang: config 'mamba_ssm_dtype'")
    # Granite's cache params take SGLang's dataclass default: the config field is not read.
    granite = {**shipped_config("granite-4.0-h-small"), "mamba_ssm_dtype": "bfloat16"}
    assert state_spec_from_hf_config(granite, layout="sglang").layers[0].tensors[1].dtype == (
        "float32"
    )
    forced = state_spec_from_hf_config(config, layout="sglang", ssm_dtype="float16")
    assert forced.layers[0].tensors[1].dtype_rule.startswith("the ssm_dtype")


# -- speculative decoding -------------------------------------------------------------------


def test_vllm_speculative_buffers_for_nemotron_h() -> None:
    # mamba2_state_shape(num_spec=3): conv 10,240 x (3 + 3) columns; MambaSpec keeps 1 + 3
    # pages per sequence in mamba_cache_mode "none". Page = 10,240 x 6 x 2 + 128 x 64 x 128 x 4
    # = 4,317,184; 4 pages = 17,268,736; the ring's slot (3 columns) is 4,255,744 of them.
    spec = state_spec_from_hf_config(shipped_config("nemotron-h-8b"), num_speculative_tokens=3)
    assert spec.bytes_per_snapshot == 102_137_856  # the slot does not change
    assert spec.speculative_bytes_per_sequence == 24 * (4 * 4_317_184 - 4_255_744) == 312_311_808


def test_vllm_does_not_widen_a_mamba1_conv() -> None:
    # mamba1_state_shape takes no num_spec: only the 1 + k pages grow.
    spec = state_spec_from_hf_config(shipped_config("jamba-1.5-mini"), num_speculative_tokens=2)
    assert spec.speculative_bytes_per_sequence == 2 * 8_716_288


def test_sglang_speculative_buffers_for_nemotron_h() -> None:
    # MambaPool with speculative_num_draft_tokens = 3 + 1: intermediate_ssm_state_cache
    # 4 x (128, 64, 128) float32, deduplicated conv window 10,240 x (4 + 4 - 2) bfloat16.
    spec = state_spec_from_hf_config(
        shipped_config("nemotron-h-8b"), layout="sglang", num_speculative_tokens=3
    )
    per_layer = 4 * 128 * 64 * 128 * 4 + 10_240 * 6 * 2
    assert spec.speculative_bytes_per_sequence == 24 * per_layer == 405_602_304


def test_transformers_keeps_no_speculative_buffers() -> None:
    spec = state_spec_from_hf_config(
        shipped_config("nemotron-h-8b"), layout="transformers", num_speculative_tokens=3
    )
    assert spec.speculative_bytes_per_sequence == 0


# -- kimi_linear, bailing_hybrid, olmo_hybrid, zaya: the engines' own shape rules ---------------
# (vLLM 0.34: kda_state_shape/_dtype, gated_delta_net_state_shape, zaya._cca_state_shapes;
# SGLang 0.5.23: KimiLinearStateShape.create with the default float32 temporal state.)

_KDA_HUB = {
    "model_type": "kimi_linear",
    "torch_dtype": "bfloat16",
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "head_dim": 192,  # the MLA attention's, never the KDA's
    "linear_attn_config": {
        "full_attn_layers": [4],
        "kda_layers": [1, 2, 3],
        "num_heads": 8,
        "head_dim": 64,
        "short_conv_kernel_size": 4,
    },
}


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_kimi_linear_kda_in_both_engines(tp: int) -> None:
    conv = 3 * 8 * 64 // tp * 3 * 2  # q, k, v in one bfloat16 conv state, kernel - 1 columns
    state = 8 // tp * 64 * 64 * 4  # float32 in vLLM (kda_state_dtype) and SGLang (default)
    for layout in ("vllm", "sglang"):
        spec = state_spec_from_hf_config(_KDA_HUB, layout=layout, tp_size=tp)
        assert [layer.index for layer in spec.layers] == [0, 1, 2]
        assert spec.bytes_per_snapshot == 3 * (conv + state)
        assert spec.layers[0].tensors[1].dtype == "float32"


def test_kda_speculative_buffers_vllm_only() -> None:
    spec = state_spec_from_hf_config(_KDA_HUB, num_speculative_tokens=2)
    assert spec.speculative_bytes_per_sequence > 0
    with pytest.raises(InvalidArgumentError, match="disable_conv_window_dedup"):
        state_spec_from_hf_config(_KDA_HUB, layout="sglang", num_speculative_tokens=2)


def test_bailing_vllm_makes_the_tail_past_the_last_group_attention() -> None:
    config = {
        "model_type": "bailing_hybrid",
        "num_hidden_layers": 6,
        "layer_group_size": 4,
        "num_attention_heads": 8,
        "head_dim": 64,
    }
    vllm = state_spec_from_hf_config(config)
    sglang = state_spec_from_hf_config(config, layout="sglang")
    assert [layer.index for layer in vllm.layers] == [0, 1, 2]  # _is_kda_layer
    assert [layer.index for layer in sglang.layers] == [0, 1, 2, 4, 5]  # (i + 1) % 4
    assert vllm.bytes_per_snapshot == 3 * (3 * 8 * 64 * 3 * 2 + 8 * 64 * 64 * 4)


def test_olmo_hybrid_derives_its_sizes_and_sglang_refuses_it() -> None:
    config = {"model_type": "olmo_hybrid", "hidden_size": 3840, "num_hidden_layers": 4}
    spec = state_spec_from_hf_config(config)  # 30 heads, k 96 = int(0.75 * 3840 / 30), v 192
    assert [layer.index for layer in spec.layers] == [0, 1, 2]
    assert spec.layers[0].tensors[0].shape == (2 * 30 * 96 + 30 * 192, 3)
    assert spec.layers[0].tensors[1].shape == (30, 96, 192)
    with pytest.raises(InvalidArgumentError, match="'sglang' does not serve"):
        state_spec_from_hf_config(config, layout="sglang")


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_zaya_cca_is_replicated_on_every_rank_in_vllm(tp: int) -> None:
    config = {
        "model_type": "zaya",
        "torch_dtype": "bfloat16",
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 128,
    }
    spec = state_spec_from_hf_config(config, tp_size=tp)
    assert spec.layers[0].tensors[0].shape == (10 * 128, 2)  # cca_time0 - 1 + cca_time1 - 1
    assert spec.bytes_per_snapshot == 2 * (10 * 128 * 2 + 2 * 128 // 2) * 2
    refused: tuple[tuple[Layout, int], ...] = (("sglang", 0), ("vllm", 1))
    for layout, drafts in refused:
        with pytest.raises(InvalidArgumentError, match="not sized for model type 'zaya'"):
            state_spec_from_hf_config(config, layout=layout, num_speculative_tokens=drafts)
