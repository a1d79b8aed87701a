"""Which dtype each state tensor gets, per layout: each engine's own rules.

Returns ``(dtype, rule)`` pairs; the rule is the sentence a spec shows so an
operator can see why a figure is what it is. The arguments mirror the
engines' knobs: ``dtype`` is the model dtype (vLLM ``--dtype``), ``conv_dtype``
vLLM's ``--mamba-cache-dtype`` / SGLang's ``SGLANG_MAMBA_CONV_DTYPE``,
``ssm_dtype`` vLLM's ``--mamba-ssm-cache-dtype`` / ``SGLANG_MAMBA_SSM_DTYPE``.
"""

from __future__ import annotations

from ._fields import Fields, dtype_name
from ._models import ModelType

__all__ = ["state_dtypes"]

Choice = tuple[str, str]


def _model_dtype(f: Fields, dtype: str | None, layout: str) -> Choice:
    if dtype is not None:
        return dtype_name(dtype, "dtype"), "the dtype argument"
    field = "torch_dtype" if f.str("torch_dtype") else "dtype"
    named = f.str(field)
    if layout == "vllm":
        # vLLM's _resolve_auto_dtype: dtype="auto" downcasts a float32 (or unnamed) config
        # to the platform's first supported dtype, bfloat16 on current GPUs.
        if named is None:
            return "bfloat16", "vLLM dtype='auto' (no config dtype: float32, run as bfloat16)"
        name = dtype_name(named, field, field=True)
        if name == "float32":
            return "bfloat16", f"vLLM dtype='auto' runs the config's float32 '{field}' as bfloat16"
        return name, f"vLLM dtype='auto': config '{field}'"
    if named is None:
        return "bfloat16", "no config dtype: bfloat16"
    return dtype_name(named, field, field=True), f"config '{field}'"


def state_dtypes(
    f: Fields,
    model: ModelType,
    layout: str,
    dtype: str | None,
    conv_dtype: str | None,
    ssm_dtype: str | None,
) -> tuple[Choice, Choice]:
    """``(conv, ssm)`` as ``(dtype, rule)`` for ``layout``."""
    if layout == "sglang":
        return _sglang(f, model, conv_dtype, ssm_dtype)
    fixed = model.float32_state.get(layout)
    if layout == "transformers":
        # transformers reads no cache-dtype field: the conv window is in the model's dtype, the
        # recurrent state in what the model type's scan hands the cache (float32_state).
        model_dtype = _model_dtype(f, dtype, layout)
        conv = _given(conv_dtype, "conv_dtype") or model_dtype
        state = ("float32", fixed) if fixed else model_dtype
        return conv, _given(ssm_dtype, "ssm_dtype") or state
    model_dtype = _model_dtype(f, dtype, layout)
    conv = _given(conv_dtype, "conv_dtype (vLLM --mamba-cache-dtype)") or model_dtype
    ssm = _given(ssm_dtype, "ssm_dtype (vLLM --mamba-ssm-cache-dtype)")
    if ssm is None and fixed:
        ssm = "float32", fixed
    if ssm is None and model.vllm_ssm_field is not None:
        field = model.vllm_ssm_field
        named = f.str(field)  # falls back to the config class's default (Nemotron-H: float32)
        if named is not None:
            source = "config" if f.has(field) else "the transformers config-class default of"
            ssm = dtype_name(named, field, field=True), f"vLLM: {source} '{field}'"
    if ssm is None:
        ssm = conv[0], "vLLM mamba_ssm_cache_dtype='auto': follows the conv state"
    return conv, ssm


def _given(value: str | None, source: str) -> Choice | None:
    if value is None:
        return None
    return dtype_name(value, source.split(" ")[0]), f"the {source} argument"


def _sglang(
    f: Fields, model: ModelType, conv_dtype: str | None, ssm_dtype: str | None
) -> tuple[Choice, Choice]:
    # mamba2_state_dtype(): conv from SGLANG_MAMBA_CONV_DTYPE (default bfloat16, whatever
    # the model dtype); SSM float32, else the config's mamba_ssm_dtype (only for model types
    # that pass their config), else SGLANG_MAMBA_SSM_DTYPE, which beats both.
    conv = _given(conv_dtype, "conv_dtype (SGLANG_MAMBA_CONV_DTYPE)") or (
        "bfloat16",
        "SGLang default (SGLANG_MAMBA_CONV_DTYPE unset)",
    )
    ssm = _given(ssm_dtype, "ssm_dtype (SGLANG_MAMBA_SSM_DTYPE)")
    if ssm is None and model.sglang == "config" and f.has("mamba_ssm_dtype"):
        named = f.str("mamba_ssm_dtype")
        assert named is not None  # f.has said so
        ssm = dtype_name(named, "mamba_ssm_dtype", field=True), "SGLang: config 'mamba_ssm_dtype'"
    return conv, ssm or ("float32", "SGLang default (SGLANG_MAMBA_SSM_DTYPE unset)")
