"""State sizes from model configs, and the ring-depth policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_rollback import (
    DeclineReason,
    InvalidArgumentError,
    RollbackDeclined,
    SsmDecodeRing,
    rollback_to_boundary,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.reserve import (
    DEFAULT_MAX_SLOTS,
    ENV_VAR,
    SHIPPED_MODELS,
    SUPPORTED_MODEL_TYPES,
    DepthRule,
    RingDepth,
    SsmStateSpec,
    decode_rollback_ring_slots,
    shipped_config,
    state_spec_from_hf_config,
)

BF16 = 2
MiB = 2**20

# -- full-size configs, vLLM layout, against arithmetic done by hand ------------------------------
# (tests/test_reserve_engines.py holds the full table: every shipped model, both engines, tp 1-8.)

FP32 = 4


def test_nemotron_h_8b_keeps_its_h_state_in_float32_as_vllm_does() -> None:
    # 24 Mamba-2 layers ("M" in the pattern); 128 heads x 64 = 8,192 channels; 8 groups of 128.
    # No mamba_ssm_cache_dtype in the config: NemotronHConfig's default, float32, which vLLM's
    # NemotronHForCausalLMConfig keeps.
    spec = state_spec_from_hf_config(shipped_config("nemotron-h-8b"))
    conv = (8_192 + 2 * 8 * 128) * (4 - 1) * BF16  # 61,440
    ssm = 128 * 64 * 128 * FP32  # 4,194,304
    assert len(spec.layers) == 24
    assert spec.layers[0].tensors[0].shape == (10_240, 3)
    assert spec.layers[0].tensors[1].shape == (128, 64, 128)
    assert spec.bytes_per_snapshot == 24 * (conv + ssm) == 102_137_856
    assert [layer.index for layer in spec.layers][:4] == [0, 2, 4, 6]
    assert "mamba_ssm_cache_dtype" in spec.layers[0].tensors[1].dtype_rule

    tp4 = state_spec_from_hf_config(shipped_config("nemotron-h-8b"), tp_size=4)
    assert tp4.bytes_per_snapshot == 24 * (10_240 // 4 * 3 * BF16 + 32 * 64 * 128 * FP32)


def test_jamba_1_5_mini_vllm_layout() -> None:
    # 32 layers, attention at i % 8 == 4: 28 Mamba layers of 2 x 4,096 = 8,192 channels.
    spec = state_spec_from_hf_config(shipped_config("jamba-1.5-mini"))
    assert len(spec.layers) == 28
    assert 4 not in {layer.index for layer in spec.layers}
    assert spec.bytes_per_snapshot == 28 * (8_192 * 3 + 8_192 * 16) * BF16 == 8_716_288


def test_falcon_h1_7b_vllm_layout() -> None:
    # Attention and Mamba-2 side by side in all 44 layers; d_ssm 3,072 = 24 heads x 128.
    spec = state_spec_from_hf_config(shipped_config("falcon-h1-7b"))
    conv = (3_072 + 2 * 1 * 256) * 3 * BF16
    ssm = 24 * 128 * 256 * BF16
    assert len(spec.layers) == 44
    assert spec.bytes_per_snapshot == 44 * (conv + ssm) == 70_152_192


def test_granite_4_0_h_small_vllm_layout_and_group_replication() -> None:
    # 36 Mamba-2 layers of 40; one group, which tensor parallelism replicates per rank.
    spec = state_spec_from_hf_config(shipped_config("granite-4.0-h-small"))
    assert len(spec.layers) == 36
    assert spec.bytes_per_snapshot == 36 * ((8_192 + 2 * 128) * 3 + 128 * 64 * 128) * BF16
    tp4 = state_spec_from_hf_config(shipped_config("granite-4.0-h-small"), tp_size=4)
    groups = 4  # 1 group, replicated to 4 so each rank's heads have theirs
    conv = (8_192 + 2 * groups * 128) // 4 * 3 * BF16
    assert tp4.layers[0].tensors[0].shape == (2_304, 3)
    assert tp4.bytes_per_snapshot == 36 * (conv + 32 * 64 * 128 * BF16)


def test_qwen3_next_80b_a3b_vllm_layout() -> None:
    # Every 4th layer is full attention: 36 gated delta-net layers.
    spec = state_spec_from_hf_config(shipped_config("qwen3-next-80b-a3b"))
    conv_dim = 2 * 16 * 128 + 32 * 128  # 8,192
    assert len(spec.layers) == 36
    assert spec.layers[0].tensors[0].shape == (conv_dim, 3)
    assert spec.layers[0].tensors[1].shape == (32, 128, 128)
    assert spec.bytes_per_snapshot == 36 * (conv_dim * 3 + 32 * 128 * 128) * BF16 == 39_518_208
    tp2 = state_spec_from_hf_config(shipped_config("qwen3-next-80b-a3b"), tp_size=2)
    assert tp2.layers[0].tensors[1].shape == (16, 128, 128)


def test_mamba2_2_7b_vllm_layout() -> None:
    spec = state_spec_from_hf_config(shipped_config("mamba2-2.7b"))
    conv = (80 * 64 + 2 * 128) * 3 * BF16
    assert len(spec.layers) == 64
    assert spec.bytes_per_snapshot == 64 * (conv + 80 * 64 * 128 * BF16) == 85_950_464
    assert spec.bytes_per_snapshot / MiB == pytest.approx(81.97, abs=0.01)


def test_engine_is_the_old_name_of_vllm() -> None:
    config = shipped_config("nemotron-h-8b")
    engine = state_spec_from_hf_config(config, layout="engine")
    assert engine == state_spec_from_hf_config(config, layout="vllm")
    assert engine.layout == "vllm"


def test_every_shipped_config_names_its_source() -> None:
    for name in SHIPPED_MODELS:
        config = shipped_config(name)
        assert isinstance(config["_source"], str)
        assert config["model_type"] in SUPPORTED_MODEL_TYPES


# -- transformers layout, against the bytes a real cache holds -------------------------------------


def _cache_and_spec(model_type: str, dtype: str) -> tuple[int, SsmStateSpec]:
    """Bytes per sequence a tiny model's real cache holds, and the transformers-layout spec."""
    pytest.importorskip("transformers")
    import warnings

    import torch
    from transformers import AutoModelForCausalLM

    from ssm_rollback.integrations.transformers import HybridCacheSnapshotPool
    from ssm_rollback.testing import tiny_config

    config = tiny_config(model_type)
    if config.layer_types is None:  # Lfm2MoeConfig has no default pattern
        config.layer_types = ["conv", "full_attention", "conv", "conv"][: config.num_hidden_layers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()  # type: ignore[no-untyped-call]
        model = model.to(getattr(torch, dtype))
        with torch.no_grad():
            cache = model(torch.randint(0, 128, (3, 5)), use_cache=True).cache
            model(torch.randint(0, 128, (3, 1)), cache=cache, use_cache=True)  # and one decode
    held = HybridCacheSnapshotPool(cache, 1).torch_pool.live_states
    per_row = sum(t.numel() * t.element_size() for t in held) // 3
    return per_row, state_spec_from_hf_config(config.to_dict(), layout="transformers", dtype=dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("model_type", SUPPORTED_MODEL_TYPES)
def test_transformers_layout_is_what_the_cache_holds_in_every_dtype(
    model_type: str, dtype: str
) -> None:
    # In half precision the cache keeps the scans' recurrent state in float32 (most types).
    per_row, spec = _cache_and_spec(model_type, dtype)
    assert spec.bytes_per_snapshot == per_row
    assert spec.layout == "transformers"


# The tiny models' bytes per sequence (hidden 64, 4 layers); the bfloat16 runs show the
# recurrent states staying float32 in a bfloat16 model.
_TINY_BYTES = {
    # 4 Mamba-2 layers: conv 64 + 2 x 16 = 96 channels x 4 columns, state 4 x 16 x 16
    ("mamba2", "bfloat16"): 4 * (96 * 4 * 2 + 4 * 16 * 16 * 4),  # 19,456
    # 4 Mamba-1 layers: conv 64 channels x 4 columns, state 64 x 16
    ("mamba", "bfloat16"): 4 * (64 * 4 * 2 + 64 * 16 * 4),  # 18,432
    # 3 gated delta-net layers, as OLMo-Hybrid's below
    ("qwen3_next", "bfloat16"): 3 * (128 * 4 * 2 + 4 * 16 * 16 * 4),  # 15,360
    # 3 KDA layers: conv 3 x 4 heads x 16 = 192 channels x 4 columns, state 4 x 16 x 16
    ("kimi_linear", "float32"): 3 * (192 * 4 + 4 * 16 * 16) * 4,  # 21,504
    ("kimi_linear", "bfloat16"): 3 * (192 * 4 * 2 + 4 * 16 * 16 * 4),  # 16,896
    ("bailing_hybrid", "float32"): 3 * (192 * 4 + 4 * 16 * 16) * 4,  # 21,504
    ("bailing_hybrid", "bfloat16"): 3 * (192 * 4 * 2 + 4 * 16 * 16 * 4),  # 16,896
    # 3 gated delta-net layers: conv 2 x 2 x 16 + 4 x 16 = 128 channels, state 4 x 16 x 16
    ("olmo_hybrid", "float32"): 3 * (128 * 4 + 4 * 16 * 16) * 4,  # 18,432
    ("olmo_hybrid", "bfloat16"): 3 * (128 * 4 * 2 + 4 * 16 * 16 * 4),  # 15,360
    # 4 CCA layers: (4 + 2 heads) x 16 = 96 channels x 2 columns, delayed value 2 x 16 / 2
    ("zaya", "float32"): 4 * (96 * 2 + 16) * 4,  # 3,328
}


@pytest.mark.parametrize(("model_type", "dtype"), sorted(_TINY_BYTES))
def test_tiny_transformers_layout_bytes_by_hand(model_type: str, dtype: str) -> None:
    per_row, spec = _cache_and_spec(model_type, dtype)
    assert per_row == _TINY_BYTES[model_type, dtype]
    assert spec.bytes_per_snapshot == per_row


def test_transformers_layout_keeps_the_scan_state_in_float32_in_half_precision() -> None:
    # Without torch: what the cache test above measures, for the full-size configs. The conv
    # window follows the model dtype; the scan's state is float32 unless ssm_dtype says not.
    hf = state_spec_from_hf_config(shipped_config("nemotron-h-8b"), layout="transformers")
    assert hf.bytes_per_snapshot == 24 * (10_240 * 4 * BF16 + 128 * 64 * 128 * FP32)
    for name in SHIPPED_MODELS:
        for dtype in ("bfloat16", "float16"):
            spec = state_spec_from_hf_config(
                shipped_config(name), layout="transformers", dtype=dtype
            )
            conv, state = spec.layers[0].tensors
            assert (conv.dtype, state.dtype) == (dtype, "float32"), name
            assert state.dtype_rule.startswith("transformers: the "), name
        told = state_spec_from_hf_config(
            shipped_config(name), layout="transformers", ssm_dtype="bfloat16"
        )
        assert told.layers[0].tensors[1].dtype == "bfloat16"


# -- reading configs ----------------------------------------------------------------------


def test_hub_and_transformers_layer_names_agree() -> None:
    hub = shipped_config("nemotron-h-8b")
    pattern = str(hub["hybrid_override_pattern"])
    names = {"M": "mamba", "*": "attention", "-": "mlp"}
    written = {k: v for k, v in hub.items() if k != "hybrid_override_pattern"}
    written["layers_block_type"] = [names[c] for c in pattern]
    assert state_spec_from_hf_config(written) == state_spec_from_hf_config(hub)
    written["layers_block_type"] = [
        {"M": "linear_attention", "*": "full_attention", "-": "mlp"}[c] for c in pattern
    ]
    del written["num_hidden_layers"]  # transformers derives it from the pattern
    assert state_spec_from_hf_config(written) == state_spec_from_hf_config(hub)


def test_configs_load_from_a_file_or_its_folder(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(shipped_config("jamba-1.5-mini")))
    by_file = state_spec_from_hf_config(tmp_path / "config.json")
    by_folder = state_spec_from_hf_config(str(tmp_path))
    assert by_file == by_folder == state_spec_from_hf_config(shipped_config("jamba-1.5-mini"))


def test_dtypes_come_from_the_config_the_argument_and_the_ssm_cache_dtype() -> None:
    config = dict(shipped_config("nemotron-h-8b"))
    config["mamba_ssm_cache_dtype"] = "bfloat16"
    default = state_spec_from_hf_config(config)
    assert {t.dtype for t in default.layers[0].tensors} == {"bfloat16"}
    # vLLM's --dtype sets the model dtype: the conv follows, the configured h-state stays.
    as_float = state_spec_from_hf_config(config, dtype="float32")
    assert [t.dtype for t in as_float.layers[0].tensors] == ["float32", "bfloat16"]
    both = state_spec_from_hf_config(config, conv_dtype="float32", ssm_dtype="float32")
    assert both.bytes_per_snapshot == 2 * default.bytes_per_snapshot
    config["mamba_ssm_cache_dtype"] = "float32"
    mixed = state_spec_from_hf_config(config)
    assert [t.dtype for t in mixed.layers[0].tensors] == ["bfloat16", "float32"]
    del config["torch_dtype"]
    config["dtype"] = "float16"
    assert state_spec_from_hf_config(config).layers[0].tensors[0].dtype == "float16"
    config["dtype"] = "float32"  # vLLM's dtype="auto" runs a float32 checkpoint in bfloat16
    assert state_spec_from_hf_config(config).layers[0].tensors[0].dtype == "bfloat16"
    hf = state_spec_from_hf_config(config, layout="transformers")
    assert {t.dtype for t in hf.layers[0].tensors} == {"float32"}  # transformers: as loaded
    del config["dtype"]
    assert state_spec_from_hf_config(config).layers[0].tensors[0].dtype == "bfloat16"
    assert state_spec_from_hf_config(config, dtype="torch.float16").layers[0].tensors[0].dtype == (
        "float16"
    )


def test_the_engines_drop_a_conv_column_that_transformers_keeps() -> None:
    engine = state_spec_from_hf_config(shipped_config("jamba-1.5-mini"))
    hf = state_spec_from_hf_config(shipped_config("jamba-1.5-mini"), layout="transformers")
    assert engine.layers[0].tensors[0].shape == (8_192, 3)
    assert hf.layers[0].tensors[0].shape == (8_192, 4)


@pytest.mark.parametrize(
    ("change", "kwargs", "message"),
    [
        ({"model_type": "llama"}, {}, "'model_type' must be one of .*got 'llama'"),
        ({"model_type": None}, {}, "'model_type' must be one of"),
        ({"num_hidden_layers": 3}, {}, "'hybrid_override_pattern' has 52 entries"),
        ({"ssm_state_size": -1}, {}, "config field 'ssm_state_size' must be an int >= 1"),
        ({}, {"tp_size": 3}, "'tp_size' 3 must divide config field 'mamba_num_heads' = 128"),
        ({}, {"tp_size": 0}, "'tp_size' must be an int >= 1"),
        ({}, {"tp_size": 2, "layout": "transformers"}, "must be 1 for layout 'transformers'"),
        ({}, {"layout": "tpu"}, "'layout' must be one of 'vllm', 'engine', 'sglang'"),
        ({}, {"num_speculative_tokens": -1}, "'num_speculative_tokens'"),
        ({}, {"ssm_dtype": "int8"}, "'ssm_dtype' must be one of"),
        ({}, {"conv_dtype": "int8"}, "'conv_dtype' must be one of"),
        ({}, {"dtype": "int8"}, "'dtype' must be one of"),
        ({"torch_dtype": "int4"}, {}, "config field 'torch_dtype' must be one of"),
        ({"hybrid_override_pattern": "M-X"}, {}, "unknown layer kind 'X'"),
        ({"hybrid_override_pattern": "*-*-"}, {}, "no SSM layers"),
        ({"hybrid_override_pattern": None}, {}, "'hybrid_override_pattern' is missing"),
    ],
)
def test_bad_configs_and_arguments_name_the_field(
    change: dict[str, object], kwargs: dict[str, object], message: str
) -> None:
    config = {**shipped_config("nemotron-h-8b"), **change}
    config = {k: v for k, v in config.items() if v is not None}
    with pytest.raises(InvalidArgumentError, match=message):
        state_spec_from_hf_config(config, **kwargs)  # type: ignore[arg-type]


def test_qwen3_next_heads_must_divide_by_tp() -> None:
    with pytest.raises(InvalidArgumentError, match="'linear_num_key_heads' = 16"):
        state_spec_from_hf_config(shipped_config("qwen3-next-80b-a3b"), tp_size=3)


def test_unreadable_configs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="must be a readable file"):
        state_spec_from_hf_config(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InvalidArgumentError, match="must be JSON"):
        state_spec_from_hf_config(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(InvalidArgumentError, match="must hold a JSON object"):
        state_spec_from_hf_config(tmp_path / "list.json")
    with pytest.raises(InvalidArgumentError, match="mapping or a path"):
        state_spec_from_hf_config(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'name' must be one of"):
        shipped_config("gpt-5")


# -- the depth policy ---------------------------------------------------------------------

SPEC = state_spec_from_hf_config(shipped_config("nemotron-h-8b"))
PER = SPEC.bytes_per_snapshot
NO_ENV: dict[str, str] = {}


def depth(free: int, **kwargs: object) -> RingDepth:
    kwargs.setdefault("env", NO_ENV)
    return decode_rollback_ring_slots(SPEC, max_sequences=256, free_bytes=free, **kwargs)  # type: ignore[arg-type]


def test_plenty_of_memory_gives_the_maximum() -> None:
    got = depth(100 * 256 * PER)
    assert got == RingDepth(DEFAULT_MAX_SLOTS, DepthRule.MAXIMUM, PER, 8 * 256 * PER, 100)


def test_scarce_memory_gives_what_fits() -> None:
    got = depth(3 * 256 * PER + 256 * PER - 1)
    assert (got.slots, got.rule, got.fit) == (3, DepthRule.MEMORY, 3)
    assert got.bytes_total == 3 * 256 * PER
    assert depth(0).slots == 0


def test_the_flag_beats_the_environment_which_beats_the_policy() -> None:
    free = 20 * 256 * PER
    env = {ENV_VAR: "4"}
    assert depth(free, env=env) == RingDepth(4, DepthRule.ENV, PER, 4 * 256 * PER, 20)
    assert depth(free, env=env, override=12).rule == DepthRule.OVERRIDE
    assert depth(free, env=env, override="12").slots == 12  # beyond max_slots: allowed
    assert depth(free, override=0).slots == 0


def test_the_environment_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "2")
    got = decode_rollback_ring_slots(SPEC, max_sequences=1, free_bytes=10 * PER)
    assert (got.slots, got.rule) == (2, DepthRule.ENV)


@pytest.mark.parametrize(
    ("override", "env", "message"),
    [
        (None, {ENV_VAR: ""}, f"{ENV_VAR} must be an integer >= 0, got an empty string"),
        (None, {ENV_VAR: "-1"}, f"{ENV_VAR} must be an integer >= 0, got '-1'"),
        (None, {ENV_VAR: "two"}, f"{ENV_VAR} must be an integer >= 0, got 'two'"),
        (None, {ENV_VAR: "1.5"}, f"{ENV_VAR} must be an integer >= 0"),
        (None, {ENV_VAR: "50"}, f"{ENV_VAR} = 50 does not fit"),
        ("", NO_ENV, "the --ring-slots flag.* got an empty string"),
        (-3, NO_ENV, "the --ring-slots flag.* got -3"),
        ("x", {ENV_VAR: "2"}, "the --ring-slots flag.* got 'x'"),
        (True, NO_ENV, "the --ring-slots flag.* got True"),
        (2.0, NO_ENV, "the --ring-slots flag.* got 2.0"),
        (50, NO_ENV, "--ring-slots = 50 does not fit: 50 slots x 256 sequences"),
    ],
)
def test_bad_overrides_name_their_source(
    override: object, env: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        depth(20 * 256 * PER, override=override, env=env)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_sequences": 0}, "'max_sequences' must be an int >= 1"),
        ({"max_sequences": -1}, "'max_sequences' must be an int >= 1"),
        ({"free_bytes": -1}, "'free_bytes'"),
        ({"max_slots": True}, "'max_slots'"),
    ],
)
def test_bad_policy_arguments_name_themselves(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"max_sequences": 4, "free_bytes": 10**12, "env": NO_ENV, **kwargs}
    with pytest.raises(InvalidArgumentError, match=message):
        decode_rollback_ring_slots(SPEC, **args)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'spec' must be an SsmStateSpec"):
        decode_rollback_ring_slots("spec", max_sequences=1, free_bytes=1)  # type: ignore[arg-type]


sizes = st.integers(0, 40 * 256 * PER)


@given(free=sizes, more=st.integers(0, 10 * 256 * PER), maximum=st.integers(0, 32))
def test_the_policy_never_exceeds_the_fit_and_is_monotone(
    free: int, more: int, maximum: int
) -> None:
    low = depth(free, max_slots=maximum)
    high = depth(free + more, max_slots=maximum)
    assert low.slots <= low.fit
    assert low.slots <= maximum
    assert low.bytes_total <= free
    assert low.slots <= high.slots


@given(free=sizes, slots=st.integers(0, 40))
def test_an_override_is_honoured_exactly_when_it_fits(free: int, slots: int) -> None:
    fit = free // (256 * PER)
    if slots <= fit:
        assert depth(free, override=slots).slots == slots
    else:
        with pytest.raises(InvalidArgumentError):
            depth(free, override=slots)


@given(steps=st.lists(st.booleans(), max_size=30), at_most=st.none() | st.integers(0, 30))
def test_zero_slots_means_every_hybrid_rollback_declines(
    steps: list[bool], at_most: int | None
) -> None:
    slots = depth(256 * PER - 1).slots
    assert slots == 0
    ring = SsmDecodeRing(slots)
    boundaries = []
    for n, is_boundary in enumerate(steps, start=1):
        if is_boundary:
            boundaries.append(n)
        snapshot_boundary_if_ssm(
            ring, seq=0, token_position=n, is_boundary=is_boundary, in_thinking=False
        )
    result = rollback_to_boundary(ring, boundaries, seq=0, current_len=len(steps), at_most=at_most)
    assert result == RollbackDeclined(0, DeclineReason.RING_DISABLED)


def test_spec_values_are_plain_and_comparable() -> None:
    assert isinstance(SPEC, SsmStateSpec)
    assert SPEC.model_type == "nemotron_h"
    assert SPEC.num_layers == 52
    assert SPEC.layers[0].nbytes == PER // 24
