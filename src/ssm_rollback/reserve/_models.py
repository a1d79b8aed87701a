"""Per model type: which family, which layers, how the engines pick its state dtypes.

Adding a model type is one row in ``MODEL_TYPES`` (plus its ``transformers``
defaults in ``_defaults.py``) and one test.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Final, Literal

import attrs

from .._errors import InvalidArgumentError, shown
from ._families import Width
from ._fields import Fields
from ._layers import (
    MAX_LAYERS,
    all_layers,
    bailing_layers,
    bailing_vllm_layers,
    bamba_layers,
    granite_layers,
    jamba_layers,
    kimi_layers,
    lfm2_layers,
    nemotron_layers,
    olmo_hybrid_layers,
    qwen3_next_layers,
    zaya_layers,
)
from ._spec import LayerKind

__all__ = ["MODEL_TYPES", "SHIPPED_MODELS", "ModelType", "normalize", "shipped_config"]


@attrs.frozen
class ModelType:
    """How one ``model_type`` is sized."""

    kind: LayerKind
    layers: Callable[[Fields], list[int]]
    width: Width = "expand"
    #: vLLM: the config field its ``verify_and_update_config`` copies into
    #: ``mamba_ssm_cache_dtype`` (Nemotron-H's, Qwen3.5's), else the h-state follows the conv.
    vllm_ssm_field: str | None = None
    #: SGLang: ``"config"`` when the model's cache params pass the config to
    #: ``mamba2_state_dtype`` (it reads ``mamba_ssm_dtype``), ``"default"`` when they take
    #: the dataclass default (float32 unless the environment says otherwise), ``None``
    #: when SGLang does not serve the model type.
    sglang: Literal["config", "default"] | None = "default"
    #: vLLM's own layer rule where it differs from the config's pattern (Bailing's tail).
    vllm_layers: Callable[[Fields], list[int]] | None = None
    #: Layout -> why the recurrent state is float32 whatever the model dtype (KDA; in
    #: ``transformers`` every scan but the short conv's and ZAYA's).
    float32_state: Mapping[str, str] = attrs.field(factory=dict)
    #: ``"<layout>"`` or ``"<layout>+speculative"`` -> why that layout is not sized.
    refusals: Mapping[str, str] = attrs.field(factory=dict)


def _mamba_layers(f: Fields) -> list[int]:
    """Every layer; a ``mamba_ssm`` config's ``attn_layer_idx`` become attention."""
    attention = f.list("attn_layer_idx") or []
    return [i for i in all_layers(f) if i not in attention]


_KDA_FLOAT32: Final[Mapping[str, str]] = {
    # kda_state_dtype(model_dtype, mamba_cache_dtype): its mamba_ssm_cache_dtype stays "auto".
    "vllm": "vLLM kda_state_dtype: the KDA recurrent state is float32",
    "transformers": "transformers: the KDA layer caches its recurrent state as float32",
}
# transformers' linear-attention cache allocates each state lazily in the dtype of the first
# tensor a layer hands it. The conv window is the model's activations; the scans compute in
# float32 and hand their state over uncast: the PyTorch paths (measured, transformers 5.25)
# and the kernels they stand in for (mamba_ssm's selective_scan_fn and
# mamba_chunk_scan_combined, flash-linear-attention's gated delta rule) alike.
_HF_MAMBA1_FLOAT32: Final[Mapping[str, str]] = {
    "transformers": "transformers: the Mamba selective scan caches a float32 state"
}
_HF_MAMBA2_FLOAT32: Final[Mapping[str, str]] = {
    "transformers": "transformers: the Mamba-2 chunked scan caches a float32 state"
}
_HF_GDN_FLOAT32: Final[Mapping[str, str]] = {
    "transformers": "transformers: the gated delta rule caches a float32 state"
}
_SGLANG_KDA_DRAFTS: Final = (
    "SGLang's KDA pool keeps its speculative conv windows undeduplicated "
    "(disable_conv_window_dedup); those buffers are not sized here"
)

MODEL_TYPES: Final[Mapping[str, ModelType]] = {
    "mamba": ModelType("mamba1", _mamba_layers, float32_state=_HF_MAMBA1_FLOAT32),
    "falcon_mamba": ModelType("mamba1", all_layers, float32_state=_HF_MAMBA1_FLOAT32),
    "jamba": ModelType("mamba1", jamba_layers, sglang=None, float32_state=_HF_MAMBA1_FLOAT32),
    "mamba2": ModelType("mamba2", _mamba_layers, float32_state=_HF_MAMBA2_FLOAT32),
    "bamba": ModelType("mamba2", bamba_layers, sglang=None, float32_state=_HF_MAMBA2_FLOAT32),
    "nemotron_h": ModelType(
        "mamba2",
        nemotron_layers,
        "heads",
        "mamba_ssm_cache_dtype",
        sglang="config",
        float32_state=_HF_MAMBA2_FLOAT32,
    ),
    # attention and Mamba-2 side by side in every layer
    "falcon_h1": ModelType(
        "mamba2", all_layers, "d_ssm", sglang="config", float32_state=_HF_MAMBA2_FLOAT32
    ),
    "granitemoehybrid": ModelType("mamba2", granite_layers, float32_state=_HF_MAMBA2_FLOAT32),
    # every Zamba2 layer has a Mamba-2 mixer; "hybrid" layers add the shared attention
    "zamba2": ModelType("mamba2", all_layers, sglang=None, float32_state=_HF_MAMBA2_FLOAT32),
    "qwen3_next": ModelType(
        "gated_delta_net", qwen3_next_layers, sglang="config", float32_state=_HF_GDN_FLOAT32
    ),
    "qwen3_5_text": ModelType(
        "gated_delta_net",
        qwen3_next_layers,
        vllm_ssm_field="mamba_ssm_dtype",
        sglang="config",
        float32_state=_HF_GDN_FLOAT32,
    ),
    "qwen3_5_moe_text": ModelType(
        "gated_delta_net",
        qwen3_next_layers,
        vllm_ssm_field="mamba_ssm_dtype",
        sglang="config",
        float32_state=_HF_GDN_FLOAT32,
    ),
    "lfm2": ModelType("short_conv", lfm2_layers, sglang="config"),
    "lfm2_moe": ModelType("short_conv", lfm2_layers),
    # vLLM's GatedDeltaNet with gated_delta_net_state_shape/_dtype; SGLang 0.5.23 has no
    # OLMo-Hybrid model.
    "olmo_hybrid": ModelType(
        "gated_delta_net",
        olmo_hybrid_layers,
        sglang=None,
        float32_state=_HF_GDN_FLOAT32,
    ),
    "kimi_linear": ModelType(
        "kimi_delta_attention",
        kimi_layers,
        float32_state=_KDA_FLOAT32,
        refusals={"sglang+speculative": _SGLANG_KDA_DRAFTS},
    ),
    "bailing_hybrid": ModelType(
        "kimi_delta_attention",
        bailing_layers,
        vllm_layers=bailing_vllm_layers,
        float32_state=_KDA_FLOAT32,
        refusals={"sglang+speculative": _SGLANG_KDA_DRAFTS},
    ),
    # vLLM's _cca_state_shapes / _cca_state_dtypes: both tensors in the conv (model) dtype.
    "zaya": ModelType(
        "compressed_conv_attention",
        zaya_layers,
        refusals={
            "sglang": (
                "SGLang 0.5.23 sizes ZAYA1 from its own ZayaConfig (zaya_layers, per-layer head "
                "lists) and keeps the previous hidden state rather than the delayed values; "
                "that layout is not sized here"
            ),
            "vllm+speculative": "vLLM's ZayaForCausalLM refuses speculative decoding",
        },
    ),
}

#: Full-size configs shipped with the package, by name (``shipped_config``, ``plan --model``).
SHIPPED_MODELS: Final = (
    "falcon-h1-7b",
    "granite-4.0-h-small",
    "jamba-1.5-mini",
    "mamba2-2.7b",
    "nemotron-h-8b",
    "qwen3-next-80b-a3b",
)


def shipped_config(name: str) -> dict[str, object]:
    """The shipped ``config.json`` fields of a full-size model; ``_source`` says where from."""
    if name not in SHIPPED_MODELS:
        raise InvalidArgumentError(
            f"'name' must be one of {', '.join(SHIPPED_MODELS)}, got {shown(name)}"
        )
    package = resources.files("ssm_rollback")
    text = package.joinpath("configs", f"{name}.json").read_text("utf-8")
    data: dict[str, object] = json.loads(text)
    return data


# mamba_ssm's module defaults: Mamba(d_state=16, d_conv=4, expand=2) and
# Mamba2(d_state=128, d_conv=4, expand=2, headdim=64, ngroups=1).
_MAMBA_SSM_DEFAULTS: Final[Mapping[str, Mapping[str, int]]] = {
    "Mamba1": {"d_state": 16, "d_conv": 4, "expand": 2},
    "Mamba2": {"d_state": 128, "d_conv": 4, "expand": 2, "headdim": 64, "ngroups": 1},
}


def _from_mamba_ssm(data: Mapping[str, object]) -> Mapping[str, object]:
    """A ``mamba_ssm`` config (``d_model``, ``n_layer``, ``ssm_cfg``) in transformers' names."""
    cfg = data.get("ssm_cfg") or {}
    if not isinstance(cfg, Mapping):
        raise InvalidArgumentError(f"config field 'ssm_cfg' must be an object, got {shown(cfg)}")
    layer = cfg.get("layer", "Mamba1")
    if not isinstance(layer, str) or layer not in _MAMBA_SSM_DEFAULTS:
        raise InvalidArgumentError(
            f"config field 'ssm_cfg.layer' must be 'Mamba1' or 'Mamba2', got {shown(layer)}"
        )
    sizes = {**_MAMBA_SSM_DEFAULTS[layer], **cfg}
    out: dict[str, object] = {
        "hidden_size": data["d_model"],
        "num_hidden_layers": data["n_layer"],
        "attn_layer_idx": data.get("attn_layer_idx") or [],
        "expand": sizes["expand"],
        "conv_kernel": sizes["d_conv"],
        "state_size": sizes["d_state"],
    }
    if layer == "Mamba1":
        return {"model_type": "mamba", **out}
    heads, head_dim = sizes["expand"], sizes["headdim"]
    d_model = data["d_model"]
    if isinstance(heads, int) and isinstance(d_model, int) and isinstance(head_dim, int):
        heads = heads * d_model // head_dim if head_dim else heads
    return {
        "model_type": "mamba2",
        **out,
        "num_heads": heads,
        "head_dim": head_dim,
        "n_groups": sizes["ngroups"],
    }


#: Kimi's ``linear_attn_config`` keys, as KimiLinearConfig lifts them (they win).
_KIMI_LIFTED: Final = {
    "head_dim": "linear_head_dim",
    "num_heads": "linear_num_heads",
    "short_conv_kernel_size": "linear_conv_kernel_dim",
}


def _from_kimi_hub(data: Mapping[str, object]) -> Mapping[str, object]:
    """A Kimi-Linear Hub config's ``linear_attn_config`` in transformers' top-level names."""
    nested = data.get("linear_attn_config")
    if nested is None:
        return data
    if not isinstance(nested, Mapping):
        raise InvalidArgumentError(
            f"config field 'linear_attn_config' must be an object (kimi_linear), "
            f"got {shown(nested)}"
        )
    out = dict(data)
    for key, name in _KIMI_LIFTED.items():
        if nested.get(key) is not None:
            out[name] = nested[key]
    full, kda = nested.get("full_attn_layers"), nested.get("kda_layers")
    if data.get("layer_types") is None and isinstance(full, list) and isinstance(kda, list):
        count = data.get("num_hidden_layers")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_LAYERS:
            raise InvalidArgumentError(
                f"config field 'num_hidden_layers' must be an int in [1, {MAX_LAYERS}] "
                f"(kimi_linear), got {shown(count)}"
            )
        types: list[object] = [None] * count  # an unlisted layer is an unknown kind
        for names, kind in ((full, "full_attention"), (kda, "linear_attention")):
            for layer in names:  # 1-indexed in the checkpoint
                if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= count:
                    raise InvalidArgumentError(
                        f"config field 'linear_attn_config' must list layers in [1, {count}] "
                        f"(kimi_linear), got {shown(layer)}"
                    )
                types[layer - 1] = kind
        out["layer_types"] = types
    return out


def normalize(data: Mapping[str, object]) -> Mapping[str, object]:
    """The text model's config: VL wrappers unwrapped, ``mamba_ssm`` configs renamed."""
    model_type = data.get("model_type")
    if model_type is None and "d_model" in data and "n_layer" in data:
        return _from_mamba_ssm(data)
    if model_type == "kimi_linear":
        return _from_kimi_hub(data)
    text = data.get("text_config")
    known = isinstance(model_type, str) and model_type in MODEL_TYPES
    if not known and isinstance(text, Mapping):
        # A VL config nests the language model; its dtype may sit on the outer config.
        inherited = {k: data[k] for k in ("torch_dtype", "dtype") if data.get(k) is not None}
        return normalize({**inherited, **text})
    return data
