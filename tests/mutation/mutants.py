# ruff: noqa: E501  (snippets are the source text, whole lines)
"""The hand-written mutants ``run_mutants.py`` applies, one behaviour change each.

Each names its module (under ``src/ssm_rollback``), an original snippet that
occurs exactly once there, its replacement, and the test files to run. A
mutant with ``equivalent`` set changes no observable behaviour; the text
says why, and it is left out of the score.

The snippets of ``_ring.py``, ``_batched.py``, ``rollback.py``,
``_effect_values.py``, ``backends/_torch_copy.py`` and the wire modules
(``_wire.py``, ``_wire_values.py``, ``_wire_channel.py``) match the current
code (run them with ``--module``); many of the other modules' were written for
commit dba0ee3 and no longer occur (``README.md`` says how to run those).
"""

from __future__ import annotations

from mutant_base import Mutant
from mutants_core import CORE_MUTANTS
from mutants_hf_tp import HF_TP_MUTANTS
from mutants_more import MORE_MUTANTS
from mutants_pool import POOL_MUTANTS
from mutants_prefix import PREFIX_MUTANTS

CHECKS = "tests/test_check_boundaries.py"
CORE = (
    "tests/test_ring.py",
    "tests/test_rollback.py",
    "tests/test_apply_effects.py",
    "tests/test_effects.py",
    "tests/test_scheduler_simulation.py",
    CHECKS,
    "tests/test_peer_bugs.py",
    "tests/test_batched.py",
    "tests/test_ring_machine.py",
    "tests/test_fake_pool.py",
    "tests/test_torch_pool.py",
)
TORCH = (
    "tests/test_torch_pool.py",
    "tests/test_apply_effects.py",
    CHECKS,
    "tests/test_peer_bugs.py",
)
FAKE = (
    "tests/test_fake_pool.py",
    "tests/test_apply_effects.py",
    "tests/test_scheduler_simulation.py",
    CHECKS,
    "tests/test_peer_bugs.py",
)
HF = (
    "tests/test_hf_pool_kit.py",
    "tests/test_transformers_integration.py",
    CHECKS,
    "tests/test_peer_bugs.py",
)
# The bitwise decode test runs for every model type (minutes): keep four of them.
HF_SELECT = ("-k", "not fresh_decode or bamba or falcon_h1 or zamba2 or qwen3_next")
RESERVE = ("tests/test_reserve_hardening.py", "tests/test_reserve.py", CHECKS)
# The refreshed modules (_ring, _batched, rollback, _effect_values, the torch copier) run
# narrower selections: the files that exercise them, fastest first (``-x`` stops at the
# first failure).
RING_TESTS = (
    "tests/test_ring.py",
    CHECKS,
    "tests/test_rollback.py",
    "tests/test_batched.py",
    "tests/test_scheduler_simulation.py",
    "tests/test_peer_bugs.py",
    "tests/test_ring_machine.py",
)
ROLLBACK_TESTS = (
    "tests/test_rollback.py",
    CHECKS,
    "tests/test_ring.py",
    "tests/test_verify.py",
    "tests/test_scheduler_simulation.py",
    "tests/test_peer_bugs.py",
)
BATCHED_TESTS = (CHECKS, "tests/test_batched.py", "tests/test_ring.py", "tests/test_rollback.py")
EFFECT_TESTS = (
    "tests/test_effects.py",
    CHECKS,
    "tests/test_rollback.py",
    "tests/test_verify.py",
    "tests/test_apply_effects.py",
    "tests/test_batched.py",
    "tests/test_wire.py",
)
COPY_TESTS = (CHECKS, "tests/test_torch_pool.py")
# The wire modules: the format's own tests first (no processes), then the process groups:
# one rank in this process (fast), then 2 and 4 ranks launched over gloo (~20 s; a mutant
# that hangs them fails at gloo's 60 s timeout, or at the runner's --timeout).
DISTRIBUTED = "tests/test_distributed.py"
WIRE_TESTS = ("tests/test_wire.py", DISTRIBUTED)
CHANNEL_TESTS = (DISTRIBUTED,)


def _m(
    name: str,
    module: str,
    original: str,
    replacement: str,
    tests: tuple[str, ...] = CORE,
    *,
    select: tuple[str, ...] = (),
    equivalent: str = "",
) -> Mutant:
    return Mutant(name, module, original, replacement, tests, select, equivalent)


TICKETS = "_core/ring/_tickets.py"
RING = "_core/ring/_ring.py"
RING_ROWS = "_core/ring/_rows.py"
ROLLBACK = "_core/rollback.py"
POOL = "pool/__init__.py"
SLOTS = "pool/_slot_tags.py"
EFFECTS = "_core/effect_dict.py"
EFFECT_VALUES = "_core/effects.py"
BATCHED = "_core/boundaries.py"
COLUMNS = "_core/columns.py"
FAKE_MOD = "backends/fake.py"
TORCH_MOD = "backends/torch.py"
TORCH_CHECKS = "backends/_torch_checks.py"
TORCH_COPY = "backends/_torch_copy.py"
HF_MOD = "integrations/_hf/crop.py"
HF_POOL_MOD = "integrations/_hf/cache_pool.py"
RESERVE_MOD = "reserve/_depth.py"
WIRE = "_tp/wire.py"
WIRE_VALUES = "_tp/wire_values.py"
CHANNEL = "_tp/channel.py"
GROUPS = "_tp/groups.py"

MUTANTS: tuple[Mutant, ...] = (
    # -- _ring.py ---------------------------------------------------------------------------
    # record / _record: arguments, order, cursor, slot tables, tickets (rules 2-5 and 10)
    _m(
        "ring_record_returns_none",  # the sanity mutant: every test of a save must fail
        RING,
        "return None if recorded is None else recorded[0]",
        "return None",
        RING_TESTS,
    ),
    _m(
        "ring_record_accepts_negative",
        RING,
        "if type(token_position) is not int or token_position < 0:  # rule 2",
        "if type(token_position) is not int:  # rule 2",
        RING_TESTS,
    ),
    _m(
        "ring_cursor_wraps_late",
        RING,
        "ring._cursor = slot + 1 if slot + 1 < capacity else 0",
        "ring._cursor = slot + 1 if slot + 1 <= capacity else 0",
        RING_TESTS,
    ),
    _m(
        "ring_record_equal_position_allowed",
        RING,
        "if token_position <= ring._newest:",
        "if token_position < ring._newest:",
        RING_TESTS,
    ),
    _m(
        # The slot tables make eviction by ownership (rule 5) the overwrite itself: this
        # one keeps the owner's position under the new ticket.
        "ring_no_eviction",
        RING,
        "        ring._positions[slot] = token_position\n",
        "",
        RING_TESTS,
    ),
    _m(
        "ring_record_keeps_stale_newest",
        RING,
        "    ring._newest = token_position\n",
        "",
        RING_TESTS,
    ),
    _m(
        "ring_ticket_reused_per_slot",
        RING,
        "        ring._tickets[slot] = ticket\n",
        "",
        RING_TESTS,
    ),
    _m(
        "ring_ticket_is_position",
        RING,
        "    ticket = tickets.mint_ticket()\n",
        "    ticket = token_position\n",
        RING_TESTS,
    ),
    _m(
        "ring_ticket_counter_per_ring",
        RING,
        "    ticket = tickets.mint_ticket()\n",
        "    ticket = max(ring._tickets, default=0) + 1\n",
        RING_TESTS,
    ),
    _m(
        "ring_ticket_blocks_overlap",  # a step's block of tickets overlaps the next mint's
        TICKETS,
        "mint_ticket = itertools.count(_BLOCK, _BLOCK).__next__",
        "mint_ticket = itertools.count(_BLOCK, 1).__next__",
        RING_TESTS,
    ),
    _m(
        "ring_ticket_blocks_floor",  # a batch of more than _BLOCK rows mints too few tickets
        TICKETS,
        "blocks = [mint_ticket() for _ in range(-(-count // _BLOCK))]",
        "blocks = [mint_ticket() for _ in range(count // _BLOCK)]",
        RING_TESTS,
    ),
    _m(
        "tickets_copy_is_shallow",  # a ring, an index or a pool's tags shares its tables
        TICKETS,
        "    def __copy__(self) -> Self:",
        "    def _copy(self) -> Self:",
        ("tests/test_pickle_tickets.py",),
    ),
    _m(
        "tickets_unpickled_counter_not_advanced",  # a fresh process mints the pickled tickets
        TICKETS,
        "        advance_past(max(high if type(high) is int else -1, self._newest_held()))",
        "        pass",
        ("tests/test_pickle_tickets.py",),
    ),
    _m(
        "tickets_advanced_onto_the_ticket",  # the counter's next mint is the ticket itself
        TICKETS,
        "itertools.count((ticket // _BLOCK + 1) * _BLOCK, _BLOCK)",
        "itertools.count((ticket // _BLOCK) * _BLOCK, _BLOCK)",
        ("tests/test_pickle_tickets.py",),
    ),
    _m(
        "tickets_pickled_without_high_water",  # only the tickets the ring still keeps count
        TICKETS,
        "    state[_HIGH_WATER] = mint_ticket()",
        "    state[_HIGH_WATER] = -1",
        ("tests/test_pickle_tickets.py",),
    ),
    _m(
        "ring_unpickled_ignores_its_tickets",  # a state pickled without a high water
        RING,
        "        return max(self._tickets, default=-1)",
        "        return -1",
        ("tests/test_pickle_tickets.py",),
    ),
    _m(
        "ring_ticket_single_block_strict",
        TICKETS,
        "    if count <= _BLOCK:\n",
        "    if count < _BLOCK:\n",
        RING_TESTS,
        equivalent=(
            "for count == _BLOCK the block path mints one block and keeps its first _BLOCK "
            "tickets: the same tickets, as a list instead of a range"
        ),
    ),
    # _record_rows: the batched step's inlined _record
    _m(
        "batch_ring_cursor_wraps_late",
        RING_ROWS,
        "ring._cursor = slot + 1 if slot + 1 < ring._capacity else 0",
        "ring._cursor = slot + 1 if slot + 1 <= ring._capacity else 0",
        RING_TESTS,
    ),
    _m(
        "batch_ring_no_eviction",
        RING_ROWS,
        "            ring._positions[slot] = position\n",
        "",
        RING_TESTS,
    ),
    _m(
        "batch_ring_newest_not_put_back",  # a refused step leaves the rows it passed moved on
        RING_ROWS,
        "    for ring in rings:\n        ring._newest = ring._newest_live()\n",
        "",
        RING_TESTS,
    ),
    _m(
        "ring_newest_live_guess_at_cursor",
        RING,
        "guess = positions[self._cursor - 1]",
        "guess = positions[self._cursor % len(positions)]",
        RING_TESTS,
    ),
    _m(
        "ring_newest_live_trusts_an_empty_guess",
        RING,
        "return guess if guess != _EMPTY else max(positions)",
        "return guess",
        RING_TESTS,
    ),
    _m(
        "batch_ring_stale_newest",
        RING_ROWS,
        "        ring._newest = position\n",
        "",
        RING_TESTS,
    ),
    _m(
        "batch_ring_ticket_reused_per_slot",
        RING_ROWS,
        "            ring._tickets[slot] = ticket\n",
        "",
        RING_TESTS,
    ),
    _m(
        "batch_ring_tickets_reversed",  # the saves carry other rings' tickets
        RING_ROWS,
        "return slots, tickets\n",
        "return slots, tickets[::-1]\n",
        RING_TESTS,
    ),
    _m(
        "batch_ring_disabled_records",  # a disabled ring passes the fast path's check
        RING_ROWS,
        "if position <= ring._newest or not ring._capacity:",
        "if position <= ring._newest:",
        RING_TESTS,
    ),
    _m(
        "batch_ring_ready_allows_equal",  # the fast path lets a repeated position through
        RING_ROWS,
        "if position <= ring._newest or not ring._capacity:",
        "if position < ring._newest or not ring._capacity:",
        RING_TESTS,
    ),
    _m(
        "batch_ring_disabled_rows_not_filtered",
        BATCHED,
        "    if kept is not None:  # some rows",
        "    if False:  # some rows",
        BATCHED_TESTS,
    ),
    # lookups: _slot_holding (the newest-slot guess, then a scan), entry_for, the walks
    _m(
        "ring_lookup_newest_excluded",
        RING,
        "        if position > self._newest:\n            return None\n",
        "        if position >= self._newest:\n            return None\n",
        RING_TESTS,
    ),
    _m(
        "ring_lookup_newest_bound_dropped",
        RING,
        "        if position > self._newest:\n            return None\n",
        "",
        RING_TESTS,
        equivalent=(
            "only a shortcut: truncate_after and discard write _EMPTY (-1) over every slot "
            "they drop and clear() empties the tables, so no slot holds a position above "
            "_newest and both the guess and the scan find nothing for one"
        ),
    ),
    _m(
        "ring_lookup_guess_unwrapped",  # cursor 0: the guess at -1 is returned as slot -1
        RING,
        "            return newest % len(positions)",
        "            return newest",
        RING_TESTS,
    ),
    _m(
        "ring_lookup_guess_at_cursor",
        RING,
        "        newest = self._cursor - 1  # where",
        "        newest = self._cursor % len(positions) if positions else 0  # where",
        RING_TESTS,
        equivalent=(
            "the guess is verified (positions[guess] == position) before it is returned, and a "
            "wrong guess falls back to the scan: any guessed slot gives the same answer"
        ),
    ),
    _m(
        "ring_lookup_guess_unverified",
        RING,
        "if positions and positions[newest] == position:",
        "if positions and positions[newest] >= position:",
        RING_TESTS,
    ),
    _m(
        "ring_lookup_empty_table_unchecked",
        RING,
        "if positions and positions[newest] == position:",
        "if positions[newest] == position:",
        RING_TESTS,
        equivalent=(
            "an empty table means no record since construction or clear(), so _newest is -1 "
            "and every position >= 0 has already returned None above"
        ),
    ),
    _m(
        "ring_lookup_scan_skipped",  # only the newest slot is ever found
        RING,
        "            return positions.index(position)\n",
        "            return None\n",
        RING_TESTS,
    ),
    _m(
        "ring_entry_for_wrong_ticket",
        RING,
        "SsmRingEntry(position, slot, self._tickets[slot])",
        "SsmRingEntry(position, slot, self._tickets[slot] + 1)",
        RING_TESTS,
    ),
    _m(
        "ring_entry_for_accepts_negative",
        RING,
        "        if type(position) is not int or position < 0:\n"
        "            position = check_non_negative_int",
        "        if type(position) is not int:\n            position = check_non_negative_int",
        RING_TESTS,
    ),
    _m(
        "ring_disabled_records",
        RING,
        "    if not capacity:\n        return None\n",
        "    if not capacity:\n        capacity = 1\n",
        RING_TESTS,
    ),
    _m(
        "ring_is_enabled_for_zero",
        RING,
        "return self._capacity > 0",
        "return self._capacity >= 0",
        RING_TESTS,
    ),
    _m(
        "ring_len_counts_empty_slots",
        RING,
        "return len(self._positions) - self._positions.count(_EMPTY)",
        "return len(self._positions)",
        RING_TESTS,
    ),
    _m(
        "ring_oldest_first_from_slot_0",
        RING,
        "itertools.chain(range(cursor, len(positions)), range(cursor))",
        "itertools.chain(range(cursor), range(cursor, len(positions)))",
        RING_TESTS,
    ),
    _m(
        "ring_oldest_first_yields_empty_slots",
        RING,
        "range(cursor)):\n            if positions[slot] != _EMPTY:",
        "range(cursor)):\n            if True:",
        RING_TESTS,
    ),
    _m(
        "ring_newest_first_is_oldest_first",
        RING,
        "return (positions[slot] for slot in ring._newest_first_slots())",
        "return (positions[slot] for slot in ring._oldest_first())",
        RING_TESTS,
    ),
    _m(
        "ring_newest_first_skips_slot_0",
        RING,
        "range(cursor - 1, -1, -1), range(len(positions) - 1, cursor - 1, -1)",
        "range(cursor - 1, 0, -1), range(len(positions) - 1, cursor - 1, -1)",
        RING_TESTS,
    ),
    _m(
        "ring_newest_first_skips_the_oldest",
        RING,
        "range(cursor - 1, -1, -1), range(len(positions) - 1, cursor - 1, -1)",
        "range(cursor - 1, -1, -1), range(len(positions) - 1, cursor, -1)",
        RING_TESTS,
    ),
    # truncate_after (rule 6), discard (rule 7), clear (rule 8)
    _m(
        "ring_truncate_drops_keep",
        RING,
        "if position <= keep:",
        "if position < keep:",
        RING_TESTS,
    ),
    _m(
        "ring_truncate_no_cursor_update",
        RING,
        "                self._cursor = slot + 1 if slot + 1 < self._capacity else 0\n",
        "",
        RING_TESTS,
    ),
    _m(
        "ring_truncate_cursor_wraps_late",
        RING,
        "self._cursor = slot + 1 if slot + 1 < self._capacity else 0",
        "self._cursor = slot + 1 if slot + 1 <= self._capacity else 0",
        RING_TESTS,
    ),
    _m(
        "ring_truncate_stale_newest",
        RING,
        "                self._newest = position\n",
        "",
        RING_TESTS,
    ),
    _m(
        "ring_truncate_keeps_dropped",  # the dropped entries stay live
        RING,
        "            positions[slot] = _EMPTY\n",
        "",
        RING_TESTS,
    ),
    _m(
        "ring_truncate_walk_short",  # the walk stops one slot early: the oldest is never reached
        RING,
        "        for _ in range(count):\n",
        "        for _ in range(count - 1):\n",
        RING_TESTS,
    ),
    _m(
        "ring_truncate_wraps_at_capacity",  # the walk wraps at capacity, not the table's end
        RING,
        "slot = slot - 1 if slot else count - 1",
        "slot = slot - 1 if slot else self._capacity - 1",
        RING_TESTS,
    ),
    _m(
        "ring_truncate_all_no_clear",  # nothing survives, and clear() is skipped
        RING,
        "            positions[slot] = _EMPTY\n        self.clear()\n",
        "            positions[slot] = _EMPTY\n",
        RING_TESTS,
    ),
    _m(
        "ring_discard_no_cursor_back",
        RING,
        "            self._cursor = slot\n",
        "",
        RING_TESTS,
    ),
    _m(
        "ring_discard_stale_newest",
        RING,
        "            self._newest = self._newest_live()\n",
        "",
        RING_TESTS,
    ),
    _m(
        "ring_discard_keeps_owner",  # the failed save's entry stays live
        RING,
        "        self._positions[slot] = _EMPTY\n",
        "",
        RING_TESTS,
    ),
    _m(
        "ring_discard_cursor_back_always",
        RING,
        "        if position == self._newest:\n            self._cursor = slot\n",
        "        self._cursor = slot\n        if position == self._newest:\n",
        RING_TESTS,
    ),
    _m(
        "ring_clear_keeps_positions",
        RING,
        "        self._positions.clear()\n",
        "",
        RING_TESTS,
    ),
    _m(
        "ring_clear_keeps_cursor",
        RING,
        "        self._tickets.clear()\n        self._cursor = 0\n",
        "        self._tickets.clear()\n",
        RING_TESTS,
    ),
    _m(
        "ring_clear_keeps_newest",
        RING,
        "        self._cursor = 0\n        self._newest = -1\n",
        "        self._cursor = 0\n",
        RING_TESTS,
    ),
    # check_valid (rule 9)
    _m(
        "ring_check_len_ge_capacity",
        RING,
        "or len(positions) > capacity:",
        "or len(positions) >= capacity:",
        RING_TESTS,
    ),
    _m(
        "ring_check_len_off_by_one",
        RING,
        "or len(positions) > capacity:",
        "or len(positions) > capacity + 1:",
        RING_TESTS,
    ),
    _m(
        "ring_check_table_lengths_dropped",
        RING,
        "if len(positions) != len(tickets) or len(positions) > capacity:",
        "if len(positions) > capacity:",
        RING_TESTS,
    ),
    _m(
        "ring_check_cursor_equal_capacity_ok",
        RING,
        "if not (0 <= cursor < capacity or",
        "if not (0 <= cursor <= capacity or",
        RING_TESTS,
    ),
    _m(
        "ring_check_cursor_past_table_ok",
        RING,
        " or cursor > len(positions):",
        ":",
        RING_TESTS,
    ),
    _m(
        "ring_check_negative_position_ok",
        RING,
        "if any(p < 0 for p in in_order) or len(set(in_order)) != len(in_order):",
        "if len(set(in_order)) != len(in_order):",
        RING_TESTS,
    ),
    _m(
        "ring_check_position_order_strict",
        RING,
        "if any(a >= b for a, b in itertools.pairwise(in_order)):",
        "if any(a > b for a, b in itertools.pairwise(in_order)):",
        RING_TESTS,
        equivalent=(
            "the check before it refuses two live entries at one position, so no pair it "
            "sees is equal: 'a >= b' and 'a > b' agree on every pair"
        ),
    ),
    _m(
        "ring_check_ticket_order_dropped",
        RING,
        "if any(a >= b for a, b in itertools.pairwise(ticket_order)) or any(",
        "if any(",
        RING_TESTS,
    ),
    _m(
        "ring_check_ticket_zero_ok",
        RING,
        "            t <= 0 for t in ticket_order\n",
        "            t < 0 for t in ticket_order\n",
        RING_TESTS,
    ),
    _m(
        "ring_check_newest_dropped",
        RING,
        "if self._newest != newest or self._newest_live() != newest:",
        "if False:",
        RING_TESTS,
    ),
    # -- rollback.py ------------------------------------------------------------------------
    # snapshot_boundary_if_ssm: identity fast path, the full check as its fallback, the save
    _m(
        "rb_snapshot_in_thinking",
        ROLLBACK,
        "if is_boundary is False or in_thinking is True:",
        "if is_boundary is False:",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_save_ticket_is_position",
        ROLLBACK,
        "trusted_save(seq, recorded[0], token_position, recorded[1])",
        "trusted_save(seq, recorded[0], token_position, token_position)",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_save_seq_slot_swapped",
        ROLLBACK,
        "trusted_save(seq, recorded[0], token_position, recorded[1])",
        "trusted_save(recorded[0], seq, token_position, recorded[1])",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_disabled_ring_saves",
        ROLLBACK,
        "    if recorded is None:\n        return None\n    return trusted_save",
        "    return trusted_save",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_fast_seq_type_unchecked",
        ROLLBACK,
        "        type(seq) is not int\n        or type(token_position)",
        "        False\n        or type(token_position)",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_fast_position_type_unchecked",
        ROLLBACK,
        "        or type(token_position) is not int\n",
        "",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_fast_seq_negative_unchecked",
        ROLLBACK,
        "        or seq < 0\n",
        "",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_fast_position_negative_unchecked",
        ROLLBACK,
        "        or token_position < 0\n",
        "",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_fast_ring_type_unchecked",
        ROLLBACK,
        "        or type(ring) is not SsmDecodeRing\n",
        "",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_fast_in_thinking_unchecked",
        ROLLBACK,
        "        or (in_thinking is not False and in_thinking is not True)\n",
        "",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_fast_is_boundary_unchecked",
        ROLLBACK,
        "        or (is_boundary is not False and is_boundary is not True)\n",
        "",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_no_boundary_seq_type_unchecked",  # the no-boundary fast path skips a check
        ROLLBACK,
        "        and type(seq) is int\n        and ",
        "        and ",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_no_boundary_position_type_unchecked",  # the no-boundary fast path skips a check
        ROLLBACK,
        "        and type(token_position) is int\n        and ",
        "        and ",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_no_boundary_seq_negative_unchecked",  # the no-boundary fast path skips a check
        ROLLBACK,
        "        and seq >= 0\n        and ",
        "        and ",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_no_boundary_position_negative_unchecked",  # the no-boundary fast path skips a check
        ROLLBACK,
        "        and token_position >= 0\n        and ",
        "        and ",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_no_boundary_ring_type_unchecked",  # the no-boundary fast path skips a check
        ROLLBACK,
        "        and type(ring) is SsmDecodeRing\n        and ",
        "        and ",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_no_boundary_in_thinking_unchecked",
        ROLLBACK,
        "        and (in_thinking is False or in_thinking is True)\n    ):\n        return None",
        "    ):\n        return None",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_fallback_seq_unchecked",
        ROLLBACK,
        '        seq = check_non_negative_int("seq", seq)\n        token_position',
        "        token_position",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_fallback_in_thinking_unchecked",
        ROLLBACK,
        '        _check_bool("in_thinking", in_thinking)\n',
        "",
        ROLLBACK_TESTS,
    ),
    # boundaries, limits and the plan
    _m(
        "rb_boundary_pair_0_1_unchecked",
        ROLLBACK,
        "if index > 0 and _boundary_at(boundaries, index - 1) >= found:",
        "if index > 1 and _boundary_at(boundaries, index - 1) >= found:",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_boundary_equal_pair_ok",
        ROLLBACK,
        "if index > 0 and _boundary_at(boundaries, index - 1) >= found:",
        "if index > 0 and _boundary_at(boundaries, index - 1) > found:",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_boundary_0_unchecked",
        ROLLBACK,
        "    if index >= 0:\n        found = _boundary_at(boundaries, index)",
        "    if index > 0:\n        found = _boundary_at(boundaries, index)",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_boundary_negative_ok",
        ROLLBACK,
        "    if type(value) is not int or value < 0:\n        value = check_non_negative_int(f",
        "    if type(value) is not int:\n        value = check_non_negative_int(f",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_last_boundary_equal_current_refused",
        ROLLBACK,
        "if last > current_len:",
        "if last >= current_len:",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_last_boundary_unchecked",
        ROLLBACK,
        "if last > current_len:",
        "if False:",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_limit_max",
        ROLLBACK,
        "min(at_most, ceiling)",
        "max(at_most, ceiling)",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_find_limit_exclusive",
        ROLLBACK,
        "if limit is not None and position > limit:",
        "if limit is not None and position >= limit:",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_find_not_a_boundary",
        ROLLBACK,
        "if index >= 0 and boundaries[index] == position:",
        "if index >= 0:",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_current_len_guard_off_by_one",
        ROLLBACK,
        "if newest > current_len:",
        "if newest > current_len + 1:",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_current_len_guard_refuses_equal",
        ROLLBACK,
        "if newest > current_len:",
        "if newest >= current_len:",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_current_len_guard_dropped",
        ROLLBACK,
        "if newest > current_len:",
        "if False:",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_disabled_not_declined_first",
        ROLLBACK,
        "        if not ring.is_enabled:\n            return RollbackDeclined(seq, "
        "DeclineReason.RING_DISABLED)\n",
        "",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_no_truncate",
        ROLLBACK,
        "        ring.truncate_after(plan.keep_len)  # the commit",
        "        pass  # the commit",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_restore_wrong_slot",
        ROLLBACK,
        "SsmSnapshotRestore(seq, entry.snapshot_slot, target, entry.ticket)",
        "SsmSnapshotRestore(seq, ring.next_slot, target, entry.ticket)",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_tokens_dropped_off_by_one",
        ROLLBACK,
        "return RollbackPlan(seq, target, current_len - target, (restore,))",
        "return RollbackPlan(seq, target, current_len - target - 1, (restore,))",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_attention_first_boundary_declined",
        ROLLBACK,
        "    if index < 0:\n        return RollbackDeclined(seq, DeclineReason.NO_BOUNDARY)",
        "    if index <= 0:\n        return RollbackDeclined(seq, DeclineReason.NO_BOUNDARY)",
        ROLLBACK_TESTS,
    ),
    _m(
        "rb_shortfall_off_by_one",
        ROLLBACK,
        "if _last_boundary_index(boundaries, limit) < 0:",
        "if _last_boundary_index(boundaries, limit) <= 0:",
        ROLLBACK_TESTS,
    ),
    # -- pool.py ----------------------------------------------------------------------------
    _m(
        "pool_failed_saves_not_forgotten",
        POOL,
        "                _forget(ring_for(save.seq), save)\n",
        "                pass\n",
    ),
    _m(
        "pool_forget_ticket_unchecked",
        POOL,
        "if entry is not None and entry.ticket == save.ticket and "
        "entry.snapshot_slot == save.slot:",
        "if entry is not None and entry.snapshot_slot == save.slot:",
    ),
    _m(
        "pool_forget_slot_unchecked",
        POOL,
        "if entry is not None and entry.ticket == save.ticket and "
        "entry.snapshot_slot == save.slot:",
        "if entry is not None and entry.ticket == save.ticket:",
    ),
    _m(
        "pool_forget_none_ring_unchecked",
        POOL,
        "    if ring is None:\n        return\n",
        "",
        equivalent=(
            "_check_runs refuses every save whose row has no ring before any copy, and a pool "
            "reports as failed only saves it was given, so _forget never receives None"
        ),
    ),
    _m(
        "pool_check_pool_ignores_stored_ticket",
        POOL,
        'for member in ("save", "restore", "stored_position", "stored_ticket"):',
        'for member in ("save", "restore", "stored_position"):',
    ),
    # -- _slots.py ----------------------------------------------------------------------------
    _m(
        "slots_index_bounds_dropped",
        SLOTS,
        '        self._check_ids("seq", seq, "slot", slot)\n',
        "",
    ),
    _m(
        "slots_commit_failed_not_cleared",
        SLOTS,
        "            i = flat[k]\n            held_positions[i] = held_tickets[i] = None\n",
        "            i = flat[k]\n",
    ),
    _m(
        "slots_commit_keeps_old_ticket",
        SLOTS,
        "            held_tickets[i] = seen[i] = ticket\n",
        "            held_tickets[i] = ticket if held_tickets[i] is None else held_tickets[i]\n"
        "            seen[i] = ticket\n",
    ),
    _m(
        "slots_forget_keeps_ticket",
        SLOTS,
        "        for i in flat:\n            positions[i] = tickets[i] = None",
        "        for i in flat:\n            positions[i] = None",
    ),
    # -- _batched.py: snapshot_boundaries ----------------------------------------------------
    # the known-dtype table: a column of one of these skips the per-element type scan
    _m(
        "batch_known_float_typecodes",
        COLUMNS,
        '**dict.fromkeys("bBhHiIlLqQ", int),',
        '**dict.fromkeys("bBhHiIlLqQfd", int),',
        BATCHED_TESTS,
    ),
    _m(
        "batch_known_float_dtypes",
        COLUMNS,
        '_INT_TYPES = ("int8",',
        '_INT_TYPES = ("float32", "float64", "int8",',
        BATCHED_TESTS,
    ),
    _m(
        "batch_known_bool_as_int",
        COLUMNS,
        '    "bool": bool,\n',
        '    "bool": int,\n',
        BATCHED_TESTS,
    ),
    _m(
        "batch_known_torch_bool_as_int",
        COLUMNS,
        '"torch.bool": bool,',
        '"torch.bool": int,',
        BATCHED_TESTS,
    ),
    _m(
        "batch_unknown_dtype_trusted",
        COLUMNS,
        "known = _KNOWN_TYPES.get(str(dtype))",
        "known = _KNOWN_TYPES.get(str(dtype), int)",
        BATCHED_TESTS,
    ),
    # the validation fast paths and their fallbacks
    _m(
        "batch_ints_trust_any_known",
        COLUMNS,
        "(known is int or set(map(type, column)) == {int})",
        "(known is not None or set(map(type, column)) == {int})",
        BATCHED_TESTS,
    ),
    _m(
        "batch_ints_negative_ok",
        COLUMNS,
        "and min(cast(list[int], column)) >= least",
        "and min(cast(list[int], column)) >= least - 1",
        BATCHED_TESTS,
    ),
    _m(
        "batch_ints_zero_takes_fallback",
        COLUMNS,
        "and min(cast(list[int], column)) >= least",
        "and min(cast(list[int], column)) > least",
        BATCHED_TESTS,
    ),
    _m(
        "batch_flags_trust_any_known",
        COLUMNS,
        "    if known is bool:\n",
        "    if known is not None:\n",
        BATCHED_TESTS,
    ),
    _m(
        "batch_flags_of_two_dimensions_read_by_dtype",
        COLUMNS,
        '    _one_dimensional(name, values)\n    column, known = as_list(name, values, "bools")\n',
        '    column, known = as_list(name, values, "bools")\n',
        (*BATCHED_TESTS, "tests/test_fail_closed.py"),
    ),
    _m(
        "batch_columns_of_two_dimensions_read_by_dtype",
        COLUMNS,
        '    if shape is not None and hasattr(values, "tolist") and len(shape) > 1:',
        "    if False:",
        (*BATCHED_TESTS, "tests/test_fail_closed.py"),
    ),
    _m(
        "batch_array_subclass_trusted_by_dtype",
        COLUMNS,
        '        if f"{kind.__module__}.{kind.__qualname__}" in _PLAIN_ARRAYS:\n',
        "        if True:\n",
        (*BATCHED_TESTS, "tests/test_fail_closed.py"),
    ),
    _m(
        "batch_flags_values_unchecked",
        COLUMNS,
        "not (types <= {bool, int} and set(column) <= {0, 1})",
        "not (types <= {bool, int})",
        BATCHED_TESTS,
    ),
    _m(
        "batch_step_lengths_unchecked",
        COLUMNS,
        "    if len(set(lengths.values())) > 1:\n",
        "    if False:\n",
        BATCHED_TESTS,
    ),
    _m(
        "batch_step_duplicate_rows_ok",
        BATCHED,
        "    if rows is not None and len(set(row_list)) != n:",
        "    if False:",
        BATCHED_TESTS,
    ),
    # the rings of the rows
    _m(
        "batch_step_ring_count_off_by_one",
        COLUMNS,
        "rows and max(rows) >= len(rings):",
        "rows and max(rows) > len(rings):",
        BATCHED_TESTS,
    ),
    _m(
        "batch_step_fast_rings_too_few",
        COLUMNS,
        "in_order and type(rings) is list and len(rings) >= len(rows)",
        "in_order and type(rings) is list and len(rings) >= len(rows) - 1",
        BATCHED_TESTS,
    ),
    _m(
        "batch_step_fast_rings_ignore_rows",
        COLUMNS,
        "in_order and type(rings) is list and len(rings) >= len(rows)",
        "type(rings) is list and len(rings) >= len(rows)",
        BATCHED_TESTS,
    ),
    _m(
        "batch_step_ring_types_unchecked",
        COLUMNS,
        "    if set(map(type, found)) - {SsmDecodeRing}:\n",
        "    if False:\n",
        BATCHED_TESTS,
    ),
    # the selection of the rows that record, and its all-rows shortcut
    _m(
        "batch_step_in_thinking_records",
        BATCHED,
        "chosen = [k for k in compress(range(n), boundary) if not thinking[k]]",
        "chosen = list(compress(range(n), boundary))",
        BATCHED_TESTS,
    ),
    _m(
        "batch_all_rows_ignores_boundary",
        BATCHED,
        "if not thinking_rows and boundary.count(True) == n:",
        "if not thinking_rows:",
        BATCHED_TESTS,
    ),
    _m(
        "batch_all_rows_ignores_thinking",
        BATCHED,
        "if not thinking_rows and boundary.count(True) == n:",
        "if boundary.count(True) == n:",
        BATCHED_TESTS,
    ),
    _m(
        "batch_chosen_rows_are_indices",
        BATCHED,
        "chosen_rows = chosen if rows is None else list(map(row_list.__getitem__, chosen))",
        "chosen_rows = chosen",
        BATCHED_TESTS,
    ),
    _m(
        "batch_shared_rings_unchecked",  # a ring named for two rows is not checked in-step
        RING_ROWS,
        "        newest[ring] = (position, j)\n",
        "",
        BATCHED_TESTS,
    ),
    _m(
        "batch_shared_ring_allows_equal",
        RING_ROWS,
        "if before is not None and position <= before[0]:",
        "if before is not None and position < before[0]:",
        BATCHED_TESTS,
    ),
    _m(
        "batch_step_order_allows_equal",
        RING_ROWS,
        "if before is None and position <= ring._newest:",
        "if before is None and position < ring._newest:",
        BATCHED_TESTS,
    ),
    # -- the batched step's checks in _slots.py and pool.py ----------------------------------
    # -- _effect_values.py --------------------------------------------------------------------
    _m(
        "effects_dict_drops_ticket",
        EFFECT_VALUES,
        "**attrs.asdict(self, recurse=False)}\n\n\n@attrs.frozen\nclass SsmSnapshotSave(",
        '**attrs.asdict(self, recurse=False, filter=lambda a, _: a.name != "ticket")}\n\n\n@attrs.frozen\nclass SsmSnapshotSave(',
        EFFECT_TESTS,
    ),
    _m(
        "effects_accept_dict_swapped",
        EFFECT_VALUES,
        '"seq": self.seq, "index": self.index, "ticket": self.ticket}',
        '"seq": self.index, "index": self.seq, "ticket": self.ticket}',
        EFFECT_TESTS,
    ),
    _m(
        "effects_negative_ok",
        EFFECT_VALUES,
        "if type(value) is not int or value < 0:  # effects",
        "if type(value) is not int:  # effects",
        EFFECT_TESTS,
    ),
    _m(
        "effects_ticket_unvalidated",
        EFFECT_VALUES,
        "    token_position: int = attrs.field(validator=_non_negative_int)\n    ticket: int = attrs.field(validator=_non_negative_int)",
        "    token_position: int = attrs.field(validator=_non_negative_int)\n    ticket: int = attrs.field()",
        EFFECT_TESTS,
    ),
    _m(
        "effects_source_negative_ok",
        EFFECT_VALUES,
        "int | None) -> None:\n    if value is not None and (type(value) is not int or value < 0):",
        "int | None) -> None:\n    if value is not None and type(value) is not int:",
        EFFECT_TESTS,
    ),
    _m(
        "effects_restore_kind_is_save",  # the old effects_kinds_swapped: one kind for both
        EFFECT_VALUES,
        'kind: ClassVar[str] = "ssm_snapshot_restore"',
        'kind: ClassVar[str] = "ssm_snapshot_save"',
        EFFECT_TESTS,
    ),
    _m(
        "effects_trusted_save_fields_swapped",
        EFFECT_VALUES,
        'for name in ("seq", "slot", "token_position", "ticket", "source")',
        'for name in ("seq", "slot", "ticket", "token_position", "source")',
        EFFECT_TESTS,
    ),
    _m(
        "effects_trusted_save_drops_source",
        EFFECT_VALUES,
        "    _set_source(save, source)\n",
        "    _set_source(save, None)\n",
        EFFECT_TESTS,
    ),
    # -- _effects.py --------------------------------------------------------------------------
    _m(
        "effects_dict_extra_keys_ok",
        EFFECTS,
        "if keys != set(fields):",
        "if not keys >= set(fields):",
    ),
    # -- backends/fake.py ---------------------------------------------------------------------
    _m(
        "fake_stored_value_ignores_tags",
        FAKE_MOD,
        "        if self._tags.stored_ticket(seq, slot) is None:\n            return None\n",
        "",
        FAKE,
    ),
    _m(
        "fake_copies_count_batches",
        FAKE_MOD,
        "            stored[i] = live[seq]\n        self.copies += len(rows)",
        "            stored[i] = live[seq]\n        self.copies += 1",
        FAKE,
    ),
    _m(
        "fake_restore_wrong_row",
        FAKE_MOD,
        "            live[seq] = stored[i]",
        "            live[(seq + 1) % len(live)] = stored[i]",
        FAKE,
    ),
    # -- backends/_torch_copy.py --------------------------------------------------------------
    # destination rows a range: one index_select into a narrow view
    _m(
        "torch_copy_move_range_args_swapped",
        TORCH_COPY,
        "first, order = self._as_range(dst, src)",
        "first, order = self._as_range(src, dst)",
        COPY_TESTS,
    ),
    _m(
        "torch_copy_dst_range_from_row_0",
        TORCH_COPY,
        "out=_rows(t, dim, first, count))",
        "out=_rows(t, dim, 0, count))",
        COPY_TESTS,
    ),
    _m(
        "torch_copy_range_order_trusted",
        TORCH_COPY,
        "if last - first == count - 1 and rows == self._ascending(first, last):",
        "if last - first == count - 1:",
        COPY_TESTS,
    ),
    _m(
        "torch_copy_range_test_off_by_one",
        TORCH_COPY,
        "    if max(rows) - first + 1 != count:",
        "    if max(rows) - first != count:",
        COPY_TESTS,
    ),
    _m(
        "torch_copy_order_off_by_one",
        TORCH_COPY,
        "        order[row - first] = value",
        "        order[(row - first + 1) % count] = value",
        COPY_TESTS,
    ),
    # the choice between _foreach_copy_ and the index ops
    _m(
        "torch_copy_threads_ignored",
        TORCH_COPY,
        "if self._auto and torch.get_num_threads() != 1:",
        "if False:",
        COPY_TESTS,
    ),
    _m(
        "torch_copy_wide_threshold_strict",
        TORCH_COPY,
        "_row_bytes(t, batch_dim) >= WIDE_ROW_BYTES",
        "_row_bytes(t, batch_dim) > WIDE_ROW_BYTES",
        COPY_TESTS,
    ),
    _m(
        "torch_copy_narrow_rows_skipped_when_mixed",
        TORCH_COPY,
        "        if not all(by_row):\n",
        "        if not any(by_row):\n",
        COPY_TESTS,
    ),
    _m(
        "torch_copy_index_ops_skip_inverted",
        TORCH_COPY,
        "            if not done\n",
        "            if done\n",
        COPY_TESTS,
    ),
    # _foreach_copy_ over the rows' views, in source-row order
    _m(
        "torch_copy_each_row_unsorted",
        TORCH_COPY,
        "    if any(b < a for a, b in pairwise(src)):\n",
        "    if False:\n",
        COPY_TESTS,
        equivalent=(
            "the sort only orders the memory traffic: dst holds no row twice and the source "
            "and target are different RowSets, so every order writes the same bytes"
        ),
    ),
    _m(
        "torch_copy_each_row_sorts_src_only",
        TORCH_COPY,
        "src, dst = [src[k] for k in order], [dst[k] for k in order]",
        "src = [src[k] for k in order]",
        COPY_TESTS,
    ),
    _m(
        "torch_copy_each_row_direction_swapped",
        TORCH_COPY,
        "torch._foreach_copy_([to_rows[r] for r in dst], [from_rows[r] for r in src])",
        "torch._foreach_copy_([from_rows[r] for r in src], [to_rows[r] for r in dst])",
        COPY_TESTS,
    ),
    _m(
        "torch_copy_row_views_on_dim_0",
        TORCH_COPY,
        "list(self.tensors[i].unbind(self._dim))",
        "list(self.tensors[i].unbind(0))",
        COPY_TESTS,
    ),
    # the index ops: source rows a range (one index_copy_), else gather and scatter
    _m(
        "torch_copy_src_range_args_swapped",
        TORCH_COPY,
        "first, order = self._as_range(src, dst) if src_unique else (None, [])",
        "first, order = self._as_range(dst, src) if src_unique else (None, [])",
        COPY_TESTS,
    ),
    _m(
        "torch_copy_src_range_from_row_0",
        TORCH_COPY,
        "t.index_copy_(dim, index, _rows(s, dim, first, count))",
        "t.index_copy_(dim, index, _rows(s, dim, 0, count))",
        COPY_TESTS,
    ),
    _m(
        "torch_copy_scatter_indices_swapped",
        TORCH_COPY,
        "src_index, dst_index = self._indices(src, dst)",
        "dst_index, src_index = self._indices(src, dst)",
        COPY_TESTS,
    ),
    _m(
        "torch_copy_scratch_rows_on_dim_0",
        TORCH_COPY,
        "        shape[self._dim] = count",
        "        shape[0] = count",
        COPY_TESTS,
    ),
    # row_views: the widest integer dtype a row divides into
    _m(
        "torch_copy_row_views_narrowest_first",
        TORCH_COPY,
        "_ROW_DTYPES: Final = (torch.int64, torch.int32, torch.int16, torch.uint8)",
        "_ROW_DTYPES: Final = (torch.uint8, torch.int16, torch.int32, torch.int64)",
        COPY_TESTS,
    ),
    # -- backends/torch.py --------------------------------------------------------------------
    _m(
        "torch_owned_check_dropped",
        TORCH_MOD,
        "            if now != memory:",
        "            if False:",
        TORCH,
    ),
    _m(
        "torch_overlapping_memory_taken",
        TORCH_CHECKS,
        "        if stride <= spanned:\n",
        "        if False:\n",
        TORCH,
    ),
    _m(
        "torch_overlap_span_not_summed",
        TORCH_CHECKS,
        "        spanned += stride * (size - 1)\n",
        "        spanned = stride\n",
        TORCH,
    ),
    _m(
        "torch_fingerprint_no_pointer",
        TORCH_CHECKS,
        "return (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor.device)",
        "return (0, tensor.shape, tensor.stride(), tensor.dtype, tensor.device)",
        TORCH,
    ),
    _m(
        "torch_fingerprint_no_strides",
        TORCH_CHECKS,
        "return (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor.device)",
        "return (tensor.data_ptr(), tensor.shape, (), tensor.dtype, tensor.device)",
        TORCH,
    ),
    _m(
        "torch_fingerprint_no_shape",
        TORCH_CHECKS,
        "return (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor.device)",
        "return (tensor.data_ptr(), torch.Size(), tensor.stride(), tensor.dtype, tensor.device)",
        TORCH,
    ),
    _m(
        "torch_storage_grows_dim_0",
        TORCH_MOD,
        "    shape[batch_dim] *= slots",
        "    shape[0] *= slots",
        TORCH,
    ),
    _m(
        "torch_batch_dim_missing_ok",
        TORCH_CHECKS,
        "if tensor.dim() <= batch_dim:",
        "if tensor.dim() < batch_dim:",
        TORCH,
    ),
    _m(
        "torch_row_count_mismatch_ok",
        TORCH_CHECKS,
        "        elif tensor.shape[batch_dim] != rows:",
        "        elif False:",
        TORCH,
    ),
    # -- integrations/transformers.py ---------------------------------------------------------
    _m(
        "hf_crop_checks_interleaved",
        HF_MOD,
        "    plans = [_crop_plan(idx, layer, length) for idx, layer in enumerate(layers)]",
        "    plans = (_crop_plan(idx, layer, length) for idx, layer in enumerate(layers))",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_full_crop_refuses_exact_length",
        HF_MOD,
        "    if length > held:\n        raise InvalidArgumentError(",
        "    if length >= held:\n        raise InvalidArgumentError(",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_full_crop_length_unchecked",
        HF_MOD,
        "    if length > held:\n        raise InvalidArgumentError(",
        "    if False:\n        raise InvalidArgumentError(",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_sliding_window_off_by_one",
        HF_MOD,
        "first_needed = max(0, length - (layer.sliding_window - 1))",
        "first_needed = max(0, length - layer.sliding_window)",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_sliding_dropped_check_off_by_one",
        HF_MOD,
        "    if first_needed < dropped:",
        "    if first_needed <= dropped:",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_sliding_dropped_check_dropped",
        HF_MOD,
        "    if first_needed < dropped:",
        "    if False:",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_sliding_length_not_updated",
        HF_MOD,
        "        layer.cumulative_length = length\n",
        "",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_parallel_layer_own_crop",
        HF_MOD,
        "crop = DynamicLayer.crop if hybrid else type(layer).crop",
        "crop = type(layer).crop",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_cache_change_check_dropped",
        HF_POOL_MOD,
        "            if current is not ref.tensor:",
        "            if False:",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_restore_skips_cache_check",
        HF_POOL_MOD,
        "        self._check_unchanged()\n        # Read before the copy",
        "        # Read before the copy",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_save_skips_cache_check",
        HF_POOL_MOD,
        "        self._check_unchanged()\n        if not isinstance(saves, SaveBatch | Sequence):",
        "        if not isinstance(saves, SaveBatch | Sequence):",
        HF,
        select=HF_SELECT,
    ),
    # -- reserve: what the transformers layout caches, and LFM2's default pattern ------------
    _m(
        "reserve_hf_mamba2_state_in_model_dtype",  # a bf16 ring overcommitted about 1.7x
        "reserve/_models.py",
        '    "mamba2": ModelType("mamba2", _mamba_layers, float32_state=_HF_MAMBA2_FLOAT32),\n',
        '    "mamba2": ModelType("mamba2", _mamba_layers),\n',
        ("tests/test_reserve.py",),
    ),
    _m(
        "reserve_lfm2_default_pattern_all_conv",
        "reserve/_layers.py",
        '    if f.list("full_attn_idxs") is None:\n',
        "    if False:\n",
        ("tests/test_reserve_configs.py",),
    ),
    # -- reserve.py: decode_rollback_ring_slots -----------------------------------------------
    _m(
        "reserve_fit_equal_max_is_memory",
        RESERVE_MOD,
        "    elif fit >= maximum:",
        "    elif fit > maximum:",
        RESERVE,
    ),
    _m(
        "reserve_override_equal_fit_refused",
        RESERVE_MOD,
        "        if slots > fit:",
        "        if slots >= fit:",
        RESERVE,
    ),
    _m(
        "reserve_override_unchecked",
        RESERVE_MOD,
        "        if slots > fit:",
        "        if False:",
        RESERVE,
    ),
    _m(
        "reserve_fit_ignores_sequences",
        RESERVE_MOD,
        "fit = max(0, free - speculative - shared) // (sequences * per_slot)",
        "fit = max(0, free - speculative - shared) // per_slot",
        RESERVE,
    ),
    _m(
        "reserve_zero_bytes_divides",
        RESERVE_MOD,
        'sequences = check_positive("max_sequences", max_sequences)',
        "sequences = max_sequences",
        RESERVE,
    ),
    _m(
        "reserve_total_ignores_sequences",
        RESERVE_MOD,
        "total = slots * sequences * per_slot",
        "total = slots * per_slot",
        RESERVE,
    ),
    _m(
        "reserve_maximum_rule_uses_fit",
        RESERVE_MOD,
        "        slots, rule = maximum, DepthRule.MAXIMUM",
        "        slots, rule = fit, DepthRule.MAXIMUM",
        RESERVE,
    ),
    _m(
        "reserve_env_not_defaulted",
        RESERVE_MOD,
        "    environment = os.environ if env is None else env",
        "    environment = {} if env is None else env",
        RESERVE,
    ),
    _m(
        "reserve_env_beats_flag",
        RESERVE_MOD,
        "    if override is not None:\n        chosen = (",
        "    if override is not None and ENV_VAR not in environment:\n        chosen = (",
        RESERVE,
    ),
    # -- _wire_channel.py -------------------------------------------------------------------
    # sends_on / _backends / buffer_device: which path (sends or broadcast) and where
    _m(
        "chan_sends_on_any_cpu_backend",
        GROUPS,
        'return device.type == "cpu" and _backends(config).get("cpu") == "gloo"',
        'return device.type == "cpu"',
        CHANNEL_TESTS,
    ),
    _m(
        "chan_sends_on_ignores_device",
        GROUPS,
        'return device.type == "cpu" and _backends(config).get("cpu") == "gloo"',
        'return _backends(config).get("cpu") == "gloo"',
        CHANNEL_TESTS,
        equivalent="buffer_device gives a CUDA buffer only to a group without a CPU backend, "
        "whose get('cpu') is None: the device test never decides sends_on's answer",
    ),
    _m(
        "chan_backends_bare_name_cpu_only",
        GROUPS,
        'for device_type in (kind,) if kind else ("cpu", "cuda"):',
        'for device_type in (kind,) if kind else ("cpu",):',
        CHANNEL_TESTS,
        equivalent="a bare name sets the 'cpu' entry either way, and with one buffer_device "
        "picks the CPU and sends_on reads only it: the 'cuda' entry never decides",
    ),
    _m(
        "chan_buffer_device_cuda_beside_cpu",
        GROUPS,
        'if "cpu" not in backends and "cuda" in backends:',
        'if "cuda" in backends:',
        CHANNEL_TESTS,
    ),
    _m(
        "chan_buffer_device_never_cuda",
        GROUPS,
        'if "cpu" not in backends and "cuda" in backends:',
        "if False:",
        CHANNEL_TESTS,
    ),
    # _send: the gloo sends (tag, root, peers) and the broadcast
    _m(
        "chan_recv_untagged",
        CHANNEL,
        "self._run(lambda: group.recv([self._wire], root, TAG), self._ranks[root], what)",
        "self._run(lambda: group.recv([self._wire], root, 0), self._ranks[root], what)",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_recv_from_group_rank_0",
        CHANNEL,
        "self._run(lambda: group.recv([self._wire], root, TAG), self._ranks[root], what)",
        "self._run(lambda: group.recv([self._wire], 0, TAG), self._ranks[root], what)",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_send_to_root_too",
        CHANNEL,
        "                    if peer != root:\n",
        "                    if True:\n",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_send_skips_last_peer",
        CHANNEL,
        "            for peer in range(group.size()):\n                try:",
        "            for peer in range(group.size() - 1):\n                try:",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_broadcast_from_group_rank_0",
        CHANNEL,
        "self._run(lambda: group.broadcast(self._wire, root), None, what)",
        "self._run(lambda: group.broadcast(self._wire, 0), None, what)",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_broadcast_no_copy_back",
        CHANNEL,
        "if self._wire is not self._tensor and self._group_rank != root:",
        "if False:",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_write_no_device_copy",
        CHANNEL,
        "if self._wire is not self._tensor:  # a device buffer",
        "if False:  # a device buffer",
        CHANNEL_TESTS,
    ),
    # step: the root's group rank, cached per src; who posts
    _m(
        "chan_step_root_cached_under_0",
        CHANNEL,
        "root = self._roots.get(src)",
        "root = self._roots.get(0)",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_step_sender_by_group_rank",
        CHANNEL,
        "payload = self._post(effects) if self._rank == src else []",
        "payload = self._post(effects) if self._group_rank == src else []",
        CHANNEL_TESTS,
    ),
    # _read: the header checks and rule 3's growth
    _m(
        "chan_read_follows_only_ok",
        CHANNEL,
        "if status in (OK | FOLLOWS, REFUSED | FOLLOWS) and 0 <= length <= MAX_WORDS:",
        "if status == OK | FOLLOWS and 0 <= length <= MAX_WORDS:",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_read_follows_limit_strict",
        CHANNEL,
        "if status in (OK | FOLLOWS, REFUSED | FOLLOWS) and 0 <= length <= MAX_WORDS:",
        "if status in (OK | FOLLOWS, REFUSED | FOLLOWS) and 0 <= length < MAX_WORDS:",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_read_grow_not_doubled",
        CHANNEL,
        "self.grow(max(2 * self.capacity, 1 << (at + length - 1).bit_length()))",
        "self.grow(1 << (at + length - 1).bit_length())",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_read_grow_ignores_header",
        CHANNEL,
        "self.grow(max(2 * self.capacity, 1 << (at + length - 1).bit_length()))",
        "self.grow(max(2 * self.capacity, 1 << (length - 1).bit_length()))",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_read_length_bound_strict",
        CHANNEL,
        "or not 0 <= length <= self.capacity - at:",
        "or not 0 <= length < self.capacity - at:",
        CHANNEL_TESTS,
    ),
    # _all_non_negative: the sign byte of every payload word
    _m(
        "chan_sign_check_low_byte",
        CHANNEL,
        "return payload[_TOP_BYTE::8].isascii()",
        "return payload[7 - _TOP_BYTE :: 8].isascii()",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_sign_check_skips_last_word",
        CHANNEL,
        "[8 * at : 8 * (at + length)].tobytes()",
        "[8 * at : 8 * (at + length - 1)].tobytes()",
        CHANNEL_TESTS,
    ),
    # _encode: refusals on the sender become every rank's error
    _m(
        "chan_encode_iterable_error_escapes",
        WIRE,
        "except Exception as error:  # the caller's iterable broke",
        "except ArithmeticError as error:  # the caller's iterable broke",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_encode_limit_inclusive",
        WIRE,
        "if len(words) > limit:",
        "if len(words) >= limit:",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_encode_none_not_empty",
        WIRE,
        "return encode(() if effects is None else effects, ranged=ranged)",
        "return encode(effects, ranged=ranged)",
        CHANNEL_TESTS,
    ),
    # _post: a value past int64, refused before the header promises more (rule 3)
    _m(
        "chan_post_big_range_unchecked",
        CHANNEL,
        "if self._at + len(payload) > self.capacity and refused is None:",
        "if False:",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_post_struct_error_unnamed",
        CHANNEL,
        "found = _wire.out_of_range(payload)\n            refused, payload = _wire.refusal(",
        "found = None\n            refused, payload = _wire.refusal(",
        CHANNEL_TESTS,
    ),
    _m(
        "chan_post_fits_strict",
        CHANNEL,
        "fits = self._at + len(payload) <= self.capacity",
        "fits = self._at + len(payload) < self.capacity",
        CHANNEL_TESTS,
    ),
    # -- _wire_values.py --------------------------------------------------------------------
    _m(
        "values_accepts_length_unchecked",
        WIRE_VALUES,
        "if not len(seqs) == len(indices) == len(tickets):",
        "if False:",
        WIRE_TESTS,
    ),
    _m(
        "values_accepts_ticket_zero_kept",  # 0 on the wire is no ticket, not ticket 0
        WIRE_VALUES,
        "held = [None if t == 0 else t - 1 for t in tickets]",
        "held = [0 if t == 0 else t - 1 for t in tickets]",
        WIRE_TESTS,
    ),
    _m(
        "values_accepts_ticket_not_unshifted",  # t + 1 on the wire is ticket t
        WIRE_VALUES,
        "held = [None if t == 0 else t - 1 for t in tickets]",
        "held = [None if t == 0 else t for t in tickets]",
        WIRE_TESTS,
    ),
    _m(
        "values_accepts_columns_swapped",
        WIRE_VALUES,
        "return _built(SsmStateAccept, _ACCEPT_FIELDS, (seqs, indices, held))",
        "return _built(SsmStateAccept, _ACCEPT_FIELDS, (indices, seqs, held))",
        WIRE_TESTS,
    ),
    _m(
        "wire_accept_ticket_not_shifted",  # the sender's side: ticket t goes as t + 1
        WIRE,
        "words += [0 if a.ticket is None else a.ticket + 1 for a in accepts]",
        "words += [0 if a.ticket is None else a.ticket for a in accepts]",
        WIRE_TESTS,
    ),
    _m(
        "wire_accept_none_ticket_as_one",
        WIRE,
        "words += [0 if a.ticket is None else a.ticket + 1 for a in accepts]",
        "words += [1 if a.ticket is None else a.ticket + 1 for a in accepts]",
        WIRE_TESTS,
    ),
    _m(
        "values_restore_fields_out_of_order",
        WIRE_VALUES,
        'for name in ("seq", "slot", "token_position", "ticket")',
        'for name in ("seq", "slot", "ticket", "token_position")',
        WIRE_TESTS,
    ),
    _m(
        "values_save_batch_sources_unshifted",
        WIRE_VALUES,
        "None if sources is None else tuple(map(_UNSHIFTED, sources))",
        "None if sources is None else tuple(sources)",
        WIRE_TESTS,
    ),
    # -- _wire.py ---------------------------------------------------------------------------
    _m(
        "wire_decode_negative_one_ok",
        WIRE,
        "if not checked and min(words) < 0:",
        "if not checked and min(words) < -1:",
        WIRE_TESTS,
    ),
    _m(
        "wire_decode_trailing_ok",
        WIRE,
        "    if at != size:",
        "    if at > size:",
        WIRE_TESTS,
    ),
    _m(
        "wire_record_rows_bound_off_by_one",
        WIRE,
        "if n * width > len(words) - at:",
        "if n * width > len(words) - at + 1:",
        WIRE_TESTS,
    ),
    _m(
        "wire_record_flags_unchecked",
        WIRE,
        "if flags not in (0, HAS_SOURCES):",
        "if flags is None:",
        WIRE_TESTS,
    ),
)


MUTANTS = MUTANTS + CORE_MUTANTS + POOL_MUTANTS + PREFIX_MUTANTS + HF_TP_MUTANTS + MORE_MUTANTS
