# ruff: noqa: E501  (snippets are the source text, whole lines)
"""Mutants of the core's decisions written at HEAD: the verify step, rollback's plan and
commit, ``SaveBatch``, the ring's batched record and the column checks."""

from __future__ import annotations

from mutant_base import Mutant, mutant

VERIFY = "_core/verify.py"
ROLLBACK = "_core/rollback.py"
SAVE_BATCH = "_core/save_batch.py"
RING_ROWS = "_core/ring/_rows.py"
COLUMNS = "_core/columns.py"

# The verify step's own tests first, then the fail-closed and plan/commit files.
VERIFY_TESTS = (
    "tests/test_verify.py",
    "tests/test_fail_closed.py",
    "tests/test_rollback_plan.py",
    "tests/test_mutation_gaps.py",
)
PLAN_TESTS = ("tests/test_rollback_plan.py", "tests/test_rollback.py")
BATCH_TESTS = (
    "tests/test_fail_closed.py",
    "tests/test_apply_effects.py",
    "tests/test_batched.py",
    "tests/test_check_boundaries.py",
    "tests/test_mutation_gaps.py",
)
ROWS_TESTS = ("tests/test_check_boundaries.py", "tests/test_batched.py", "tests/test_verify.py")
COLUMN_TESTS = (
    "tests/test_check_boundaries.py",
    "tests/test_fail_closed.py",
    "tests/test_batched.py",
    "tests/test_mutation_gaps.py",
)

CORE_MUTANTS: tuple[Mutant, ...] = (
    # -- _core/verify.py: the order check, the accepted bound, what records, the plan ------
    mutant(
        "verify_order_refuses_the_newest",  # L == the ring's newest is a legal step
        VERIFY,
        "if first < newest and ring.is_enabled:",
        "if first <= newest and ring.is_enabled:",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_order_one_behind_ok",
        VERIFY,
        "if first < newest and ring.is_enabled:",
        "if first < newest - 1 and ring.is_enabled:",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_order_disabled_checked",
        VERIFY,
        "if first < newest and ring.is_enabled:",
        "if first < newest:",
        VERIFY_TESTS,
        equivalent=(
            "a disabled ring never records, so its newest position stays -1 and no "
            "first_position (an int >= 1) lies behind it: the enabled test never decides"
        ),
    ),
    mutant(
        "verify_accepted_bound_off_by_one",
        VERIFY,
        "if n > len(boundary) - 1:",
        "if n > len(boundary):",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_first_position_zero_ok",
        VERIFY,
        'first = int_value(name("first_position", "first_positions"), first_position, 1)',
        'first = int_value(name("first_position", "first_positions"), first_position, 0)',
        VERIFY_TESTS,
    ),
    mutant(
        "verify_rejected_drafts_record",  # rule 1: a rejected draft reaches the ring
        VERIFY,
        "chosen = [j for j in range(n + 1) if boundary[j] and not thinking[j]]",
        "chosen = [j for j in range(len(boundary)) if boundary[j] and not thinking[j]]",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_last_accepted_never_records",
        VERIFY,
        "chosen = [j for j in range(n + 1) if boundary[j] and not thinking[j]]",
        "chosen = [j for j in range(n) if boundary[j] and not thinking[j]]",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_thinking_boundaries_record",
        VERIFY,
        "chosen = [j for j in range(n + 1) if boundary[j] and not thinking[j]]",
        "chosen = [j for j in range(n + 1) if boundary[j]]",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_thinking_length_unchecked",
        VERIFY,
        'thinking = _flags(name("in_thinking", "in_thinking"), in_thinking, len(boundary))',
        'thinking = _flags(name("in_thinking", "in_thinking"), in_thinking, None)',
        VERIFY_TESTS,
    ),
    mutant(
        "verify_empty_flags_ok",
        VERIFY,
        "if count is None and not flags:",
        "if False:",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_save_reads_the_end_state",  # rule 2: a save reads its own index, not L + n
        VERIFY,
        "saves.append(trusted_save(seq, slot, position, ticket, j))",
        "saves.append(trusted_save(seq, slot, position, ticket, checked.accepted))",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_replay_save_from_intermediate",
        VERIFY,
        "replay.append(ReplaySegment(position, trusted_save(seq, slot, position, ticket)))",
        "replay.append(ReplaySegment(position, trusted_save(seq, slot, position, ticket, j)))",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_evicted_boundaries_saved",  # the step's own evicted entries still get a save
        VERIFY,
        "        if (position, ticket) in live:\n",
        "        if True:\n",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_no_end_segment",
        VERIFY,
        "if not replay or replay[-1].through < end:",
        "if not replay:",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_end_segment_always",
        VERIFY,
        "if not replay or replay[-1].through < end:",
        "if True:",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_accept_index_off_by_one",
        VERIFY,
        "accept = SsmStateAccept(checked.seq, checked.accepted, tickets.mint_ticket())",
        "accept = SsmStateAccept(checked.seq, checked.accepted + 1, tickets.mint_ticket())",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_batch_accepts_the_last_fed",
        VERIFY,
        "accepts = tuple(cast(SsmStateAccept, plan.effects[0]) for plan in plans)",
        "accepts = tuple(SsmStateAccept(plan.seq, plan.fed - 1, tickets.mint_ticket()) for plan in plans)",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_batch_duplicate_rows_ok",  # a row named twice in one verify batch
        VERIFY,
        "    if len(set(row_list)) != count:\n",
        "    if False:\n",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_batch_sources_dropped",  # the batch's saves read the live state
        VERIFY,
        "        [LIVE if s.source is None else s.source for s in saves],\n",
        "        None,\n",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_batch_rows_taken_in_order",  # rows= given, yet rings read from row 0 on
        VERIFY,
        "ring_list = rings_for(rings, row_list, in_order=rows is None)",
        "ring_list = rings_for(rings, row_list, in_order=True)",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_batch_negative_row_ok",
        VERIFY,
        'int_value(f"rows[{r}]", v, 0)',
        'int_value(f"rows[{r}]", v, -1)',
        VERIFY_TESTS,
        equivalent=(
            "_check_row checks each row again (int_value(name('seq', 'rows'), seq, 0)) before "
            "any ring changes, with the same message; the ring lookup between the two only reads"
        ),
    ),
    mutant(
        "verify_positions_off_by_one",
        VERIFY,
        "positions = [c.first + j for c in checked for j in c.boundaries]",
        "positions = [c.first + j + 1 for c in checked for j in c.boundaries]",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_kept_rows_ignored",  # a disabled ring's boundaries counted as recorded
        VERIFY,
        "recorded_rows = range(len(rings)) if kept is None else kept",
        "recorded_rows = range(len(rings))",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_replay_needed_off_by_one",
        VERIFY,
        "if self.accepted < self.fed - 1:",
        "if self.accepted < self.fed - 2:",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_replay_needed_ignores_mid_run_saves",
        VERIFY,
        "return any(s.token_position < self.end_position for s in self.saves)",
        "return False",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_checkpoint_at_first_position",
        VERIFY,
        "return self.first_position - 1",
        "return self.first_position",
        VERIFY_TESTS,
    ),
    mutant(
        "verify_batch_effects_without_saves",
        VERIFY,
        "return (self.saves, *self.accepts)",
        "return tuple(self.accepts)",
        VERIFY_TESTS,
    ),
    # -- _core/rollback.py: commit_rollback and the plan's arguments ------------------------
    mutant(
        "rb_commit_no_truncate",
        ROLLBACK,
        "    ring.truncate_after(restore.token_position)\n",
        "",
        PLAN_TESTS,
    ),
    mutant(
        "rb_commit_fit_unchecked",
        ROLLBACK,
        "if entry is None or (entry.snapshot_slot, entry.ticket) != (restore.slot, restore.ticket):",
        "if entry is None:",
        PLAN_TESTS,
    ),
    mutant(
        "rb_commit_slot_unchecked",
        ROLLBACK,
        "if entry is None or (entry.snapshot_slot, entry.ticket) != (restore.slot, restore.ticket):",
        "if entry is None or entry.ticket != restore.ticket:",
        PLAN_TESTS,
    ),
    mutant(
        "rb_commit_ticket_unchecked",
        ROLLBACK,
        "if entry is None or (entry.snapshot_slot, entry.ticket) != (restore.slot, restore.ticket):",
        "if entry is None or entry.snapshot_slot != restore.slot:",
        PLAN_TESTS,
    ),
    mutant(
        "rb_commit_plan_type_unchecked",
        ROLLBACK,
        "    if type(plan) is not RollbackPlan:\n",
        "    if False:\n",
        PLAN_TESTS,
    ),
    mutant(
        "rb_commit_attention_plan_truncates",
        ROLLBACK,
        "    if plan.effects == ():\n        return\n",
        "",
        PLAN_TESTS,
    ),
    mutant(
        "rb_plan_hybrid_unchecked",
        ROLLBACK,
        'hybrid = _check_bool("hybrid", hybrid)',
        "hybrid = bool(hybrid)",
        PLAN_TESTS,
    ),
    mutant(
        "rb_attention_tokens_dropped_off_by_one",
        ROLLBACK,
        "return RollbackPlan(seq, target, current_len - target, ())",
        "return RollbackPlan(seq, target, current_len - target + 1, ())",
        PLAN_TESTS,
    ),
    mutant(
        "rb_find_limit_ignored",
        ROLLBACK,
        "            continue\n        index = _last_boundary_index(boundaries, position)",
        "            pass\n        index = _last_boundary_index(boundaries, position)",
        PLAN_TESTS,
    ),
    mutant(
        "rb_find_last_ignores_at_most",
        ROLLBACK,
        "return _find(newest_first(ring), boundaries, _limit(at_most, None))",
        "return _find(newest_first(ring), boundaries, None)",
        PLAN_TESTS,
    ),
    mutant(
        "rb_to_boundary_truncates_on_attention",
        ROLLBACK,
        "if isinstance(plan, RollbackPlan) and plan.effects:",
        "if isinstance(plan, RollbackPlan):",
        PLAN_TESTS,
    ),
    mutant(
        "rb_boundaries_str_accepted",
        ROLLBACK,
        "if not isinstance(boundaries, Sequence) or isinstance(boundaries, str | bytes):",
        "if not isinstance(boundaries, Sequence):",
        PLAN_TESTS,
    ),
    mutant(
        "rb_check_ring_subclass_ok",
        ROLLBACK,
        "    if type(ring) is not SsmDecodeRing:\n        raise InvalidArgumentTypeError(",
        "    if not hasattr(ring, 'truncate_after'):\n        raise InvalidArgumentTypeError(",
        PLAN_TESTS,
    ),
    # -- _core/save_batch.py -----------------------------------------------------------------
    mutant(
        "sb_lengths_unchecked",
        SAVE_BATCH,
        "        if len(set(lengths.values())) > 1:\n",
        "        if False:\n",
        BATCH_TESTS,
    ),
    mutant(
        "sb_sources_length_ignored",
        SAVE_BATCH,
        '            lengths["sources"] = len(source_column)\n',
        "            pass\n",
        BATCH_TESTS,
    ),
    mutant(
        "sb_sources_live_refused",
        SAVE_BATCH,
        'int_column("sources", sources, least=LIVE)',
        'int_column("sources", sources)',
        BATCH_TESTS,
    ),
    mutant(
        "sb_sources_below_live_ok",
        SAVE_BATCH,
        'int_column("sources", sources, least=LIVE)',
        'int_column("sources", sources, least=LIVE - 1)',
        BATCH_TESTS,
    ),
    mutant(
        "sb_trusted_keeps_all_live_sources",
        SAVE_BATCH,
        "None if sources is None or set(sources) <= {LIVE} else tuple(sources),",
        "None if sources is None else tuple(sources),",
        (*BATCH_TESTS, "tests/test_pool_checks_once.py"),
        equivalent=(
            "no caller passes an all-LIVE column: the pool checks turn one into None "
            "(_check_save_columns) before apply_effects builds a batch, and a verify "
            "step's saves each read an intermediate state; the test of a third-party "
            "pool's live saves shows the column arrives as None"
        ),
    ),
    mutant(
        "sb_trusted_distinct_dropped",
        SAVE_BATCH,
        'object.__setattr__(batch, "distinct", distinct)',
        'object.__setattr__(batch, "distinct", False)',
        BATCH_TESTS,
        equivalent=(
            "only slower: 'distinct' lets a pool skip rules 2-3 for a batch the library "
            "built; without it the pool checks them and, the batch holding them by "
            "construction, accepts the same batches"
        ),
    ),
    mutant(
        "sb_evolve_keeps_distinct",
        SAVE_BATCH,
        "distinct: bool = attrs.field(default=False, eq=False, repr=False, init=False)",
        "distinct: bool = attrs.field(default=False, eq=False, repr=False)",
        (*BATCH_TESTS, "tests/test_pool_checks_once.py"),
    ),
    mutant(
        "sb_source_live_not_none",
        SAVE_BATCH,
        "return None if source == LIVE else source",
        "return source",
        BATCH_TESTS,
    ),
    mutant(
        "sb_getitem_seq_slot_swapped",
        SAVE_BATCH,
        "            self.seqs[index],\n            self.slots[index],",
        "            self.slots[index],\n            self.seqs[index],",
        BATCH_TESTS,
    ),
    mutant(
        "sb_iter_skips_last",
        SAVE_BATCH,
        "for index in range(len(self.seqs)):",
        "for index in range(len(self.seqs) - 1):",
        BATCH_TESTS,
    ),
    mutant(
        "sb_to_dict_sources_dropped",
        SAVE_BATCH,
        '"sources": None if self.sources is None else list(self.sources),',
        '"sources": None,',
        ("tests/test_effects.py", *BATCH_TESTS),
    ),
    mutant(
        "sb_generator_not_read",
        SAVE_BATCH,
        "            values = list(values)  # a generator",
        "            pass  # a generator",
        BATCH_TESTS,
    ),
    mutant(
        "sb_generator_error_escapes",
        SAVE_BATCH,
        "        except Exception as error:  # the caller's iterable failed",
        "        except ZeroDivisionError as error:  # the caller's iterable failed",
        BATCH_TESTS,
    ),
    # -- _core/ring/_rows.py: the batched record's slow path and first visits ------------
    mutant(
        "rows_slow_path_keeps_disabled_rows",
        RING_ROWS,
        "        if not ring._capacity:\n            continue  # rule 1",
        "        if False:\n            continue  # rule 1",
        ROWS_TESTS,
    ),
    mutant(
        "rows_slow_path_unfiltered",
        RING_ROWS,
        "    rings = [rings[j] for j in kept]\n",
        "",
        ROWS_TESTS,
    ),
    mutant(
        "rows_first_visit_not_appended",
        RING_ROWS,
        "            ring._positions.append(position)\n",
        "",
        ROWS_TESTS,
    ),
    mutant(
        "rows_slow_order_allows_equal",
        RING_ROWS,
        "if before is None and position <= ring._newest:",
        "if before is None and position < ring._newest:",
        ROWS_TESTS,
    ),
    mutant(
        "rows_newest_not_moved_on",  # a ring named twice is not checked against its first row
        RING_ROWS,
        "        ring._newest = position\n    else:",
        "        pass\n    else:",
        ROWS_TESTS,
    ),
    # -- _core/columns.py ---------------------------------------------------------------------
    mutant(
        "col_str_is_a_column",
        COLUMNS,
        "if isinstance(values, str | bytes | Mapping) or not isinstance(values, Sequence):",
        "if not isinstance(values, Sequence):",
        COLUMN_TESTS,
    ),
    mutant(
        "col_int_value_bool_ok",
        COLUMNS,
        "if type(value) is not int or value < least:",
        "if value < least:",
        COLUMN_TESTS,
    ),
    mutant(
        "col_int_value_least_off_by_one",
        COLUMNS,
        "if type(value) is not int or value < least:",
        "if type(value) is not int or value < least - 1:",
        COLUMN_TESTS,
    ),
    mutant(
        "col_lookup_error_escapes",
        COLUMNS,
        "    except Exception:  # a user's container",
        "    except ZeroDivisionError:  # a user's container",
        COLUMN_TESTS,
    ),
    mutant(
        "col_flags_any_int_ok",
        COLUMNS,
        "if type(value) not in (bool, int) or value not in (0, 1):",
        "if type(value) not in (bool, int):",
        COLUMN_TESTS,
    ),
)
