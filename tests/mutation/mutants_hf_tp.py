"""Mutants of the Hugging Face decoders (the speculative loop, drafting) and the
tensor-parallel agreement check, written at HEAD."""

from __future__ import annotations

from mutant_base import Mutant, mutant

SPEC = "integrations/_hf/speculative.py"
DRAFTING = "integrations/_hf/drafting.py"
AGREEMENT = "_tp/agreement.py"
RETIRE = "_tp/retire.py"

GAPS = "tests/test_mutation_gaps.py"
# Every test of the decoders (about 40 s in one process): a narrower selection let
# mutants that break every greedy decode survive.
HF_DECODER_TESTS = (
    GAPS,
    "tests/test_hf_decoder_gaps.py",
    "tests/test_generation.py",
    "tests/test_hf_fail_closed.py",
    "tests/test_hf_contract.py",
    "tests/test_hf_generate_contract.py",
    "tests/test_prefix_cache.py",
    "tests/test_prefix_publish.py",
    "tests/test_hf_generate_outputs.py",
    "tests/test_hf_generate_misuse.py",
)
SPEC_TESTS = HF_DECODER_TESTS
SPEC_SELECT: tuple[str, ...] = ()
# The multi-rank fault runs take minutes: the scheduler's answer is tested in one process.
AGREEMENT_TESTS = (GAPS, "tests/test_fail_closed.py")
AGREEMENT_SELECT = ("-k", "retire")


def _s(name: str, module: str, original: str, replacement: str, **kw: str) -> Mutant:
    return mutant(name, module, original, replacement, SPEC_TESTS, *SPEC_SELECT, **kw)


def _a(name: str, original: str, replacement: str, **kw: str) -> Mutant:
    return mutant(name, RETIRE, original, replacement, AGREEMENT_TESTS, *AGREEMENT_SELECT, **kw)


HF_TP_MUTANTS: tuple[Mutant, ...] = (
    # -- speculative_generate ------------------------------------------------------------------
    _s(
        "spec_cut_keeps_tokens_after_eos",
        SPEC,
        "            return tokens[: i + 1]\n",
        "            return tokens\n",
    ),
    _s(
        "spec_cut_drops_the_eos",
        SPEC,
        "            return tokens[: i + 1]\n",
        "            return tokens[:i]\n",
    ),
    _s(
        "spec_snapshot_fed_one_past_the_boundary",  # the boundary's snapshot at the wrong position
        SPEC,
        "upto = prompt_len + segment.through - len(target.fed)",
        "upto = prompt_len + segment.through - len(target.fed) + 1",
    ),
    _s(
        "spec_first_position_off_by_one",
        SPEC,
        "        first_position=first,\n",
        "        first_position=first + 1,\n",
    ),
    _s(
        "spec_keep_off_by_one",
        SPEC,
        "keep = prompt_len + first + n  #",
        "keep = prompt_len + first + n + 1  #",
    ),
    _s(
        "spec_rejected_drafts_not_rewound",
        SPEC,
        "        if n < len(drafts):\n            target.rewind(keep)",
        "        if False:\n            target.rewind(keep)",
    ),
    _s("spec_greedy_bonus_is_first", SPEC, "return n, int(chosen[n])", "return n, int(chosen[0])"),
    _s(
        "spec_greedy_accepts_one_more",
        SPEC,
        "while n < len(drafts) and drafts[n] == chosen[n]:",
        "while n < len(drafts) and (n == 0 or drafts[n] == chosen[n]):",
    ),
    _s(
        "spec_streamer_takes_a_batch",
        SPEC,
        "if stream.active and len(prompts.rows) != 1:",
        "if stream.active and len(prompts.rows) < 1:",
    ),
    _s("spec_row_counts_lost", SPEC, "counts.tokens += len(new)", "counts.tokens = len(new)"),
    _s(
        "spec_forward_unprobed",
        SPEC,
        '        if verifies:\n            check_multi_token_forward("model", model, vocab)\n',
        "",
    ),
    # -- drafting ------------------------------------------------------------------------------
    _s(
        "draft_lookup_shortest_ngram_first",
        DRAFTING,
        "for n in range(min(max_ngram, length - 1), 0, -1):",
        "for n in range(1, min(max_ngram, length - 1) + 1):",
    ),
    _s(
        "draft_lookup_empty_follow_returned",
        DRAFTING,
        "                if follow:\n                    return follow\n",
        "                return follow\n",
        equivalent=(
            "follow is never empty for k >= 1: start < length - n, so tokens[start + n] exists; "
            "for k <= 0 every follow is empty and both return []"
        ),
    ),
    _s("draft_too_many_ok", DRAFTING, "if len(proposed) > k:", "if len(proposed) > k + 1:"),
    _s("draft_vocab_smaller_ok", DRAFTING, "if own != vocab:", "if own < vocab:"),
    _s(
        "draft_assistant_never_rewound",
        DRAFTING,
        "        if common < len(held):\n            stream.rewind(common)",
        "        if False:\n            stream.rewind(common)",
    ),
    # -- the generate() contract (tests/test_hf_generate_misuse.py) ---------------------------
    _s(
        "hf_eos_keyword_handed_over",  # generate hands eos_token_id over, past min_new_tokens
        "integrations/_hf/generate_args.py",
        '_IN_CONFIG = ("max_new_tokens", "eos_token_id", "pad_token_id")',
        '_IN_CONFIG = ("max_new_tokens", "pad_token_id")',
    ),
    _s(
        "hf_pad_keyword_handed_over",  # generate's mask misses the caller's pad id
        "integrations/_hf/generate_args.py",
        '_IN_CONFIG = ("max_new_tokens", "eos_token_id", "pad_token_id")',
        '_IN_CONFIG = ("max_new_tokens", "eos_token_id")',
    ),
    _s(
        "hf_direct_processors_default_length",
        "integrations/_hf/generate_args.py",
        "            config.max_length = ids.shape[-1] + max_new_tokens\n",
        "",
    ),
    _s(
        "hf_direct_processors_without_the_calls_eos",
        "integrations/_hf/generate_args.py",
        "            config.eos_token_id = list(eos) or None\n",
        "",
    ),
    _s(
        "hf_pad_with_the_smallest_eos",
        "integrations/_hf/arguments.py",
        "    return eos[0] if eos else 0",
        "    return min(eos) if eos else 0",
    ),
    _s(
        "hf_pad_past_int64_ok",
        "integrations/_hf/arguments.py",
        "        if not 0 <= pad_token_id <= _MAX_PAD:",
        "        if not 0 <= pad_token_id:",
    ),
    _s(
        "hf_own_criteria_with_other_values_ok",
        "integrations/_hf/generate_checks.py",
        "        return bool(criterion.max_length == config.max_length)",
        "        return True",
    ),
    _s(
        "hf_own_eos_criterion_with_other_ids_ok",
        "integrations/_hf/generate_checks.py",
        "        return set(criterion.eos_token_id.reshape(-1).tolist()) == set(ids)",
        "        return True",
    ),
    _s(
        "hf_max_time_ignored",
        "integrations/_hf/generate_checks.py",
        '_STOPS = ("max_time", "stop_strings")',
        '_STOPS = ("stop_strings",)',
    ),
    _s(
        "hf_token_settings_unchecked",
        "integrations/_hf/generate_checks.py",
        "            if not 0 <= token < vocab:",
        "            if token < 0:",
    ),
    _s(
        "hf_sequence_bias_pairs_unread",
        "integrations/_hf/generate_checks.py",
        "            items = items[:1]",
        "            items = []",
    ),
    _s(
        "hf_rows_told_row_zero",
        "integrations/_hf/scoring.py",
        "        return allowed(row, ids)",
        "        return allowed(0, ids)",
    ),
    _s(
        "hf_publish_as_each_row_ends",  # a later row's refusal leaves the earlier ones published
        SPEC,
        "            runs.append(run)\n",
        "            runs.append(run)\n"
        "            publish_stream(prefixes, target, prompt, run.new)\n",
    ),
    _s(
        "hf_ids_compared_in_their_own_dtype",
        "integrations/_hf/prompts.py",
        "    return ids.long()  # compared in int64",
        "    return ids  # compared in int64",
    ),
    _s(
        "hf_wrapped_decoder_is_a_direct_call",
        "integrations/_hf/streaming.py",
        "            if below is frame or below.f_code is _code_of(wrapper):",
        "            if below is frame:",
    ),
    mutant(
        "hf_zero_new_tokens_decodes_nothing",  # returned the prompt where generate() raises
        "integrations/_hf/generate_args.py",
        'check_int_at_least("max_new_tokens", value, 1)',
        'check_non_negative_int("max_new_tokens", value)',
        ("tests/test_hf_generate_misuse.py",),
        "-k",
        "zero",
    ),
    # -- the generate contract: this round's fixes ---------------------------------------------
    *(
        mutant(name, f"integrations/_hf/{module}", original, replacement, tests)
        for name, module, original, replacement, tests in (
            (
                "hf_penalty_row_keeps_the_batch_padding",
                "scoring.py",
                '            fields["prompt_ignore_length"] = ignored[row : row + 1]',
                "            pass",
                ("tests/test_hf_generate_misuse.py",),
            ),
            (
                "hf_encoder_penalty_reads_the_batch_prompt",
                "scoring.py",
                '            fields["encoder_input_ids"] = prompt[row : row + 1]',
                "            pass",
                ("tests/test_hf_generate_misuse.py",),
            ),
            (
                "hf_synthid_taken",
                "generate_checks.py",
                "    if isinstance(value.watermarking_config, SynthIDTextWatermarkingConfig):",
                "    if False:",
                ("tests/test_hf_generate_misuse.py",),
            ),
            (
                "hf_config_without_cache_taken",
                "generate_args.py",
                'if call is None and use_cache is None and getattr(given, "use_cache", None) is False:',  # noqa: E501
                "if False:",
                ("tests/test_hf_generate_misuse.py",),
            ),
            (
                "hf_pad_of_an_eos_masks",
                "generate_args.py",
                "pad_ok = isinstance(pad, int) and not isinstance(pad, bool) and pad not in eos",
                "pad_ok = isinstance(pad, int) and not isinstance(pad, bool)",
                ("tests/test_hf_contract.py",),
            ),
            (
                "hf_default_length_uncapped",
                "generate_args.py",
                "            length = min(width + length, cap)",
                "            length = width + length",
                ("tests/test_hf_contract.py",),
            ),
            (
                "hf_default_length_counts_the_prompt",
                "generate_args.py",
                "            length = min(width + length, cap)",
                "            length = min(length, cap)",
                ("tests/test_hf_contract.py",),
            ),
            (
                "hf_wrappers_streamer_dropped",
                "streaming.py",
                "    if own is None or own is outer:",
                "    if True:",
                ("tests/test_hf_generate_contract.py",),
            ),
            (
                "hf_result_reduced_by_fields",
                "decoding.py",
                "        return (type(self), (), *rest)",
                "        return reduced",
                ("tests/test_hf_generate_outputs.py",),
            ),
            (
                "hf_padded_row_cache_returned",
                "result_cache.py",
                "    if rows != 1 or padded:  # no one cache",
                "    if rows != 1:  # no one cache",
                ("tests/test_hf_generate_outputs.py",),
            ),
            (
                "hf_cache_of_another_layout_taken",
                "result_cache.py",
                "        if given != wanted:  # DynamicCache() without a config",
                "        if False:  # DynamicCache() without a config",
                ("tests/test_hf_generate_outputs.py",),
            ),
            (
                "hf_pool_restore_reads_lengths_after_copying",
                "cache_pool.py",
                "        lengths = [self._lengths.get((r.seq, r.slot)) for r in restores]",
                "        lengths = [self._lengths[r.seq, r.slot] for r in restores]",
                ("tests/test_hf_prefix_cache_misuse.py",),
            ),
            (
                "hf_models_own_no_cache_refused",
                "generate_args.py",
                'getattr(given, "use_cache", None) is False:',
                'getattr(given or model.generation_config, "use_cache", None) is False:',
                ("tests/test_hf_generate_misuse.py",),
            ),
            (
                "hf_saves_ignore_the_offset",
                "recurrent_offset.py",
                "    if held is None:  # never cropped nor restored into",
                "    if True:  # never cropped nor restored into",
                ("tests/test_hf_prefix_cache_misuse.py",),
            ),
            (
                "gen_ends_ignores_a_done_grammar",
                "generation.py",
                "    done = row.grammar is not None and row.grammar.is_done()",
                "    done = False",
                ("tests/test_grammar_generation.py",),
            ),
            (
                "gen_ends_ignores_the_eos",
                "generation.py",
                " or (bool(output) and output[-1] in rules.eos) or done",
                " or done",
                ("tests/test_hf_generate_outputs.py",),
            ),
            (
                "hf_result_cache_left_after_the_last_token",
                "result_cache.py",
                "        passes = stand_before_last(stream, tokens) if self.stand else 0",
                "        passes = 0",
                ("tests/test_hf_generate_outputs.py",),
            ),
            (
                "hf_result_carries_no_cache",
                "result_cache.py",
                "        return (stream.cache if self.returned else None), passes",
                "        return None, passes",
                ("tests/test_hf_generate_outputs.py",),
            ),
            (
                "hf_batch_cache_of_the_callers_taken",
                "result_cache.py",
                "        if rows != 1:\n            raise InvalidArgumentError(",
                "        if False:\n            raise InvalidArgumentError(",
                ("tests/test_hf_generate_outputs.py",),
            ),
        )
    ),
    # -- a cache whose recurrent state and attention stand after different tokens ------------
    *(
        mutant(
            name,
            module,
            original,
            replacement,
            ("tests/test_hf_prefix_cache_misuse.py",),
            "-k",
            "cropped or rolled_back",
        )
        for name, module, original, replacement in (
            (
                "hf_crop_leaves_no_offset",
                "integrations/_hf/crop.py",
                "        moved_attention(cache, held - length)",
                "        pass",
            ),
            (
                "hf_restore_leaves_the_offset",
                "integrations/_hf/cache_pool.py",
                "            recurrent_offset.restored(self._cache, restore.seq, length)",
                "            pass",
            ),
            (
                "hf_publish_ignores_the_offset",
                "integrations/_hf/prefix_cache.py",
                "        if behind:  # crop_attention",
                "        if False:  # crop_attention",
            ),
            (
                "hf_restore_offset_sign_flipped",
                "integrations/_hf/recurrent_offset.py",
                "    held.rows[row] = recurrent_length - attention_length(cache)",
                "    held.rows[row] = attention_length(cache) - recurrent_length",
            ),
        )
    ),
    # -- the agreement check's scheduler answer -----------------------------------------------
    _a(
        "agreement_retire_ignores_tickets",  # retires an entry whose ticket no rank disputes
        "if entry is not None and entry.ticket in d.tickets and (id(ring), d.slot) not in seen:",
        "if entry is not None and (id(ring), d.slot) not in seen:",
    ),
    mutant(
        "agreement_retire_row_bound_inclusive",  # the rings lookup apply_effects shares
        "pool/_runs.py",
        "get = lambda seq: rings[seq] if seq < count else None  # noqa: E731",
        "get = lambda seq: rings[seq] if seq <= count else None  # noqa: E731",
        AGREEMENT_TESTS,
        *AGREEMENT_SELECT,
    ),
    mutant(
        "agreement_refused_rank_skips_the_gather",  # its peers wait out the group's timeout
        AGREEMENT,
        "    everyone = _gather(words, group)\n"
        "    if refused is not None:\n        raise refused\n",
        "    if refused is not None:\n        raise refused\n"
        "    everyone = _gather(words, group)\n",
        ("tests/test_distributed.py",),
        "-k",
        "fails_together",
    ),
    mutant(
        "agreement_intermediate_buffers_uncompared",
        AGREEMENT,
        "    staged = _staged(pool)\n",
        "    staged: list[int] = []\n",
        ("tests/test_distributed.py",),
        "-k",
        "fails_together",
    ),
    mutant(
        "agreement_accepts_uncompared",  # an accept on one rank only passed: the rows' live
        AGREEMENT,  # state differed with every slot agreeing
        "    accepted = _accepted(pool)\n",
        "    accepted: list[int | None] = [None] * rows\n",
        ("tests/test_distributed.py",),
        "-k",
        "fails_together",
    ),
    mutant(
        "agreement_row_dispute_known_misfiled",  # known got another pair's words
        "_tp/disputes.py",
        "        disputed[key] = k // 2\n",
        "        disputed[key] = 0\n",
        ("tests/test_distributed.py",),
        "-k",
        "fails_together",
    ),
    mutant(
        "agreement_excusal_disputes_agreeing_ranks",  # a mended slot raised tickets (10, 10)
        "_tp/disputes.py",
        "        if all((a[k], a[k + 1]) == held for a in actual):\n",
        "        if False:\n",
        ("tests/test_distributed.py",),
        "-k",
        "fails_together",
    ),
    mutant(
        "agreement_settled_stays_known",
        AGREEMENT,
        "            known.pop(key, None)\n",
        "            pass\n",
        ("tests/test_distributed.py",),
        "-k",
        "fails_together",
    ),
    mutant(
        "agreement_excused_hashes_as_empty",
        AGREEMENT,
        "_EXCUSED: Final = -3",
        "_EXCUSED: Final = -2",
        ("tests/test_fail_closed.py",),
        "-k",
        "digest",
    ),
    _a("agreement_retire_not_discarded", "        ring.discard(entry.token_position)\n", ""),
    _a(
        "agreement_retire_negative_seq_ok",
        '        seq = check_non_negative_int(f"error.disputes[{i}].seq", d.seq)\n',
        "        seq = d.seq\n",
    ),
)
