"""The hand-written mutants ``run_mutants.py`` applies, one behaviour change each.

Each names its module (under ``src/ssm_rollback``), an original snippet that
occurs exactly once there, its replacement, and the test files to run. A
mutant with ``equivalent`` set changes no observable behaviour; the text
says why, and it is left out of the score.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Mutant:
    """One mutant: replace ``original`` (exactly once in ``module``) by ``replacement``."""

    name: str
    module: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    select: tuple[str, ...] = ()
    equivalent: str = ""


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


RING = "_ring.py"
ROLLBACK = "rollback.py"
POOL = "pool.py"
SLOTS = "_slots.py"
EFFECTS = "_effects.py"
FAKE_MOD = "backends/fake.py"
TORCH_MOD = "backends/torch.py"
TORCH_COPY = "backends/_torch_copy.py"
HF_MOD = "integrations/transformers.py"
RESERVE_MOD = "reserve.py"

MUTANTS: tuple[Mutant, ...] = (
    # -- _ring.py ---------------------------------------------------------------------------
    _m(
        "ring_record_returns_none",  # the sanity mutant: every test of a save must fail
        RING,
        "return None if recorded is None else recorded[0]",
        "return None",
    ),
    _m(
        "ring_cursor_wraps_late",
        RING,
        "self._cursor = slot + 1 if slot + 1 < capacity else 0",
        "self._cursor = slot + 1 if slot + 1 <= capacity else 0",
    ),
    _m(
        "ring_record_equal_position_allowed",
        RING,
        "if token_position <= self._newest:",
        "if token_position < self._newest:",
    ),
    _m(
        "ring_no_eviction",
        RING,
        "            del slot_of[evicted]\n",
        "            pass\n",
    ),
    _m(
        "ring_record_keeps_stale_newest",
        RING,
        "        self._newest = token_position\n",
        "",
    ),
    _m(
        "ring_ticket_reused_per_slot",
        RING,
        "ticket = self._ticket_of[slot] = _mint_ticket()",
        "ticket = self._ticket_of[slot] = self._ticket_of.get(slot) or _mint_ticket()",
    ),
    _m(
        "ring_ticket_is_position",
        RING,
        "ticket = self._ticket_of[slot] = _mint_ticket()",
        "ticket = self._ticket_of[slot] = token_position",
    ),
    _m(
        "ring_ticket_counter_per_ring",
        RING,
        "ticket = self._ticket_of[slot] = _mint_ticket()",
        "ticket = self._ticket_of[slot] = max(self._ticket_of.values(), default=0) + 1",
    ),
    _m(
        "ring_entry_for_wrong_ticket",
        RING,
        "return None if slot is None else SsmRingEntry(position, slot, self._ticket_of[slot])",
        "return None if slot is None else SsmRingEntry(position, slot, self._ticket_of[slot] + 1)",
    ),
    _m(
        "ring_entry_for_accepts_negative",
        RING,
        "        if type(position) is not int or position < 0:\n"
        "            position = check_non_negative_int",
        "        if type(position) is not int:\n            position = check_non_negative_int",
    ),
    _m(
        "ring_disabled_records",
        RING,
        "        if not capacity:\n            return None\n",
        "        if not capacity:\n            capacity = 1\n",
    ),
    _m(
        "ring_is_enabled_for_zero",
        RING,
        "return self._capacity > 0",
        "return self._capacity >= 0",
    ),
    _m(
        "ring_newest_first_is_oldest_first",
        RING,
        "return reversed(self._slot_of)",
        "return iter(self._slot_of)",
    ),
    _m(
        "ring_truncate_drops_keep",
        RING,
        "if position <= keep:",
        "if position < keep:",
    ),
    _m(
        "ring_truncate_no_cursor_update",
        RING,
        "                self._cursor = slot + 1 if slot + 1 < self._capacity else 0\n",
        "",
    ),
    _m(
        "ring_truncate_cursor_wraps_late",
        RING,
        "self._cursor = slot + 1 if slot + 1 < self._capacity else 0",
        "self._cursor = slot + 1 if slot + 1 <= self._capacity else 0",
    ),
    _m(
        "ring_truncate_keeps_owner",
        RING,
        "            del self._owner_of[slot]\n        self._newest = -1",
        "        self._newest = -1",
    ),
    _m(
        "ring_truncate_all_keeps_cursor",
        RING,
        "        self._newest = -1\n        self._cursor = 0\n\n    def discard",
        "        self._newest = -1\n\n    def discard",
    ),
    _m(
        "ring_truncate_stale_newest",
        RING,
        "                self._newest = position\n",
        "",
    ),
    _m(
        "ring_discard_no_cursor_back",
        RING,
        "            self._cursor = slot\n",
        "",
    ),
    _m(
        "ring_discard_stale_newest",
        RING,
        "            self._newest = next(reversed(slot_of), -1)\n",
        "",
    ),
    _m(
        "ring_discard_keeps_owner",
        RING,
        "        del slot_of[position]\n        del self._owner_of[slot]\n",
        "        del slot_of[position]\n",
    ),
    _m(
        "ring_discard_cursor_back_always",
        RING,
        "        if position == self._newest:\n            self._cursor = slot\n",
        "        self._cursor = slot\n        if position == self._newest:\n",
    ),
    _m(
        "ring_clear_keeps_owners",
        RING,
        "        self._owner_of.clear()\n",
        "",
    ),
    _m(
        "ring_clear_keeps_cursor",
        RING,
        "        self._owner_of.clear()\n        self._cursor = 0\n",
        "        self._owner_of.clear()\n",
    ),
    _m(
        "ring_check_slot_equal_capacity_ok",
        RING,
        "if not 0 <= slot < capacity:",
        "if not 0 <= slot <= capacity:",
    ),
    _m(
        "ring_check_len_ge_capacity",
        RING,
        "if len(slot_of) > capacity:",
        "if len(slot_of) >= capacity:",
    ),
    _m(
        "ring_check_owner_count_dropped",
        RING,
        "if len(owner_of) != len(slot_of) or any(",
        "if any(",
    ),
    _m(
        "ring_check_ticket_order_dropped",
        RING,
        "if any(a >= b for a, b in itertools.pairwise(tickets)) or -1 in tickets:",
        "if -1 in tickets:",
    ),
    _m(
        "ring_check_position_order_strict",
        RING,
        "if any(a >= b for a, b in itertools.pairwise(positions)):",
        "if any(a > b for a, b in itertools.pairwise(positions)):",
        equivalent=(
            "positions are the keys of one dict, so two live positions are never equal: "
            "'a >= b' and 'a > b' agree on every pair check_valid can see"
        ),
    ),
    _m(
        "ring_check_cursor_equal_capacity_ok",
        RING,
        "if not (0 <= self._cursor < capacity or",
        "if not (0 <= self._cursor <= capacity or",
    ),
    _m(
        "ring_check_newest_dropped",
        RING,
        "if self._newest != next(reversed(slot_of), -1):",
        "if False:",
    ),
    # -- rollback.py ------------------------------------------------------------------------
    _m(
        "rb_snapshot_in_thinking",
        ROLLBACK,
        "if not is_boundary or in_thinking:",
        "if not is_boundary:",
    ),
    _m(
        "rb_save_ticket_is_position",
        ROLLBACK,
        "SsmSnapshotSave(seq, recorded[0], token_position, recorded[1])",
        "SsmSnapshotSave(seq, recorded[0], token_position, token_position)",
    ),
    _m(
        "rb_boundary_pair_0_1_unchecked",
        ROLLBACK,
        "if index > 0 and _boundary_at(boundaries, index - 1) >= found:",
        "if index > 1 and _boundary_at(boundaries, index - 1) >= found:",
    ),
    _m(
        "rb_boundary_equal_pair_ok",
        ROLLBACK,
        "if index > 0 and _boundary_at(boundaries, index - 1) >= found:",
        "if index > 0 and _boundary_at(boundaries, index - 1) > found:",
    ),
    _m(
        "rb_boundary_0_unchecked",
        ROLLBACK,
        "    if index >= 0:\n        found = _boundary_at(boundaries, index)",
        "    if index > 0:\n        found = _boundary_at(boundaries, index)",
    ),
    _m(
        "rb_boundary_negative_ok",
        ROLLBACK,
        "    if type(value) is not int or value < 0:\n        value = check_non_negative_int(f",
        "    if type(value) is not int:\n        value = check_non_negative_int(f",
    ),
    _m(
        "rb_last_boundary_equal_current_refused",
        ROLLBACK,
        "if last > current_len:",
        "if last >= current_len:",
    ),
    _m(
        "rb_last_boundary_unchecked",
        ROLLBACK,
        "if last > current_len:",
        "if False:",
    ),
    _m(
        "rb_limit_max",
        ROLLBACK,
        "min(at_most, ceiling)",
        "max(at_most, ceiling)",
    ),
    _m(
        "rb_find_limit_exclusive",
        ROLLBACK,
        "if limit is not None and position > limit:",
        "if limit is not None and position >= limit:",
    ),
    _m(
        "rb_find_not_a_boundary",
        ROLLBACK,
        "if index >= 0 and boundaries[index] == position:",
        "if index >= 0:",
    ),
    _m(
        "rb_current_len_guard_off_by_one",
        ROLLBACK,
        "if newest > current_len:",
        "if newest > current_len + 1:",
    ),
    _m(
        "rb_current_len_guard_refuses_equal",
        ROLLBACK,
        "if newest > current_len:",
        "if newest >= current_len:",
    ),
    _m(
        "rb_current_len_guard_dropped",
        ROLLBACK,
        "if newest > current_len:",
        "if False:",
    ),
    _m(
        "rb_disabled_not_declined_first",
        ROLLBACK,
        "        if not ring.is_enabled:\n            return RollbackDeclined(seq, "
        "DeclineReason.RING_DISABLED)\n",
        "",
    ),
    _m(
        "rb_no_truncate",
        ROLLBACK,
        "        ring.truncate_after(target)\n",
        "",
    ),
    _m(
        "rb_restore_wrong_slot",
        ROLLBACK,
        "SsmSnapshotRestore(seq, entry.snapshot_slot, target, entry.ticket)",
        "SsmSnapshotRestore(seq, ring.next_slot, target, entry.ticket)",
    ),
    _m(
        "rb_tokens_dropped_off_by_one",
        ROLLBACK,
        "return RollbackPlan(seq, target, current_len - target, (restore,))",
        "return RollbackPlan(seq, target, current_len - target - 1, (restore,))",
    ),
    _m(
        "rb_attention_first_boundary_declined",
        ROLLBACK,
        "    if index < 0:\n        return RollbackDeclined(seq, DeclineReason.NO_BOUNDARY)",
        "    if index <= 0:\n        return RollbackDeclined(seq, DeclineReason.NO_BOUNDARY)",
    ),
    _m(
        "rb_shortfall_off_by_one",
        ROLLBACK,
        "if _last_boundary_index(boundaries, limit) < 0:",
        "if _last_boundary_index(boundaries, limit) <= 0:",
    ),
    # -- pool.py ----------------------------------------------------------------------------
    _m(
        "pool_rings_seq_equal_len",
        POOL,
        "return lambda seq: rings[seq] if seq < count else None",
        "return lambda seq: rings[seq] if seq <= count else None",
    ),
    _m(
        "pool_check_seq_equal_rows",
        POOL,
        "if seq >= rows:",
        "if seq > rows:",
    ),
    _m(
        "pool_check_slot_equal_slots",
        POOL,
        "if slot >= slots:",
        "if slot > slots:",
    ),
    _m(
        "pool_check_row_once_dropped",
        POOL,
        "    first = seen.setdefault(seq, name)\n    if first != name:",
        "    first = seen.setdefault(seq, name)\n    if False:",
    ),
    _m(
        "pool_check_row_once_per_call",
        POOL,
        "    for run in runs:\n        seen: dict[int, str] = {}\n",
        "    seen: dict[int, str] = {}\n    for run in runs:\n",
    ),
    _m(
        "pool_check_ring_for_save_dropped",
        POOL,
        "                if ring_for(seq) is None:",
        "                if False:",
    ),
    _m(
        "pool_check_pending_ignored",
        POOL,
        "held = pending.get((seq, slot))",
        "held = None",
    ),
    _m(
        "pool_check_pending_not_recorded",
        POOL,
        "pending[seq, slot] = (position, ticket)",
        "pass",
    ),
    _m(
        "pool_check_restore_ticket_ignored",
        POOL,
        "if held != (position, ticket):",
        "if held[0] != position:",
    ),
    _m(
        "pool_check_runs_dropped",
        POOL,
        "    _check_runs(pool, runs, ring_for)\n",
        "",
    ),
    _m(
        "pool_failed_saves_not_forgotten",
        POOL,
        "                _forget(ring_for(save.seq), save)\n",
        "                pass\n",
    ),
    _m(
        "pool_failed_saves_not_reported",
        POOL,
        "            failed.extend(outcome.failed)\n",
        "",
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
        "pool_runs_one_call_per_save",
        POOL,
        "            if saving is not True:",
        "            if True:",
    ),
    _m(
        "pool_check_pool_ignores_stored_ticket",
        POOL,
        'for member in ("save", "restore", "stored_position", "stored_ticket"):',
        'for member in ("save", "restore", "stored_position"):',
    ),
    # -- _slots.py ----------------------------------------------------------------------------
    _m(
        "slots_restore_ticket_unchecked",
        SLOTS,
        "if tickets[i] != r.ticket or positions[i] != r.token_position",
        "if positions[i] != r.token_position",
    ),
    _m(
        "slots_restore_position_unchecked",
        SLOTS,
        "if tickets[i] != r.ticket or positions[i] != r.token_position",
        "if tickets[i] != r.ticket",
    ),
    _m(
        "slots_index_seq_equal_rows",
        SLOTS,
        "if seq >= self._num_sequences:",
        "if seq > self._num_sequences:",
    ),
    _m(
        "slots_index_slot_equal_slots",
        SLOTS,
        "if slot >= self._slots_per_sequence:",
        "if slot > self._slots_per_sequence:",
    ),
    _m(
        "slots_index_bounds_dropped",
        SLOTS,
        '        self._check_ids("seq", seq, "slot", slot)\n',
        "",
    ),
    _m(
        "slots_batch_bounds_off_by_one",
        SLOTS,
        "if seq >= num_sequences or slot >= slots:",
        "if seq > num_sequences or slot > slots:",
    ),
    _m(
        "slots_batch_row_once_dropped",
        SLOTS,
        "            if first != i:\n                # A row's",
        "            if False:\n                # A row's",
    ),
    _m(
        "slots_commit_failed_not_cleared",
        SLOTS,
        "        for k in failed:\n            i = flat[k]\n"
        "            held_positions[i] = held_tickets[i] = None\n",
        "",
    ),
    _m(
        "slots_commit_keeps_old_ticket",
        SLOTS,
        "            held_tickets[i] = ticket\n",
        "            held_tickets[i] = ticket if held_tickets[i] is None else held_tickets[i]\n",
    ),
    _m(
        "slots_forget_keeps_ticket",
        SLOTS,
        "        for i in flat:\n            positions[i] = tickets[i] = None",
        "        for i in flat:\n            positions[i] = None",
    ),
    _m(
        "base_copy_error_not_forgotten",
        SLOTS,
        "                self._tags.forget(flat)\n",
        "                pass\n",
    ),
    _m(
        "base_copy_error_forgets_copied_only",
        SLOTS,
        "                self._tags.forget(flat)\n",
        "                self._tags.forget(copy_flat)\n",
    ),
    _m(
        "base_fault_predicate_inverted",
        SLOTS,
        "[k for k in range(len(rows)) if fail(saves[k])]",
        "[k for k in range(len(rows)) if not fail(saves[k])]",
    ),
    _m(
        "base_failed_committed_as_saved",
        SLOTS,
        "        self._tags.commit(flat, positions, tickets, failed)\n",
        "        self._tags.commit(flat, positions, tickets)\n",
    ),
    _m(
        "base_failed_saves_copied",
        SLOTS,
        "copy_rows, copy_flat = [rows[k] for k in kept], [flat[k] for k in kept]",
        "copy_rows, copy_flat = rows, flat",
    ),
    _m(
        "base_predicate_asked_during_copy",
        SLOTS,
        "        failed = [] if fail is None else "
        "[k for k in range(len(rows)) if fail(saves[k])]\n",
        "        if rows:\n            self._copy_saves(rows[:1], flat[:1])\n"
        "        failed = [] if fail is None else "
        "[k for k in range(len(rows)) if fail(saves[k])]\n",
    ),
    _m(
        "base_restore_owned_unchecked",
        SLOTS,
        "        self._check_owned()\n        rows, flat = self._tags.check_restores(restores)",
        "        rows, flat = self._tags.check_restores(restores)",
        TORCH,
    ),
    _m(
        "base_save_owned_unchecked",
        SLOTS,
        "        self._check_owned()\n"
        "        rows, flat, positions, tickets = self._tags.check_saves(saves)",
        "        rows, flat, positions, tickets = self._tags.check_saves(saves)",
        TORCH,
    ),
    _m(
        "base_copy_all_failed_batch",
        SLOTS,
        "        if copy_rows:\n            try:",
        "        if True:\n            try:",
    ),
    _m(
        "base_copy_empty_restore",
        SLOTS,
        "        if rows:\n            self._copy_restores",
        "        if True:\n            self._copy_restores",
    ),
    # -- the batched step: SaveBatch checks, _record_rows, snapshot_boundaries ---------------
    _m(
        "batch_ring_cursor_wraps_late",
        RING,
        "ring._cursor = slot + 1 if slot + 1 < capacity else 0",
        "ring._cursor = slot + 1 if slot + 1 <= capacity else 0",
    ),
    _m(
        "batch_ring_no_eviction",
        RING,
        "                del ring._slot_of[evicted]\n",
        "                pass\n",
    ),
    _m(
        "batch_ring_stale_newest",
        RING,
        "            ring._newest = position\n",
        "",
    ),
    _m(
        "batch_ring_ticket_reused_per_slot",
        RING,
        "ticket = ring._ticket_of[slot] = mint()",
        "ticket = ring._ticket_of[slot] = ring._ticket_of.get(slot) or mint()",
    ),
    _m(
        "batch_ring_disabled_records",
        RING,
        "            if not capacity:\n                continue\n",
        "            if not capacity:\n                capacity = 1\n",
    ),
    _m(
        "batch_step_in_thinking_records",
        "_batched.py",
        "chosen = [k for k in compress(range(n), boundary) if not thinking[k]]",
        "chosen = list(compress(range(n), boundary))",
    ),
    _m(
        "batch_step_order_allows_equal",
        "_batched.py",
        "if any(map(le, chosen_positions, newest)):",
        "if any(p < q for p, q in zip(chosen_positions, newest, strict=True)):",
    ),
    _m(
        "batch_step_duplicate_rows_ok",
        "_batched.py",
        "    if rows is not None and len(set(row_list)) != n:",
        "    if False:",
    ),
    _m(
        "batch_step_ring_count_off_by_one",
        "_batched.py",
        "        if rows and max(rows) >= count:",
        "        if rows and max(rows) > count:",
    ),
    _m(
        "batch_step_fast_rings_too_few",
        "_batched.py",
        "in_order and type(rings) is list and len(rings) >= len(rows)",
        "in_order and type(rings) is list and len(rings) >= len(rows) - 1",
    ),
    _m(
        "batch_tags_seq_equal_rows",
        SLOTS,
        "max(seqs) >= self._num_sequences",
        "max(seqs) > self._num_sequences",
    ),
    _m(
        "batch_tags_slot_equal_slots",
        SLOTS,
        "or max(slots) >= self._slots_per_sequence",
        "or max(slots) > self._slots_per_sequence",
    ),
    _m(
        "batch_tags_duplicate_rows_ok",
        SLOTS,
        "                or len(set(seqs)) != len(seqs)\n",
        "",
    ),
    _m(
        "batch_fits_seq_equal_rows",
        POOL,
        "if max(seqs) >= rows or max(batch.slots) >= slots or len(set(seqs)) != len(seqs):",
        "if max(seqs) > rows or max(batch.slots) >= slots or len(set(seqs)) != len(seqs):",
    ),
    _m(
        "batch_fits_duplicate_rows_ok",
        POOL,
        "if max(seqs) >= rows or max(batch.slots) >= slots or len(set(seqs)) != len(seqs):",
        "if max(seqs) >= rows or max(batch.slots) >= slots:",
    ),
    _m(
        "batch_fits_rows_seen_earlier_ok",
        POOL,
        "    if not seen.keys().isdisjoint(seqs) or None in map(ring_for, seqs):",
        "    if None in map(ring_for, seqs):",
    ),
    _m(
        "batch_fits_missing_ring_ok",
        POOL,
        "    if not seen.keys().isdisjoint(seqs) or None in map(ring_for, seqs):",
        "    if not seen.keys().isdisjoint(seqs):",
    ),
    _m(
        "batch_fits_rows_not_marked_seen",
        POOL,
        '    seen.update(dict.fromkeys(seqs, "an earlier SaveBatch"))\n',
        "",
    ),
    _m(
        "batch_fits_pending_not_recorded",
        POOL,
        "                if has_restores:\n",
        "                if False:\n",
    ),
    # -- _effects.py --------------------------------------------------------------------------
    _m(
        "effects_dict_drops_ticket",
        EFFECTS,
        '            "ticket": self.ticket,\n',
        "",
    ),
    _m(
        "effects_dict_extra_keys_ok",
        EFFECTS,
        "if keys != set(fields):",
        "if not keys >= set(fields):",
    ),
    _m(
        "effects_negative_ok",
        EFFECTS,
        "if type(value) is not int or value < 0:",
        "if type(value) is not int:",
    ),
    _m(
        "effects_kinds_swapped",
        EFFECTS,
        '    "ssm_snapshot_save": SsmSnapshotSave,\n'
        '    "ssm_snapshot_restore": SsmSnapshotRestore,',
        '    "ssm_snapshot_save": SsmSnapshotRestore,\n'
        '    "ssm_snapshot_restore": SsmSnapshotSave,',
    ),
    _m(
        "effects_ticket_unvalidated",
        EFFECTS,
        "    ticket: int = attrs.field(validator=_non_negative_int)",
        "    ticket: int = attrs.field()",
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
    # -- backends/torch.py --------------------------------------------------------------------
    _m(
        "torch_copy_range_order_trusted",
        TORCH_COPY,
        "    if rows == list(range(first, first + count)):\n",
        "    if True:\n",
        TORCH,
    ),
    _m(
        "torch_copy_range_test_off_by_one",
        TORCH_COPY,
        "    if max(rows) - first + 1 != count:",
        "    if max(rows) - first != count:",
        TORCH,
    ),
    _m(
        "torch_copy_save_range_from_row_0",
        TORCH_COPY,
        "storage.index_copy_(dim, slots, live.narrow(dim, first, len(rows)))",
        "storage.index_copy_(dim, slots, live.narrow(dim, 0, len(rows)))",
        TORCH,
    ),
    _m(
        "torch_copy_restore_range_from_row_0",
        TORCH_COPY,
        "out=live.narrow(dim, first, len(rows))",
        "out=live.narrow(dim, 0, len(rows))",
        TORCH,
    ),
    _m(
        "torch_copy_scattered_save_indices_swapped",
        TORCH_COPY,
        "        row_index, slot_index = self._indices(rows, flat)\n"
        "        for i, (live, storage) in enumerate(self._pairs):\n"
        "            gathered = self._scratch_for(i, live, len(rows))\n"
        "            torch.index_select(live, dim, row_index, out=gathered)",
        "        slot_index, row_index = self._indices(rows, flat)\n"
        "        for i, (live, storage) in enumerate(self._pairs):\n"
        "            gathered = self._scratch_for(i, live, len(rows))\n"
        "            torch.index_select(live, dim, row_index, out=gathered)",
        TORCH,
    ),
    _m(
        "torch_copy_scratch_rows_on_dim_0",
        TORCH_COPY,
        "        shape[self._dim] = count",
        "        shape[0] = count",
        TORCH,
    ),
    _m(
        "torch_copy_order_off_by_one",
        TORCH_COPY,
        "        order[row - first] = slot",
        "        order[(row - first + 1) % count] = slot",
        TORCH,
    ),
    _m(
        "torch_owned_check_dropped",
        TORCH_MOD,
        "            if now != memory:",
        "            if False:",
        TORCH,
    ),
    _m(
        "torch_fingerprint_no_pointer",
        TORCH_MOD,
        "return (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor.device)",
        "return (0, tensor.shape, tensor.stride(), tensor.dtype, tensor.device)",
        TORCH,
    ),
    _m(
        "torch_fingerprint_no_strides",
        TORCH_MOD,
        "return (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor.device)",
        "return (tensor.data_ptr(), tensor.shape, (), tensor.dtype, tensor.device)",
        TORCH,
    ),
    _m(
        "torch_fingerprint_no_shape",
        TORCH_MOD,
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
        TORCH_MOD,
        "if tensor.dim() <= batch_dim:",
        "if tensor.dim() < batch_dim:",
        TORCH,
    ),
    _m(
        "torch_row_count_mismatch_ok",
        TORCH_MOD,
        "        elif tensor.shape[batch_dim] != rows:",
        "        elif False:",
        TORCH,
    ),
    # -- integrations/transformers.py ---------------------------------------------------------
    _m(
        "hf_crop_checks_interleaved",
        HF_MOD,
        "    plans = [_crop_plan(idx, layer, length) for idx, layer in enumerate(_layers(cache))]\n"
        "    for plan in plans:  # every layer checked before any is changed\n"
        "        if plan is not None:\n",
        "    for idx, layer in enumerate(_layers(cache)):\n"
        "        plan = _crop_plan(idx, layer, length)\n"
        "        if plan is not None:\n",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_full_crop_refuses_exact_length",
        HF_MOD,
        "    held = DynamicLayer.get_seq_length(layer)\n    if length > held:",
        "    held = DynamicLayer.get_seq_length(layer)\n    if length >= held:",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_full_crop_length_unchecked",
        HF_MOD,
        "    held = DynamicLayer.get_seq_length(layer)\n    if length > held:",
        "    held = DynamicLayer.get_seq_length(layer)\n    if False:",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_sliding_crop_length_unchecked",
        HF_MOD,
        "    if length > total:",
        "    if False:",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_sliding_crop_refuses_exact_length",
        HF_MOD,
        "    if length > total:",
        "    if length >= total:",
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
        HF_MOD,
        "            if current is not ref.tensor:",
        "            if False:",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_restore_skips_cache_check",
        HF_MOD,
        "        self._check_unchanged()\n        self._pool.restore(restores)",
        "        self._pool.restore(restores)",
        HF,
        select=HF_SELECT,
    ),
    _m(
        "hf_save_skips_cache_check",
        HF_MOD,
        "        self._check_unchanged()\n        return self._pool.save(saves)",
        "        return self._pool.save(saves)",
        HF,
        select=HF_SELECT,
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
        "    fit = free // (sequences * per_slot)",
        "    fit = free // per_slot",
        RESERVE,
    ),
    _m(
        "reserve_zero_bytes_divides",
        RESERVE_MOD,
        "    if sequences == 0:",
        "    if False:",
        RESERVE,
    ),
    _m(
        "reserve_total_ignores_sequences",
        RESERVE_MOD,
        "return RingDepth(slots, rule, per_slot, slots * sequences * per_slot, fit)",
        "return RingDepth(slots, rule, per_slot, slots * per_slot, fit)",
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
)
