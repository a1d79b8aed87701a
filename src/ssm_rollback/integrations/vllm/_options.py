"""The connector's configuration and the engines it refuses; no vLLM import here."""

from __future__ import annotations

from collections.abc import Mapping

from ..._core.prefix import MAX_CAPACITY
from ..._errors import InvalidArgumentError, check_non_negative_int, describe, grouped, shown
from ._scheduler import RequestOptions
from ._store import LayerGroup

__all__ = [
    "DEFAULT_PREFIX_SLOTS",
    "UnsupportedEngineError",
    "check_engine",
    "options_of",
    "prefix_slots",
    "request_options",
]

#: Shared slots when ``kv_connector_extra_config`` names no ``prefix_slots``.
DEFAULT_PREFIX_SLOTS = 16


class UnsupportedEngineError(InvalidArgumentError):
    """The engine's configuration or KV cache layout is one the connector cannot serve.

    Raised when the engine starts, before any request runs; the message names
    the setting.
    """


def prefix_slots(extra: Mapping[str, object] | None) -> int:
    """``kv_connector_extra_config["prefix_slots"]``: the number of shared slots (the only key
    it takes: another is a typo that would leave the default in place without a word)."""
    unknown = sorted(map(str, set(extra or {}) - {"prefix_slots"}))
    if unknown:
        raise UnsupportedEngineError(
            f"'kv_connector_extra_config' takes 'prefix_slots' only, got {shown(unknown)}"
        )
    value = (extra or {}).get("prefix_slots", DEFAULT_PREFIX_SLOTS)
    slots = check_non_negative_int("prefix_slots", value)
    if slots > MAX_CAPACITY:
        raise UnsupportedEngineError(
            f"'prefix_slots' must be at most {MAX_CAPACITY:,} (each holds a whole SSM state), "
            f"got {grouped(slots)}"
        )
    return slots


def options_of(params: Mapping[str, object] | None, *, shared: bool) -> RequestOptions:
    """What a request may do with shared prefixes: its ``request_options``, or neither load nor
    publish when it is not ``shared`` (a LoRA adapter's or a salted request's state is not
    the base model's, nor another tenant's; a request fed ``prompt_embeds`` has no ids of
    its own). A malformed ``kv_transfer_params`` raises (the
    connector then serves the request without shared prefixes: one request's mistake must
    not stop the engine)."""
    options = request_options(params)
    return options if shared else RequestOptions(load=False, publish=False)


def request_options(params: Mapping[str, object] | None) -> RequestOptions:
    """A request's ``kv_transfer_params["ssm_rollback"]``: ``load`` and ``publish`` (bools)."""
    given = (params or {}).get("ssm_rollback", {})
    if not isinstance(given, Mapping):
        raise InvalidArgumentError(
            f"'kv_transfer_params[\"ssm_rollback\"]' must be a dict, got {describe(given)}"
        )
    unknown = set(given) - {"load", "publish"}
    if unknown:
        raise InvalidArgumentError(
            f"'kv_transfer_params[\"ssm_rollback\"]' takes 'load' and 'publish', "
            f"got {sorted(map(str, unknown))}"
        )
    flags = {}
    for name in ("load", "publish"):
        value = given.get(name, True)
        if type(value) is not bool:
            raise InvalidArgumentError(f"'{name}' must be True or False, got {describe(value)}")
        flags[name] = value
    return RequestOptions(load=flags["load"], publish=flags["publish"])


def _setting(config: object, path: str) -> object:
    value = config
    for part in path.split("."):
        value = getattr(value, part, None)
    return value


def check_engine(
    vllm_config: object, kv_cache_config: object, kinds: tuple[type, type]
) -> tuple[LayerGroup, ...]:
    """The KV cache groups, or ``UnsupportedEngineError`` naming what cannot be served.

    ``kinds`` are vLLM's full-attention and Mamba spec classes (passed in, so
    this module imports no vLLM).
    """
    attention, mamba = kinds
    role = _setting(vllm_config, "kv_transfer_config.kv_role")
    if role != "kv_both":
        raise UnsupportedEngineError(f"'kv_role' must be 'kv_both', got {shown(role)}")
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        size = _setting(vllm_config, f"parallel_config.{name}")
        if size not in (None, 1):
            raise UnsupportedEngineError(f"'{name}' must be 1 (one worker), got {shown(size)}")
    if _setting(vllm_config, "speculative_config") is not None:
        raise UnsupportedEngineError(
            "'speculative_config' must be None: speculative decoding keeps the running SSM "
            "state in one of several blocks per request, which the connector does not track"
        )
    if _setting(vllm_config, "cache_config.enable_prefix_caching"):
        raise UnsupportedEngineError(
            "'enable_prefix_caching' must be False: the connector is the prefix cache "
            "(vLLM's Mamba cache mode 'align' moves states the connector does not track)"
        )
    groups = []
    for number, group in enumerate(getattr(kv_cache_config, "kv_cache_groups", ())):
        spec = group.kv_cache_spec
        layers = tuple(group.layer_names)
        if type(spec) is attention and getattr(spec, "sliding_window", None) is None:
            groups.append(LayerGroup(layers, False, int(getattr(spec, "block_size", 0))))
        elif type(spec) is mamba and getattr(spec, "mamba_cache_mode", "none") == "none":
            groups.append(LayerGroup(layers, True, int(getattr(spec, "block_size", 0))))
        else:
            raise UnsupportedEngineError(
                f"KV cache group {number} ({type(spec).__name__}, layers {list(layers)[:3]}) "
                "is neither full attention nor Mamba state without prefix caching"
            )
    if not groups:
        raise UnsupportedEngineError("'kv_cache_config' has no KV cache groups")
    return tuple(groups)
