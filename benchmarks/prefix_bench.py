"""``PrefixSnapshotIndex`` on an 8,192-token prompt: 100 live entries against 10,000.

    python benchmarks/prefix_bench.py            # the full run (about a minute)
    python benchmarks/prefix_bench.py --smoke    # a quick pass that only checks it runs

The entries are what an engine serving chat publishes (SPEC 13's ``app``
placement): a handful of system prompts (500-3,000 tokens, all opening with
the same 40-token preamble), and conversations under them with an entry at
every message end, in a chat template (every message opens with the same
three header tokens, so branches part a few tokens past a message end).
Among them, the conversation the probe continues (the *trunk*: system
prompt 0 and its turns, about 6,000 tokens, an entry at each message end), and
branches off it at its message ends - regenerated replies, edited
questions, searches that fork - so half the other entries share a long
prefix with the probe. The rest are other conversations, some branching off each
other. The trunk is in both indexes; the other entries fill them to 100 and
to 10,000 live entries.

The probe is the trunk plus a new user message, 8,192 tokens in all: its
longest live prefix is the trunk's last message end in both indexes.

Timed, each call on its own clock, the sizes interleaved round by round,
medians of every call:

- ``match(probe)``;
- ``plan_prefill(seq, probe, publish_at=...)`` then ``release(plan)``: the
  hit, plus the trunk's message ends and the prompt end minus one token
  to publish, all live already after the first call (the steady state of a
  regenerate);
- ``publish(seq, tokens, length)`` of a new assistant reply after the
  probe (into a free slot; each batch is discarded untimed afterwards), and
  the same into a full index, where every publish evicts.

The ratio is the 10,000-entry median over the 100-entry one, from the same
run. Goals: ``match`` at 10,000 entries within 2x of 100, and under 1 ms.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable

from ssm_rollback import PrefixEntry, PrefixSnapshotIndex

# Token ids below 10 are the template's own; words are drawn from the rest.
BOS, START, END, NEWLINE, SYSTEM, USER, ASSISTANT = range(1, 8)
VOCAB = 50_000
SYSTEMS = 8
PREAMBLE = 40  # "You are a helpful assistant. Today is ...": every system prompt opens with it


def message(rng: random.Random, role: int, low: int, high: int) -> list[int]:
    """One chat-template message: the header, ``low``-``high`` words, the end."""
    words = [rng.randrange(10, VOCAB) for _ in range(rng.randint(low, high))]
    return [START, role, NEWLINE, *words, END, NEWLINE]


def turn(rng: random.Random, role: int) -> list[int]:
    """A user question (20-400 tokens) or an assistant reply (50-600 tokens)."""
    return message(rng, role, 20, 400) if role == USER else message(rng, role, 50, 600)


class Corpus:
    """The probe, its trunk, and entries (a token list and a length each) around them."""

    def __init__(self, prompt: int, seed: int = 0) -> None:
        rng = self.rng = random.Random(seed)
        preamble = [BOS, START, SYSTEM, NEWLINE, *(rng.randrange(10, VOCAB) for _ in range(36))]
        self.systems = [
            preamble + message(rng, SYSTEM, 500, 3_000)[3:] for _ in range(SYSTEMS)
        ]  # the preamble stands in for the first message's header and opening words
        trunk, ends = list(self.systems[0]), [len(self.systems[0])]
        role = USER
        while len(trunk) < prompt * 0.75:  # about 6,000 tokens at 8,192
            trunk += turn(rng, role)
            ends.append(len(trunk))
            role = ASSISTANT if role == USER else USER
        self.trunk, self.trunk_ends, self.next_role = trunk, ends, role
        question = message(rng, USER, 1, 1)
        filler = prompt - len(trunk) - len(question)
        assert filler > 0, f"a {prompt}-token prompt is shorter than its trunk"
        words = [rng.randrange(10, VOCAB) for _ in range(filler)]
        self.probe = trunk + question[:-2] + words + question[-2:]
        #: Conversations drawn so far, to branch off: tokens, then each message end and
        #: the role of the message after it.
        self.others: list[tuple[list[int], list[tuple[int, int]]]] = []

    def trunk_entries(self) -> list[tuple[list[int], int]]:
        return [(self.trunk, end) for end in self.trunk_ends]

    def branch(self) -> list[tuple[list[int], int]]:
        """1-4 new messages off a message end of the trunk, or of another conversation."""
        rng = self.rng
        kind = rng.random()
        if kind < 0.5 or not self.others:  # off the trunk: shares up to ~5,000 tokens
            at = rng.randrange(len(self.trunk_ends))
            base = self.trunk[: self.trunk_ends[at]]
            role = USER if at % 2 == 0 else ASSISTANT  # the system prompt ends at index 0
        elif kind < 0.8:  # a new conversation under a system prompt (the first ones more often)
            system = self.systems[min(int(rng.expovariate(0.5)), SYSTEMS - 1)]
            base, role = list(system), USER
        else:  # off another conversation's message end
            tokens, ends = rng.choice(self.others)
            end, role = rng.choice(ends)
            base = tokens[:end]
        tokens, ends = base, []
        for _ in range(rng.randint(1, 4)):
            tokens = tokens + turn(rng, role)
            role = ASSISTANT if role == USER else USER
            ends.append((len(tokens), role))
        if len(self.others) < 2_000:
            self.others.append((tokens, ends))
        return [(tokens, end) for end, _ in ends]


def build(corpus: Corpus, entries: int, headroom: int) -> PrefixSnapshotIndex:
    """An index of ``capacity = entries + headroom`` holding ``entries`` live entries."""
    index = PrefixSnapshotIndex(entries + headroom)
    for tokens, length in corpus.trunk_entries():
        index.publish(0, tokens, length)
    while len(index) < entries:
        for tokens, length in corpus.branch():
            if len(index) < entries:
                index.publish(0, tokens, length)  # an existing prefix is refreshed, not counted
    assert len(index) == entries
    return index


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter_ns()
    call()
    return (time.perf_counter_ns() - start) / 1_000


class Sizes:
    """One index per size (with headroom), one full one per size, and the probe's arguments."""

    def __init__(self, prompt: int, sizes: tuple[int, ...], headroom: int) -> None:
        self.corpus = corpus = Corpus(prompt)
        self.indexes = {n: build(corpus, n, headroom) for n in sizes}
        self.full = {n: build(corpus, n, 0) for n in sizes}
        self.publish_at = [*corpus.trunk_ends, prompt - 1]
        hits = {n: index.match(corpus.probe) for n, index in self.indexes.items()}
        lengths = {None if hit is None else hit.length for hit in hits.values()}
        assert lengths == {corpus.trunk_ends[-1]}, f"the probe must hit the trunk's end: {hits}"
        for index in self.indexes.values():  # places the prompt end minus one: then steady
            index.release(index.plan_prefill(0, corpus.probe, publish_at=self.publish_at))
        self.rng = random.Random(1)

    def reply(self) -> list[int]:
        """The probe and a new assistant reply: what decode publishes at the reply's end."""
        return self.corpus.probe + message(self.rng, ASSISTANT, 50, 600)

    def match(self, n: int, calls: int) -> list[float]:
        index, probe = self.indexes[n], self.corpus.probe
        return [timed(lambda: index.match(probe)) for _ in range(calls)]

    def plan(self, n: int, calls: int) -> list[float]:
        index, probe, at = self.indexes[n], self.corpus.probe, self.publish_at
        times = []
        for _ in range(calls):
            start = time.perf_counter_ns()
            index.release(index.plan_prefill(0, probe, publish_at=at))
            times.append((time.perf_counter_ns() - start) / 1_000)
        return times

    def publish(self, n: int, calls: int, *, full: bool) -> list[float]:
        index = self.full[n] if full else self.indexes[n]
        replies = [self.reply() for _ in range(calls)]
        times, saves = [], []
        for tokens in replies:
            start = time.perf_counter_ns()
            save = index.publish(0, tokens, len(tokens))
            times.append((time.perf_counter_ns() - start) / 1_000)
            saves.append(save)
        if not full:  # back to ``n`` live entries, untimed
            for save in saves:
                assert save is not None
                index.discard(PrefixEntry(save.length, save.slot, save.ticket))
        return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run, only checks it works")
    parser.add_argument("--calls", type=int, default=200, help="calls per size per round")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (median)")
    args = parser.parse_args(argv)
    prompt, sizes, calls, rounds = (
        (8_192, (40, 200), 3, 1) if args.smoke else (8_192, (100, 10_000), args.calls, args.rounds)
    )
    start = time.perf_counter()
    bench = Sizes(prompt, sizes, headroom=calls + 2)
    corpus = bench.corpus
    print(
        f"a {prompt:,}-token probe; its longest live prefix: {corpus.trunk_ends[-1]:,} tokens "
        f"(the trunk: system prompt of {corpus.trunk_ends[0]:,}, {len(corpus.trunk_ends) - 1} "
        f"messages); indexes built in {time.perf_counter() - start:.1f} s"
    )
    operations: dict[str, Callable[[int], list[float]]] = {
        "match": lambda n: bench.match(n, calls),
        "plan_prefill + release": lambda n: bench.plan(n, calls),
        "publish, free slot": lambda n: bench.publish(n, calls, full=False),
        "publish, evicting": lambda n: bench.publish(n, calls, full=True),
    }
    times: dict[tuple[str, int], list[float]] = {(op, n): [] for op in operations for n in sizes}
    for _ in range(rounds):  # interleaved, so drift hits every size alike
        for op, run in operations.items():
            for n in sizes:
                times[op, n] += run(n)
    median = {key: statistics.median(values) for key, values in times.items()}
    small, large = sizes
    print(f"\nmedian us per call, {rounds} rounds x {calls} calls per size")
    print(f"{'operation':<24} {f'{small:,} entries':>15} {f'{large:,} entries':>16} {'ratio':>7}")
    for op in operations:
        a, b = median[op, small], median[op, large]
        print(f"{op:<24} {a:>15.1f} {b:>16.1f} {b / a:>6.2f}x")
    ratio = median["match", large] / median["match", small]
    print(
        f"\nmatch at {large:,} entries / at {small:,}: {ratio:.2f} (goal: at most 2); "
        f"{median['match', large]:.0f} us (goal: under 1,000)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
