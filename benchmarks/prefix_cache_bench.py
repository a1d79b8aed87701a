"""A chat over a long history on CPU: time to first token with ``HybridPrefixCache`` and without.

    python benchmarks/prefix_cache_bench.py            # the full run (a few minutes)
    python benchmarks/prefix_cache_bench.py --smoke    # a quick pass that only checks it runs

A randomly initialised Nemotron-H (8 layers: Mamba2, attention and MLP;
hidden 512, vocab 2,048; nothing is downloaded), torch threads pinned
(``--threads``). The chat is token ids with role and end-of-message tokens
(what a chat template renders): a system prompt and earlier exchanges,
over 2,048 tokens, then four turns, one regenerate (the same prompt again)
and one edit (the last user message replaced). Each request generates a
64-token greedy answer and publishes the state after it and the
end-of-message token the chat renders next (``publish_generated(...,
followed_by=[END])``: one short forward pass once the answer is out, timed
apart); the turn's answer becomes the assistant's message, so the next
turn's prompt extends it and hits at the message end. The cache is used two
ways side by side, each replaying the chat on a cache of its own:

- "prompt end": ``prepare`` publishes every message end and its own prompt
  end minus one token (what a regenerate reuses) and computes all but the
  last token; ``generate`` computes that one in a forward pass of its own.
- "tail": ``prepare(..., prefill_rest=False)`` publishes nothing and stops
  at the hit; ``generate``'s first forward pass computes the new message
  and the last token together.

Reported:

- Time to first token: ``prepare`` + ``generate(cache=...)`` until its
  streamer gets the first new token, against plain ``model.generate``,
  medians of ``--rounds`` rounds (each round replays the whole chat on
  fresh prefix caches, so every request meets a cache as the chat left it).
  The greedy answers are checked to be the same all three ways.
- Best-of-4 from one prompt: prompt tokens the model's forward passes
  compute, counted by a hook, with the cache (the prompt once) and without.
- Bytes held, checked after every request against ``--max-mib``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig
from transformers.utils import logging as hf_logging

from ssm_rollback.integrations.transformers import HybridPrefixCache, PrefixCacheReport
from ssm_rollback.testing import tiny_config

SYSTEM, USER, ASSISTANT, END = 1, 2, 3, 4  # role and end-of-message tokens
FIRST_WORD = 8  # message contents use ids from here on


def sizes(smoke: bool) -> dict[str, int]:
    if smoke:
        return {"layers": 4, "hidden": 64, "heads": 4, "head_dim": 16, "vocab": 128}
    return {"layers": 8, "hidden": 512, "heads": 8, "head_dim": 64, "vocab": 2048}


def hybrid_config(s: dict[str, int]) -> PretrainedConfig:
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
        chunk_size=16 if s["hidden"] < 512 else 128,
        layers_block_type=pattern,
        max_position_embeddings=4096,
        eos_token_id=None,
    )


class Counted:
    """The model, with the tokens its forward passes take counted (a pre-forward hook)."""

    def __init__(self, config: PretrainedConfig) -> None:
        torch.manual_seed(0)
        model: torch.nn.Module = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
        self.model = model.eval()
        generation_config = getattr(self.model, "generation_config")  # noqa: B009
        generation_config.eos_token_id = None
        generation_config.pad_token_id = 0
        self.tokens = 0
        self.model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, _: object, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        ids = args[0] if args else kwargs.get("input_ids")
        assert isinstance(ids, torch.Tensor)
        self.tokens += ids.shape[-1]

    def generate(self, ids: list[int], new: int, **kwargs: object) -> list[int]:
        prompt = torch.tensor([ids])
        kwargs = {"do_sample": False, **kwargs}
        with torch.no_grad():
            out: torch.Tensor = self.model.generate(  # type: ignore[operator]
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, **kwargs
            )
        generated: list[int] = out[0, len(ids) :].tolist()
        return generated


class Chat:
    """Messages as token ids; ``prompt()`` renders them with the assistant's header last."""

    def __init__(self, vocab: int, seed: int) -> None:
        self.rng = torch.Generator().manual_seed(seed)
        self.vocab = vocab
        self.messages: list[list[int]] = []

    def words(self, n: int) -> list[int]:
        out: list[int] = torch.randint(FIRST_WORD, self.vocab, (n,), generator=self.rng).tolist()
        return out

    def add(self, role: int, n: int) -> None:
        self.messages.append([role, *self.words(n), END])

    def prompt(self) -> tuple[list[int], tuple[int, ...]]:
        """The rendered ids and where each message ends (what ``message_boundaries`` gives)."""
        ids: list[int] = []
        ends = []
        for message in self.messages:
            ids += message
            ends.append(len(ids))
        return [*ids, ASSISTANT], tuple(ends)


def opening(s: dict[str, int], smoke: bool) -> Chat:
    """The system prompt and the earlier exchanges: the history every request sends again."""
    chat = Chat(s["vocab"], 0)
    chat.add(SYSTEM, 24 if smoke else 300)
    for _ in range(4 if smoke else 7):
        chat.add(USER, 10 if smoke else 110)
        chat.add(ASSISTANT, 20 if smoke else 150)
    return chat


class FirstToken:
    """A streamer that notes when the first generated token arrives (``put`` after the prompt)."""

    def __init__(self) -> None:
        self.puts = 0
        self.at = 0.0

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2:
            self.at = time.perf_counter()

    def end(self) -> None:
        pass


MODES = ("prompt end", "tail")  # the module's docstring says what each does


class Timings:
    """Per request and mode: times to first token, tokens reused; whether the answers agree."""

    def __init__(self) -> None:
        self.plain: dict[str, list[float]] = {}
        self.cached: dict[str, dict[str, list[float]]] = {mode: {} for mode in MODES}
        self.reused: dict[str, dict[str, int]] = {mode: {} for mode in MODES}
        self.lengths: dict[str, int] = {}
        self.closes: list[float] = []  # publish_generated's pass after each answer
        self.same = True
        self.peak = 0
        self.reports = dict.fromkeys(MODES, PrefixCacheReport())


def answer(
    m: Counted,
    cache: HybridPrefixCache | None,
    mode: str,
    ids: list[int],
    ends: tuple[int, ...],
    new: int,
    t: Timings,
) -> tuple[float, list[int]]:
    """Time to first token of a ``new``-token greedy answer, and the answer. With the cache:
    ``prepare`` as its mode says, ``generate`` from it, then ``publish_generated`` with the
    end-of-message token (after the answer is out: the next turn starts at the message end;
    that pass is timed into ``t.closes``, not into any time to first token)."""
    timer = FirstToken()
    started = time.perf_counter()
    if cache is None:
        out = m.generate(ids, new, streamer=timer)
    else:
        if mode == "tail":
            prepared = cache.prepare(ids, prefill_rest=False)
        else:
            prepared = cache.prepare(ids, publish_at=(*ends, len(ids) - 1))
        out = m.generate(ids, new, streamer=timer, cache=prepared)
        closing = time.perf_counter()
        cache.publish_generated([ids + out], prepared, followed_by=[END])
        t.closes.append(time.perf_counter() - closing)
    return timer.at - started, out


def chat_round(m: Counted, s: dict[str, int], smoke: bool, max_bytes: int, t: Timings) -> None:
    """One replay of the chat on a fresh prefix cache per mode: four turns, a regenerate, an
    edit. Each reply is the answer of the turn's last request (all ways give the same)."""
    user, reply = (12, 16) if smoke else (48, 64)
    chat = opening(s, smoke)
    caches = {mode: HybridPrefixCache(m.model, max_bytes=max_bytes) for mode in MODES}

    def ask(name: str) -> list[int]:
        ids, ends = chat.prompt()
        t_plain, plain = answer(m, None, "", ids, ends, reply, t)
        t.plain.setdefault(name, []).append(t_plain)
        t.lengths[name] = len(ids)
        for mode, cache in caches.items():
            before = cache.report.tokens_reused
            t_cached, cached = answer(m, cache, mode, ids, ends, reply, t)
            t.cached[mode].setdefault(name, []).append(t_cached)
            t.reused[mode][name] = cache.report.tokens_reused - before
            t.same &= plain == cached
            t.peak = max(t.peak, cache.report.bytes_held)
            assert cache.report.bytes_held <= max_bytes
        return plain

    for turn in range(1, 5):
        chat.add(USER, user)
        said = ask(f"turn {turn}")
        if turn == 2:
            said = ask("regenerate")
            chat.messages.pop()
            chat.add(USER, user)
            said = ask("edit")
        chat.messages.append([ASSISTANT, *said, END])
    t.reports = {mode: cache.report for mode, cache in caches.items()}


def chat_section(m: Counted, s: dict[str, int], smoke: bool, rounds: int, max_bytes: int) -> bool:
    t = Timings()
    for _ in range(rounds):
        chat_round(m, s, smoke, max_bytes, t)
    budget = f"{max_bytes / 2**20:.1f} MiB"
    print(f"\n(a) a chat, time to first token (medians of {rounds}); budget {budget}")
    print("  cached, two ways: 'prompt end' = prepare(ids, publish_at=message ends + prompt end")
    print("  minus one); 'tail' = prepare(ids, prefill_rest=False), generate computes the rest")
    head = f"{'request':<12}{'prompt':>7}{'plain ms':>9}"
    for mode in MODES:
        head += f" | {mode:<10}{'reused':>7}{'ms':>7}{'speedup':>8}"
    print(f"  {head}")
    worst = dict.fromkeys(MODES, float("inf"))
    for name, times in t.plain.items():
        p = statistics.median(times)
        row = f"{name:<12}{t.lengths[name]:>7}{p * 1e3:>9.1f}"
        for mode in MODES:
            c, reused = statistics.median(t.cached[mode][name]), t.reused[mode][name]
            if reused:
                worst[mode] = min(worst[mode], p / c)
            row += f" | {'':<10}{reused:>7}{c * 1e3:>7.1f}{p / c:>7.1f}x"
        print(f"  {row}")
    print(
        f"  after each answer, off the next request's path: publish_generated with the end of "
        f"the message, median {statistics.median(t.closes) * 1e3:.1f} ms"
    )
    for mode, r in t.reports.items():
        print(
            f"  {mode}: hits {r.hits}, misses {r.misses}, evictions {r.evictions}, declined "
            f"{r.declined}; slowest hit's speedup {worst[mode]:.1f}x"
        )
    print(
        f"  bytes held at most {t.peak / 2**20:.1f} MiB of {budget} (never over); "
        f"same answers all ways: {'yes' if t.same else 'NO'}"
    )
    return t.same


def best_of_section(m: Counted, s: dict[str, int], smoke: bool, max_bytes: int) -> None:
    chat = opening(s, smoke)
    chat.add(USER, 12 if smoke else 48)
    ids = chat.prompt()[0]
    new = 8
    sampled = {"do_sample": True, "top_k": 0}
    m.tokens = 0
    for seed in range(4):
        torch.manual_seed(seed)
        m.generate(ids, new, **sampled)
    plain = m.tokens
    cache = HybridPrefixCache(m.model, max_bytes=max_bytes)
    m.tokens = 0
    for seed in range(4):
        torch.manual_seed(seed)
        m.generate(ids, new, cache=cache.prepare(ids, publish_at=(len(ids) - 1,)), **sampled)
    ours = m.tokens
    decode = 4 * (new - 1)
    print(f"\n(b) best-of-4 from one {len(ids)}-token prompt, {new} new tokens each")
    print(f"  {'path':<12}{'forward tokens':>16}{'prompt tokens':>15}")
    print(f"  {'plain':<12}{plain:>16}{plain - decode:>15}")
    print(f"  {'cached':<12}{ours:>16}{ours - decode:>15}")
    print(
        f"  the prompt is computed once with the cache: {len(ids) - 1} tokens + the last token "
        f"of each sample ({ours - decode == len(ids) - 1 + 4}); hits {cache.report.hits}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run, only checks it works")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the whole chat")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--max-mib", type=float, default=48, help="the prefix cache's budget")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    warnings.simplefilter("ignore")
    s = sizes(args.smoke)
    rounds = 1 if args.smoke else args.rounds
    max_bytes = int((0.5 if args.smoke else args.max_mib) * 2**20)
    print(
        f"torch {torch.__version__}, {args.threads} threads; Nemotron-H: {s['layers']} layers, "
        f"hidden {s['hidden']}, vocab {s['vocab']}, random weights"
    )
    m = Counted(hybrid_config(s))
    m.generate([FIRST_WORD] * 32, 2)  # warm up
    same = chat_section(m, s, args.smoke, rounds, max_bytes)
    best_of_section(m, s, args.smoke, max_bytes)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
