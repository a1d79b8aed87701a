"""The model types the tiny models cover, without importing ``transformers``.

The command line lists the demo's model types in ``--help`` before anything
heavy is imported, so the lists live here, apart from the model builder.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEMO_MODEL_TYPES", "TESTED_MODEL_TYPES"]

#: Model types whose tiny models the test suite rolls back bit for bit.
#: (``ssm-rollback demo`` offers its own list: the types with a causal-LM head.)
TESTED_MODEL_TYPES: Final = (
    "bailing_hybrid",
    "bamba",
    "falcon_h1",
    "falcon_mamba",
    "glm5_next_text",
    "granitemoehybrid",
    "inkling2_loop_text",
    "inkling2_text",
    "inkling_text",
    "jamba",
    "kimi_linear",
    "lara_mini",
    "lfm2",
    "lfm3",
    "mamba",
    "mamba2",
    "nemotron_h",
    "olmo_hybrid",
    "qwen3_5_moe_text",
    "qwen3_5_text",
    "qwen3_next",
    "qwen4_exp_text",
    "zamba",
    "zamba2",
    "zaya",
)

#: The model types the demo builds and decodes: the tested tiny models with a causal-LM
#: head. ``glm5_next_text`` is tested too but left out: transformers has no causal-LM
#: class for it (only a bare decoder), so there are no logits to sample from.
DEMO_MODEL_TYPES: Final = tuple(t for t in TESTED_MODEL_TYPES if t != "glm5_next_text")
