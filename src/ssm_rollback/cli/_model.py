"""The model flags that ``plan`` and ``simulate`` share, and the state spec they name."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Final

from .._errors import shown
from ._common import FlagError, int_flag, one_line
from ._files import read_json_file

if TYPE_CHECKING:
    from ..reserve import SsmStateSpec

__all__ = ["MODEL_FLAGS", "add_model_arguments", "load_spec"]

#: The library's parameter names for what these flags set, for error messages.
MODEL_FLAGS: Final = {
    "tp_size": "--tp",
    "dtype": "--dtype",
    "layout": "--layout",
    "conv_dtype": "--conv-dtype",
    "ssm_dtype": "--ssm-dtype",
    "num_speculative_tokens": "--spec-tokens",
}


def add_model_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    from ..reserve import SHIPPED_MODELS

    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--config", metavar="PATH", help="a Hugging Face config.json")
    source.add_argument("--model", choices=SHIPPED_MODELS, help="a shipped full-size config")
    parser.add_argument(
        "--tp", type=int_flag(1), default=1, help="tensor-parallel ranks (default 1)"
    )
    parser.add_argument(
        "--dtype", default=None, help="model dtype (default: the config's, as the engine reads it)"
    )
    parser.add_argument(
        "--layout",
        choices=["vllm", "sglang", "transformers", "engine"],
        default="vllm",
        help="whose allocation to size (default vllm; engine is its old name)",
    )
    parser.add_argument(
        "--conv-dtype",
        default=None,
        metavar="DTYPE",
        help="conv state dtype (vLLM --mamba-cache-dtype, SGLANG_MAMBA_CONV_DTYPE)",
    )
    parser.add_argument(
        "--ssm-dtype",
        default=None,
        metavar="DTYPE",
        help="SSM state dtype (vLLM --mamba-ssm-cache-dtype, SGLANG_MAMBA_SSM_DTYPE)",
    )
    parser.add_argument(
        "--spec-tokens",
        type=int_flag(0),
        default=0,
        metavar="K",
        help="draft tokens per step: add the engine's speculative buffers (default 0)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def load_spec(args: argparse.Namespace) -> tuple[str, SsmStateSpec]:
    """The model's name and state spec; ``args.source`` names the flag that chose the config."""
    from ..reserve import shipped_config, state_spec_from_hf_config

    if args.config is not None:
        args.source = f"--config {args.config}"
        config = read_json_file("--config", args.config, directory_file="config.json")
        if not isinstance(config, dict):
            raise FlagError("--config", f"{shown(args.config)} must hold a JSON object")
        name = one_line(args.config)  # printed: no surrogates from a non-UTF-8 file name
    else:
        args.source = f"--model {args.model}"
        config, name = shipped_config(args.model), args.model
    spec = state_spec_from_hf_config(
        config,
        tp_size=args.tp,
        dtype=args.dtype,
        layout=args.layout,
        # getattr: a parser built before these flags existed still loads a spec
        conv_dtype=getattr(args, "conv_dtype", None),
        ssm_dtype=getattr(args, "ssm_dtype", None),
        num_speculative_tokens=getattr(args, "spec_tokens", 0),
    )
    return name, spec
