"""Tiny, randomly initialised hybrid models built from ``transformers`` configs (no downloads).

``tiny_config(model_type)`` starts from the model type's default config and
shrinks every size it knows (hidden size, heads, experts, SSM dims) and the
layer pattern to four layers that keep one of each layer kind, so that a
model builds and runs on a laptop CPU in well under a second;
``tiny_model(model_type, seed=...)`` builds one. The demo and the test
suite use these; nothing here downloads anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import torch
from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForCausalLM, PretrainedConfig
from transformers.cache_utils import get_layer_types_and_kwargs

from ._model_types import TESTED_MODEL_TYPES

__all__ = [
    "LINEAR_LAYER_TYPES",
    "TESTED_MODEL_TYPES",
    "TINY_OVERRIDES",
    "hybrid_model_types",
    "recurrent_layer_kinds",
    "tiny_config",
    "tiny_model",
]

#: Cache layer types of ``transformers`` that hold recurrent (conv / SSM) state.
LINEAR_LAYER_TYPES: Final = frozenset({"conv", "linear_attention", "hybrid", "hybrid_sliding"})

LAYERS: Final = 4


# Sizes shrunk wherever a config has the field.
_SMALL: Final[Mapping[str, int]] = {
    "vocab_size": 128,
    # Inkling2's LM head is this wide, not vocab_size: left at 200k, it samples ids the
    # embedding does not have.
    "unpadded_vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "attention_head_dim": 16,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "moe_shared_expert_intermediate_size": 32,
    "shared_intermediate_size": 32,
    "mamba_n_heads": 4,
    "mamba_num_heads": 4,
    "n_mamba_heads": 4,
    "mamba_d_head": 16,
    "mamba_head_dim": 16,
    "mamba_headdim": 16,
    "mamba_d_state": 16,
    "ssm_state_size": 16,
    "state_size": 16,
    "mamba_n_groups": 1,
    "n_groups": 1,
    "mamba_ngroups": 1,
    "mamba_expand": 1,
    "expand": 1,
    "mamba_d_ssm": 64,
    "mamba_chunk_size": 16,
    "chunk_size": 16,
    "mamba_dt_rank": 8,
    "time_step_rank": 8,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "num_mem_blocks": 1,
    "kv_channels": 16,
    "num_heads": 4,
    "num_query_groups": 4,
    "max_position_embeddings": 512,
}

#: Per-model-type settings on top of the generic shrink (fields the shrink cannot infer).
TINY_OVERRIDES: Final[Mapping[str, Mapping[str, object]]] = {
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["mamba", "attention", "mamba", "mamba"]},
    "jamba": {
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "use_mamba_kernels": False,
    },
    "nemotron_h": {
        "layers_block_type": ["mamba", "attention", "mamba", "moe"],
        "mamba_ssm_cache_dtype": "float32",
    },
    "zamba2": {
        "hybrid_layer_ids": [1, 3],
        "attention_hidden_size": 128,
        "use_mem_rope": False,
    },
    "zamba": {
        "attn_layer_period": 3,
        "attn_layer_offset": 2,
        "attention_hidden_size": 128,
        # two hybrid layers: the shared transformer's weights are tied across them
        "layers_block_type": [
            "linear_attention",
            "linear_attention",
            "hybrid",
            "linear_attention",
            "linear_attention",
            "hybrid",
        ],
    },
    "bailing_hybrid": {
        "num_experts_per_token": 2,
        "num_expert_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 1,
        "layer_group_size": 2,
        "num_nextn_predict_layers": 0,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "qk_head_dim": 16,
        "v_head_dim": 16,
        "linear_head_dim": 16,
        "linear_num_heads": 4,
    },
    "kimi_linear": {
        "num_experts_per_token": 2,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 16,
        "linear_head_dim": 16,
        "linear_num_heads": 4,
    },
    "glm5_next": {"num_key_value_heads": 4},
    "glm5_next_text": {"num_key_value_heads": 4},
    "zaya": {"num_experts_per_tok": 1},
    # LFM2's default config lists every layer as attention; the real models mix in short convs.
    "lfm2": {"layer_types": ["conv", "full_attention", "conv", "conv"]},
    "qwen4_exp_text": {
        "indexer_n_heads": 2,
        "indexer_kv_heads": 1,
        "indexer_head_dim": 16,
        "indexer_budget": 8,
        "indexer_compress_ratio": 1,
        "ple_embed_dim": 64,
        "heads_per_ngram": 2,
    },
}


def recurrent_layer_kinds(config: PretrainedConfig) -> list[str]:
    """The cache layer types ``transformers`` builds for ``config``, in layer order."""
    layer_types, _ = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    return list(layer_types)


def _short_pattern(pattern: list[object]) -> list[object]:
    """A ``LAYERS``-long pattern keeping every kind of ``pattern``, in first-seen order."""
    kinds = list(dict.fromkeys(pattern))
    if len(kinds) > LAYERS:
        return kinds
    if len(pattern) >= LAYERS and set(pattern[:LAYERS]) == set(kinds):
        return pattern[:LAYERS]
    filler = max(kinds, key=pattern.count)
    out = list(kinds)
    while len(out) < LAYERS:
        out.insert(0, filler)
    return out


def tiny_config(model_type: str, **overrides: object) -> PretrainedConfig:
    """A tiny config of ``model_type``: four layers, hidden size 64, vocab 128."""
    config = AutoConfig.for_model(model_type)
    values: dict[str, object] = {}
    text = config.get_text_config(decoder=True)
    fields = text.to_dict()
    for name, small in _SMALL.items():
        if name in fields and fields[name] is not None:
            values[name] = small
    for name in ("layer_types", "layers_block_type"):
        pattern = fields.get(name)
        if isinstance(pattern, list) and pattern:
            values[name] = _short_pattern(pattern)
    values["num_hidden_layers"] = LAYERS
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):  # must fit the small vocab
        token = fields.get(name)
        if isinstance(token, int) and token >= _SMALL["vocab_size"]:
            values[name] = _SMALL["vocab_size"] - 1
    values.update(TINY_OVERRIDES.get(model_type, {}))
    values.update(overrides)
    for name in ("layer_types", "layers_block_type"):
        pattern = values.get(name)
        if isinstance(pattern, list):
            values["num_hidden_layers"] = len(pattern)
    return AutoConfig.for_model(model_type, **values)


def tiny_model(model_type: str, *, seed: int = 0, **overrides: object) -> torch.nn.Module:
    """A causal LM of ``tiny_config(model_type, **overrides)`` in eval mode, its random weights
    drawn after ``torch.manual_seed(seed)`` (the caller's random state is left as it was)."""
    config = tiny_config(model_type, **overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model: torch.nn.Module = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    return model.eval()


def hybrid_model_types() -> list[str]:
    """Every model type of the installed ``transformers`` whose cache holds recurrent state.

    Found from the configs alone (no model is built): the types whose cache
    layer kinds include a linear-attention kind.
    """
    found = []
    for model_type in CONFIG_MAPPING:
        try:
            kinds = recurrent_layer_kinds(AutoConfig.for_model(model_type))
        except Exception:
            continue
        if LINEAR_LAYER_TYPES & set(kinds):
            found.append(model_type)
    return sorted(found)
