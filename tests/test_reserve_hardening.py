"""The depth policy fails closed: degenerate configs and arguments are library errors.

No input to ``state_spec_from_hf_config`` or ``decode_rollback_ring_slots``
yields a zero or negative byte count or a foreign exception; each refusal
names the config field or argument, what was expected and what was given.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_rollback import InvalidArgumentError, SsmRollbackError
from ssm_rollback._errors import InvalidArgumentTypeError
from ssm_rollback.reserve import (
    ENV_VAR,
    SHIPPED_MODELS,
    SUPPORTED_MODEL_TYPES,
    DepthRule,
    RingDepth,
    SsmLayerSpec,
    SsmStateSpec,
    StateTensorSpec,
    decode_rollback_ring_slots,
    shipped_config,
    state_spec_from_hf_config,
)

# Model types without a shipped config, written with the fields their Hub configs use.
EXTRA_CONFIGS: Mapping[str, Mapping[str, object]] = {
    "mamba-small": {
        "model_type": "mamba",
        "hidden_size": 768,
        "num_hidden_layers": 4,
        "state_size": 16,
        "conv_kernel": 4,
        "expand": 2,
    },
    "falcon-mamba-small": {
        "model_type": "falcon_mamba",
        "hidden_size": 1024,
        "n_layer": 4,
        "intermediate_size": 2048,
        "state_size": 16,
        "conv_kernel": 4,
    },
    "bamba-small": {
        "model_type": "bamba",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "attn_layer_indices": [1],
        "mamba_n_heads": 32,
        "mamba_d_head": 64,
        "mamba_d_state": 128,
        "mamba_n_groups": 1,
        "mamba_d_conv": 4,
    },
    "zamba2-small": {
        "model_type": "zamba2",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "layers_block_type": ["mamba", "hybrid", "mamba", "mamba"],
        "n_mamba_heads": 32,
        "mamba_headdim": 64,
        "mamba_d_state": 64,
        "mamba_ngroups": 1,
        "mamba_d_conv": 4,
    },
    "qwen3-5-small": {
        "model_type": "qwen3_5_text",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "linear_num_key_heads": 4,
        "linear_num_value_heads": 8,
        "linear_key_head_dim": 64,
        "linear_value_head_dim": 64,
        "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "float32",
    },
    "qwen3-5-moe-small": {
        "model_type": "qwen3_5_moe_text",
        "hidden_size": 1024,
        "layer_types": ["linear_attention", "full_attention", "linear_attention"],
    },
    "lfm2-moe-small": {
        "model_type": "lfm2_moe",
        "hidden_size": 1024,
        "layer_types": ["conv", "full_attention", "conv", "conv"],
        "conv_L_cache": 3,
    },
    "lfm2-small": {
        "model_type": "lfm2",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "full_attn_idxs": [1],
        "conv_L_cache": 3,
    },
    "kimi-linear-small": {  # the Hub's linear_attn_config, layers 1-indexed
        "model_type": "kimi_linear",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "linear_attn_config": {
            "full_attn_layers": [4],
            "kda_layers": [1, 2, 3],
            "num_heads": 8,
            "head_dim": 64,
            "short_conv_kernel_size": 4,
        },
    },
    "olmo-hybrid-small": {  # head counts and dims derived, as OlmoHybridConfig does
        "model_type": "olmo_hybrid",
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "layer_types": [
            "linear_attention",
            "linear_attention",
            "linear_attention",
            "full_attention",
        ],
    },
    "bailing-hybrid-small": {
        "model_type": "bailing_hybrid",
        "hidden_size": 1024,
        "num_hidden_layers": 6,
        "layer_group_size": 4,
        "num_attention_heads": 8,
        "head_dim": 64,
        "short_conv_kernel_size": 4,
    },
    "zaya-small": {
        "model_type": "zaya",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "cca_time0": 2,
        "cca_time1": 2,
    },
}

ALL_CONFIGS: tuple[str, ...] = SHIPPED_MODELS + tuple(EXTRA_CONFIGS)


def config_of(name: str) -> dict[str, object]:
    if name in EXTRA_CONFIGS:
        return dict(EXTRA_CONFIGS[name])
    return shipped_config(name)


def spec_of(name: str, change: Mapping[str, object], **kwargs: object) -> SsmStateSpec:
    config = {**config_of(name), **change}
    return state_spec_from_hf_config(config, **kwargs)  # type: ignore[arg-type]


def test_every_supported_model_type_has_a_config_here() -> None:
    covered = {config_of(name)["model_type"] for name in ALL_CONFIGS}
    assert covered == set(SUPPORTED_MODEL_TYPES)
    for name in ALL_CONFIGS:
        assert spec_of(name, {}).bytes_per_snapshot > 0


# -- degenerate sizes, periods and patterns name the config field --------------------------------

SIZE_CASES: list[tuple[str, dict[str, object], str]] = [
    # Mamba-2 mixers
    ("nemotron-h-8b", {"conv_kernel": 0}, "'conv_kernel' must be an int >= 2"),
    ("nemotron-h-8b", {"conv_kernel": 1}, "'conv_kernel' must be an int >= 2"),
    ("nemotron-h-8b", {"ssm_state_size": 0}, "'ssm_state_size' must be an int >= 1"),
    ("nemotron-h-8b", {"ssm_state_size": -1}, "'ssm_state_size' must be an int >= 1"),
    ("nemotron-h-8b", {"mamba_num_heads": 0}, "'mamba_num_heads' must be an int >= 1"),
    ("nemotron-h-8b", {"mamba_head_dim": 0}, "'mamba_head_dim' must be an int >= 1"),
    ("nemotron-h-8b", {"n_groups": 0}, "'n_groups' must be an int >= 1"),
    ("mamba2-2.7b", {"conv_kernel": 0}, "'conv_kernel' must be an int >= 2"),
    ("mamba2-2.7b", {"num_heads": 0}, "'num_heads' must be an int >= 1"),
    ("mamba2-2.7b", {"head_dim": 0}, "'head_dim' must be an int >= 1"),
    ("mamba2-2.7b", {"state_size": 0}, "'state_size' must be an int >= 1"),
    ("falcon-h1-7b", {"mamba_d_ssm": 0}, "'mamba_d_ssm' must be an int >= 1"),
    ("falcon-h1-7b", {"mamba_d_conv": 0}, "'mamba_d_conv' must be an int >= 2"),
    ("falcon-h1-7b", {"mamba_n_groups": 0}, "'mamba_n_groups' must be an int >= 1"),
    ("granite-4.0-h-small", {"mamba_d_conv": 0}, "'mamba_d_conv' must be an int >= 2"),
    ("granite-4.0-h-small", {"mamba_n_heads": 0}, "'mamba_n_heads' must be an int >= 1"),
    ("granite-4.0-h-small", {"mamba_d_head": -4}, "'mamba_d_head' must be an int >= 1"),
    ("bamba-small", {"mamba_d_state": 0}, "'mamba_d_state' must be an int >= 1"),
    ("zamba2-small", {"mamba_d_conv": 0}, "'mamba_d_conv' must be an int >= 2"),
    ("zamba2-small", {"n_mamba_heads": 0}, "'n_mamba_heads' must be an int >= 1"),
    ("zamba2-small", {"mamba_headdim": 0}, "'mamba_headdim' must be an int >= 1"),
    ("zamba2-small", {"mamba_ngroups": 0}, "'mamba_ngroups' must be an int >= 1"),
    # Mamba-1 mixers
    ("jamba-1.5-mini", {"mamba_d_conv": 0}, "'mamba_d_conv' must be an int >= 2"),
    ("jamba-1.5-mini", {"mamba_d_state": 0}, "'mamba_d_state' must be an int >= 1"),
    ("jamba-1.5-mini", {"mamba_expand": 0}, "'mamba_expand' must be an int >= 1"),
    ("jamba-1.5-mini", {"hidden_size": 0}, "'hidden_size' must be an int >= 1"),
    ("mamba-small", {"conv_kernel": 0}, "'conv_kernel' must be an int >= 2"),
    ("mamba-small", {"state_size": 0}, "'state_size' must be an int >= 1"),
    ("mamba-small", {"intermediate_size": 0}, "'intermediate_size' must be an int >= 1"),
    ("falcon-mamba-small", {"conv_kernel": -1}, "'conv_kernel' must be an int >= 2"),
    # gated delta-net
    ("qwen3-next-80b-a3b", {"linear_conv_kernel_dim": 0}, "'linear_conv_kernel_dim' must be"),
    (
        "qwen3-next-80b-a3b",
        {"linear_conv_kernel_dim": 1},
        "'linear_conv_kernel_dim' must be an int >= 2",
    ),
    ("qwen3-next-80b-a3b", {"linear_num_key_heads": 0}, "'linear_num_key_heads' must be an int"),
    ("qwen3-next-80b-a3b", {"linear_num_value_heads": 0}, "'linear_num_value_heads' must be"),
    ("qwen3-next-80b-a3b", {"linear_key_head_dim": 0}, "'linear_key_head_dim' must be an int"),
    ("qwen3-next-80b-a3b", {"linear_value_head_dim": 0}, "'linear_value_head_dim' must be an"),
    # short conv
    ("lfm2-small", {"conv_L_cache": 0}, "'conv_L_cache' must be an int >= 2"),
    ("lfm2-small", {"conv_L_cache": 1}, "'conv_L_cache' must be an int >= 2"),
    ("lfm2-small", {"hidden_size": 0}, "'hidden_size' must be an int >= 1"),
    # layer counts
    ("nemotron-h-8b", {"num_hidden_layers": 0}, "'num_hidden_layers' must be an int >= 1"),
    ("mamba2-2.7b", {"num_hidden_layers": 0}, "'num_hidden_layers' must be an int >= 1"),
    ("falcon-mamba-small", {"n_layer": 0}, "'n_layer' must be an int >= 1"),
    (
        "mamba2-2.7b",
        {"num_hidden_layers": 10**9},
        "'num_hidden_layers' must be at most 100000 layers",
    ),
    ("mamba2-2.7b", {"n_layer": 32}, "'n_layer' = 32 disagrees with 'num_hidden_layers' = 64"),
    # periods and offsets
    ("jamba-1.5-mini", {"attn_layer_period": 0}, "'attn_layer_period' must be an int >= 1"),
    ("jamba-1.5-mini", {"attn_layer_offset": 8}, "'attn_layer_offset' must be less than"),
    ("jamba-1.5-mini", {"attn_layer_offset": -1}, "'attn_layer_offset' must be an int >= 0"),
    ("qwen3-next-80b-a3b", {"full_attention_interval": 0}, "'full_attention_interval' must be"),
    ("bamba-small", {"attn_layer_indices": [1, 4]}, r"'attn_layer_indices' must hold .*got 4"),
    ("bamba-small", {"attn_layer_indices": [-1]}, r"'attn_layer_indices' must hold .*got -1"),
    ("lfm2-small", {"full_attn_idxs": [9]}, r"'full_attn_idxs' must hold .*got 9"),
    # layer patterns whose length disagrees with the layer count
    ("nemotron-h-8b", {"num_hidden_layers": 4}, "'hybrid_override_pattern' has 52 entries"),
    (
        "nemotron-h-8b",
        {"layers_block_type": ["mamba", "attention"] * 3},
        "'layers_block_type' has 6 entries, but 'num_hidden_layers' = 52",
    ),
    ("granite-4.0-h-small", {"num_hidden_layers": 52}, "'layer_types' has 40 entries"),
    ("qwen3-next-80b-a3b", {"layer_types": ["linear_attention"] * 4}, "'layer_types' has 4 ent"),
    ("jamba-1.5-mini", {"layers_block_type": ["mamba"] * 4}, "'layers_block_type' has 4 entr"),
    ("bamba-small", {"layer_types": ["mamba"] * 52}, "'layer_types' has 52 entries"),
    ("zamba2-small", {"layers_block_type": ["mamba"] * 52}, "'layers_block_type' has 52 entr"),
    ("lfm2-small", {"layer_types": ["conv"] * 52}, "'layer_types' has 52 entries"),
    ("lfm2-small", {"num_hidden_layers": None, "layer_types": []}, "'layer_types' must .*>= 1"),
    (
        "zamba2-small",
        {"num_hidden_layers": None, "layers_block_type": ""},
        "'layers_block_type' mu",
    ),
    # heads that groups do not divide
    ("nemotron-h-8b", {"n_groups": 3}, "'n_groups' = 3 must divide 'mamba_num_heads' = 128"),
    ("mamba2-2.7b", {"n_groups": 3}, "'n_groups' = 3 must divide 'num_heads' = 80"),
    (
        "qwen3-next-80b-a3b",
        {"linear_num_value_heads": 24},
        "'linear_num_key_heads' = 16 must divide 'linear_num_value_heads' = 24",
    ),
]


@pytest.mark.parametrize(("name", "change", "message"), SIZE_CASES)
def test_degenerate_sizes_name_the_config_field(
    name: str, change: dict[str, object], message: str
) -> None:
    config = {k: v for k, v in {**config_of(name), **change}.items() if v is not None}
    for layout in ("engine", "transformers"):  # SGLang refuses some families outright
        with pytest.raises(InvalidArgumentError, match=message):
            state_spec_from_hf_config(config, layout=layout)


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("nemotron-h-8b", {"conv_kernel": True}),
        ("nemotron-h-8b", {"conv_kernel": 4.0}),
        ("nemotron-h-8b", {"conv_kernel": "4"}),
        ("nemotron-h-8b", {"mamba_num_heads": [128]}),
        ("jamba-1.5-mini", {"attn_layer_period": False}),
        ("qwen3-next-80b-a3b", {"full_attention_interval": 4.5}),
        ("lfm2-small", {"conv_L_cache": "3"}),
        ("nemotron-h-8b", {"torch_dtype": 16}),
        ("nemotron-h-8b", {"mamba_ssm_cache_dtype": ["float32"]}),
        ("nemotron-h-8b", {"hybrid_override_pattern": 52}),
        ("bamba-small", {"attn_layer_indices": [True]}),
        ("bamba-small", {"attn_layer_indices": "1"}),
    ],
)
def test_wrong_types_in_configs_are_type_errors_naming_the_field(
    name: str, change: dict[str, object]
) -> None:
    (field,) = change
    with pytest.raises(InvalidArgumentTypeError, match=f"'{field}' must be"):
        spec_of(name, change)


def test_the_smallest_valid_values_are_accepted() -> None:
    # The refusals stop exactly at the degenerate values, not one step before.
    assert spec_of("nemotron-h-8b", {"conv_kernel": 2}).layers[0].tensors[0].shape == (10_240, 1)
    assert spec_of("lfm2-small", {"conv_L_cache": 2}).layers[0].tensors[0].shape == (1_024, 1)
    assert spec_of("mamba-small", {"state_size": 1}).layers[0].tensors[1].shape == (1_536, 1)
    offset_0 = spec_of("jamba-1.5-mini", {"attn_layer_offset": 0})
    assert [layer.index for layer in offset_0.layers][:3] == [1, 2, 3]
    assert (
        len(spec_of("jamba-1.5-mini", {"attn_layer_period": 2, "attn_layer_offset": 1}).layers)
        == 16
    )
    assert len(spec_of("qwen3-next-80b-a3b", {"full_attention_interval": 2}).layers) == 24
    assert spec_of("nemotron-h-8b", {"n_groups": 128}).bytes_per_snapshot > 0
    assert len(spec_of("bamba-small", {"attn_layer_indices": [0, 3]}).layers) == 2
    assert len(spec_of("mamba2-2.7b", {"num_hidden_layers": 1}).layers) == 1
    with pytest.raises(InvalidArgumentError, match="no SSM layers"):
        spec_of("jamba-1.5-mini", {"attn_layer_period": 1, "attn_layer_offset": 0})


def test_a_group_count_that_tensor_parallelism_would_shrink_is_refused() -> None:
    # 5 groups over 4 ranks: replicating groups up to the rank count would drop one.
    with pytest.raises(InvalidArgumentError, match=r"'n_groups' = 5 .*'tp_size' = 4"):
        spec_of("mamba2-2.7b", {"n_groups": 5}, tp_size=4)
    # vLLM's MambaMixer2 replicates a single group only (n_groups % tp == 0 or n_groups == 1):
    # 2 groups over 4 ranks, or 3 over 2, used to be sized as if they were one.
    with pytest.raises(InvalidArgumentError, match=r"'n_groups' = 2 .*'tp_size' = 4"):
        spec_of("mamba2-2.7b", {"n_groups": 2}, tp_size=4)
    with pytest.raises(InvalidArgumentError, match=r"'n_groups' = 3 .*'tp_size' = 2"):
        spec_of("mamba2-2.7b", {"n_groups": 3, "num_heads": 96, "hidden_size": 3_072}, tp_size=2)
    one = spec_of("mamba2-2.7b", {"n_groups": 1}, tp_size=4)
    assert one.layers[0].tensors[0].shape == ((5_120 + 2 * 4 * 128) // 4, 3)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"tp_size": -1}, InvalidArgumentError, "'tp_size' must be an int >= 1, got -1"),
        ({"tp_size": True}, InvalidArgumentTypeError, "'tp_size' must be an int >= 1"),
        ({"tp_size": 2.0}, InvalidArgumentTypeError, "'tp_size' must be an int >= 1"),
        ({"dtype": 16}, InvalidArgumentTypeError, "'dtype' must be a dtype name"),
        ({"dtype": "float4"}, InvalidArgumentError, "'dtype' must be one of"),
        ({"layout": None}, InvalidArgumentError, "'layout' must be"),
    ],
)
def test_bad_arguments_name_themselves(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        spec_of("nemotron-h-8b", {}, **kwargs)


# -- unreadable configs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe{}", "'config' must be UTF-8"),
        (b'{"model_type": "mamba2", "num_heads": 1' + b"0" * 5000 + b"}", "'config' must be JSON"),
        (b"[" * 100_000, "'config' must be JSON"),
        (b"", "'config' must be JSON"),
        (b"null", "'config' must hold a JSON object"),
    ],
)
def test_unreadable_config_files_name_config(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(InvalidArgumentError, match=message):
        state_spec_from_hf_config(path)


def test_config_paths_that_cannot_be_read_name_config(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="'config' must be a readable file"):
        state_spec_from_hf_config(tmp_path)  # a folder without config.json
    with pytest.raises(InvalidArgumentError, match="'config' must be a readable file"):
        state_spec_from_hf_config(str(tmp_path / "bad\0name.json"))
    with pytest.raises(InvalidArgumentTypeError, match=r"'config' must be a config\.json mapping"):
        state_spec_from_hf_config(b"config.json")  # type: ignore[arg-type]
    # Path("") is the working directory; an empty flag must not read whatever config.json is there.
    (tmp_path / "config.json").write_text(json.dumps(shipped_config("mamba2-2.7b")))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        with pytest.raises(InvalidArgumentError, match=r"'config' must be .*got ''"):
            state_spec_from_hf_config("")


# -- the spec values cannot describe zero bytes ----------------------------------------------------


def test_a_spec_cannot_describe_zero_or_negative_bytes() -> None:
    with pytest.raises(InvalidArgumentError, match="'shape' must be"):
        StateTensorSpec("conv", (8, 0), "bfloat16")
    with pytest.raises(InvalidArgumentError, match="'shape' must be"):
        StateTensorSpec("conv", (8, -1), "bfloat16")
    with pytest.raises(InvalidArgumentError, match="'dtype' must be one of"):
        StateTensorSpec("conv", (8, 3), "int4")
    with pytest.raises(InvalidArgumentError, match="'tensors' must be"):
        SsmLayerSpec(0, "mamba2", ())
    with pytest.raises(InvalidArgumentError, match="'layers' must be"):
        SsmStateSpec("mamba2", "engine", 1, 4, ())


_TENSOR = StateTensorSpec("conv", (8, 3), "bfloat16")
_LAYER = SsmLayerSpec(0, "mamba2", (_TENSOR,))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        # Each was taken, and failed later with an AttributeError (or sized nonsense).
        (lambda: SsmStateSpec("m", "vllm", 1, 1, (1,)), r"'layers' must be .*got 1 of type int"),  # type: ignore[arg-type]
        (lambda: SsmLayerSpec(0, "mamba2", ("a",)), r"'tensors' must be .*got 'a' of type str"),  # type: ignore[arg-type]
        (lambda: SsmLayerSpec(0, "mamba2", (_TENSOR,), ("a",)), r"'speculative' must be a tuple"),  # type: ignore[arg-type]
        (lambda: SsmLayerSpec(0, "mamba2", (_TENSOR,), [_TENSOR]), r"'speculative' must be"),  # type: ignore[arg-type]
        (lambda: SsmStateSpec("m", "vllm", 0, 1, (_LAYER,)), r"'tp_size' must be an int >= 1"),
        (lambda: SsmStateSpec("m", "vllm", True, 1, (_LAYER,)), r"'tp_size' must be an int"),
        (lambda: SsmStateSpec("m", "vllm", 1, -5, (_LAYER,)), r"'num_layers' must be an int >= 1"),
        (lambda: SsmStateSpec("m", "bogus", 1, 1, (_LAYER,)), r"'layout' must be one of .*'bogus'"),  # type: ignore[arg-type]
        (lambda: SsmStateSpec(None, "vllm", 1, 1, (_LAYER,)), r"'model_type' must be a str"),  # type: ignore[arg-type]
        (
            lambda: SsmStateSpec("m", "vllm", 1, 1, (_LAYER,), num_speculative_tokens=-1),
            r"'num_speculative_tokens' must be an int >= 0",
        ),
        (
            lambda: SsmStateSpec("m", "vllm", 1, 1, (attrs.evolve(_LAYER, index=1),)),
            r"'layers' must hold layer indices in \[0, num_layers 1\), got index 1",
        ),
        (lambda: SsmLayerSpec(-1, "mamba2", (_TENSOR,)), r"'index' must be an int >= 0"),
        (lambda: SsmLayerSpec(0, "mamba3", (_TENSOR,)), r"'kind' must be one of .*'mamba3'"),  # type: ignore[arg-type]
        (lambda: StateTensorSpec(None, (8, 3), "bfloat16"), r"'name' must be a str"),  # type: ignore[arg-type]
        (lambda: StateTensorSpec("c", (8, 3), "bfloat16", 1), r"'dtype_rule' must be a str"),  # type: ignore[arg-type]
    ],
)
def test_a_hand_built_spec_is_checked_at_construction_naming_the_field(
    build: Callable[[], object], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        build()


# -- the depth policy's arguments ------------------------------------------------------------------

SPEC = state_spec_from_hf_config(shipped_config("nemotron-h-8b"))
PER = SPEC.bytes_per_snapshot


def depth(**kwargs: object) -> RingDepth:
    args: dict[str, object] = {"max_sequences": 4, "free_bytes": 100 * 4 * PER, "env": {}}
    return decode_rollback_ring_slots(SPEC, **{**args, **kwargs})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"env": [f"{ENV_VAR}=2"]}, InvalidArgumentTypeError, "'env' must be a mapping"),
        ({"env": f"{ENV_VAR}=2"}, InvalidArgumentTypeError, "'env' must be a mapping"),
        ({"max_sequences": 0}, InvalidArgumentError, "'max_sequences' must be an int >= 1, got 0"),
        ({"max_sequences": -2}, InvalidArgumentError, "'max_sequences' must be an int >= 1"),
        ({"max_sequences": "4"}, InvalidArgumentTypeError, "'max_sequences' must be an int"),
        ({"free_bytes": 1.5e12}, InvalidArgumentTypeError, "'free_bytes' must be an int >= 0"),
        ({"free_bytes": None}, InvalidArgumentTypeError, "'free_bytes' must be an int >= 0"),
        ({"max_slots": -1}, InvalidArgumentError, "'max_slots' must be an int >= 0"),
        ({"max_slots": 8.0}, InvalidArgumentTypeError, "'max_slots' must be an int >= 0"),
        ({"override": [2]}, InvalidArgumentTypeError, "the --ring-slots flag.* got \\[2\\]"),
        ({"override": "\u0663"}, InvalidArgumentError, "the --ring-slots flag.* got '\u0663'"),
        (
            {"override": "9" * 5000},
            InvalidArgumentError,
            "the --ring-slots flag.* got a 5000-digit string",
        ),
        ({"env": {ENV_VAR: "\u0663"}}, InvalidArgumentError, f"{ENV_VAR} must be an integer"),
        ({"env": {ENV_VAR: " 2x"}}, InvalidArgumentError, f"{ENV_VAR} must be an integer"),
    ],
)
def test_bad_policy_arguments_name_themselves(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        depth(**kwargs)


def test_a_spec_argument_must_be_a_spec_with_bytes() -> None:
    with pytest.raises(InvalidArgumentTypeError, match="'spec' must be an SsmStateSpec"):
        decode_rollback_ring_slots(
            {"layers": ()},  # type: ignore[arg-type]
            max_sequences=1,
            free_bytes=1,
            env={},
        )
    with attrs.validators.disabled():  # as a spec built around the validators would be
        empty = SsmStateSpec("mamba2", "engine", 1, 4, ())
    with pytest.raises(InvalidArgumentError, match="'spec' must describe at least one byte"):
        decode_rollback_ring_slots(empty, max_sequences=1, free_bytes=10**9, env={})


# -- sizes past what any machine holds ---------------------------------------------------------


@pytest.mark.parametrize("value", [2**50 + 1, 10**30, 10**5000], ids=["2**50+1", "1e30", "1e5000"])
def test_a_size_field_past_what_a_machine_holds_is_named(value: int) -> None:
    """``mamba_num_heads`` 10**30 once sized to 8e35 bytes a snapshot, and 0 slots."""
    config = {**shipped_config("nemotron-h-8b"), "mamba_num_heads": value}
    with pytest.raises(InvalidArgumentError) as raised:
        state_spec_from_hf_config(config)
    shown = f"{value:,}" if value < 10**40 else "about 10**5000"
    assert str(raised.value) == (
        f"config field 'mamba_num_heads' must be an int from 1 to 2**50 (nemotron_h; no "
        f"machine holds more), got {shown}"
    )


def test_sizes_that_multiply_past_what_a_machine_holds_are_refused() -> None:
    config = {**shipped_config("nemotron-h-8b"), "mamba_num_heads": 2**40, "mamba_head_dim": 2**30}
    with pytest.raises(InvalidArgumentError) as raised:
        state_spec_from_hf_config(config)
    assert str(raised.value) == (
        "config gives 14,677,115,028,758,857,324,462,080 bytes per snapshot (24 SSM layers; "
        "the largest tensor, 'ssm', is 1,099,511,627,776x1,073,741,824x128 float32), more than "
        "the 2**50 bytes (1 PiB) a machine holds (nemotron_h)"
    )


@pytest.mark.parametrize("drafts", [10**10, 10**25])
def test_speculative_buffers_past_what_a_machine_holds_name_the_draft_tokens(drafts: int) -> None:
    with pytest.raises(
        InvalidArgumentError,
        match=rf"^'num_speculative_tokens' gives .* bytes of speculative buffers per sequence "
        rf"for {drafts:,} draft tokens, more than the 2\*\*50 bytes",
    ):
        state_spec_from_hf_config(shipped_config("nemotron-h-8b"), num_speculative_tokens=drafts)
    spec = state_spec_from_hf_config(shipped_config("nemotron-h-8b"), num_speculative_tokens=64)
    assert spec.speculative_bytes_per_sequence < 2**50


def test_the_policy_refuses_a_hand_built_spec_or_memory_past_any_machine() -> None:
    huge = StateTensorSpec("ssm", (2**40, 2**20), "float32")
    spec = SsmStateSpec("mamba2", "vllm", 1, 1, (SsmLayerSpec(0, "mamba2", (huge,)),))
    with pytest.raises(
        InvalidArgumentError, match=r"^'spec' must fit a machine, got 4,611,686,018,427,387,904 "
    ):
        decode_rollback_ring_slots(spec, max_sequences=1, free_bytes=2**64, env={})
    with pytest.raises(InvalidArgumentError, match=r"^'free_bytes' must be at most 2\*\*64"):
        depth(free_bytes=2**64 + 1)
    assert depth(free_bytes=2**64).slots == 8


def test_a_fit_of_exactly_the_maximum_is_the_maximum_rule() -> None:
    assert depth(free_bytes=8 * 4 * PER) == RingDepth(8, DepthRule.MAXIMUM, PER, 8 * 4 * PER, 8)
    assert depth(free_bytes=8 * 4 * PER - 1).rule == DepthRule.MEMORY
    assert depth(free_bytes=8 * 4 * PER, max_slots=9).rule == DepthRule.MEMORY


def test_the_flag_wins_even_over_a_malformed_variable() -> None:
    # The flag decides outright: the variable is not read, so its form does not matter.
    got = depth(override=3, env={ENV_VAR: "junk"})
    assert (got.slots, got.rule) == (3, DepthRule.OVERRIDE)
    with pytest.raises(InvalidArgumentError, match=ENV_VAR):
        depth(env={ENV_VAR: "junk"})
    assert depth(env={ENV_VAR: " 5 "}).slots == 5


# -- hostile configs, generated ------------------------------------------------------------------

# Every field the sizing reads, and a few it only checks.
SIZING_FIELDS = (
    "model_type",
    "torch_dtype",
    "dtype",
    "mamba_ssm_cache_dtype",
    "num_hidden_layers",
    "n_layer",
    "layers_block_type",
    "hybrid_override_pattern",
    "layer_types",
    "attn_layer_period",
    "attn_layer_offset",
    "attn_layer_indices",
    "full_attention_interval",
    "full_attn_idxs",
    "hidden_size",
    "d_model",
    "intermediate_size",
    "mamba_expand",
    "expand",
    "mamba_d_conv",
    "conv_kernel",
    "mamba_d_state",
    "state_size",
    "ssm_state_size",
    "mamba_num_heads",
    "mamba_n_heads",
    "n_mamba_heads",
    "num_heads",
    "mamba_head_dim",
    "mamba_d_head",
    "mamba_headdim",
    "head_dim",
    "n_groups",
    "mamba_n_groups",
    "mamba_ngroups",
    "mamba_d_ssm",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "conv_L_cache",
    "linear_attn_config",
    "linear_num_heads",
    "linear_head_dim",
    "short_conv_kernel_size",
    "layer_group_size",
    "num_attention_heads",
    "num_key_value_heads",
    "cca_time0",
    "cca_time1",
)

hostile_values = st.one_of(
    st.sampled_from([0, -1, 1, 2, 3, True, False, None, "", "4", 4.0, float("nan")]),
    st.integers(-(2**70), 2**70),
    st.integers(1, 80),
    st.floats(),
    st.text(max_size=6),
    st.lists(st.integers(-2, 60) | st.sampled_from(["mamba", "attention", "M", "*"]), max_size=8),
    st.sampled_from(SUPPORTED_MODEL_TYPES),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


DEGENERATE: tuple[object, ...] = (0, -1, 1, 2, True, False, None, 4.0, "4", "", [], [0], 10**30)


def check_sizes_or_refuses(config: Mapping[str, object] | Path, **kwargs: object) -> None:
    """The property: a spec whose every size is positive, or a library error; nothing else."""
    try:
        spec = state_spec_from_hf_config(config, **kwargs)  # type: ignore[arg-type]
    except SsmRollbackError:
        return
    assert 0 < spec.bytes_per_snapshot <= 2**50
    assert spec.speculative_bytes_per_sequence <= 2**50
    assert all(size >= 1 for layer in spec.layers for t in layer.tensors for size in t.shape)
    assert 0 < len(spec.layers) <= spec.num_layers
    assert all(0 <= layer.index < spec.num_layers for layer in spec.layers)


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_every_field_at_every_degenerate_value_sizes_or_is_refused(name: str) -> None:
    for field in SIZING_FIELDS:
        for value in DEGENERATE:
            for layout in ("engine", "sglang", "transformers"):
                check_sizes_or_refuses({**config_of(name), field: value}, layout=layout)


@pytest.mark.parametrize("name", ALL_CONFIGS)
@given(
    data=st.data(),
    tp_size=st.sampled_from([1, 1, 2, 4, 3]),
    layout=st.sampled_from(["engine", "sglang", "transformers"]),
)
def test_hostile_configs_size_to_positive_bytes_or_raise_a_library_error(
    name: str, data: st.DataObject, tp_size: int, layout: str
) -> None:
    # Half the changes hit a field this config has, so each family's own fields get hit often.
    present = sorted(set(config_of(name)) & set(SIZING_FIELDS))
    fields = st.sampled_from(present) | st.sampled_from(SIZING_FIELDS)
    changes = data.draw(st.dictionaries(fields, hostile_values, min_size=1, max_size=3))
    if layout == "transformers":
        tp_size = 1
    check_sizes_or_refuses({**config_of(name), **changes}, tp_size=tp_size, layout=layout)


@given(
    name=st.sampled_from(ALL_CONFIGS),
    changes=st.dictionaries(st.sampled_from(SIZING_FIELDS), hostile_values, min_size=1, max_size=2),
)
def test_hostile_config_files_raise_only_library_errors(
    tmp_path_factory: pytest.TempPathFactory, name: str, changes: dict[str, object]
) -> None:
    path = tmp_path_factory.mktemp("config") / "config.json"
    path.write_text(json.dumps({**config_of(name), **changes}), encoding="utf-8")
    check_sizes_or_refuses(path)


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "too_large"])
def test_a_config_path_that_is_no_regular_file_is_refused_before_reading(
    kind: str, tmp_path: Path
) -> None:
    """The library's own path reader read /dev/zero or a FIFO without end (the CLI already
    refused them); now it looks at the path first."""
    import os

    from ssm_rollback.reserve import _fields

    if kind == "dev_zero":
        path = Path("/dev/zero")
        if not path.exists():
            pytest.skip("no /dev/zero here")
        message = "must be a regular file"
    elif kind == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        path = tmp_path / "config.json"
        os.mkfifo(path)
        message = "must be a regular file"
    else:
        path = tmp_path / "config.json"
        path.write_bytes(b" " * (_fields.MAX_CONFIG_BYTES + 1))
        message = "must be at most"
    with pytest.raises(InvalidArgumentError, match=message):
        state_spec_from_hf_config(path)
