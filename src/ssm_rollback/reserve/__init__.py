"""How many snapshot slots each sequence gets: state sizes from model configs, depth from memory.

Two questions a scheduler answers before it allocates anything:

1. *How big is one snapshot?* ``state_spec_from_hf_config`` reads a Hugging
   Face ``config.json`` and lists every SSM layer's state tensors per
   sequence, laid out as an engine stores them: ``layout="vllm"`` (the
   default; ``"engine"`` is its old name) and ``"sglang"`` reproduce those
   engines' allocations per rank, dtypes included; ``"transformers"`` is what
   its caches hold (``conv_kernel`` columns, one rank). With
   ``num_speculative_tokens`` the spec also lists what each engine adds for
   speculative decoding, apart from the slot.
2. *How many can it afford?* ``decode_rollback_ring_slots`` turns free memory
   into a ring depth: the speculative buffers and the shared prefix slots
   (``prefix_slots``, one snapshot each) first, then ``fit = rest //
   (max_sequences * bytes_per_snapshot)``, ``slots = min(max_slots, fit)``;
   a ``--ring-slots`` flag (``override``) beats the
   ``SSM_ROLLBACK_RING_SLOTS`` variable, which beats the policy.

Modules: ``_spec`` (the values), ``_fields`` (reading configs), ``_defaults``
(the ``transformers`` class defaults), ``_layers`` and ``_models`` (which
layers, per model type), ``_families`` (shape rules per mixer family),
``_dtypes`` (each engine's dtype rules), ``_depth`` (the policy). The core
never imports torch or transformers: dtypes are names (``"bfloat16"``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final, get_args

from .._errors import InvalidArgumentError, check_non_negative_int, shown
from ._defaults import DEFAULTS
from ._depth import DEFAULT_MAX_SLOTS, ENV_VAR, DepthRule, RingDepth, decode_rollback_ring_slots
from ._dtypes import state_dtypes
from ._families import FAMILIES, layer_tensors
from ._fields import Fields, check_positive, load
from ._layers import num_layers
from ._models import MODEL_TYPES, SHIPPED_MODELS, normalize, shipped_config
from ._spec import Layout, SsmLayerSpec, SsmStateSpec, StateTensorSpec, oversized

__all__ = [
    "DEFAULT_MAX_SLOTS",
    "ENV_VAR",
    "LAYOUTS",
    "SHIPPED_MODELS",
    "SUPPORTED_MODEL_TYPES",
    "DepthRule",
    "RingDepth",
    "SsmLayerSpec",
    "SsmStateSpec",
    "StateTensorSpec",
    "decode_rollback_ring_slots",
    "shipped_config",
    "state_spec_from_hf_config",
]

#: The model types ``state_spec_from_hf_config`` knows.
SUPPORTED_MODEL_TYPES: Final = tuple(sorted(MODEL_TYPES))
#: The layouts ``state_spec_from_hf_config`` takes (``"engine"`` means ``"vllm"``).
LAYOUTS: Final[tuple[str, ...]] = get_args(Layout)


def config_fields(config: Mapping[str, object] | str | os.PathLike[str]) -> Fields:
    """The config's fields as sizing reads them: normalised, with the model type's defaults.

    For code that splits state the way sizing sized it (the tensor-parallel
    shard helpers): a field the config leaves out takes the same
    ``transformers`` class default here as in ``state_spec_from_hf_config``.
    Not part of the public surface.
    """
    data = normalize(load(config))
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
        raise InvalidArgumentError(
            f"config field 'model_type' must be one of {', '.join(SUPPORTED_MODEL_TYPES)}, "
            f"got {shown(model_type)}"
        )
    return Fields(data, model_type, DEFAULTS.get(model_type, {}))


def state_spec_from_hf_config(
    config: Mapping[str, object] | str | os.PathLike[str],
    *,
    tp_size: int = 1,
    dtype: str | None = None,
    layout: Layout = "vllm",
    conv_dtype: str | None = None,
    ssm_dtype: str | None = None,
    num_speculative_tokens: int = 0,
) -> SsmStateSpec:
    """Every SSM layer's state tensors per sequence, from a Hugging Face ``config.json``.

    ``config`` is the parsed JSON or a path to it (or to its folder); a VL
    config's ``text_config`` and a ``mamba_ssm`` config (``d_model``,
    ``n_layer``, ``ssm_cfg``) are read too. ``dtype`` is the model dtype
    (default: the config's, as the layout's engine resolves it);
    ``conv_dtype`` and ``ssm_dtype`` override the state dtypes as the
    engine's own knobs do. Each tensor's ``dtype_rule`` names the rule that
    chose it. ``num_speculative_tokens`` sizes the engine's speculative
    buffers (``spec.speculative_bytes_per_sequence``). A missing mixer field
    takes the model type's ``transformers`` config-class default. Unknown
    model types, a layout that does not serve the model type, a
    ``tp_size`` that does not divide the heads and degenerate values raise
    ``InvalidArgumentError`` naming the field: no config yields a zero or
    negative byte count, nor one past 2**50 bytes (1 PiB) per sequence, the
    snapshot or the speculative buffers (a size field past 2**50 is named
    itself).
    """
    data = normalize(load(config))
    tp = check_positive("tp_size", tp_size)
    drafts = check_non_negative_int("num_speculative_tokens", num_speculative_tokens)
    if layout not in LAYOUTS:
        raise InvalidArgumentError(
            f"'layout' must be one of {', '.join(map(repr, LAYOUTS))}, got {shown(layout)}"
        )
    resolved = "vllm" if layout == "engine" else layout
    if resolved == "transformers" and tp != 1:
        raise InvalidArgumentError(
            f"'tp_size' must be 1 for layout 'transformers' (its caches hold one rank), got {tp}"
        )
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
        raise InvalidArgumentError(
            f"config field 'model_type' must be one of {', '.join(SUPPORTED_MODEL_TYPES)}, "
            f"got {shown(model_type)}"
        )
    model = MODEL_TYPES[model_type]
    if resolved == "sglang" and model.sglang is None:
        raise InvalidArgumentError(
            f"'layout' 'sglang' does not serve model type {shown(model_type)} (SGLang has no "
            f"hybrid state pool for it); use 'vllm' or 'transformers'"
        )
    for refused in (resolved, f"{resolved}+speculative") if drafts else (resolved,):
        if refused in model.refusals:
            raise InvalidArgumentError(
                f"'layout' {shown(resolved)} is not sized for model type {shown(model_type)}"
                f"{' with num_speculative_tokens' if '+' in refused else ''}: "
                f"{model.refusals[refused]}"
            )
    f = Fields(data, model_type, DEFAULTS.get(model_type, {}))
    # The pattern's own faults (an unknown kind, no SSM layer) say more than its length.
    layer_rule = model.vllm_layers if resolved == "vllm" and model.vllm_layers else model.layers
    layers = layer_rule(f)
    if not layers:
        raise InvalidArgumentError(
            f"config has no SSM layers ({model_type}): a pure-attention model needs no snapshots"
        )
    count = num_layers(f)
    conv, ssm = state_dtypes(f, model, resolved, dtype, conv_dtype, ssm_dtype)
    shape = FAMILIES[model.kind](f, tp, model.width)
    tensors, speculative = layer_tensors(shape, resolved, conv, ssm, drafts)
    spec = SsmStateSpec(
        model_type=model_type,
        layout=resolved,
        tp_size=tp,
        num_layers=count,
        layers=tuple(SsmLayerSpec(i, model.kind, tensors, speculative) for i in layers),
        num_speculative_tokens=drafts,
    )
    # The per-field bound names one absurd field; this catches a product of several, and
    # more draft tokens than any engine could allocate buffers for.
    oversize = oversized(spec)
    if oversize is not None:
        what, problem = oversize
        name = "'num_speculative_tokens'" if what == "speculative" else "config"
        raise InvalidArgumentError(f"{name} gives {problem} ({model_type})")
    return spec
