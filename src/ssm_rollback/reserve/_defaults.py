"""The ``transformers`` config-class defaults of the fields the shape rules read.

A config that leaves a mixer field out is sized with the value its model
type's ``transformers`` config class would give it (``NemotronHConfig()``'s
``n_groups`` is 8, not 1). The core never imports ``transformers``: the
table is written here and checked against the real classes by
``tests/test_reserve_defaults.py``. Layer counts, layer patterns and the
hidden size have no entry: a config without them does not describe a model.
Derived defaults (Falcon-H1's ``mamba_d_head="auto"``, Zamba2's head width,
Mamba's ``intermediate_size``) are computed where the shape rules read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["DEFAULTS"]

_MAMBA1: Final[Mapping[str, object]] = {"expand": 2, "conv_kernel": 4, "state_size": 16}
_GDN: Final[Mapping[str, object]] = {
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
}
_GRANITE_BAMBA: Final[Mapping[str, object]] = {
    "mamba_expand": 2,
    "mamba_d_conv": 4,
    "mamba_d_state": 256,
    "mamba_n_groups": 1,
    "mamba_n_heads": 128,
    "mamba_d_head": 64,
}

#: Model type -> field -> the config class's default (transformers 5).
DEFAULTS: Final[Mapping[str, Mapping[str, object]]] = {
    "mamba": _MAMBA1,  # MambaConfig
    "falcon_mamba": _MAMBA1,  # FalconMambaConfig
    "jamba": {  # JambaConfig
        "mamba_expand": 2,
        "mamba_d_conv": 4,
        "mamba_d_state": 16,
        "attn_layer_period": 8,
        "attn_layer_offset": 4,
    },
    "mamba2": {  # Mamba2Config
        "expand": 2,
        "conv_kernel": 4,
        "state_size": 128,
        "n_groups": 8,
        "num_heads": 128,
        "head_dim": 64,
    },
    "bamba": _GRANITE_BAMBA,  # BambaConfig
    "granitemoehybrid": _GRANITE_BAMBA,  # GraniteMoeHybridConfig
    "nemotron_h": {  # NemotronHConfig
        "expand": 2,
        "conv_kernel": 4,
        "ssm_state_size": 128,
        "n_groups": 8,
        "mamba_num_heads": 128,
        "mamba_head_dim": 64,
        "mamba_ssm_cache_dtype": "float32",
    },
    "falcon_h1": {  # FalconH1Config (mamba_d_head "auto": mamba_d_ssm // mamba_n_heads)
        "mamba_expand": 2,
        "mamba_d_conv": 4,
        "mamba_d_state": 256,
        "mamba_n_groups": 1,
        "mamba_n_heads": 128,
        "mamba_d_ssm": 1024,
    },
    "zamba2": {  # Zamba2Config (mamba_headdim: mamba_expand * hidden_size // n_mamba_heads)
        "mamba_expand": 2,
        "mamba_d_conv": 4,
        "mamba_d_state": 64,
        "mamba_ngroups": 1,
        "n_mamba_heads": 8,
    },
    # Qwen3NextConfig / Qwen3_5TextConfig / Qwen3_5MoeTextConfig: no interval field; their
    # layer_types default puts full attention at every 4th layer, as the layer rule assumes.
    "qwen3_next": _GDN,
    "qwen3_5_text": _GDN,
    "qwen3_5_moe_text": _GDN,
    "lfm2": {"conv_L_cache": 3},  # Lfm2Config
    "lfm2_moe": {"conv_L_cache": 3},  # Lfm2MoeConfig
    # OlmoHybridConfig: the head counts and dims default to None and are derived from
    # num_attention_heads and hidden_size (the shape rule computes them the same way).
    "olmo_hybrid": {"num_attention_heads": 30, "linear_conv_kernel_dim": 4},
    "kimi_linear": {  # KimiLinearConfig (linear_attn_config's keys win over these)
        "linear_num_heads": 32,
        "linear_head_dim": 128,
        "linear_conv_kernel_dim": 4,
    },
    # BailingHybridConfig copies head_dim (128), num_attention_heads and short_conv_kernel_size
    # into the linear_* fields, then reuses head_dim for the MLA rope width.
    "bailing_hybrid": {
        "linear_num_heads": 32,
        "linear_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "short_conv_kernel_size": 4,
        "layer_group_size": 6,
    },
    "zaya": {"num_key_value_heads": 2, "head_dim": 128, "cca_time0": 2, "cca_time1": 2},
}
