# ruff: noqa: E501  (snippets are the source text, whole lines)
"""Mutants of the modules the other files leave out, written at HEAD: the accept ticket rule
and the shared slots' rules of the pool, the grammar transaction, its adapters and bitmask,
the Hugging Face decoder and stream, ``distributed``, the shard and failure helpers, the
rest of ``reserve``, ``cli/_files.py``; and a few more of the verify step, the effects,
the torch copier and the depth policy."""

from __future__ import annotations

from mutant_base import Mutant, mutant
from mutants_hf_tp import HF_DECODER_TESTS

GAPS = "tests/test_mutation_gaps.py"

# -- the accept ticket rule (rule 7) and the shared slots (SPEC 13) --------------------------
RULES = "pool/_batch_rules.py"
RUNS = "pool/_runs.py"
TAGS = "pool/_slot_tags.py"
SHARED = "pool/_shared_rules.py"
SHARED_BASE = "pool/_shared_base.py"
ACCEPT_TESTS = ("tests/test_fail_closed.py", "tests/test_apply_effects.py", GAPS)
ACCEPT_SELECT = ("-k", "accept")
SHARED_TESTS = ("tests/test_prefix_pools.py", GAPS, "tests/test_fake_pool.py")
SHARED_SELECT = ("-k", "not twenty_thousand")


def _acc(name: str, module: str, original: str, replacement: str, **kw: str) -> Mutant:
    return mutant(name, module, original, replacement, ACCEPT_TESTS, *ACCEPT_SELECT, **kw)


def _shb(name: str, original: str, replacement: str, **kw: str) -> Mutant:
    tests = ("tests/test_check_boundaries.py", *SHARED_TESTS)
    return mutant(name, SHARED_BASE, original, replacement, tests, *SHARED_SELECT, **kw)


def _sh(name: str, original: str, replacement: str, **kw: str) -> Mutant:
    return mutant(name, SHARED, original, replacement, SHARED_TESTS, *SHARED_SELECT, **kw)


# -- grammar ---------------------------------------------------------------------------------
GRAMMAR_ROLLBACK = "integrations/_grammar/rollback.py"
GRAMMAR_STEP = "integrations/_grammar/step.py"
MATCHERS = "integrations/_grammar/matchers.py"
BITMASK = "integrations/_grammar/bitmask.py"
GRAMMAR_TESTS = ("tests/test_grammar.py", "tests/test_grammar_fail_closed.py", GAPS)
GRAMMAR_SELECT = ("-k", "not generate")
STEP_TESTS = ("tests/test_grammar_review.py", "tests/test_grammar_fail_closed.py")
STEP_SELECT = (
    "-k",
    "row_grammar or allows_nothing or wider_than or refuses_a_matcher_that_already or never_picks",
)


def _g(name: str, module: str, original: str, replacement: str, **kw: str) -> Mutant:
    return mutant(name, module, original, replacement, GRAMMAR_TESTS, *GRAMMAR_SELECT, **kw)


def _gs(name: str, original: str, replacement: str, **kw: str) -> Mutant:
    return mutant(name, GRAMMAR_STEP, original, replacement, STEP_TESTS, *STEP_SELECT, **kw)


# -- the Hugging Face backtracking decoder and its stream --------------------------------------
GENERATION = "integrations/_hf/generation.py"
GEN_ROW = "integrations/_hf/row.py"
STREAM = "integrations/_hf/stream.py"
DECODING = "integrations/_hf/decoding.py"
ARGS = "integrations/_hf/arguments.py"
CHAT = "integrations/_hf/chat.py"
HF_GEN_TESTS = HF_DECODER_TESTS  # every test of the decoders, as for the speculative loop
HF_GEN_SELECT: tuple[str, ...] = ()


def _hf(name: str, module: str, original: str, replacement: str, **kw: str) -> Mutant:
    return mutant(name, module, original, replacement, HF_GEN_TESTS, *HF_GEN_SELECT, **kw)


# -- distributed, shard, failures, groups --------------------------------------------------
DISTRIBUTED_MOD = "distributed.py"
SHARD = "_tp/shard.py"
FAILURES = "_tp/failures.py"
GROUPS = "_tp/groups.py"
FAIL_TESTS = ("tests/test_tp_fail_together.py", GAPS)
FAIL_SELECT = ("-k", "src_word or src_refusal or library_error or distributed_error")
SHARD_TESTS = ("tests/test_shard.py", GAPS, "tests/test_distributed.py")
SHARD_SELECT = ("-k", "shard")
SINGLE_RANK_TESTS = (GAPS, "tests/test_distributed.py")
SINGLE_RANK_SELECT = ("-k", "one_rank or without_a_group or apply_on_worker or shard")

# -- reserve, cli --------------------------------------------------------------------------
LAYERS = "reserve/_layers.py"
DTYPES = "reserve/_dtypes.py"
DEPTH = "reserve/_depth.py"
RESERVE_TESTS = ("tests/test_reserve_configs.py", "tests/test_reserve.py", GAPS)
DEPTH_TESTS = ("tests/test_prefix_sizing.py", "tests/test_reserve.py", GAPS)
DEPTH_SELECT = ("-k", "prefix_slots or shared or ring_slots or depth or decode")
CLI_FILES = "cli/_files.py"
CLI_TESTS = ("tests/test_cli_files.py", GAPS)

MORE_MUTANTS: tuple[Mutant, ...] = (
    mutant(
        "grammar_bitmask_rows_sharing_memory_ok",
        "integrations/_grammar/bitmask.py",
        "    if bitmask.shape[0] > 1 and abs(bitmask.stride(0)) < width:",
        "    if False:",
        ("tests/test_grammar_misuse.py",),
    ),
    # -- the vLLM connector's scheduler side (pure Python: tests/test_vllm_book.py) -----------
    mutant(
        "vllm_prompt_end_published_past_it",  # a resumed request's recompute published it
        "integrations/vllm/_scheduler.py",
        "        if not request.options.publish or not computed < end == computed + scheduled:",
        "        if not request.options.publish or not computed < end <= computed + scheduled:",
        ("tests/test_vllm_book.py",),
    ),
    mutant(
        "vllm_lora_and_salted_requests_share",
        "integrations/vllm/_options.py",
        "    return options if shared else RequestOptions(load=False, publish=False)",
        "    return options",
        ("tests/test_vllm_book.py",),
    ),
    mutant(
        "vllm_unknown_extra_keys_ok",
        "integrations/vllm/_options.py",
        "    if unknown:\n        raise UnsupportedEngineError(\n            f\"'kv_connector_extra_config' takes",
        "    if False:\n        raise UnsupportedEngineError(\n            f\"'kv_connector_extra_config' takes",
        ("tests/test_vllm_book.py",),
    ),
    mutant(
        "vllm_speculative_decoding_ok",
        "integrations/vllm/_options.py",
        '    if _setting(vllm_config, "speculative_config") is not None:',
        "    if False:",
        ("tests/test_vllm_book.py",),
    ),
    mutant(
        "grammar_rollback_that_says_no_taken",
        GRAMMAR_ROLLBACK,
        "        if answer is False or (moved is not None and moved != dropped):",
        "        if moved is not None and moved != dropped:",
        ("tests/test_grammar_misuse.py",),
    ),
    mutant(
        "grammar_too_few_given_back_taken",
        GRAMMAR_ROLLBACK,
        "        if answer is False or (moved is not None and moved != dropped):",
        "        if answer is False:",
        ("tests/test_grammar_misuse.py",),
    ),
    mutant(
        "grammar_token_ids_unchecked",
        GRAMMAR_ROLLBACK,
        "    _check_token_ids(tokens, matcher)\n",
        "",
        ("tests/test_grammar_misuse.py",),
    ),
    mutant(
        "grammar_adapters_over_one_engine_ok",
        GRAMMAR_STEP,
        "        if any(other is matcher or _engine(other) is engine for other in matchers[:index]):",
        "        if any(other is matcher for other in matchers[:index]):",
        ("tests/test_grammar_misuse.py",),
    ),
    # -- rule 7: an accept no newer than the row's last is refused ----------------------------
    _acc(
        "rules_accept_same_ticket_ok",
        RULES,
        "if ticket is not None and replayed(ticket, last):",
        "if ticket is not None and last is not None and ticket < last:",
    ),
    _acc("rules_accept_tickets_unread", RULES, "held = self._accepted(seqs)", "held = None"),
    _acc(
        "rules_accept_none_ticket_checked",  # an unticketed (v0.2) accept compared as -1
        RULES,
        "if ticket is not None and replayed(ticket, last):",
        "if last is not None and (-1 if ticket is None else ticket) <= last:",
    ),
    _acc(
        "runs_accepted_once_skipped",
        RUNS,
        "_check_accepted_once(accepts, accepted, names)",
        "pass",
    ),
    _acc(
        "runs_accepted_once_same_ticket_ok",
        RUNS,
        "if replayed(ticket, last):",
        "if last is not None and ticket < last:",
    ),
    _acc(
        "runs_accepted_once_not_recorded",
        RUNS,
        "        accepted[seq] = ticket\n",
        "        pass\n",
    ),
    _acc(
        "tags_commit_accepts_drops_them",
        TAGS,
        "                accepted[seq] = ticket\n",
        "                pass\n",
    ),
    _acc(
        "tags_commit_accepts_none_overwrites",
        TAGS,
        "            if ticket is not None:\n                accepted[seq] = ticket\n",
        "            accepted[seq] = ticket\n",
    ),
    _acc(
        "base_accepts_not_committed",
        "pool/_base.py",
        "            self._tags._commit_accepts(checked.rows, checked.tickets)\n",
        "",
    ),
    # -- the shared slots' half of the pool skeleton ----------------------------------------
    _shb(
        "shared_base_failed_saves_copied",
        "            copy_rows = [row for k, row in enumerate(rows) if k not in skip]\n"
        "            copy_slots = [slot for k, slot in enumerate(slots) if k not in skip]\n",
        "            pass\n",
    ),
    _shb(
        "shared_base_copy_error_not_forgotten",
        "            self._tags._forget_shared(slots)  # maybe half written: no restore may read them\n",
        "            pass\n",
    ),
    _shb(
        "shared_base_failed_committed_as_saved",
        "self._tags._commit_shared(slots, lengths, tickets, failed)",
        "self._tags._commit_shared(slots, lengths, tickets, [])",
    ),
    mutant(
        "shared_base_save_owned_unchecked",
        SHARED_BASE,
        "        self._check_owned()\n        rows, slots, lengths, tickets = checked\n",
        "        rows, slots, lengths, tickets = checked\n",
        ("tests/test_torch_pool.py",),
        "-k",
        "no_longer_owns",
    ),
    mutant(
        "shared_base_restore_owned_unchecked",
        SHARED_BASE,
        "        self._check_owned()\n        if checked.rows:\n            self._copy_shared_restores",
        "        if checked.rows:\n            self._copy_shared_restores",
        ("tests/test_torch_pool.py",),
        "-k",
        "no_longer_owns",
    ),
    # -- the shared slots' rules --------------------------------------------------------------
    _sh(
        "shared_restore_ticket_unchecked",
        "if tickets != [r.ticket for r in restores] or (",
        "if False or (",
    ),
    _sh(
        "shared_restore_length_unchecked",
        "lengths is not None and lengths != [r.length for r in restores]",
        "False",
    ),
    _sh("shared_save_again_unchecked", "if any(map(replayed, tickets, held)):", "if False:"),
    _sh("shared_slot_bound_inclusive", "and max(slots) < shared", "and max(slots) <= shared"),
    _sh(
        "shared_saves_one_slot_twice_ok",
        "and (not writes or len(set(slots)) == len(slots))",
        "and True",
    ),
    _sh(
        "shared_rows_twice_ok",
        "            and len(set(seqs)) == len(seqs)\n            and (not writes",
        "            and (not writes",
    ),
    _sh(
        "shared_restores_count_as_writes",
        "first = targets.setdefault(slot, k) if writes else k",
        "first = targets.setdefault(slot, k)",
    ),
    _sh(
        "shared_pending_ignored",
        "    if pending:\n        for k, slot in enumerate(slots):\n",
        "    if False:\n        for k, slot in enumerate(slots):\n",
    ),
    _sh(
        "shared_pending_seen_ignored",  # a shared save applied twice within one call
        "        return _with_pending(slots, pending, None, self._seen_shared_now(slots))[1]",
        "        return self._seen_shared_now(slots)",
    ),
    _sh(
        "shared_pending_length_not_taken",
        "                if lengths is not None:\n                    lengths[k] = length\n",
        "                pass\n",
    ),
    # -- grammar: the rollback transaction ---------------------------------------------------
    _g(
        "grammar_matcher_limit_strict",
        GRAMMAR_ROLLBACK,
        "if limit is not None and limit < plan.tokens_dropped:",
        "if limit is not None and limit <= plan.tokens_dropped:",
    ),
    _g(
        "grammar_matcher_limit_unchecked",
        GRAMMAR_ROLLBACK,
        "if limit is not None and limit < plan.tokens_dropped:",
        "if False:",
    ),
    _g(
        "grammar_held_ticket_unchecked",
        GRAMMAR_ROLLBACK,
        "    if held != restore.ticket:\n",
        "    if False:\n",
    ),
    _g(
        "grammar_tokens_past_held_ok",
        GRAMMAR_ROLLBACK,
        "    if taken > held:\n",
        "    if False:\n",
    ),
    _g(
        "grammar_num_tokens_ignored",
        GRAMMAR_ROLLBACK,
        '        taken = max(taken, check_non_negative_int("matcher.num_tokens", matcher.num_tokens))\n',
        "        pass\n",
    ),
    _g(
        "grammar_pool_fault_matcher_not_put_back",
        GRAMMAR_ROLLBACK,
        "            _reaccept(matcher, tokens[plan.keep_len :], error)\n",
        "",
    ),
    _g(
        "grammar_reaccept_one_short",
        GRAMMAR_ROLLBACK,
        "            _reaccept(matcher, tokens[plan.keep_len :], error)\n",
        "            _reaccept(matcher, tokens[plan.keep_len + 1 :], error)\n",
    ),
    _g(
        "grammar_partial_rollback_not_undone",
        GRAMMAR_ROLLBACK,
        "        if 0 < given_back <= dropped:\n",
        "        if False:\n",
    ),
    _g(
        "grammar_crop_after_commit_order",  # the KV cut planned only after the matcher moved
        GRAMMAR_ROLLBACK,
        "    cut = None if crop is None else _plan_cut(crop, plan.keep_len)\n    _move_matcher(matcher, plan.tokens_dropped, tokens)\n",
        "    _move_matcher(matcher, plan.tokens_dropped, tokens)\n    cut = None if crop is None else _plan_cut(crop, plan.keep_len)\n",
    ),
    _g(
        "grammar_ring_not_committed",
        GRAMMAR_ROLLBACK,
        "    commit_rollback(ring, plan)\n    return plan\n",
        "    return plan\n",
    ),
    _g(
        "grammar_reaccept_refusal_ignored",
        GRAMMAR_ROLLBACK,
        "        if not matcher.accept_token(token):\n            raise InvariantError(",
        "        if False:\n            raise InvariantError(",
    ),
    # -- grammar: the adapters and the bitmask ------------------------------------------------
    _g(
        "matcher_rollback_past_limit_ok",
        MATCHERS,
        "    if num_tokens > limit:\n",
        "    if num_tokens > limit + 1:\n",
    ),
    _g(
        "matcher_limit_ignores_max",
        MATCHERS,
        "return self._accepted if self._max is None else min(self._accepted, self._max)",
        "return self._accepted",
    ),
    _g(
        "xgrammar_accept_past_vocab",
        MATCHERS,
        "        if token >= self._vocab_size or self._matcher.is_terminated():\n",
        "        if token > self._vocab_size or self._matcher.is_terminated():\n",
    ),
    _g(
        "xgrammar_rollback_count_kept",
        MATCHERS,
        "            self._matcher.rollback(num_tokens)\n            self._accepted -= num_tokens\n",
        "            self._matcher.rollback(num_tokens)\n",
    ),
    _g(
        "xgrammar_terminated_row_not_cleared",
        MATCHERS,
        "            row.zero_()  # xgrammar raises for a terminated matcher: nothing is allowed\n            return\n",
        "            pass\n",
    ),
    _g(
        "llguidance_eos_recorded",
        MATCHERS,
        "        recorded = num_tokens - self._unrecorded_eos\n",
        "        recorded = num_tokens\n",
    ),
    _g(
        "llguidance_eos_flag_kept",
        MATCHERS,
        "        self._unrecorded_eos = False\n        self._accepted -= num_tokens\n",
        "        self._accepted -= num_tokens\n",
    ),
    _g(
        "llguidance_stopped_takes_any_token",
        MATCHERS,
        "if token not in self._eos or not self._matcher.consume_token(token):",
        "if not self._matcher.consume_token(token):",
    ),
    _g(
        "bitmask_padding_kept",
        BITMASK,
        "        row[vocab_size // _BITS] &= (1 << used) - 1\n",
        "        pass\n",
    ),
    _g(
        "bitmask_padding_one_bit_more",
        BITMASK,
        "        row[vocab_size // _BITS] &= (1 << used) - 1\n",
        "        row[vocab_size // _BITS] &= (1 << used + 1) - 1\n",
    ),
    _g(
        "bitmask_apply_ids_past_mask_allowed",
        BITMASK,
        "        pad = torch.zeros(masks.shape[0], vocab - allowed.shape[1], dtype=torch.bool)\n",
        "        pad = torch.ones(masks.shape[0], vocab - allowed.shape[1], dtype=torch.bool)\n",
    ),
    _g(
        "bitmask_row_index_bound_inclusive",
        BITMASK,
        "    if index >= bitmask.shape[0]:\n",
        "    if index > bitmask.shape[0]:\n",
    ),
    # -- grammar: a row's step -----------------------------------------------------------------
    _gs(
        "step_mask_ids_past_matcher_allowed",
        '        masked[..., self._vocab_size :] = float("-inf")\n',
        "",
    ),
    _gs(
        "step_empty_mask_unchecked",
        "        if not bool(torch.isfinite(masked).any()):\n",
        "        if False:\n",
    ),
    _gs(
        "step_used_matcher_ok",
        "        if taken:\n            # Every rollback",
        "        if False:\n            # Every rollback",
    ),
    _gs(
        "step_wider_matcher_ok",
        "        if covered > vocab_size:\n",
        "        if False:\n",
    ),
    _gs(
        "step_shared_matcher_ok",
        "        if any(other is matcher or _engine(other) is engine for other in matchers[:index]):\n",
        "        if False:\n",
    ),
    # -- the backtracking decoder -------------------------------------------------------------
    _hf(
        "gen_budget_never_spent",
        GEN_ROW,
        "    row.budget -= 1\n    return True\n",
        "    return True\n",
    ),
    _hf(
        "gen_budget_off_by_one",
        GEN_ROW,
        "    if row.budget <= 0:  # spent",
        "    if row.budget < 0:  # spent",
    ),
    _hf(
        "gen_rejected_token_not_banned",
        GENERATION,
        "                row.refused.setdefault(len(output), []).append((tuple(output), token))\n",
        "",
    ),
    _hf(
        "gen_boundaries_kept_past_the_cut",
        GEN_ROW,
        "    del row.boundaries[row.boundaries.index(plan.keep_len) + 1 :]\n",
        "",
    ),
    _hf(
        "gen_logits_kept_past_the_cut",
        GEN_ROW,
        "del output[plan.keep_len :], row.logits_after[plan.keep_len + 1 :]",
        "del output[plan.keep_len :], row.logits_after[plan.keep_len + 2 :]",
    ),
    _hf(
        "gen_snapshot_position_one_early",
        GENERATION,
        "row.ring, seq=0, token_position=len(output), is_boundary=is_b, in_thinking=False",
        "row.ring, seq=0, token_position=len(output) - 1, is_boundary=is_b, in_thinking=False",
    ),
    _hf(
        "gen_crop_ignores_the_prompt",
        GEN_ROW,
        "crop=lambda keep: stream.plan_truncate(len(row.prompt) + keep),",
        "crop=lambda keep: stream.plan_truncate(keep),",
    ),
    _hf(
        "gen_fresh_check_skips_the_last_token",
        GEN_ROW,
        "    for token in row.output:\n",
        "    for token in row.output[:-1]:\n",
    ),
    _hf(
        "stream_checkpoint_reused_at_another_length",
        STREAM,
        "if self._checkpoint is not None and self._checkpoint.token_position == length:",
        "if self._checkpoint is not None:",
    ),
    _hf(
        "stream_rewind_queues_nothing",
        STREAM,
        "        self.queued = kept[at:]\n",
        "        self.queued = []\n",
    ),
    _hf(
        "stream_feed_queue_kept",
        STREAM,
        "        self.fed += tokens\n        self.queued = []\n",
        "        self.fed += tokens\n",
    ),
    _hf(
        "stream_logits_of_the_queue_too",
        STREAM,
        "first = -1 if last_only else len(tokens) - len(ids)",
        "first = -1 if last_only else 0",
    ),
    _hf(
        "args_token_upper_bound_inclusive",
        ARGS,
        "    if not 0 <= token < vocab:\n",
        "    if not 0 <= token <= vocab:\n",
    ),
    _hf(
        "args_token_negative_ok",
        ARGS,
        "    if not 0 <= token < vocab:\n",
        "    if not token < vocab:\n",
    ),
    _hf(
        "args_bool_ids_ok",
        ARGS,
        "    if isinstance(value, bool) or (\n",
        "    if False or (\n",
    ),
    _hf(
        "args_ban_mask_shape_unchecked",
        ARGS,
        "        if ban.shape != (vocab,):\n",
        "        if False:\n",
    ),
    _hf(
        "args_predicate_any_truthy_answer",
        ARGS,
        "        if isinstance(answer, bool):\n            return answer\n",
        "        if answer is not None:\n            return bool(answer)  # type: ignore[call-overload]\n",
    ),
    _hf(
        "args_generator_device_unchecked",
        ARGS,
        "    if generator.device.type != device.type:\n",
        "    if False:\n",
    ),
    _hf(
        "chat_boundary_not_a_prefix_kept",
        CHAT,
        "        if whole[:end] == part and (not ends or end > ends[-1]):\n",
        "        if not ends or end > ends[-1]:\n",
    ),
    _hf(
        "chat_repeated_boundary_kept",
        CHAT,
        "        if whole[:end] == part and (not ends or end > ends[-1]):\n",
        "        if whole[:end] == part:\n",
    ),
    _hf(
        "pick_greedy_takes_the_least",
        "integrations/_hf/scoring.py",
        "        return int(scores.argmax())\n",
        "        return int(scores.argmin())\n",
    ),
    # -- distributed, failures, shard ---------------------------------------------------------
    mutant(
        "distributed_one_rank_src_unchecked",
        DISTRIBUTED_MOD,
        "        if word != 0:\n",
        "        if False:\n",
        SINGLE_RANK_TESTS,
        *SINGLE_RANK_SELECT,
    ),
    mutant(
        "distributed_one_rank_error_dropped",
        DISTRIBUTED_MOD,
        "        if error is not None:\n            raise error\n        if word != 0:\n",
        "        if word != 0:\n",
        SINGLE_RANK_TESTS,
        *SINGLE_RANK_SELECT,
    ),
    mutant(
        "distributed_one_rank_none_not_empty",
        "_tp/wire.py",  # the one encode of the caller's effects, shared with the channel
        "return encode(() if effects is None else effects, ranged=ranged)",
        "return encode(effects, ranged=ranged)",
        SINGLE_RANK_TESTS,
        *SINGLE_RANK_SELECT,
    ),
    mutant(
        "distributed_worker_rings_not_contained",
        DISTRIBUTED_MOD,
        "    def __contains__(self, seq: object) -> bool:\n        return True\n",
        "    def __contains__(self, seq: object) -> bool:\n        return False\n",
        SINGLE_RANK_TESTS,
        *SINGLE_RANK_SELECT,
    ),
    mutant(
        "failures_src_past_int64_ok",
        FAILURES,
        "    if value > _MAX_INT64:\n",
        "    if value > _MAX_INT64 + 1:\n",
        FAIL_TESTS,
        *FAIL_SELECT,
    ),
    mutant(
        "failures_mixed_src_unchecked",
        FAILURES,
        "    if any(word != words[0] for word in words):\n",
        "    if False:\n",
        FAIL_TESTS,
        *FAIL_SELECT,
    ),
    mutant(
        "failures_own_error_dropped",
        FAILURES,
        "    if error is not None:\n        return error\n",
        "",
        FAIL_TESTS,
        *FAIL_SELECT,
    ),
    mutant(
        "failures_src_outside_group_ok",
        FAILURES,
        "    if words[0] not in ranks:\n",
        "    if False:\n",
        FAIL_TESTS,
        *FAIL_SELECT,
    ),
    mutant(
        "failures_lost_rank_dropped",
        FAILURES,
        'f"{label}: {who} {what} - {why}; the group cannot be used again{because}", label, rank',
        'f"{label}: {who} {what} - {why}; the group cannot be used again{because}", label, None',
        FAIL_TESTS,
        *FAIL_SELECT,
    ),
    mutant(
        "shard_replicated_group_of_rank_0",
        SHARD,
        "            group = rank * seg.groups // tp\n",
        "            group = 0\n",
        SHARD_TESTS,
        *SHARD_SELECT,
        equivalent=(
            "shard_of then checks the config at tp_size, which refuses groups that do not divide "
            "it unless there is one group, and one group is group 0 on every rank"
        ),
    ),
    mutant(
        "shard_even_split_from_0",
        SHARD,
        "            out.append((start + rank * width, start + (rank + 1) * width))\n",
        "            out.append((start, start + width))\n",
        SHARD_TESTS,
        *SHARD_SELECT,
    ),
    mutant(
        "shard_segments_not_offset",
        SHARD,
        "        start += seg.size\n",
        "",
        SHARD_TESTS,
        *SHARD_SELECT,
    ),
    mutant(
        "shard_rank_bound_inclusive",
        SHARD,
        "    if not 0 <= rank < tp:\n",
        "    if not 0 <= rank <= tp:\n",
        SHARD_TESTS,
        *SHARD_SELECT,
    ),
    mutant(
        "shard_groups_split_when_they_do_not_divide",
        SHARD,
        "        elif seg.groups and seg.groups % tp:\n",
        "        elif False:\n",
        SHARD_TESTS,
        *SHARD_SELECT,
    ),
    mutant(
        "shard_replicated_state_split",
        SHARD,
        "        if seg.whole:\n",
        "        if False:\n",
        SHARD_TESTS,
        *SHARD_SELECT,
    ),
    mutant(
        "shard_kda_conv_one_run",
        SHARD,
        "        return layer.kind, [_Segment(channels // 3)] * 3\n",
        "        return layer.kind, [_Segment(channels)]\n",
        SHARD_TESTS,
        *SHARD_SELECT,
    ),
    # -- reserve: layers, dtypes, the depth policy's shared slots -------------------------------
    mutant(
        "layers_period_offset_bound_inclusive",
        LAYERS,
        "    if offset >= period:",
        "    if offset > period:",
        RESERVE_TESTS,
    ),
    mutant(
        "layers_every_fourth_shifted",
        LAYERS,
        "attention = {i for i in range(count) if i % 4 == 3} or {count - 1}",
        "attention = {i for i in range(count) if i % 4 == 2} or {count - 1}",
        RESERVE_TESTS,
    ),
    mutant(
        "layers_interval_from_zero",
        LAYERS,
        "return [i for i in all_layers(f) if (i + 1) % interval]",
        "return [i for i in all_layers(f) if i % interval]",
        RESERVE_TESTS,
    ),
    mutant(
        "layers_group_tail_kept",
        LAYERS,
        "    grouped = count // group * group\n",
        "    grouped = count\n",
        RESERVE_TESTS,
    ),
    mutant(
        "layers_first_of_four_attention",
        LAYERS,
        "return [i for i in all_layers(f) if not (i and i % 4 == 0)]",
        "return [i for i in all_layers(f) if i % 4]",
        RESERVE_TESTS,
    ),
    mutant(
        "layers_count_limit_off",
        LAYERS,
        "    if count > MAX_LAYERS:",
        "    if count > MAX_LAYERS + 1:",
        RESERVE_TESTS,
    ),
    mutant(
        "dtypes_fixed_state_ignored",
        DTYPES,
        'state = ("float32", fixed) if fixed else model_dtype',
        "state = model_dtype",
        RESERVE_TESTS,
    ),
    mutant(
        "depth_fit_ignores_shared",
        DEPTH,
        "fit = max(0, free - speculative - shared) // (sequences * per_slot)",
        "fit = max(0, free - speculative) // (sequences * per_slot)",
        DEPTH_TESTS,
        *DEPTH_SELECT,
    ),
    mutant(
        "depth_shared_unchecked",
        DEPTH,
        "    if shared and speculative + shared > free:\n",
        "    if False:\n",
        DEPTH_TESTS,
        *DEPTH_SELECT,
    ),
    mutant(
        "depth_shared_bound_inclusive",
        DEPTH,
        "    if shared and speculative + shared > free:\n",
        "    if shared and speculative + shared >= free:\n",
        DEPTH_TESTS,
        *DEPTH_SELECT,
    ),
    mutant(
        "depth_shared_bytes_not_reported",
        DEPTH,
        "return RingDepth(slots, rule, per_slot, total, fit, speculative, shared_slots, shared)",
        "return RingDepth(slots, rule, per_slot, total, fit, speculative, shared_slots, 0)",
        DEPTH_TESTS,
        *DEPTH_SELECT,
    ),
    # -- cli/_files.py ------------------------------------------------------------------------
    mutant(
        "files_empty_path_ok",
        CLI_FILES,
        "    if not path:  # the empty",
        "    if False:  # the empty",
        CLI_TESTS,
    ),
    mutant(
        "files_size_limit_inclusive",
        CLI_FILES,
        "    if status.st_size > limit:\n",
        "    if status.st_size >= limit:\n",
        CLI_TESTS,
    ),
    mutant(
        "files_not_regular_ok",
        CLI_FILES,
        "    if not stat.S_ISREG(status.st_mode):\n",
        "    if False:\n",
        CLI_TESTS,
    ),
    mutant(
        "files_descriptor_not_rechecked",
        CLI_FILES,
        "        _check_regular(flag, path, os.fstat(descriptor), limit)\n",
        "",
        CLI_TESTS,
    ),
    mutant(
        "files_read_unbounded",
        CLI_FILES,
        "    while size <= limit:\n",
        "    while True:\n",
        CLI_TESTS,
    ),
    mutant(
        "files_directory_file_ignored",
        CLI_FILES,
        "        path = os.path.join(path, directory_file)\n",
        "        pass\n",
        CLI_TESTS,
    ),
    # -- more of the verify step, the effects, the torch copier --------------------------------
    mutant(
        "verify_accept_unticketed",
        "_core/verify.py",
        "accept = SsmStateAccept(checked.seq, checked.accepted, tickets.mint_ticket())",
        "accept = SsmStateAccept(checked.seq, checked.accepted)",
        ("tests/test_verify.py", "tests/test_fail_closed.py", GAPS),
    ),
    mutant(
        "effects_ticket_negative_ok",
        "_core/effects.py",
        "int | None], value: int | None\n) -> None:\n    if value is not None and (type(value) is not int or value < 0):",
        "int | None], value: int | None\n) -> None:\n    if value is not None and type(value) is not int:",
        ("tests/test_effects.py", "tests/test_fail_closed.py", GAPS),
    ),
    mutant(
        "torch_copy_src_unique_ignored",
        "backends/_torch_copy.py",
        "first, order = self._as_range(src, dst) if src_unique else (None, [])",
        "first, order = self._as_range(src, dst)",
        ("tests/test_torch_pool.py",),
        "-k",
        "shared or scattered",
    ),
    mutant(
        "effect_dict_kind_str_subclass_refused",
        "_core/effect_dict.py",
        "    kind = str.__str__(given) if isinstance(given, str) else None",
        "    kind = given if type(given) is str else None",
        ("tests/test_effects.py",),
    ),
    mutant(
        "cli_usage_error_to_closed_stderr_is_an_output_error",
        "cli/__init__.py",
        "        if message and file is None and sys.stdout is None:",
        "        if message and file is None:",
        ("tests/test_cli_hardening.py",),
    ),
)
