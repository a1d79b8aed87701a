"""A tiny random Nemotron-H (attention + Mamba2) and a word-level tokenizer, saved locally."""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 256
#: Mamba, attention, Mamba, MLP: every kind of layer the connector must carry.
PATTERN = "M*M-"


def build(directory: Path, *, pattern: str = PATTERN) -> Path:
    """Save the model and its tokenizer under ``directory``; no download."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, NemotronHConfig, PreTrainedTokenizerFast

    torch.manual_seed(0)
    config = NemotronHConfig.from_dict(
        {
            "vocab_size": VOCAB,
            "hidden_size": 64,
            "num_hidden_layers": len(pattern),
            "hybrid_override_pattern": pattern,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "attention_head_dim": 32,
            "intermediate_size": 128,
            "mamba_num_heads": 4,
            "mamba_head_dim": 32,
            "n_groups": 1,
            "ssm_state_size": 16,
            "conv_kernel": 4,
            "expand": 1,
            "chunk_size": 64,
            "max_position_embeddings": 2048,
            "tie_word_embeddings": False,
            "eos_token_id": VOCAB - 1,
            "bos_token_id": 0,
            "pad_token_id": 0,
        }
    )
    model = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    model.save_pretrained(directory)
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="t1"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer, bos_token="t0", eos_token=f"t{VOCAB - 1}", unk_token="t1"
    )
    fast.save_pretrained(directory)
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": VOCAB - 1}))
    return directory


if __name__ == "__main__":
    build(Path(sys.argv[1]))
