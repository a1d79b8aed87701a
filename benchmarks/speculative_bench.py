"""Speculative decoding on CPU: a hybrid (Mamba2 + attention) model against a pure-attention one.

    python benchmarks/speculative_bench.py            # the full run (a few minutes)
    python benchmarks/speculative_bench.py --smoke    # a quick pass that only checks it runs

Two randomly initialised models of the same size (8 layers, hidden 512, vocab
2,048; nothing is downloaded): a Nemotron-H (Mamba2, attention and MLP layers)
and a Llama. Torch threads are pinned (``--threads``); every path runs in one
process, interleaved round by round, and medians are compared.

- (a) An oracle drafter proposes the target's own next ``k`` tokens (read
  from one plain greedy decode done beforehand, so drafting costs ~0), with
  acceptance forced to 100%, 75%, 50% or 0% by corrupting the draft at a
  fixed position (k = 4: position 3, 2 or 0). Target forward passes per new
  token and wall time of ``speculative_generate`` against plain greedy
  ``model.generate``, side by side.
- (b) One rollback (restore the checkpoint slot, crop the KV, requeue the
  accepted tokens) as a fraction of one verify forward (k + 1 tokens), next to
  the checkpoint save every verify step pays and the extra width the replayed
  tokens add to the next forward.
- (c) The same oracle on the attention model, where a rollback is a KV crop
  only: the hybrid model's speedup over the attention model's.
- (d) Prompt lookup on the attention model: ``transformers``' own
  ``generate(..., prompt_lookup_num_tokens=k)`` next to ours on one prompt that
  repeats itself: tokens, forward passes and wall time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig
from transformers.utils import logging as hf_logging

from ssm_rollback.integrations._hf.stream import _Stream
from ssm_rollback.integrations.transformers import speculative_generate
from ssm_rollback.testing import tiny_config

K = 4
#: Acceptance rate -> the draft position corrupted (None: none), for k = 4.
ACCEPTANCE = {"100%": None, "75%": 3, "50%": 2, "0%": 0}


def sizes(smoke: bool) -> dict[str, int]:
    if smoke:
        return {"layers": 4, "hidden": 64, "heads": 4, "head_dim": 16, "vocab": 128}
    return {"layers": 8, "hidden": 512, "heads": 8, "head_dim": 64, "vocab": 2048}


def hybrid_config(s: dict[str, int], chunk_size: int) -> PretrainedConfig:
    pattern = ["mamba", "mlp", "mamba", "attention"] * (s["layers"] // 4)
    return tiny_config(
        "nemotron_h",
        vocab_size=s["vocab"],
        hidden_size=s["hidden"],
        intermediate_size=3 * s["hidden"],
        num_attention_heads=s["heads"],
        num_key_value_heads=2,
        head_dim=s["head_dim"],
        mamba_num_heads=s["heads"],
        mamba_head_dim=s["head_dim"],
        ssm_state_size=s["head_dim"],
        chunk_size=chunk_size,
        layers_block_type=pattern,
        max_position_embeddings=1024,
        eos_token_id=None,
    )


def attention_config(s: dict[str, int]) -> PretrainedConfig:
    return AutoConfig.for_model(
        "llama",
        vocab_size=s["vocab"],
        hidden_size=s["hidden"],
        intermediate_size=3 * s["hidden"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=2,
        head_dim=s["head_dim"],
        max_position_embeddings=1024,
        eos_token_id=None,
    )


class Counted:
    """A model with a counter of its forward passes (a forward hook)."""

    def __init__(self, config: PretrainedConfig) -> None:
        torch.manual_seed(0)
        model: torch.nn.Module = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
        self.model = model.eval()
        generation_config = getattr(self.model, "generation_config")  # noqa: B009
        generation_config.eos_token_id = None
        generation_config.pad_token_id = 0
        self.calls = 0
        self.model.register_forward_hook(self._count)
        self.vocab: int = config.vocab_size

    def _count(self, *_: object) -> None:
        self.calls += 1

    def generate(self, ids: torch.Tensor, new: int, **kwargs: object) -> torch.Tensor:
        ones = torch.ones_like(ids)  # every id a real token: pad id 0 is never masked
        with torch.no_grad():
            out: torch.Tensor = self.model.generate(  # type: ignore[operator]
                ids, attention_mask=ones, max_new_tokens=new, do_sample=False, **kwargs
            )
        return out


Run = Callable[[], torch.Tensor]


def timed(runs: dict[str, Run], counted: dict[str, Counted], rounds: int) -> dict[str, Result]:
    """Every run once per round, in a rotated order; the median time and the last output."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    out: dict[str, Result] = {}
    names = list(runs)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            model = counted[name]
            model.calls = 0
            start = time.perf_counter()
            tokens = runs[name]()
            times[name].append(time.perf_counter() - start)
            out[name] = Result(tokens, model.calls)
    for name, result in out.items():
        result.seconds = statistics.median(times[name])
    return out


class Result:
    def __init__(self, tokens: torch.Tensor, forwards: int) -> None:
        self.tokens = tokens
        self.forwards = forwards
        self.seconds = 0.0


def oracle(
    reference: list[int], corrupt: int | None, vocab: int
) -> Callable[[list[int], int], list[int]]:
    def draft(tokens: list[int], k: int) -> list[int]:
        proposal = reference[len(tokens) : len(tokens) + k]
        if corrupt is not None and corrupt < len(proposal):
            proposal[corrupt] = (proposal[corrupt] + 1) % vocab
        return proposal

    return draft


def oracle_section(
    label: str, m: Counted, prompt: torch.Tensor, new: int, rounds: int
) -> dict[str, float]:
    """(a) / (c): the oracle at each acceptance against plain greedy; the speedups."""
    reference = m.generate(prompt, new + K)[0].tolist()
    expected = reference[: prompt.shape[1] + new]
    runs: dict[str, Run] = {"greedy": lambda: m.generate(prompt, new)}
    reports = {}
    # The decoder probes a model's multi-token forward once, on first use: not in the counts.
    ones = torch.ones_like(prompt)  # every id a real token, as in m.generate
    speculative_generate(
        m.model, prompt, attention_mask=ones, max_new_tokens=2, num_draft_tokens=K, eos_token_id=()
    )
    for rate, corrupt in ACCEPTANCE.items():

        def run(corrupt: int | None = corrupt, rate: str = rate) -> torch.Tensor:
            result = speculative_generate(
                m.model,
                prompt,
                attention_mask=ones,
                max_new_tokens=new,
                draft=oracle(reference, corrupt, m.vocab),
                num_draft_tokens=K,
                eos_token_id=(),
            )
            reports[rate] = result.report
            return result.sequences

        runs[rate] = run
    results = timed(runs, dict.fromkeys(runs, m), rounds)
    base = results["greedy"]
    print(f"\n{label}: {new} new tokens, prompt {prompt.shape[1]}, k = {K}")
    print(
        f"  {'path':<16}{'accepted':>9}{'fwd/token':>11}{'fwd ratio':>11}"
        f"{'ms':>9}{'speedup':>9}{'rollbacks':>11}"
    )
    print(
        f"  {'plain greedy':<16}{'':>9}{base.forwards / new:>11.3f}{1.0:>11.2f}"
        f"{base.seconds * 1e3:>9.1f}{1.0:>9.2f}{'':>11}"
    )
    speedups = {}
    for rate in ACCEPTANCE:
        res, rep = results[rate], reports[rate]
        assert res.tokens[0].tolist() == expected, f"{label} {rate}: output differs from greedy"
        assert rep.forward_passes == res.forwards, (rep.forward_passes, res.forwards)
        accepted = rep.drafts_accepted / max(rep.drafts_proposed, 1)
        speedups[rate] = base.seconds / res.seconds
        print(
            f"  {'oracle ' + rate:<16}{accepted:>9.0%}{res.forwards / new:>11.3f}"
            f"{base.forwards / res.forwards:>11.2f}{res.seconds * 1e3:>9.1f}"
            f"{speedups[rate]:>9.2f}{rep.rollbacks_served:>11}"
        )
    speedups["fwd ratio"] = base.forwards / results["100%"].forwards
    return speedups


def rollback_section(m: Counted, prompt: torch.Tensor, steps: int) -> None:
    """(b): one rollback against one verify forward, with the checkpoint save and the replay."""
    vocab = m.vocab
    stream = _Stream(m.model, vocab, 0)
    stream.feed(prompt[0].tolist())
    verify, save, rollback, wider = [], [], [], []
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        tokens = torch.randint(0, vocab, (K + 1,), generator=gen).tolist()
        start = time.perf_counter()
        stream.checkpoint()
        saved = time.perf_counter()
        stream.feed(tokens)
        fed = time.perf_counter()
        stream.rewind(len(stream.fed) - 2)  # 2 of 4 drafts accepted: 2 + last token requeued
        done = time.perf_counter()
        # The next verify forward carries the replayed tokens in front of its own k + 1.
        stream.checkpoint()
        again = time.perf_counter()
        stream.feed(torch.randint(0, vocab, (K + 1,), generator=gen).tolist())
        wider.append(time.perf_counter() - again)
        save.append(saved - start)
        verify.append(fed - saved)
        rollback.append(done - fed)
    v, s, r, w = (statistics.median(x) for x in (verify, save, rollback, wider))
    print(f"\n(b) one rollback on the hybrid model, medians of {steps} verify steps (k = {K})")
    print(f"  verify forward, {K + 1} tokens            {v * 1e3:8.2f} ms")
    print(
        f"  rollback (restore + crop + requeue)   {r * 1e3:8.3f} ms  {r / v:7.1%}"
        " of a verify forward"
    )
    print(f"  checkpoint save (every verify step)   {s * 1e3:8.3f} ms  {s / v:7.1%}")
    print(
        f"  next forward with 3 replayed tokens   {w * 1e3:8.2f} ms  {w / v - 1:+7.1%} width cost"
    )


def widths_line(
    label: str, m: Counted, prompt: torch.Tensor, reps: int, *, narrow: bool = True
) -> None:
    """Why the speedups differ: one forward's time by its width (tokens fed at once).

    ``narrow=False``: the Mamba2 scan pads every forward to the model's chunk,
    as ``transformers``' own PyTorch path does; the decoders scan only the
    forward's tokens.
    """
    stream = _Stream(m.model, m.vocab, 0, narrow_scans=narrow)
    stream.feed(prompt[0].tolist())
    gen = torch.Generator().manual_seed(3)
    times: dict[int, list[float]] = {w: [] for w in (1, K + 1, 2 * K + 1)}
    for _ in range(reps):
        for width, out in times.items():
            stream.checkpoint()
            start = time.perf_counter()
            stream.feed(torch.randint(0, m.vocab, (width,), generator=gen).tolist())
            out.append(time.perf_counter() - start)
            stream.rewind(len(stream.fed) - width)
    one = statistics.median(times[1])
    cells = "  ".join(
        f"{w} tokens {statistics.median(t) * 1e3:6.2f} ms ({statistics.median(t) / one:4.2f}x)"
        for w, t in times.items()
    )
    print(f"  {label:<10} {cells}")


def lookup_section(m: Counted, new: int, rounds: int) -> None:
    """(d): transformers' prompt lookup against ours on the attention model."""
    gen = torch.Generator().manual_seed(2)
    phrase = torch.randint(0, m.vocab, (1, 12), generator=gen)
    prompt = torch.cat([phrase] * 4, dim=1)
    runs: dict[str, Run] = {
        "greedy": lambda: m.generate(prompt, new),
        "hf lookup": lambda: m.generate(prompt, new, prompt_lookup_num_tokens=K),
        "ours": lambda: (
            speculative_generate(
                m.model,
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=new,
                draft="prompt_lookup",
                num_draft_tokens=K,
                eos_token_id=(),
            ).sequences
        ),
    }
    results = timed(runs, dict.fromkeys(runs, m), rounds)
    ours, theirs, base = results["ours"], results["hf lookup"], results["greedy"]
    same = ours.tokens.tolist() == theirs.tokens.tolist() == base.tokens.tolist()
    print(
        f"\n(d) prompt lookup on the attention model, k = {K}, {new} new tokens, "
        f"prompt {prompt.shape[1]} (a 12-token phrase 4 times)"
    )
    print(f"  {'path':<24}{'forwards':>9}{'ms':>9}{'speedup':>9}")
    for name, label in (
        ("greedy", "plain greedy"),
        ("hf lookup", "transformers lookup"),
        ("ours", "speculative_generate"),
    ):
        res = results[name]
        print(
            f"  {label:<24}{res.forwards:>9}{res.seconds * 1e3:>9.1f}"
            f"{base.seconds / res.seconds:>9.2f}"
        )
    print(
        f"  equal tokens: {same}; "
        f"ours / transformers wall time: {ours.seconds / theirs.seconds:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run, only checks it works")
    parser.add_argument("--new", type=int, default=64, help="new tokens per decode")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=128,
        help="the Mamba2 scan's chunk (Nemotron-H's default 128); transformers' CPU scan pads a "
        "multi-token forward to it, the decoders scan a shorter forward as one chunk of its width",
    )
    args = parser.parse_args(argv)
    new, rounds = (8, 1) if args.smoke else (args.new, args.rounds)
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    warnings.simplefilter("ignore")
    s = sizes(args.smoke)
    print(
        f"torch {torch.__version__}, {args.threads} threads; models: {s['layers']} layers, "
        f"hidden {s['hidden']}, vocab {s['vocab']}, random weights; medians of {rounds} rounds; "
        f"Mamba2 chunk {16 if args.smoke else args.chunk_size}"
    )
    hybrid = Counted(hybrid_config(s, 16 if args.smoke else args.chunk_size))
    attention = Counted(attention_config(s))
    prompt = torch.randint(0, s["vocab"], (1, 32), generator=torch.Generator().manual_seed(0))
    for m in (hybrid, attention):  # warm up
        m.generate(prompt, 4)
    h = oracle_section(
        "(a) oracle drafter, hybrid Nemotron-H (Mamba2 + attention + MLP)",
        hybrid,
        prompt,
        new,
        rounds,
    )
    rollback_section(hybrid, prompt, 3 if args.smoke else 30)
    a = oracle_section("(c) oracle drafter, attention-only Llama", attention, prompt, new, rounds)
    print(
        f"\n(c) hybrid speedup / attention speedup at 100%: {h['100%'] / a['100%']:.2f} "
        f"(hybrid {h['100%']:.2f}x, attention {a['100%']:.2f}x)"
    )
    print(
        "\n    one forward by width, medians (a verify forward is k + 1 wide, a replay wider; "
        "(padded): the hybrid's scan padded to its chunk, as transformers' CPU path runs it):"
    )
    reps = 3 if args.smoke else 20
    widths_line("hybrid", hybrid, prompt, reps)
    widths_line("(padded)", hybrid, prompt, reps, narrow=False)
    widths_line("attention", attention, prompt, reps)
    lookup_section(attention, new, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
