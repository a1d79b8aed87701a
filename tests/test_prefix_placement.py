"""``ssm_rollback.prefix``: the placement helpers, rule by rule, on small examples."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_rollback import InvalidArgumentError, PrefixSnapshotIndex, prefix
from ssm_rollback.prefix import (
    app,
    before_end,
    every,
    llamacpp,
    sglang,
    trtllm,
    vllm_align,
)


def test_every_n_tokens_below_the_prompt_end() -> None:
    assert every(4, 10) == (4, 8)
    assert every(5, 10) == (5,)
    assert every(1, 3) == (1, 2)
    assert every(3, 0) == ()


def test_before_end_is_one_position_when_it_lies_in_the_prompt() -> None:
    assert before_end(1, 10) == (9,)
    assert before_end(64, 200) == (136,)
    assert before_end(10, 10) == ()
    assert before_end(1, 1) == ()


def test_app_marks_every_message_end_and_the_prompt_end_minus_one() -> None:
    assert app(100, message_ends=[10, 50, 100]) == (10, 50, 99)
    assert app(100, message_ends=(50, 10, 10, 0)) == (10, 50, 99)  # any order, duplicates
    assert app(100, message_ends=[99]) == (99,)
    assert app(1, message_ends=[1]) == ()


def test_vllm_align_keeps_block_aligned_step_ends() -> None:
    # Steps of at most 8 tokens cut to blocks of 4; the step crossing the last block
    # boundary (20) is forced to end there; the prompt end itself is a decode-time publish.
    assert vllm_align(20, block_size=4, max_num_batched_tokens=8) == (8, 16)
    assert vllm_align(22, block_size=4, max_num_batched_tokens=8) == (8, 16, 20)
    assert vllm_align(22, block_size=4, max_num_batched_tokens=6) == (4, 8, 12, 16, 20)
    assert vllm_align(22, start=4, block_size=4, max_num_batched_tokens=8) == (12, 20)
    # From an unaligned hit the steps stay unaligned until the forced last boundary.
    assert vllm_align(22, start=5, block_size=4, max_num_batched_tokens=8) == (20,)
    assert vllm_align(3, block_size=4, max_num_batched_tokens=8) == ()


def test_vllm_align_keeps_one_state_for_a_prompt_within_one_step() -> None:
    assert vllm_align(2000) == (3 * prefix.VLLM_BLOCK_SIZE,)
    assert vllm_align(5000) == (9 * prefix.VLLM_BLOCK_SIZE,)
    assert vllm_align(500) == ()  # shorter than a block: nothing to share (vLLM #40696)
    assert len(vllm_align(20_000)) == 3  # two full steps, then the forced last boundary


def test_sglang_keeps_every_chunk_end() -> None:
    assert sglang(20, chunked_prefill_size=8) == (8, 16)
    assert sglang(20, start=3, chunked_prefill_size=8) == (11, 19)
    assert sglang(8, chunked_prefill_size=8) == ()
    assert sglang(5000) == ()  # one chunk: only the prompt end and the request end


@pytest.mark.parametrize(
    ("length", "interval", "expected"),
    [
        # The cases TensorRT-LLM's own chunk-point tests pin, less the prompt end itself.
        (7639, 4096, (4096, 7616)),
        (7648, 4096, (4096, 7616)),
        (8193, 4096, (4096, 8192)),
        (100, 4096, (96,)),
        (31, 4096, ()),
        (64, 4096, (32,)),
        (7639, 256, (*range(256, 7639, 256), 7616)),
        (7680, 256, tuple(sorted([*range(256, 7680, 256), 7648]))),
        (7639, 0, ()),
    ],
)
def test_trtllm_interval_points_and_the_last_reachable_block(
    length: int, interval: int, expected: tuple[int, ...]
) -> None:
    assert trtllm(length, periodic_snapshot_interval=interval) == expected


def test_trtllm_offsets_and_save_last() -> None:
    assert trtllm(
        100, periodic_snapshot_interval=0, offsets_from_start=[10, 200], offsets_from_end=[0, 5]
    ) == (10, 95)
    assert trtllm(7639, periodic_snapshot_interval=4096, save_last=False) == (4096,)


def test_llamacpp_checkpoints_the_prompt_end_minus_64() -> None:
    assert llamacpp(200) == (136,)
    assert llamacpp(129) == (65,)
    assert llamacpp(128) == ()  # a state of 64 tokens or fewer is not checkpointed
    assert llamacpp(200, start=140) == ()  # the hit already reaches past it
    assert llamacpp(100, tail=10) == (90,)


RULES: list[Callable[[int], tuple[int, ...]]] = [
    lambda n: every(7, n),
    lambda n: before_end(3, n),
    lambda n: app(n, message_ends=list(range(0, n + 1, 5))),
    lambda n: vllm_align(n, block_size=16, max_num_batched_tokens=40),
    lambda n: vllm_align(n, start=n // 3, block_size=16, max_num_batched_tokens=40),
    lambda n: sglang(n, start=n // 2, chunked_prefill_size=9),
    lambda n: trtllm(n, periodic_snapshot_interval=24, offsets_from_end=[0, 7], tokens_per_block=8),
    lambda n: llamacpp(n, start=n // 4),
]


@given(length=st.integers(0, 400), rule=st.sampled_from(RULES))
def test_every_rule_gives_ascending_positions_inside_the_prompt(
    length: int, rule: Callable[[int], tuple[int, ...]]
) -> None:
    positions = rule(length)
    assert list(positions) == sorted(set(positions))
    assert all(1 <= p < length for p in positions)
    if length:  # and the index takes them as they are
        PrefixSnapshotIndex(4).plan_prefill(0, [1] * length, publish_at=positions)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: every(0, 10), "'n'"),
        (lambda: every(2, -1), "'length'"),
        (lambda: every(True, 10), "'n'"),
        (lambda: before_end(0, 10), "'m'"),
        (lambda: app(10, message_ends=[11]), "'message_ends'"),
        (lambda: app(10, message_ends=[-1]), r"'message_ends\[0\]'"),
        (lambda: app(10, message_ends="ab"), "'message_ends'"),  # type: ignore[arg-type]
        (lambda: app(-1, message_ends=[]), "'length'"),
        (lambda: vllm_align(10, block_size=0), "'block_size'"),
        (
            lambda: vllm_align(10, block_size=8, max_num_batched_tokens=4),
            "'max_num_batched_tokens'",
        ),
        (lambda: vllm_align(10, start=11), "'start'"),
        (lambda: vllm_align(10, start=-1), "'start'"),
        (lambda: sglang(10, chunked_prefill_size=0), "'chunked_prefill_size'"),
        (lambda: sglang(10.0), "'length'"),  # type: ignore[arg-type]
        (lambda: trtllm(10, periodic_snapshot_interval=-1), "'periodic_snapshot_interval'"),
        (lambda: trtllm(10, offsets_from_start=[-1]), r"'offsets_from_start\[0\]'"),
        (lambda: trtllm(10, offsets_from_end=None), "'offsets_from_end'"),  # type: ignore[arg-type]
        (lambda: trtllm(10, tokens_per_block=0), "'tokens_per_block'"),
        (lambda: trtllm(10, save_last=1), "'save_last'"),  # type: ignore[arg-type]
        (lambda: llamacpp(10, tail=0), "'tail'"),
        (lambda: llamacpp(10, start=20), "'start'"),
        # Past 2**25 tokens a rule listed or stepped through billions of positions: a
        # MemoryError, an OverflowError, or a loop that ran for minutes.
        (lambda: every(1, 10**12), "'length' must be at most 33,554,432"),
        (lambda: before_end(1, 10**30), "'length' must be at most"),
        (lambda: app(10**13, message_ends=[]), "'length' must be at most"),
        (
            lambda: vllm_align(10**12, block_size=1, max_num_batched_tokens=1),
            "'length' must be at most",
        ),
        (lambda: sglang(10**13), "'length' must be at most"),
        (lambda: trtllm(10**12, periodic_snapshot_interval=1), "'length' must be at most"),
        (lambda: llamacpp(2**25 + 1), "'length' must be at most"),
    ],
)
def test_bad_arguments_are_named(call: Callable[[], object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        call()
