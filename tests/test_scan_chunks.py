"""The decoders' Mamba2 scans sized to each forward pass: the same values, the model left as found.

``transformers``' PyTorch Mamba2 scan pads a forward pass to its chunk; the
decoders narrow the chunk to a shorter forward's width for that forward.
"""

from __future__ import annotations

import functools
import threading

import pytest

pytest.importorskip("transformers")

import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from ssm_rollback.integrations._hf.scan_chunks import ScanChunks
from ssm_rollback.integrations._hf.stream import _Stream
from ssm_rollback.integrations.transformers import backtracking_generate, speculative_generate
from ssm_rollback.testing import tiny_config, tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
# Model code warns about slow reference kernels and the like: not our concern here.
pytestmark = pytest.mark.usefixtures("quiet_warnings")

MAMBA2_TYPES = ("bamba", "falcon_h1", "granitemoehybrid", "mamba2", "nemotron_h", "zamba2")
OTHER_TYPES = ("jamba", "lfm2", "qwen3_next", "mamba")
CHUNK = 16  # the tiny configs' chunk


@functools.cache
def model(model_type: str) -> torch.nn.Module:
    return tiny_model(model_type)


def chunks(m: torch.nn.Module) -> list[int]:
    return [int(getattr(mixer, "chunk_size")) for mixer in ScanChunks(m).mixers]  # noqa: B009


@pytest.mark.parametrize("model_type", MAMBA2_TYPES)
def test_the_mamba2_mixers_are_found(model_type: str) -> None:
    found = ScanChunks(model(model_type)).mixers
    assert found
    assert {type(mixer).__name__ for mixer in found} != set()
    assert chunks(model(model_type)) == [CHUNK] * len(found)


@pytest.mark.parametrize("model_type", OTHER_TYPES)
def test_models_without_a_mamba2_scan_have_nothing_to_narrow(model_type: str) -> None:
    assert ScanChunks(model(model_type)).mixers == ()


def test_a_narrowed_forward_computes_the_padded_forwards_values() -> None:
    """In float64 the narrowed scan's logits and state equal the padded scan's to rounding."""
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_config(tiny_config("bamba")).eval().double()  # type: ignore[no-untyped-call]
    prompt = torch.arange(3, 10).unsqueeze(0)
    verify = torch.arange(40, 45).unsqueeze(0)
    outs = []
    for narrow in (False, True):
        with torch.no_grad():
            cache = m(prompt, use_cache=True).cache
            with ScanChunks(m if narrow else torch.nn.Module()).narrowed(verify.shape[1]):
                if narrow:
                    assert chunks(m) == [5] * len(chunks(m))
                out = m(verify, cache=cache, use_cache=True)
        state = torch.cat(
            [
                cache.get_recurrent_state(mixer.layer_idx, state_idx=0).flatten()
                for mixer in ScanChunks(m).mixers
            ]
        )
        outs.append((out.logits, state))
    (wide_logits, wide_state), (narrow_logits, narrow_state) = outs
    torch.testing.assert_close(narrow_logits, wide_logits, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(narrow_state, wide_state, rtol=1e-12, atol=1e-12)
    assert chunks(m) == [CHUNK] * len(chunks(m))


def test_the_chunk_comes_back_when_the_forward_raises() -> None:
    m = model("bamba")
    stream = _Stream(m, 128, 0)
    with pytest.raises(IndexError):
        stream.feed([1, 2, 10**6])  # an id past the embedding, mid-narrowing
    assert set(chunks(m)) == {CHUNK}


def test_a_forward_as_wide_as_the_chunk_or_one_token_keeps_it() -> None:
    m = model("mamba2")
    for width in (CHUNK, CHUNK + 1, 4 * CHUNK, 1, 0):  # 1: the recurrent step, no scan
        with ScanChunks(m).narrowed(width):
            assert set(chunks(m)) == {CHUNK}
    assert set(chunks(m)) == {CHUNK}


def test_a_narrowing_holds_its_model_so_another_thread_waits() -> None:
    """Two decoders on one model in two threads narrow one at a time: each forward scans in
    its own width, never in a chunk another thread set."""
    m = model("zamba2")
    taken: list[bool] = []

    def try_to_narrow() -> None:
        lock = ScanChunks(m).lock
        got = lock.acquire(blocking=False)
        taken.append(got)
        if got:
            lock.release()

    with ScanChunks(m).narrowed(5):
        other = threading.Thread(target=try_to_narrow)
        other.start()
        other.join()
        assert set(chunks(m)) == {5}
    assert taken == [False]
    try_to_narrow()  # and free again once the narrowing ends
    assert taken == [False, True]


def test_nested_narrowings_in_one_thread_unwind_in_order() -> None:
    m = model("zamba2")
    with ScanChunks(m).narrowed(7):
        with ScanChunks(m).narrowed(3):
            assert set(chunks(m)) == {3}
        assert set(chunks(m)) == {7}
        with ScanChunks(m).narrowed(9):  # wider than the chunk in force: kept
            assert set(chunks(m)) == {7}
    assert set(chunks(m)) == {CHUNK}


def _record_scan_chunks(m: torch.nn.Module) -> tuple[list[tuple[int, int]], list[object]]:
    """(forward width, chunk) at every Mamba2 mixer call, and the hooks to remove."""
    seen: list[tuple[int, int]] = []

    def hook(mixer: torch.nn.Module, args: tuple[torch.Tensor, ...], *_: object) -> None:
        seen.append((args[0].shape[1], int(getattr(mixer, "chunk_size"))))  # noqa: B009

    handles: list[object] = [
        mixer.register_forward_pre_hook(hook, with_kwargs=True) for mixer in ScanChunks(m).mixers
    ]
    return seen, handles


@pytest.mark.parametrize("decoder", ["speculative", "backtracking"])
def test_the_decoders_scan_each_forward_in_one_chunk_of_its_width(decoder: str) -> None:
    m = model("nemotron_h")
    seen, handles = _record_scan_chunks(m)
    try:
        prompt = torch.arange(1, 21).unsqueeze(0)  # 20 tokens: wider than the chunk
        if decoder == "speculative":
            speculative_generate(m, prompt, max_new_tokens=12, draft=lambda t, k: [7] * k)
        else:
            backtracking_generate(
                m,
                prompt,
                max_new_tokens=12,
                is_boundary={5, 9},
                reject=lambda new: len(new) if new[-1] == 9 else None,
                capacity=4,
            )
    finally:
        for handle in handles:
            handle.remove()  # type: ignore[attr-defined]
    assert seen
    assert {(width, chunk) for width, chunk in seen if width >= CHUNK} == {(20, CHUNK)}
    assert all(chunk == width for width, chunk in seen if 1 < width < CHUNK)
    assert all(chunk == CHUNK for width, chunk in seen if width == 1)
    assert any(width > 1 for width, _ in seen if width < CHUNK) or decoder == "backtracking"
    assert set(chunks(m)) == {CHUNK}
