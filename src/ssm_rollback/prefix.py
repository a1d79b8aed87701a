"""Where to share a prompt's SSM state: positions for ``PrefixSnapshotIndex.plan_prefill``.

A hit is only as good as the positions that were published: the index
restores the state after *exactly* ``tokens[:length]``, so a snapshot helps
a later request only if it lies at or before the point where the two
prompts diverge. ``every`` and ``before_end`` are generic; ``app`` is the
rule of an application that knows its message boundaries (SPEC 13); the
engine rules reproduce, for comparison, where vLLM, SGLang, TensorRT-LLM and
llama.cpp place their snapshots by default. Every helper returns the
positions inside a prompt of ``length`` tokens (ascending, each in
``[1, length)``), ready for ``publish_at``; a position at the prompt end or
later is a decode-time ``publish``, which each engine rule's docstring
states in words.

The engine rules model one request per scheduler step and place snapshots
only; the index (its capacity and eviction) decides what is kept, the same
for every rule. Each docstring cites the upstream code it follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ._core.columns import int_column
from ._core.prefix import (
    EVICTIONS,
    Eviction,
    PrefillChunk,
    PrefillPlan,
    PrefixEntry,
    PrefixHit,
    PrefixHold,
    PrefixSnapshotIndex,
    PrefixStats,
)
from ._errors import InvalidArgumentError, check_non_negative_int, grouped, shown

__all__ = [
    "EVICTIONS",
    "LLAMACPP_TAIL",
    "SGLANG_CHUNKED_PREFILL_SIZE",
    "TRTLLM_INTERVAL",
    "TRTLLM_TOKENS_PER_BLOCK",
    "VLLM_BLOCK_SIZE",
    "VLLM_MAX_NUM_BATCHED_TOKENS",
    "Eviction",
    "PrefillChunk",
    "PrefillPlan",
    "PrefixEntry",
    "PrefixHit",
    "PrefixHold",
    "PrefixSnapshotIndex",
    "PrefixStats",
    "app",
    "before_end",
    "every",
    "llamacpp",
    "sglang",
    "trtllm",
    "vllm_align",
]

#: vLLM's hybrid block size is derived from the model (attention pages are padded to
#: the Mamba state's page); 528 is what it picks for Qwen3.5-4B (vLLM issue #40696),
#: one of the smaller values reported, so the rule is not handicapped by a coarse grid.
VLLM_BLOCK_SIZE: Final = 528
#: vLLM's scheduler token budget per step for online serving on large GPUs.
VLLM_MAX_NUM_BATCHED_TOKENS: Final = 8192
#: SGLang's ``--chunked-prefill-size`` default on H100/H200-class GPUs (``server_args.py``).
SGLANG_CHUNKED_PREFILL_SIZE: Final = 8192
#: TensorRT-LLM ships ``periodic_snapshot_interval=0`` (no hybrid reuse at all); 256 is
#: the interval its deployment guide configures for a hybrid model and the one its
#: chunk-point tests call the current default.
TRTLLM_INTERVAL: Final = 256
#: ``KvCacheConfig.tokens_per_block`` default.
TRTLLM_TOKENS_PER_BLOCK: Final = 32
#: llama.cpp's server processes the last 64 prompt tokens as a batch of their own so
#: that a context checkpoint exists 64 tokens before the prompt end.
LLAMACPP_TAIL: Final = 64
#: The longest prompt the rules place in (2**25 tokens, past every model's context): a
#: longer length is a mistake, and would list or step through billions of positions.
MAX_LENGTH: Final = 1 << 25


def every(n: int, length: int) -> tuple[int, ...]:
    """Every ``n`` tokens: ``n, 2n, ...`` below ``length``."""
    n = _at_least("n", n, 1)
    length = _length(length)
    return tuple(range(n, length, n))


def before_end(m: int, length: int) -> tuple[int, ...]:
    """``m`` tokens before the prompt end: ``length - m``, if that is at least 1."""
    m = _at_least("m", m, 1)
    length = _length(length)
    return (length - m,) if length - m >= 1 else ()


def app(length: int, *, message_ends: Sequence[int]) -> tuple[int, ...]:
    """The application's rule: where requests diverge, which only it knows (SPEC 13).

    The end of every message in the prompt (the system prompt and tool
    schemas included: they are messages) and the prompt end minus one token,
    the longest prefix a regenerated or best-of-n request can reuse (a hit
    leaves one token to compute). The application also publishes the end of
    each output during decode: the live state once the last sampled token is
    known, before it is fed (``length + output - 1``).
    """
    length = _length(length)
    ends = int_column("message_ends", message_ends)
    if ends and max(ends) > length:
        raise InvalidArgumentError(
            f"'message_ends' must hold positions <= length {length}, got {shown(max(ends))}"
        )
    return tuple(sorted({end for end in ends if 1 <= end < length} | set(before_end(1, length))))


def vllm_align(
    length: int,
    *,
    start: int = 0,
    block_size: int = VLLM_BLOCK_SIZE,
    max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS,
) -> tuple[int, ...]:
    """vLLM ``mamba_cache_mode="align"``: block-aligned ends of scheduler steps.

    From ``start`` (the prefix hit), vLLM feeds the prompt in steps of at most
    ``max_num_batched_tokens``, cut to a multiple of ``block_size`` while the
    step ends before the last block boundary of the prompt, and forced to end
    on that boundary when it would cross it; only a step that ends on a block
    boundary keeps its state (``Scheduler._mamba_block_aligned_split`` in
    ``vllm/v1/core/sched/scheduler.py``; ``CacheConfig.mamba_cache_mode`` in
    ``vllm/config/cache.py``: "only cache the mamba state of the last token
    of each scheduler step and when the token is at position i *
    block_size"; vLLM 0.16 and later, align mode since PR #30877). A prompt
    within one step's budget thus keeps one state, at its last block
    boundary - often inside request-unique tokens (vLLM #45238; RFC #55697
    asks for application-chosen positions instead).
    During decode, vLLM also keeps the state at each block boundary the
    output crosses (PR #30877), the prompt end included when it is one.
    """
    length = _length(length)
    start = _start(start, length)
    block_size = _at_least("block_size", block_size, 1)
    budget = _at_least("max_num_batched_tokens", max_num_batched_tokens, block_size)
    last = length - length % block_size
    positions = []
    done = start
    while done < length:
        step = min(budget, length - done)
        if done + step < last:
            step = step // block_size * block_size
        elif done < last < done + step:
            step = last - done
        done += step
        if done % block_size == 0 and done < length:
            positions.append(done)
    return tuple(positions)


def sglang(
    length: int, *, start: int = 0, chunked_prefill_size: int = SGLANG_CHUNKED_PREFILL_SIZE
) -> tuple[int, ...]:
    """SGLang ``MambaRadixCache``: the end of every chunk of a chunked prefill.

    From ``start``, SGLang prefills in chunks of ``chunked_prefill_size`` and
    caches the Mamba state at each chunk end (``cache_unfinished_req`` with
    ``chunked=True`` in ``python/sglang/srt/mem_cache/mamba_radix_cache.py``);
    after the prefill it caches the state at the prompt end, and when the
    request finishes the state after everything fed, ``length + output - 1``
    (``cache_finished_req``; SGLang 0.5). Neither end helps a regenerated prompt, whose
    longest reusable prefix is ``length - 1`` (SGLang #21158).
    """
    length = _length(length)
    start = _start(start, length)
    chunk = _at_least("chunked_prefill_size", chunked_prefill_size, 1)
    return tuple(range(start + chunk, length, chunk))


def trtllm(
    length: int,
    *,
    periodic_snapshot_interval: int = TRTLLM_INTERVAL,
    offsets_from_start: Sequence[int] = (),
    offsets_from_end: Sequence[int] = (),
    tokens_per_block: int = TRTLLM_TOKENS_PER_BLOCK,
    save_last: bool = True,
) -> tuple[int, ...]:
    """TensorRT-LLM ``MambaStateConfig``: a periodic interval plus offsets, in the prompt only.

    Every ``periodic_snapshot_interval`` tokens, each offset from the prompt
    start, each offset back from the prompt end (0: the prompt end), and,
    with ``save_last``, the last block boundary a duplicate prompt can reach
    (``(length - 1) // tokens_per_block * tokens_per_block``):
    ``prepare_expect_snapshot_points`` in
    ``tensorrt_llm/_torch/pyexecutor/mamba_cache_manager.py``; field
    defaults in the ``MambaStateConfig`` reference (1.3 and 1.4 releases).
    An interval of 0 with no offsets places nothing (TensorRT-LLM then
    turns hybrid reuse off). Nothing is placed during decode; the
    ``per_conversation`` reuse policy keeps one record per conversation
    (PR #18272), a retention rule the shared index replaces here.
    """
    length = _length(length)
    interval = check_non_negative_int("periodic_snapshot_interval", periodic_snapshot_interval)
    starts = int_column("offsets_from_start", offsets_from_start)
    ends = int_column("offsets_from_end", offsets_from_end)
    block = _at_least("tokens_per_block", tokens_per_block, 1)
    if type(save_last) is not bool:
        raise InvalidArgumentError(f"'save_last' must be True or False, got {shown(save_last)}")
    points = set(range(interval, length + 1, interval)) if interval else set()
    points.update(offset for offset in starts if offset <= length)
    points.update(length - offset for offset in ends if length - offset > 0)
    if save_last and interval:
        points.add((length - 1) // block * block)
    return tuple(sorted(p for p in points if 1 <= p < length))


def llamacpp(length: int, *, start: int = 0, tail: int = LLAMACPP_TAIL) -> tuple[int, ...]:
    """llama.cpp's server context checkpoints: the prompt end minus ``tail`` tokens.

    The server stops the prompt batch ``tail`` (64) tokens before the end, so
    that a checkpoint of the state there is taken before the last batch runs,
    when the state holds more than 64 tokens (``update_slots`` in
    ``tools/server/server-context.cpp``, the server of the builds with
    ``--ctx-checkpoints``); a slot keeps up to 32 (that flag's default), a
    retention rule the shared index replaces here. When the hit already
    reaches past that point, no checkpoint is new. Nothing is placed during
    decode.
    """
    length = _length(length)
    start = _start(start, length)
    tail = _at_least("tail", tail, 1)
    point = length - tail
    return (point,) if point > max(start, 64) else ()


def _length(length: int) -> int:
    length = check_non_negative_int("length", length)
    if length > MAX_LENGTH:
        raise InvalidArgumentError(
            f"'length' must be at most {MAX_LENGTH:,} tokens (a prompt's length), got "
            f"{grouped(length)}"
        )
    return length


def _at_least(name: str, value: int, least: int) -> int:
    value = check_non_negative_int(name, value)
    if value < least:
        raise InvalidArgumentError(f"'{name}' must be an int >= {shown(least)}, got {shown(value)}")
    return value


def _start(start: int, length: int) -> int:
    start = check_non_negative_int("start", start)
    if start > length:
        raise InvalidArgumentError(f"'start' must be <= length {length}, got {shown(start)}")
    return start
