"""Bitwise-exact rollback on real transformers models, built tiny and random on the CPU.

For every model type of the installed transformers whose cache keeps
recurrent state, and that builds as a decoder on the CPU: prefill a batch,
decode with boundaries (snapshots through ``snapshot_boundary_if_ssm`` and
``apply_effects``), roll back with ``rollback_to_boundary``, restore, crop the
attention KV, decode one more token, and require the output to equal, bit for
bit, a fresh decode of the kept prefix. The types that cannot be built are
listed with the reason; a model type this list does not know fails the suite.
"""

from __future__ import annotations

import attrs
import pytest

pytest.importorskip("transformers")

import torch
from transformers import AutoModel, AutoModelForCausalLM, PretrainedConfig
from transformers.cache_utils import Cache, DynamicCache, LinearAttentionCacheLayerMixin
from transformers.utils import logging as hf_logging

from ssm_rollback import (
    DeclineReason,
    InvalidArgumentError,
    RollbackDeclined,
    RollbackPlan,
    SsmDecodeRing,
    SsmSnapshotSave,
    apply_effects,
    rollback_to_boundary,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.integrations.transformers import (
    HybridCacheSnapshotPool,
    crop_attention,
)
from ssm_rollback.testing import TESTED_MODEL_TYPES, hybrid_model_types, tiny_config

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
# Model code warns about slow reference kernels and the like: not our concern here.
pytestmark = pytest.mark.usefixtures("quiet_warnings")

SUPPORTED = TESTED_MODEL_TYPES

_COMPOSITE = "a multimodal wrapper; its language model is tested as its own model type"
NOT_BUILDABLE = {
    "glm5_next": _COMPOSITE + " (glm5_next_text)",
    "inkling2": _COMPOSITE + " (inkling2_text)",
    "inkling2_loop": _COMPOSITE + " (inkling2_loop_text)",
    "inkling_mm_model": _COMPOSITE + " (inkling_text)",
    "lfm3_vl": _COMPOSITE + " (lfm3)",
    "qwen3_5": _COMPOSITE + " (qwen3_5_text)",
    "qwen3_5_moe": _COMPOSITE + " (qwen3_5_moe_text)",
    "qwen4_exp": _COMPOSITE + " (qwen4_exp_text)",
    "nemotron_h_omni": _COMPOSITE + " (nemotron_h)",
    "lfm3_vl_vision": "a vision encoder config with no decoder class in transformers",
    "minicpm_ocr": "a multimodal model with no text-only decoder class in transformers",
    "minicpmv4_6": "a multimodal model with no text-only decoder class in transformers",
    "minicpmv4_7": "a multimodal model with no text-only decoder class in transformers",
    "nemo_speechlm": "a speech model with no text-only decoder class in transformers",
    "jev": "no model class is registered for its config in transformers",
    "minimax": "MiniMaxCache keeps the linear-attention state outside the cache layers",
    "recurrent_gemma": "keeps its recurrent state inside the model, not in a cache it returns",
}

BATCH, PROMPT, DECODE, SLOTS, EVERY = 2, 5, 12, 2, 3


@attrs.define
class Run:
    """A tiny model, fixed inputs, and a cache decoded up to some length with snapshots."""

    model: torch.nn.Module
    config: PretrainedConfig
    prompt: torch.Tensor
    tokens: torch.Tensor
    probe: torch.Tensor
    cache: Cache | None = None
    pool: HybridCacheSnapshotPool | None = None
    rings: list[SsmDecodeRing] = attrs.field(factory=list)
    boundaries: list[int] = attrs.field(factory=list)

    def forward(self, ids: torch.Tensor, cache: Cache | None) -> tuple[torch.Tensor, Cache]:
        with torch.no_grad():
            if cache is None:
                out = self.model(ids, use_cache=True)
            else:
                out = self.model(ids, cache=cache, use_cache=True)
        result = out.logits if hasattr(out, "logits") else out.last_hidden_state
        return result, out.cache

    def fresh(self, keep: int) -> torch.Tensor:
        """The probe's output after a fresh prefill and a step-by-step decode of ``keep`` tokens."""
        _, cache = self.forward(self.prompt, None)
        for n in range(keep):
            self.forward(self.tokens[:, n : n + 1], cache)
        out, _ = self.forward(self.probe, cache)
        return out


def from_config(
    auto: type[AutoModel] | type[AutoModelForCausalLM], config: PretrainedConfig
) -> torch.nn.Module:
    model: torch.nn.Module = auto.from_config(config)  # type: ignore[no-untyped-call]
    return model


def build(model_type: str, seed: int = 0) -> Run:
    config = tiny_config(model_type)
    torch.manual_seed(seed)
    try:
        model = from_config(AutoModelForCausalLM, config)
    except ValueError:  # a decoder without an LM head: compare hidden states instead
        model = from_config(AutoModel, config)
    model.eval()
    vocab = config.get_text_config(decoder=True).vocab_size
    g = torch.Generator().manual_seed(seed + 1)
    return Run(
        model,
        config,
        prompt=torch.randint(0, vocab, (BATCH, PROMPT), generator=g),
        tokens=torch.randint(0, vocab, (BATCH, DECODE), generator=g),
        probe=torch.randint(0, vocab, (BATCH, 1), generator=g),
    )


def decode(run: Run, length: int = DECODE, slots: int = SLOTS) -> Run:
    """Prefill, make the pool, and decode ``length`` tokens with a boundary every EVERY tokens."""
    _, run.cache = run.forward(run.prompt, None)
    run.pool = HybridCacheSnapshotPool(run.cache, slots, num_sequences=BATCH)
    run.rings = [SsmDecodeRing(slots) for _ in range(BATCH)]
    for n in range(1, length + 1):
        is_boundary = n % EVERY == 0
        if is_boundary:
            run.boundaries.append(n)
        saves = [
            save
            for seq, ring in enumerate(run.rings)
            if (
                save := snapshot_boundary_if_ssm(
                    ring, seq=seq, token_position=n, is_boundary=is_boundary, in_thinking=False
                )
            )
            is not None
        ]
        run.forward(run.tokens[:, n - 1 : n], run.cache)  # the state now holds n tokens
        apply_effects(run.pool, saves, run.rings)
    return run


def roll_back(run: Run, at_most: int) -> list[RollbackPlan | RollbackDeclined]:
    return [
        rollback_to_boundary(ring, run.boundaries, seq=seq, current_len=DECODE, at_most=at_most)
        for seq, ring in enumerate(run.rings)
    ]


def carry_out(run: Run, plans: list[RollbackPlan | RollbackDeclined]) -> int:
    assert run.cache is not None
    assert run.pool is not None
    assert all(isinstance(p, RollbackPlan) for p in plans)
    keep = {p.keep_len for p in plans if isinstance(p, RollbackPlan)}
    assert len(keep) == 1, "one cache has one length"
    effects = [e for p in plans if isinstance(p, RollbackPlan) for e in p.effects]
    apply_effects(run.pool, effects, run.rings)
    crop_attention(run.cache, PROMPT + keep.pop())
    return next(p.keep_len for p in plans if isinstance(p, RollbackPlan))


def test_every_hybrid_model_type_is_tested_or_explained() -> None:
    found = set(hybrid_model_types())
    assert {"bamba", "nemotron_h", "qwen3_next"} <= set(SUPPORTED)
    unknown = found - set(SUPPORTED) - set(NOT_BUILDABLE)
    assert not unknown, (
        f"new model types with recurrent caches, neither tested nor explained: {unknown}"
    )
    # Types whose default config is all attention but whose real (and tiny) configs are not.
    hybrid_when_configured = {"lfm2"}
    gone = (set(SUPPORTED) | set(NOT_BUILDABLE)) - found - hybrid_when_configured
    assert not gone, f"listed model types this transformers no longer has: {gone}"


@pytest.mark.parametrize("model_type", SUPPORTED)
def test_rollback_then_decode_is_bitwise_a_fresh_decode(model_type: str) -> None:
    run = decode(build(model_type))
    keep = carry_out(run, roll_back(run, at_most=DECODE - 2))
    assert keep == 9  # boundaries 3, 6, 9, 12; two slots hold 9 and 12
    out, _ = run.forward(run.probe, run.cache)
    assert torch.equal(out, run.fresh(keep))


@pytest.mark.parametrize("model_type", ["bamba", "nemotron_h", "qwen3_next", "falcon_h1"])
def test_a_rollback_to_an_evicted_boundary_declines_and_changes_nothing(model_type: str) -> None:
    run = decode(build(model_type))
    assert run.cache is not None
    before = [t.clone() for t in run.pool.torch_pool.live_states] if run.pool else []
    length = run.cache.get_seq_length() if _has_attention(run.cache) else None
    plans = roll_back(run, at_most=7)  # boundaries 3 and 6: their snapshots were evicted
    assert plans == [RollbackDeclined(seq, DeclineReason.SNAPSHOT_EVICTED) for seq in range(BATCH)]
    assert [r.snapshot_positions() for r in run.rings] == [(9, 12)] * BATCH
    assert run.pool is not None
    assert all(
        torch.equal(a, b) for a, b in zip(before, run.pool.torch_pool.live_states, strict=True)
    )
    if length is not None:
        assert run.cache.get_seq_length() == length


@pytest.mark.parametrize("model_type", ["bamba", "qwen3_next"])
def test_a_failed_save_is_never_restored(model_type: str) -> None:
    run = build(model_type)
    # The save at 9 fails for every row: the rings forget it, a rollback finds 6.
    _, run.cache = run.forward(run.prompt, None)
    run.pool = HybridCacheSnapshotPool(run.cache, 4)
    run.pool.torch_pool.fail_when(lambda save: save.token_position == 9)
    run.rings = [SsmDecodeRing(4) for _ in range(BATCH)]
    for n in range(1, DECODE + 1):
        if n % EVERY == 0:
            run.boundaries.append(n)
        saves: list[SsmSnapshotSave] = []
        for seq, ring in enumerate(run.rings):
            save = snapshot_boundary_if_ssm(
                ring, seq=seq, token_position=n, is_boundary=n % EVERY == 0, in_thinking=False
            )
            if save is not None:
                saves.append(save)
        run.forward(run.tokens[:, n - 1 : n], run.cache)
        outcome = apply_effects(run.pool, saves, run.rings)
        assert len(outcome.failed) == (BATCH if n == 9 else 0)
    assert [r.snapshot_positions() for r in run.rings] == [(3, 6, 12)] * BATCH
    keep = carry_out(run, roll_back(run, at_most=DECODE - 1))
    assert keep == 6
    out, _ = run.forward(run.probe, run.cache)
    assert torch.equal(out, run.fresh(keep))


def _has_attention(cache: Cache) -> bool:
    try:
        cache.get_seq_length()
    except ValueError:
        return False
    return True


# -- the pool's errors -------------------------------------------------------------------


def test_a_pool_before_prefill_is_a_clear_error() -> None:
    run = build("bamba")
    with pytest.raises(InvalidArgumentError, match="holds no recurrent state yet"):
        HybridCacheSnapshotPool(DynamicCache(config=run.config), 2)


def test_a_pure_attention_cache_is_a_clear_error() -> None:
    config = tiny_config("llama")
    model = from_config(AutoModelForCausalLM, config).eval()
    with torch.no_grad():
        cache = model(torch.zeros(1, 3, dtype=torch.long), use_cache=True).cache
    with pytest.raises(InvalidArgumentError, match="must have linear-attention"):
        HybridCacheSnapshotPool(cache, 2)
    crop_attention(cache, 1)  # but its attention can be cropped
    assert cache.get_seq_length() == 1


def test_a_batch_size_that_does_not_match_is_a_clear_error() -> None:
    run = build("nemotron_h")
    _, cache = run.forward(run.prompt, None)
    with pytest.raises(InvalidArgumentError, match="'num_sequences' must match the cache's batch"):
        HybridCacheSnapshotPool(cache, 2, num_sequences=3)


def test_a_cache_whose_layers_changed_is_refused() -> None:
    run = build("bamba")
    _, cache = run.forward(run.prompt, None)
    pool = HybridCacheSnapshotPool(cache, 2)
    cache.reorder_cache(torch.LongTensor([1, 0]))  # beam search replaces the state tensors
    with pytest.raises(InvalidArgumentError, match=r"changed since the pool was made: layers\[0\]"):
        pool.save([SsmSnapshotSave(0, 0, 1, 1)])
    assert pool.stored_position(0, 0) is None


def test_a_cache_recording_its_past_is_refused() -> None:
    run = build("bamba")
    _, cache = run.forward(run.prompt, None)
    for layer in cache.layers:
        if hasattr(layer, "activate_past_recording"):
            layer.activate_past_recording()
    with pytest.raises(InvalidArgumentError, match="records past conv states"):
        HybridCacheSnapshotPool(cache, 2)


def test_a_non_cache_is_a_type_error() -> None:
    with pytest.raises(InvalidArgumentError, match="must be a transformers Cache"):
        HybridCacheSnapshotPool(object(), 2)  # type: ignore[arg-type]


def test_the_pool_reports_what_it_snapshots() -> None:
    run = decode(build("falcon_h1"), length=3)
    assert run.pool is not None
    names = run.pool.state_names
    assert names[:2] == ("layers[0].conv_states[0]", "layers[0].recurrent_states[0]")
    assert run.pool.nbytes == SLOTS * sum(
        t.numel() * t.element_size() for t in run.pool.torch_pool.live_states
    )
    assert repr(run.pool).startswith(
        "HybridCacheSnapshotPool(num_sequences=2, slots_per_sequence=2"
    )
    assert run.pool.stored_position(0, 0) == 3


# -- crop_attention ---------------------------------------------------------------------


def test_crop_beyond_the_cache_is_a_clear_error_and_changes_nothing() -> None:
    run = decode(build("jamba"), length=2)
    assert run.cache is not None
    with pytest.raises(InvalidArgumentError, match="'length' must be <= the cache's length 7"):
        crop_attention(run.cache, 8)
    assert run.cache.get_seq_length() == PROMPT + 2
    with pytest.raises(InvalidArgumentError, match="'length' must be an int >= 0"):
        crop_attention(run.cache, -1)


def _linear_layers(cache: Cache) -> list[object]:
    return [layer for layer in cache.layers if isinstance(layer, LinearAttentionCacheLayerMixin)]


def _count(layer: object) -> torch.Tensor:
    count: torch.Tensor = getattr(layer, "cumulative_length_linear")  # noqa: B009 (untyped)
    return count


def test_crop_winds_back_a_linear_layers_token_count_where_it_keeps_one() -> None:
    """transformers 5.25 counts the tokens a linear-attention layer has seen and takes the
    cache's length (so position ids) from it when layer 0 is linear: a rollback must wind
    it back with the KV. On 5.24 the layers keep none; the count is put on them by hand."""
    run = decode(build("qwen3_next"), length=4)
    assert run.cache is not None
    linear = _linear_layers(run.cache)
    assert linear
    for layer in linear:
        setattr(layer, "cumulative_length_linear", torch.tensor(PROMPT + 4))  # noqa: B010
    with pytest.raises(InvalidArgumentError, match="'length' must be <= the cache's length 9"):
        crop_attention(run.cache, PROMPT + 5)
    assert [int(_count(layer)) for layer in linear] == [9] * len(linear)  # refused: nothing moved
    _count(linear[-1]).fill_(PROMPT + 2)  # a count behind the attention KV: refused by itself
    with pytest.raises(InvalidArgumentError, match="'length' must be <= the cache's length 7"):
        crop_attention(run.cache, PROMPT + 3)
    assert run.cache.get_seq_length() == PROMPT + 4
    _count(linear[-1]).fill_(PROMPT + 4)
    counts = [_count(layer) for layer in linear]
    crop_attention(run.cache, PROMPT + 1)
    assert [int(count) for count in counts] == [PROMPT + 1] * len(linear)
    assert all(  # in place: the tensors keep their addresses
        _count(layer) is count for layer, count in zip(linear, counts, strict=True)
    )
    assert run.cache.get_seq_length() == PROMPT + 1


def test_crop_of_a_sliding_window_that_dropped_tokens_is_refused() -> None:
    run = build("lara_mini")  # has a sliding-window attention layer
    window = next(
        layer.sliding_window
        for layer in DynamicCache(config=run.config).layers
        if hasattr(layer, "sliding_window")
    )
    long_prompt = torch.randint(0, 128, (BATCH, window + 4))
    _, cache = run.forward(long_prompt, None)
    crop_attention(cache, window + 4)  # no-op: nothing to drop
    with pytest.raises(InvalidArgumentError, match="already dropped positions"):
        crop_attention(cache, 3)


def test_crop_refuses_layers_it_does_not_know() -> None:
    class Odd:
        def __init__(self) -> None:
            self.layers = [object()]

    with pytest.raises(InvalidArgumentError, match="layer 0 is a object"):
        crop_attention(Odd(), 0)  # type: ignore[arg-type]
