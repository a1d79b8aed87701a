# ruff: noqa: E501  (snippets are the source text, whole lines)
"""Mutants of the pool's decisions written at HEAD: ``apply_effects`` and its planner
(``_runs``), the per-batch rules (``_batch_rules``), the slot tags and the pool base."""

from __future__ import annotations

from mutant_base import Mutant, mutant

POOL = "pool/__init__.py"
RUNS = "pool/_runs.py"
RULES = "pool/_batch_rules.py"
VALUES = "pool/_batch_values.py"
TAGS = "pool/_slot_tags.py"
TAGS_VIEW = "pool/_tags_view.py"
BASE = "pool/_base.py"
FAULTS = "pool/_faults.py"

# Fastest first; the fake pool's conformance suite (about 35 s) last.
POOL_TESTS = (
    "tests/test_apply_effects.py",
    "tests/test_fail_closed.py",
    "tests/test_pool_checks_once.py",
    "tests/test_check_boundaries.py",
    "tests/test_verify.py",
    "tests/test_fake_pool.py",
)
OWNED_TESTS = ("tests/test_torch_pool.py",)
OWNED_SELECT = ("-k", "no_longer_owns or empty_batches or round_trip_of_many")


def _p(name: str, module: str, original: str, replacement: str, **kw: str) -> Mutant:
    return mutant(name, module, original, replacement, POOL_TESTS, **kw)


POOL_MUTANTS: tuple[Mutant, ...] = (
    # -- apply_effects --------------------------------------------------------------------
    _p(
        "apply_restore_after_failed_save_unrechecked",
        POOL,
        "            elif failed:\n",
        "            elif False:\n",
    ),
    _p("apply_failed_not_reported", POOL, "            failed.extend(lost)\n", ""),
    _p(
        "apply_accepts_unprobed",
        POOL,
        '    if any(run.accepts for run in runs):\n        verify_buffers(pool, "SsmStateAccept effects")\n',
        "",
        equivalent=(
            "check_runs asks staged('SsmStateAccept effects') for every accept run before any "
            "copy, and for a pool without verify buffers that is verify_buffers(), which raises "
            "the same error"
        ),
    ),
    _p(
        "apply_own_pools_take_the_protocol_path",
        POOL,
        "tagged = cast(TaggedPool, pool) if issubclass(type(pool), TaggedPool) else None",
        "tagged = None",
    ),
    # -- the planner: runs_of, Run, check_runs, the ring checks ---------------------------
    _p(
        "runs_names_drop_the_offset",
        RUNS,
        'return f"effects[{self.first + (k if self.offsets is None else self.offsets[k])}]"',
        'return f"effects[{(k if self.offsets is None else self.offsets[k])}]"',
    ),
    _p(
        "runs_batch_element_index_unshifted",
        RUNS,
        'return f"effects[{self.first + piece}][{k - starts[piece]}]"',
        'return f"effects[{self.first + piece}][{k}]"',
    ),
    _p(
        "runs_piece_lookup_off_by_one",
        RUNS,
        "piece = bisect_right(starts, k) - 1",
        "piece = bisect_right(starts, k - 1) - 1",
    ),
    _p(
        "runs_single_saves_sources_dropped",
        RUNS,
        "            if given.count(None) == len(given):\n",
        "            if True:\n",
    ),
    _p(
        "runs_mixed_single_source_dropped",
        RUNS,
        "sources_column.append(LIVE if piece.source is None else piece.source)",
        "sources_column.append(LIVE)",
    ),
    _p(
        "runs_mixed_batch_sources_dropped",
        RUNS,
        "sources_column.extend(piece.sources or (LIVE,) * len(piece.seqs))",
        "sources_column.extend((LIVE,) * len(piece.seqs))",
    ),
    _p(
        "runs_mixed_values_as_list",
        RUNS,
        "        if self.batches:\n            return None\n",
        "",
    ),
    _p(
        "runs_protocol_batch_slots_are_flat",
        RUNS,
        "slots = [i - seq * slots_per_sequence for seq, i in zip(rows, flat, strict=True)]",
        "slots = list(flat)",
    ),
    _p(
        "runs_every_batch_its_own_run",
        RUNS,
        "            if kind is not SsmSnapshotSave:\n",
        "            if True:\n",
    ),
    _p(
        "runs_every_effect_its_own_run",
        RUNS,
        "            if kind is not type(effect):\n",
        "            if True:\n",
    ),
    _p(
        "runs_save_after_restore_joins_the_old_run",
        RUNS,
        "                kind, add_save = type(effect), None\n",
        "                kind = type(effect)\n",
    ),
    mutant(
        "runs_superseded_shared_saves_kept",
        "pool/__init__.py",
        "        runs = _without_superseded(runs, prefix_index, checks)\n",
        "        pass\n",
        ("tests/test_prefix_pools.py",),
        "-k",
        "evicted_before",
    ),
    mutant(
        "torch_intermediate_aliasing_live_ok",
        "backends/_torch_checks.py",
        "            if _may_share_memory(buffer, state):",
        "            if False:",
        ("tests/test_torch_pool.py",),
        "-k",
        "inside_its_own",
    ),
    mutant(
        "runs_scheduler_rows_unchecked",  # a row saved twice reached the workers
        "pool/__init__.py",
        "            check_rows_once(seqs, names)\n",
        "            pass\n",
        ("tests/test_prefix_pools.py",),
        "-k",
        "scheduler_step",
    ),
    mutant(
        "scheduler_step_rings_unchecked",
        "pool/__init__.py",
        "                check_rings(run.columns()[0], rings, None, run.names())\n",
        "                pass\n",
        ("tests/test_prefix_pools.py",),
        "-k",
        "scheduler_step",
    ),
    mutant(
        "runs_rows_checked_after_superseded_left_out",  # a row saved twice got through
        "pool/__init__.py",
        "            checks._check_shared_ids(seqs, [s.slot for s in saves], names, writes=False)\n",
        "            pass\n",
        ("tests/test_prefix_pools.py",),
        "-k",
        "saved_twice",
    ),
    mutant(
        "runs_shared_save_of_another_length_ok",
        "pool/__init__.py",
        "            if ticket == save.ticket and length == save.length:",
        "            if ticket == save.ticket:",
        ("tests/test_prefix_pools.py",),
        "-k",
        "another_length",
    ),
    mutant(
        "prefix_effect_of_no_tokens_ok",
        "_core/effects.py",
        "    length: int = attrs.field(validator=_positive_int)",
        "    length: int = attrs.field(validator=_non_negative_int)",
        ("tests/test_prefix_pools.py",),
        "-k",
        "no_tokens",
    ),
    mutant(
        "wire_prefix_length_zero_decoded",
        "_tp/wire.py",
        "    if kind in (PREFIX_SAVES, PREFIX_RESTORES) and n and min(columns[2]) < 1:",
        "    if False:",
        ("tests/test_wire.py",),
        "-k",
        "malformed_prefix",
    ),
    _p(
        "runs_batches_not_counted",
        RUNS,
        "                runs[-1].batches += 1\n",
        "                pass\n",
    ),
    _p(
        "runs_str_effects_accepted",
        RUNS,
        "if isinstance(effects, str | bytes | Mapping) or not isinstance(effects, Iterable):",
        "if not isinstance(effects, Iterable):",
    ),
    _p(
        "check_runs_pending_ignored",
        RUNS,
        "checked.append(checks.check_restores(run.restores, names, pending))",
        "checked.append(checks.check_restores(run.restores, names, None))",
    ),
    _p(
        "check_runs_pending_not_recorded",
        RUNS,
        "            if track:\n",
        "            if False:\n",
    ),
    _p(
        "check_runs_rings_unchecked",
        RUNS,
        "            check_rings(saves.rows, rings, checks.num_sequences, names)\n",
        "",
    ),
    _p(
        "check_runs_intermediate_sources_unchecked",
        RUNS,
        "            if sources is not None and max(sources, default=LIVE) != LIVE:\n",
        "            if False:\n",
    ),
    _p(
        "check_runs_single_saves_trusted_distinct",
        RUNS,
        "distinct=isinstance(values, SaveBatch) and values.distinct,",
        "distinct=True,",
    ),
    _p(
        "ring_lookup_bound_inclusive",
        RUNS,
        "get = lambda seq: rings[seq] if seq < count else None  # noqa: E731",
        "get = lambda seq: rings[seq] if seq <= count else None  # noqa: E731",
    ),
    _p(
        "ring_lookup_takes_anything",
        RUNS,
        "        if ring is None or type(ring) is SsmDecodeRing:\n",
        "        if True:\n",
    ),
    _p(
        "check_rings_mapping_trusted",
        RUNS,
        "        if all(map(rings.__contains__, rows)):\n",
        "        if True:\n",
    ),
    _p(
        "check_rings_short_list_trusted",
        RUNS,
        "        or max(rows) < len(rings)\n    ):\n        return\n",
        "        or True\n    ):\n        return\n",
    ),
    _p(
        "check_rings_short_list_off_by_one",
        RUNS,
        "        or max(rows) < len(rings)\n    ):\n        return\n",
        "        or max(rows) <= len(rings)\n    ):\n        return\n",
    ),
    # -- the per-batch rules ---------------------------------------------------------------
    _p(
        "rules_sources_always_dropped",
        RULES,
        "if sources is not None and max(sources, default=LIVE) == LIVE:",
        "if sources is not None:",
    ),
    _p(
        "rules_rows_and_slots_unchecked",  # rules 2-3 skipped for every batch
        RULES,
        "if flat is None or not (distinct or _distinct(seqs, slots, sources)):",
        "if flat is None:",
    ),
    _p(
        "rules_ids_unchecked",
        RULES,
        "if flat is None or not (distinct or _distinct(seqs, slots, sources)):",
        "if flat is not None and not (distinct or _distinct(seqs, slots, sources)):",
    ),
    _p(
        "rules_save_staged_unchecked",
        RULES,
        "        if sources is not None and staged is not None:\n",
        "        if False:\n",
    ),
    _p(
        "rules_save_again_unchecked",  # rule 6: a step's saves applied twice
        RULES,
        "            and any(map(replayed, tickets, self._held_tickets(seqs, slots, flat)))\n",
        "            and False\n",
    ),
    _p(
        "tags_commit_accepts_lowers_the_mark",  # rule 7 let an accept applied twice through
        TAGS,
        "            if ticket is not None and replayed(ticket, last):\n",
        "            if ticket is not None and last is not None and ticket < last:\n",
    ),
    _p(
        "tags_commit_accepts_row_twice_ok",
        TAGS,
        "        check_rows_once(row_list, _ROWS)\n",
        "",
    ),
    _p(
        "runs_older_save_in_the_call_ok",
        RUNS,
        "        if earlier is not None and replayed(ticket, earlier[1]):\n",
        "        if earlier is not None and ticket == earlier[1]:\n",
    ),
    _p(
        "rules_save_older_ticket_ok",  # an older step's save, applied after its slot was reused
        RULES,
        "    return held is not None and ticket <= held\n",
        "    return held is not None and ticket == held\n",
    ),
    _p(
        "rules_may_hold_skipped",
        RULES,
        "            and self._may_hold(tickets)\n",
        "",
        equivalent=(
            "only a shortcut: _may_hold answers False only when every ticket is newer than "
            "any committed, and then no slot holds one of them, so the lookups it skips find "
            "no match"
        ),
    ),
    _p(
        "rules_restore_pending_ignored",
        RULES,
        "                    held_positions[k], held_tickets[k] = pending[i]\n",
        "                    pass\n",
    ),
    _p(
        "rules_restore_ticket_unchecked",
        RULES,
        "if held_tickets != [r.ticket for r in restores] or held_positions != [",
        "if held_positions != [",
    ),
    _p(
        "rules_restore_position_unchecked",
        RULES,
        "if held_tickets != [r.ticket for r in restores] or held_positions != [\n"
        "            r.token_position for r in restores\n        ]:",
        "if held_tickets != [r.ticket for r in restores]:",
    ),
    _p(
        "rules_restore_duplicates_ok",
        RULES,
        "if flat is None or not _distinct(seqs, slots, None):",
        "if flat is None:",
    ),
    _p(
        "rules_accept_row_bound_inclusive",
        RULES,
        "if seqs and (max(seqs) >= self._num_sequences or len(set(seqs)) != len(seqs)):",
        "if seqs and (max(seqs) > self._num_sequences or len(set(seqs)) != len(seqs)):",
    ),
    _p(
        "rules_accept_duplicates_ok",
        RULES,
        "if seqs and (max(seqs) >= self._num_sequences or len(set(seqs)) != len(seqs)):",
        "if seqs and (max(seqs) >= self._num_sequences):",
    ),
    _p(
        "rules_accept_staged_unchecked",
        RULES,
        '        if staged is not None:\n            _check_staged("accepts"',
        '        if False:\n            _check_staged("accepts"',
    ),
    _p(
        "rules_staged_bound_inclusive",
        RULES,
        "        if index >= held:\n",
        "        if index > held:\n",
    ),
    _p(
        "rules_staged_live_not_skipped",
        RULES,
        "        if index == LIVE:\n            continue\n",
        "",
        equivalent=(
            "LIVE is -1 and a row holds 0 or more intermediate states, so 'index >= held' is "
            "false for it: the skip only saves a call to staged()"
        ),
    ),
    _p(
        "rules_kinds_unchecked",
        VALUES,
        "    if batch and set(map(type, batch)) != {kind}:\n",
        "    if False:\n",
    ),
    _p(
        "rules_batch_not_a_sequence_ok",
        VALUES,
        "    if not isinstance(batch, Sequence):\n",
        "    if False:\n",
    ),
    _p(
        "rules_name_bad_seq_bound_inclusive",
        RULES,
        "if seq >= self._num_sequences or slot >= per_row:",
        "if seq > self._num_sequences or slot >= per_row:",
    ),
    _p(
        "rules_ids_seq_bound_inclusive",
        RULES,
        "        if seq >= self._num_sequences:\n",
        "        if seq > self._num_sequences:\n",
    ),
    _p(
        "rules_ids_slot_bound_inclusive",
        RULES,
        "if slot_name is not None and slot >= self._slots_per_sequence:",
        "if slot_name is not None and slot > self._slots_per_sequence:",
    ),
    _p(
        "rules_distinct_intermediate_rows_once",  # a row's two intermediate states refused
        RULES,
        "        len(set(zip(seqs, sources, strict=True)))\n",
        "        len(set(seqs))\n",
    ),
    _p(
        "rules_distinct_slots_ignored",
        RULES,
        "        == count\n        == len(set(zip(seqs, slots, strict=True)))\n",
        "        == count\n",
    ),
    # -- SlotTags ----------------------------------------------------------------------------
    _p(
        "tags_may_hold_strict",  # the newest committed ticket, saved again, slips through
        TAGS,
        "return min(tickets) <= self._newest_ticket",
        "return min(tickets) < self._newest_ticket",
    ),
    _p(
        "tags_newest_ticket_not_tracked",
        TAGS,
        "            self._newest_ticket = max(self._newest_ticket, max(tickets))\n",
        "            pass\n",
    ),
    _p(
        "tags_view_positions_unread",
        TAGS_VIEW,
        "[self._pool.stored_position(seq, slot) for seq, slot in pairs],",
        "[None for seq, slot in pairs],",
    ),
    _p(
        "tags_slot_index_row_bound_inclusive",
        TAGS_VIEW,
        "if not 0 <= seq < self._rows:",
        "if not 0 <= seq <= self._rows:",
    ),
    # -- PoolBase ------------------------------------------------------------------------------
    mutant(
        "base_save_owned_unchecked",
        BASE,
        "        self._check_owned()\n        rows, flat, positions, tickets, sources = checked\n",
        "        rows, flat, positions, tickets, sources = checked\n",
        OWNED_TESTS,
        *OWNED_SELECT,
    ),
    mutant(
        "base_restore_owned_unchecked",
        BASE,
        "        self._check_owned()\n        if checked.rows:\n            self._copy_restores",
        "        if checked.rows:\n            self._copy_restores",
        OWNED_TESTS,
        *OWNED_SELECT,
    ),
    mutant(
        "base_accept_owned_unchecked",
        BASE,
        "        self._check_owned()\n        if checked.rows:\n            self._copy_accepts",
        "        if checked.rows:\n            self._copy_accepts",
        OWNED_TESTS,
        *OWNED_SELECT,
    ),
    _p(
        "base_failed_saves_copied",
        BASE,
        "copy_rows, copy_flat = [rows[k] for k in kept], [flat[k] for k in kept]",
        "copy_rows, copy_flat = rows, flat",
    ),
    _p(
        "base_copy_error_not_forgotten",
        BASE,
        "            self._tags._forget(flat)\n",
        "            pass\n",
    ),
    _p(
        "base_failed_committed_as_saved",
        BASE,
        "self._tags._commit(flat, positions, tickets, failed)",
        "self._tags._commit(flat, positions, tickets)",
    ),
    _p(
        "base_fault_predicate_inverted",
        BASE,
        "if fail(self._save(k, checked, saves))]",
        "if not fail(self._save(k, checked, saves))]",
    ),
    _p(
        "base_rebuilt_save_slot_is_flat",
        BASE,
        "slot = flat[k] - rows[k] * self._tags.slots_per_sequence",
        "slot = flat[k]",
    ),
    _p(
        "base_rebuilt_save_source_dropped",
        BASE,
        "source = None if sources is None or sources[k] == LIVE else sources[k]",
        "source = None",
    ),
    mutant(
        "base_empty_restore_copied",
        BASE,
        "        if checked.rows:\n            self._copy_restores",
        "        if True:\n            self._copy_restores",
        OWNED_TESTS,
        *OWNED_SELECT,
    ),
    _p(
        "base_intermediate_count_row_bound_inclusive",
        BASE,
        "not 0 <= seq < self.num_sequences:",
        "not 0 <= seq <= self.num_sequences:",
    ),
    _p(
        "base_intermediate_count_bool_ok",
        BASE,
        "if type(seq) is not int or not 0 <= seq",
        "if not 0 <= seq",
    ),
    _p(
        "base_fail_predicate_unchecked",
        FAULTS,
        "    if not callable(predicate):\n",
        "    if False:\n",
    ),
    _p(
        "base_mixed_live_rows_not_copied",
        BASE,
        "live = [k for k, source in enumerate(sources) if source == LIVE]",
        "live: list[int] = []",
    ),
    _p(
        "base_intermediate_rows_not_copied",
        BASE,
        "        if staged:\n            self._copy_intermediate_saves(",
        "        if False:\n            self._copy_intermediate_saves(",
    ),
    # -- rule 6 against the newest ticket a slot took, a failed save's included -------------
    *(
        mutant(name, module, original, replacement, tests)
        for name, module, original, replacement, tests in (
            (
                "tags_seen_not_kept",
                "pool/_slot_tags.py",
                "            held_tickets[i] = seen[i] = ticket",
                "            held_tickets[i] = ticket",
                ("tests/test_fail_closed.py",),
            ),
            (
                "tags_failed_save_taken",  # a failed save could not be retried
                "pool/_slot_tags.py",
                "            seen[i] = before",
                "            seen[i] = seen[i]",
                ("tests/test_fake_pool.py",),
            ),
            (
                "tags_rule6_reads_what_slots_hold",
                "pool/_slot_tags.py",
                "        return list(map(self._seen.__getitem__, flat))",
                "        return list(map(self._tickets.__getitem__, flat))",
                ("tests/test_fail_closed.py",),
            ),
            (
                "tags_shared_seen_not_kept",
                "pool/_slot_tags.py",
                "            held_tickets[slot] = seen[slot] = ticket",
                "            held_tickets[slot] = ticket",
                ("tests/test_prefix_pools.py",),
            ),
            (
                "shared_rule6_reads_what_slots_hold",
                "pool/_shared_rules.py",
                "        held = self._seen_shared(slots, pending)",
                "        held = self._held_shared(slots, pending)[1]",
                ("tests/test_prefix_pools.py",),
            ),
        )
    ),
)
