"""``HybridPrefixCache``: shared prompt prefixes of a ``transformers`` model, within a byte budget.

Each published prefix is a whole copy of the cache after exactly its tokens
(SSM and conv state, attention KV cropped to it by construction: the
prefill stops there). A ``PrefixSnapshotIndex`` (SPEC 13) decides which
prefix a prompt hits, pins that hit while the prefill stands on it, places
each publish, and evicts when its slots run out; ``PrefixCopies`` holds the
copies within ``max_bytes``, evicting the least recently used (an earlier,
shorter publish of the same prefill included: the longest prefixes are the
ones the next turn reuses).

``prepare`` hands out a fresh copy, never the stored tensors, so nothing
stays pinned once it returns: the caller may decode on, crop or drop the
cache it got.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import attrs
import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import Cache

from ... import PrefillPlan, PrefixEntry, PrefixHit, PrefixSnapshotIndex
from ..._core.prefix import MAX_CAPACITY
from ..._errors import (
    InvalidArgumentError,
    StaleSnapshotError,
    check_non_negative_int,
)
from . import recurrent_offset
from .arguments import check_flag, text_vocab_size, token_ids
from .cache_copy import cache_lengths, cache_nbytes, clone_cache
from .chat import checked_positions
from .prefix_models import CacheLayout, check_continues
from .prefix_report import PrefixCacheReport
from .prefix_store import PrefixCopies
from .prompts import read_prompts
from .stream import CachedForward

__all__ = ["HybridPrefixCache", "PrefixCacheReport"]


@final
class HybridPrefixCache:
    """Shared prompt prefixes of one model (SSM state and attention KV), held within ``max_bytes``.

    ``prepare(input_ids, publish_at=...)`` returns a cache holding the prompt
    but its last token (or, with ``prefill_rest=False``, up to the last
    publish), from the longest stored prefix plus a prefill of the rest that
    stores each ``publish_at`` position on the way; pass it to
    ``model.generate(input_ids, cache=cache)`` (``past_key_values=`` in
    older ``transformers``), or pass the prefix cache itself to the
    decoders (``prefix_cache=``). One thread at a time.
    """

    def __init__(self, model: torch.nn.Module, *, max_bytes: int) -> None:
        self._vocab = text_vocab_size(model)
        self._max_bytes = check_non_negative_int("max_bytes", max_bytes)
        check_continues(model, self._vocab)
        self._config: PretrainedConfig = getattr(model, "config")  # noqa: B009 (typed here)
        self._pass = CachedForward(model)
        one = self._forward(None, [0])
        # What the model's own caches hold, after one token and two: only such caches are stored.
        self._layout = CacheLayout.of(model, one, self._forward(None, [0, 0]))
        # The smallest entry (one token) bounds how many can ever fit: the index's slots.
        smallest = cache_nbytes(one)
        # Past the index's 2**24 slots, a budget holds more bytes, not more prefixes.
        self._index = PrefixSnapshotIndex(min(self._max_bytes // max(smallest, 1), MAX_CAPACITY))
        self._copies = PrefixCopies(self._max_bytes)
        self._counts = dict.fromkeys(attrs.fields_dict(PrefixCacheReport), 0)

    @property
    def model(self) -> torch.nn.Module:
        """The model whose prefixes this holds."""
        return self._pass.model

    @property
    def max_bytes(self) -> int:
        """The budget: bytes held never exceed it."""
        return self._max_bytes

    @property
    def capacity(self) -> int:
        """Most prefixes it can hold: ``max_bytes`` over the bytes of a one-token prefix (at
        most 2**24, the index's most slots)."""
        return self._index.capacity

    @property
    def report(self) -> PrefixCacheReport:
        """Hits, misses, tokens reused and computed, evictions, declined, bytes held: so far."""
        counts = {**self._counts, "entries": len(self._copies), "bytes_held": self._copies.held}
        counts["max_bytes"] = self._max_bytes
        counts["declined"] += self._index.stats.declined  # every slot pinned, or capacity 0
        return PrefixCacheReport(**counts)

    def __len__(self) -> int:
        return len(self._copies)

    def __repr__(self) -> str:
        return (
            f"HybridPrefixCache(max_bytes={self._max_bytes}, entries={len(self._copies)}, "
            f"bytes_held={self._copies.held})"
        )

    def entries(self) -> tuple[PrefixEntry, ...]:
        """The stored prefixes, by slot."""
        return self._index.entries()

    def prepare(
        self, input_ids: object, *, publish_at: Sequence[int] = (), prefill_rest: bool = True
    ) -> Cache:
        """A fresh cache holding ``input_ids`` (one row) but its last token; stores ``publish_at``.

        Starts from the longest stored prefix of the prompt (at most all but
        its last token) and computes the rest, stopping at each
        ``publish_at`` position (each ``< len(input_ids)``) to store the
        cache there. ``model.generate(input_ids, cache=cache)``
        then computes only the last prompt token.

        ``prefill_rest=False`` stops at the last ``publish_at`` position
        past the stored prefix (or at that prefix) and leaves the rest of the
        prompt to ``generate``, whose first forward pass computes it with the
        last token: one forward pass fewer when the prompt ends in new tokens.
        """
        tokens = self._prompt(input_ids)
        positions = checked_positions(publish_at, len(tokens))
        cache, _ = self._prefill(tokens, positions, rest=check_flag("prefill_rest", prefill_rest))
        # Nothing computed nor hit: an empty cache, as generate makes.
        return cache if cache is not None else DynamicCache(config=self._config)

    def publish_generated(
        self, sequences: object, cache: Cache, *, followed_by: object = ()
    ) -> int:
        """Store ``cache`` after ``model.generate(..., cache=cache)`` returned ``sequences``.

        ``generate`` feeds every token but the last it returns, so the cache
        then stands after ``sequences[0][:-1]``: that prefix is stored, and the
        next turn's prompt, which extends the answer, hits there.

        ``followed_by``: the tokens the next prompt has right after
        ``sequences`` (a chat template's end of the assistant message). The
        last token and these are computed now, in one forward pass on a copy
        of ``cache``, and the prefix stored is ``sequences[0] + followed_by``:
        the next turn then starts at the message end, and its first forward
        pass is its new message alone. ``cache`` itself is left as it was.

        The length stored under, or 0 (held already, declined, or nothing to store).
        """
        tokens = self._prompt(sequences, "sequences")
        after = token_ids("followed_by", followed_by, self._vocab, ordered=True)
        if not after:
            return self._publish_state(tokens[:-1], cache)
        self._check_stands(tokens[:-1], cache)
        if not self._index.capacity:
            return 0  # nothing can be stored: compute nothing for it
        start = clone_cache(cache) if len(tokens) > 1 else None
        closed = self._forward(start, [tokens[-1], *after])
        self._counts["tokens_computed"] += 1 + len(after)
        return self._publish_whole([*tokens, *after], closed)

    def publish_state(self, tokens: Sequence[int] | torch.Tensor, cache: Cache) -> int:
        """Store ``cache``, standing after exactly ``tokens``; the length stored under, or 0.

        ``tokens``: a list, tuple or 1-D tensor (or array) of token ids. ``cache``
        must be one row of this model's own cache (its layers, their state
        tensors' shapes and dtypes), and every layer of it that counts its
        tokens must hold ``len(tokens)``; else nothing is stored and
        ``InvalidArgumentError`` says so (a cache of another model or of a
        batch, or of another call, or decoded on since). A cache of a model
        of the very same layout but other weights cannot be told apart.
        """
        return self._publish_state(token_ids("tokens", tokens, self._vocab, ordered=True), cache)

    def _publish_state(self, tokens: list[int], cache: Cache) -> int:
        if not tokens:
            return 0  # nothing to share
        self._check_stands(tokens, cache)
        return self._publish_whole(tokens, cache)

    def _check_stands(self, tokens: list[int], cache: Cache) -> None:
        """Refuse a ``cache`` whose layers do not all hold ``len(tokens)`` tokens, or that is not
        one row of this model's own (``CacheLayout``)."""
        if not tokens:
            return  # nothing is read from it
        held = cache_lengths(cache)
        if held != {len(tokens)}:
            raise InvalidArgumentError(
                f"'cache' must stand after exactly the {len(tokens)} tokens to store (all but "
                f"the last of generate's output: pass the cache that generate call was given), "
                f"got layers holding {sorted(held)} tokens: nothing stored"
            )
        self._layout.check(cache)
        behind = recurrent_offset.offset(cache, 0)
        if behind:  # crop_attention leaves the recurrent state; a restore leaves the KV
            raise InvalidArgumentError(
                f"'cache' holds recurrent state after {len(tokens) + behind} tokens and attention "
                f"after {len(tokens)}: crop_attention leaves the recurrent state alone and a "
                f"snapshot restore the attention, and a rollback needs both: nothing stored"
            )

    def _publish_whole(self, tokens: list[int], cache: Cache) -> int:
        before = self._counts["published"]
        self._publish(tokens, len(tokens), cache, None)
        return len(tokens) if self._counts["published"] > before else 0

    def check_valid(self) -> None:
        """Raise ``InvariantError`` naming the first broken invariant; for tests."""
        self._index.check_valid()
        self._copies.check(self._index.entries())

    # -- the prefill ---------------------------------------------------------------------

    def _prompt(self, input_ids: object, name: str = "input_ids") -> list[int]:
        prompts = read_prompts(input_ids, None, None, self._vocab, name)
        if len(prompts.rows) != 1:
            raise InvalidArgumentError(
                f"'{name}' must hold one row (a prefix cache prepares one prompt at a time), "
                f"got {len(prompts.rows)}"
            )
        return prompts.rows[0]

    def _forward(self, cache: Cache | None, tokens: list[int]) -> Cache:
        # A prefill chunk's logits are never read: one row of them, where the model can.
        return self._pass(cache, tokens, last_only=True)[0]

    def _prefill(
        self, tokens: list[int], positions: set[int], *, rest: bool
    ) -> tuple[Cache | None, int]:
        """The cache after the longest stored prefix, then computed on through each position
        (storing it there) and, with ``rest``, to the last token; and how many tokens it holds
        (``None`` for none)."""
        plan = self._index.plan_prefill(0, tokens)  # the hit only: publishes come as stored
        self._sync()
        try:
            cache = self._start(plan, tokens)
            done = plan.start
            # The last token is generate's to feed; without ``rest``, so is all after the publishes.
            ends = {p for p in positions if p > done} | ({len(tokens) - 1} if rest else set())
            for end in sorted(ends):
                if end > done:
                    cache = self._forward(cache, tokens[done:end])
                    self._counts["tokens_computed"] += end - done
                    done = end
                if end in positions:
                    assert cache is not None  # a publish stands after a computed chunk
                    self._publish(tokens, end, cache, plan.hit)
        finally:
            self._index.release(plan)
        return cache, done

    def _start(self, plan: PrefillPlan, tokens: list[int]) -> Cache | None:
        """A fresh copy of the plan's hit, checked against its ticket and tokens; else ``None``."""
        if plan.hit is None:
            self._counts["misses"] += 1
            return None
        entry = plan.hit.entry
        kept = self._copies.get(entry.slot)
        if kept is None or kept.entry != entry or list(kept.tokens) != tokens[: entry.length]:
            raise StaleSnapshotError(
                f"prefix slot {entry.slot} must hold {entry} of the prompt's first "
                f"{entry.length} tokens, holds {None if kept is None else kept.entry}: "
                f"nothing restored"
            )
        self._counts["hits"] += 1
        self._counts["tokens_reused"] += entry.length
        self._copies.touch(entry.slot)
        return clone_cache(kept.cache)

    # -- storing and evicting ------------------------------------------------------------

    def _publish(self, tokens: list[int], length: int, cache: Cache, hit: PrefixHit | None) -> None:
        """Store the cache, standing after ``tokens[:length]``, unless that prefix is held;
        ``hit``, the entry a prefill stands on, is never evicted for it."""
        save = self._index.publish(0, tokens, length)
        self._sync()  # the index may have evicted an entry for a slot
        if save is None:  # held already (refreshed), or declined: every slot pinned
            self._copies.touch_prefix(tokens, length)
            return
        entry = PrefixEntry(save.length, save.slot, save.ticket)
        keep = {entry.slot} if hit is None else {entry.slot, hit.entry.slot}
        try:
            stored = self._copies.store(self._index, entry, tokens, cache, keep)
        except BaseException:
            if entry in self._index.entries() and self._copies.get(entry.slot) is None:
                self._index.discard(entry)  # a failed copy leaves no entry without one
            raise
        self._counts["evictions"] += stored.evicted
        self._counts["published" if stored.kept else "declined"] += 1

    def _sync(self) -> None:
        """Forget the copies of entries the index evicted for a slot (rule 7 of the index)."""
        self._counts["evictions"] += self._copies.sync(self._index.entries())
