"""The Hugging Face decoders on tiny random hybrid models: greedy speculative output equals greedy
``model.generate`` token for token, and backtracking rows equal fresh decodes of what they kept.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("transformers")

import torch
from torch.utils.hooks import RemovableHandle
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from ssm_rollback import InvalidArgumentError
from ssm_rollback.integrations.transformers import (
    GenerationResult,
    backtracking_generate,
    speculative_generate,
)
from ssm_rollback.testing import tiny_config, tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
# Model code warns about slow reference kernels and the like: not our concern here.
pytestmark = pytest.mark.usefixtures("quiet_warnings")

#: Hybrid model types under test: attention + Mamba2, + gated delta-net (MoE too), + short conv.
MODEL_TYPES = (
    "bamba",
    "falcon_h1",
    "granitemoehybrid",
    "jamba",
    "lfm2",
    "mamba2",
    "nemotron_h",
    "qwen3_5_moe_text",
    "qwen3_next",
    "zamba2",
)
NEW = 8
#: New tokens per decode in the type x draft length x seed matrix.
SHORT = 6


@functools.cache
def model(model_type: str, seed: int = 0) -> torch.nn.Module:
    return tiny_model(model_type, seed=seed)


def prompt(seed: int) -> torch.Tensor:
    """A prompt that repeats itself, so that prompt lookup finds matches."""
    ids = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(seed))
    return torch.cat([ids, ids[:, :4]], dim=1)


@functools.cache
def greedy(model_type: str, seed: int) -> torch.Tensor:
    out: torch.Tensor = model(model_type).generate(  # type: ignore[operator]
        prompt(seed), max_new_tokens=NEW, do_sample=False
    )
    return out


@functools.cache
def greedy_short(model_type: str, seed: int) -> torch.Tensor:
    out: torch.Tensor = model(model_type).generate(  # type: ignore[operator]
        prompt(seed), max_new_tokens=SHORT, do_sample=False
    )
    return out


@pytest.mark.parametrize("k", range(1, 7))
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_greedy_speculative_equals_greedy_generate(model_type: str, k: int) -> None:
    """Every type at every draft length 1-6, three seeds per type (seed = k mod 3).

    The assistant is a differently seeded model of the same type (its drafts are
    mostly rejected: rollbacks), or at even ``k`` the target's own weights (its
    drafts are mostly accepted: multi-token verify forwards kept whole).
    """
    seed = k % 3
    target = model(model_type)
    expected = greedy_short(model_type, seed).tolist()
    looked_up = speculative_generate(
        target, prompt(seed), max_new_tokens=SHORT, draft="prompt_lookup", num_draft_tokens=k
    )
    assistant = model(model_type, 0 if k % 2 == 0 else 1)
    assisted = speculative_generate(
        target, prompt(seed), max_new_tokens=SHORT, draft=assistant, num_draft_tokens=k
    )
    assert looked_up.sequences.tolist() == expected, (seed, k, "prompt lookup")
    assert assisted.sequences.tolist() == expected, (seed, k, "assistant")
    assert assisted.report.drafts_proposed > 0
    if k % 2 == 0:
        assert assisted.report.drafts_accepted > 0


@pytest.mark.parametrize("k", [2, 5])
def test_an_oracle_drafter_needs_one_forward_pass_per_k_plus_one_tokens(k: int) -> None:
    expected = greedy("nemotron_h", 0)

    def oracle(tokens: list[int], n: int) -> list[int]:
        return expected[0, len(tokens) : len(tokens) + n].tolist()

    result = speculative_generate(
        model("nemotron_h"), prompt(0), max_new_tokens=NEW, draft=oracle, num_draft_tokens=k
    )
    assert result.sequences.tolist() == expected.tolist()
    assert result.report.drafts_accepted == result.report.drafts_proposed
    assert result.report.forward_passes == 1 + -(-(NEW - 1) // (k + 1))
    assert result.report.rollbacks_served == 0


@functools.cache
def float64_model(model_type: str) -> torch.nn.Module:
    """``model(model_type)`` in float64 (MoE experts in the eager loop: no grouped GEMM there)."""
    torch.manual_seed(0)
    built: torch.nn.Module = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
        tiny_config(model_type), experts_implementation="eager"
    )
    return built.double().eval()


def _record_forwards(
    target: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[tuple[int, list[int], torch.Tensor]], RemovableHandle]:
    """Every forward pass of ``target``: the tokens its cache held, the tokens fed, the logits.

    The decoders' probe of a model's multi-token forward runs once per model: run it first."""
    from ssm_rollback.integrations._hf.probe import check_multi_token_forward
    from ssm_rollback.integrations._hf.stream import _Stream

    check_multi_token_forward("model", target, 128)

    seen: list[tuple[int, list[int], torch.Tensor]] = []
    lengths: list[int] = []
    feed = _Stream.feed

    def counting_feed(stream: _Stream, ids: list[int], **kwargs: bool) -> torch.Tensor:
        lengths.append(len(stream.fed))
        return feed(stream, ids, **kwargs)

    def after(_: torch.nn.Module, args: tuple[torch.Tensor, ...], out: object) -> None:
        seen.append((lengths.pop(), args[0][0].tolist(), out.logits[0].detach().clone()))  # type: ignore[attr-defined]

    monkeypatch.setattr(_Stream, "feed", counting_feed)
    return seen, target.register_forward_hook(after)


#: Types whose cached forward passes equal a fresh prefill in float64 to 1e-6. Not Bamba (its
#: cached passes, one token or many, differ from a prefill by 3.9e-3 in float64) nor Jamba (its
#: multi-token passes from a cache, by 9.6e-5): both are in the greedy matrix above.
EXACT_TYPES = tuple(t for t in MODEL_TYPES if t not in {"bamba", "jamba"})


@pytest.mark.parametrize("model_type", EXACT_TYPES)
@pytest.mark.parametrize("right", [0, 1])
def test_wrong_drafts_are_undone_exactly(
    model_type: str, right: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drafts wrong from position ``right`` on: every verify step rolls back. In float64, every
    forward pass's logits equal a fresh forward of the committed tokens plus what it fed, so a
    checkpoint restore that leaves rejected drafts in the recurrent state fails it."""
    target = float64_model(model_type)
    expected = target.generate(prompt(1), max_new_tokens=NEW, do_sample=False)  # type: ignore[operator]

    def wrong(tokens: list[int], n: int) -> list[int]:
        good = expected[0, len(tokens) : len(tokens) + n].tolist()
        return [*good[:right], *[(t + 1) % 128 for t in good[right:]]]

    seen, hook = _record_forwards(target, monkeypatch)
    try:
        result = speculative_generate(
            target, prompt(1), max_new_tokens=NEW, draft=wrong, num_draft_tokens=3
        )
    finally:
        hook.remove()
        monkeypatch.undo()
    assert result.sequences.tolist() == expected.tolist()
    assert result.report.rollbacks_served >= 3
    final = expected[0].tolist()
    for length, fed, logits in seen:
        with torch.no_grad():
            fresh = target(torch.tensor([final[:length] + fed])).logits[0, length:]
        # A prompt's pass keeps its last logits alone (``logits_to_keep=1``).
        torch.testing.assert_close(logits, fresh[-len(logits) :], rtol=0, atol=1e-6)


def test_a_replay_stays_bounded_when_drafts_keep_failing() -> None:
    """Every draft rejected: the replay grows by a token a step until it is wider than four
    verify steps, then gets a forward pass of its own; the output stays greedy's."""
    target = model("mamba2")
    ids = prompt(4)  # holds mamba2's pad id, which generate masks unless told not to
    expected = target.generate(  # type: ignore[operator]
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False
    )

    def wrong(tokens: list[int], n: int) -> list[int]:
        return [(t + 1) % 128 for t in expected[0, len(tokens) : len(tokens) + n].tolist()]

    ones = torch.ones_like(ids)
    speculative_generate(target, ids, attention_mask=ones, max_new_tokens=2)  # probes its forward
    widths: list[int] = []
    hook = target.register_forward_hook(lambda _, args, out: widths.append(args[0].shape[1]))
    try:
        result = speculative_generate(
            target, ids, attention_mask=ones, max_new_tokens=24, draft=wrong, num_draft_tokens=1
        )
    finally:
        hook.remove()
    assert result.sequences.tolist() == expected.tolist()
    assert result.report.forward_passes == len(widths) > 1 + 23  # prefill, 23 verify steps, replays
    assert max(widths[1:]) == 4 * 2 + 2  # a replay of four verify steps' width, and a verify step


def test_the_sampled_acceptance_rule_keeps_the_target_distribution() -> None:
    """Standard speculative sampling: whatever the draft distribution, the token that comes
    out (an accepted draft, or the residual sample after a rejection) is distributed as the
    target's - with an assistant's distribution and with a deterministic drafter's one-hot."""
    from ssm_rollback.integrations._hf.speculative import _accept

    gen = torch.Generator().manual_seed(0)
    vocab, trials = 6, 20_000
    logits = torch.randn(2, vocab, generator=gen) * 1.5
    p = torch.softmax(logits[0], -1)
    q = torch.softmax(torch.randn(vocab, generator=gen) * 1.5, -1)
    for dists in ([q], None):
        counts = torch.zeros(vocab)
        for _ in range(trials):
            # a drafter that always proposes token 2, or samples of q
            draft = 2 if dists is None else int(torch.multinomial(q, 1, generator=gen))
            n, bonus = _accept(logits, [draft], dists, gen)
            counts[draft if n == 1 else bonus] += 1
        total_variation = float((counts / trials - p).abs().sum() / 2)
        assert total_variation < 0.02, (dists is None, total_variation)


@pytest.mark.parametrize("model_type", ["qwen3_next", "mamba2"])
def test_sampled_speculative_with_the_target_as_assistant_accepts_its_drafts(
    model_type: str,
) -> None:
    """With the target's own weights as assistant, p / q = 1 for each draft: all accepted,
    which needs each draft's distribution lined up with the verify forward's position."""
    target = model(model_type)
    result = speculative_generate(
        target,
        prompt(2),
        max_new_tokens=NEW,
        draft=target,
        num_draft_tokens=3,
        generator=torch.Generator().manual_seed(3),
        eos_token_id=(),
    )
    assert result.report.drafts_proposed > 0
    assert result.report.drafts_accepted == result.report.drafts_proposed
    assert result.sequences.shape == (1, prompt(2).shape[1] + NEW)


def test_boundary_snapshots_during_speculation_keep_the_output() -> None:
    expected = greedy("bamba", 2)
    result = speculative_generate(
        model("bamba"),
        prompt(2),
        max_new_tokens=NEW,
        draft="prompt_lookup",
        num_draft_tokens=3,
        is_boundary=lambda token: token % 3 == 0,
        capacity=2,
    )
    assert result.sequences.tolist() == expected.tolist()


def test_model_generate_runs_it_as_custom_generate() -> None:
    result = model("nemotron_h").generate(  # type: ignore[operator]
        prompt(0), max_new_tokens=NEW, custom_generate=speculative_generate, draft="prompt_lookup"
    )
    assert isinstance(result, GenerationResult)
    assert result.sequences.tolist() == greedy("nemotron_h", 0).tolist()


def test_speculative_decodes_a_batch_row_by_row() -> None:
    """Before, a batch was refused ("one row"); now each row is decoded on its own, a row
    that hits EOS first padded on the right as generate pads it, the counts summed."""
    m = model("lfm2")
    rows = [prompt(0)[0].tolist(), prompt(1)[0].tolist()]
    alone = [speculative_generate(m, [row], max_new_tokens=NEW) for row in rows]
    eos = int(alone[0].sequences[0, len(rows[0]) + 1])  # row 0's second new token
    ended = [speculative_generate(m, [row], max_new_tokens=NEW, eos_token_id=eos) for row in rows]
    batch = speculative_generate(m, rows, max_new_tokens=NEW, eos_token_id=eos, pad_token_id=3)
    expected = [out.sequences[0].tolist() for out in ended]
    width = max(len(row) for row in expected)
    assert batch.sequences.tolist() == [row + [3] * (width - len(row)) for row in expected]
    assert batch.report == ended[0].report + ended[1].report
    assert len(expected[0]) < len(expected[1])  # row 0 ended at its EOS, row 1 ran on
    with pytest.raises(InvalidArgumentError, match="'streamer' streams one row"):
        speculative_generate(m, rows, max_new_tokens=NEW, streamer=_Silent())


class _Silent:
    def put(self, value: torch.Tensor) -> None:
        pass

    def end(self) -> None:
        pass


def _reject_multiples_of_five(tokens: list[int]) -> int | None:
    return max(len(tokens) - 3, 0) if tokens[-1] % 5 == 0 else None


@pytest.mark.parametrize("model_type", ["nemotron_h"])
def test_backtracking_rows_equal_fresh_decodes_after_every_rollback(model_type: str) -> None:
    result = backtracking_generate(
        model(model_type),
        prompt(3),
        max_new_tokens=10,
        is_boundary=lambda token: token % 4 == 0,
        reject=_reject_multiples_of_five,
        capacity=3,
        generator=torch.Generator().manual_seed(0),
        eos_token_id=(),
        check_rollbacks=True,
    )
    assert result.report.rollbacks_served > 0
    assert result.report.mismatches == 0
    assert result.sequences.shape == (1, 10 + 10)


def test_backtracking_rows_roll_back_on_their_own() -> None:
    """A batch's rows roll back to different lengths; each equals its own batch-1 decode."""
    prompts = torch.cat([prompt(4), prompt(5)])
    common = {
        "max_new_tokens": 8,
        "is_boundary": {0, 4, 8, 12, 16, 20, 24},
        "reject": _reject_multiples_of_five,
        "capacity": 4,
        "eos_token_id": (),
    }
    batch = backtracking_generate(model("falcon_h1"), prompts, **common)  # type: ignore[arg-type]
    rows = [backtracking_generate(model("falcon_h1"), p[None], **common) for p in prompts]  # type: ignore[arg-type]
    assert batch.report.rollbacks_served == sum(r.report.rollbacks_served for r in rows)
    for i, row in enumerate(rows):
        assert batch.sequences[i].tolist() == row.sequences[0].tolist()
