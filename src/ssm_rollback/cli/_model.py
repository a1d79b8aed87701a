"""The model flags that ``plan`` and ``simulate`` share, and the state spec they name."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Final

from ._common import FlagError, int_flag, one_line, read_json_file

if TYPE_CHECKING:
    from ..reserve import SsmStateSpec

__all__ = ["MODEL_FLAGS", "add_model_arguments", "load_spec"]

#: The library's parameter names for what these flags set, for error messages.
MODEL_FLAGS: Final = {"tp_size": "--tp", "dtype": "--dtype", "layout": "--layout"}


def add_model_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    from ..reserve import SHIPPED_MODELS

    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--config", metavar="PATH", help="a Hugging Face config.json")
    source.add_argument("--model", choices=SHIPPED_MODELS, help="a shipped full-size config")
    parser.add_argument(
        "--tp", type=int_flag(1), default=1, help="tensor-parallel ranks (default 1)"
    )
    parser.add_argument("--dtype", default=None, help="state dtype (default: the config's)")
    parser.add_argument(
        "--layout",
        choices=["engine", "transformers"],
        default="engine",
        help="how the state is stored (default engine: vLLM / SGLang)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def load_spec(args: argparse.Namespace) -> tuple[str, SsmStateSpec]:
    """The model's name and state spec; ``args.source`` names the flag that chose the config."""
    from ..reserve import shipped_config, state_spec_from_hf_config

    if args.config is not None:
        args.source = f"--config {args.config}"
        config = read_json_file("--config", args.config, directory_file="config.json")
        if not isinstance(config, dict):
            raise FlagError("--config", f"{args.config!r} must hold a JSON object")
        name = one_line(args.config)  # printed: no surrogates from a non-UTF-8 file name
    else:
        args.source = f"--model {args.model}"
        config, name = shipped_config(args.model), args.model
    spec = state_spec_from_hf_config(config, tp_size=args.tp, dtype=args.dtype, layout=args.layout)
    return name, spec
