# ruff: noqa: E501  (snippets are the source text, whole lines)
"""Mutants of the prefix index written at HEAD: the radix tree (``_trie``) and
``PrefixSnapshotIndex`` (match, plan_prefill, publish, release, discard, eviction, pins)."""

from __future__ import annotations

from mutant_base import Mutant, mutant

TRIE = "_core/prefix/_trie.py"
INDEX = "_core/prefix/_index.py"
EVICTION = "_core/prefix/_eviction.py"
PREFIX_TESTS = ("tests/test_prefix_placement.py", "tests/test_prefix_index.py")
SESSIONS = "_apps/prefix_sim/_sessions.py"
SESSIONS_TESTS = ("tests/test_prefix_sessions.py",)
TRACE = "_apps/prefix_sim/_trace.py"
REQUESTS = "_apps/prefix_sim/_requests.py"
SIMULATION_TESTS = ("tests/test_prefix_simulation.py",)
WORKERS = "_apps/prefix_sim/_workers.py"
LIVENESS = "_apps/prefix_sim/_liveness.py"
LIVENESS_TESTS = ("tests/test_prefix_liveness.py",)


def _live(name: str, module: str, original: str, replacement: str) -> Mutant:
    return mutant(name, module, original, replacement, LIVENESS_TESTS)


def _x(name: str, module: str, original: str, replacement: str, **kw: str) -> Mutant:
    return mutant(name, module, original, replacement, PREFIX_TESTS, **kw)


PREFIX_MUTANTS: tuple[Mutant, ...] = (
    # -- the radix tree ----------------------------------------------------------------------
    _x("trie_longest_ignores_limit", TRIE, "if end > limit or end > size or", "if end > size or"),
    _x(
        "trie_longest_limit_off_by_one",
        TRIE,
        "if end > limit or end > size or",
        "if end > limit + 1 or end > size or",
    ),
    _x(
        "trie_longest_edge_uncompared",  # a hash-like hit: the first token only
        TRIE,
        "if end > limit or end > size or tokens[depth:end] != child.label:",
        "if end > limit or end > size:",
    ),
    _x(
        "trie_longest_valueless_node_hits",
        TRIE,
        "            if node.value is not None:\n                best = node.value\n",
        "            best = node.value\n",
    ),
    _x(
        "trie_find_deeper_child_ok",
        TRIE,
        "if child is None or child.depth > length:",
        "if child is None:",
    ),
    _x(
        "trie_find_edge_uncompared",
        TRIE,
        "            if list(tokens[depth : child.depth]) != child.label:\n                return None\n",
        "",
    ),
    _x(
        "trie_put_no_split",
        TRIE,
        "            if shared < len(label):  # the new prefix",
        "            if False:  # the new prefix",
    ),
    _x(
        "trie_put_leaf_too_long",
        TRIE,
        "leaf: _Node[V] = _Node(list(tokens[depth:length]), length, node)",
        "leaf: _Node[V] = _Node(list(tokens[depth:]), length, node)",
    ),
    _x(
        "trie_split_depth_off_by_one",
        TRIE,
        "child.depth - len(child.label) + at, parent)",
        "child.depth - len(child.label) + at + 1, parent)",
    ),
    _x("trie_remove_absent_ok", TRIE, "if node is None or node.value is None:", "if node is None:"),
    _x(
        "trie_remove_no_prune",
        TRIE,
        "        node.value = None\n        self._prune(node)\n",
        "        node.value = None\n",
    ),
    _x(
        "trie_prune_no_merge",
        TRIE,
        "            if len(node.children) == 1:\n",
        "            if False:\n",
    ),
    _x(
        "trie_common_off_by_one",
        TRIE,
        "    while shared < limit and label[shared] == tokens[start + shared]:\n        shared += 1\n    return shared",
        "    while shared < limit and label[shared] == tokens[start + shared]:\n        shared += 1\n    return max(0, shared - 1) if shared < limit else shared",
    ),
    # -- PrefixSnapshotIndex ------------------------------------------------------------------
    _x(
        "index_match_leaves_no_token",  # rule 3
        INDEX,
        "nothing is live to match\n"
        "        found = self._trie.longest(token_list, len(token_list) - 1) if self._by_slot else None",
        "nothing is live to match\n"
        "        found = self._trie.longest(token_list, len(token_list)) if self._by_slot else None",
    ),
    _x(
        "index_plan_leaves_no_token",
        INDEX,
        "found = self._trie.longest(token_list, len(token_list) - 1) if self._by_slot else None\n"
        "        pinned: list[Live] = []",
        "found = self._trie.longest(token_list, len(token_list)) if self._by_slot else None\n"
        "        pinned: list[Live] = []",
    ),
    _x(
        "index_publish_at_bound_inclusive",
        INDEX,
        "if positions and positions[-1] >= len(token_list):",
        "if positions and positions[-1] > len(token_list):",
    ),
    _x("index_hit_not_pinned", INDEX, "            found.pins += 1\n", ""),
    _x("index_hit_not_counted", EVICTION, "        live.uses += 1\n", ""),
    _x(
        "index_frontier_hit_counted",
        INDEX,
        "            if not frontier:\n                self._order.hit_at_branch(found)\n",
        "            self._order.hit_at_branch(found)\n",
    ),
    _x(
        "index_no_pass_through",
        INDEX,
        'if found is not None and frontier and found.kids and self._eviction == "benefit":',
        "if False:",
    ),
    _x(
        "index_pass_through_under_lru_too",
        INDEX,
        'if found is not None and frontier and found.kids and self._eviction == "benefit":',
        "if found is not None and frontier and found.kids:",
    ),
    _x(
        "index_placed_again_counts_a_use",
        EVICTION,
        "        return self._ghosts.pop(hash(tokens), 1)\n",
        "        return 1 + self._ghosts.pop(hash(tokens), 0)\n",
    ),
    _x(
        "index_hit_restore_wrong_length",
        INDEX,
        "hit = PrefixHit(e, SsmPrefixRestore(seq, e.slot, e.length, e.ticket))",
        "hit = PrefixHit(e, SsmPrefixRestore(seq, e.slot, e.length - 1, e.ticket))",
    ),
    _x(
        "index_hit_start_zero",
        INDEX,
        "start = 0 if hit is None else hit.entry.length",
        "start = 0",
    ),
    _x(
        "index_publish_at_hit_saved_again",
        INDEX,
        "if position <= start or position == 0:",
        "if position < start or position == 0:",
        equivalent=(
            "the position equal to start is the hit's length, and the hit is live: the live "
            "check right after skips it the same way"
        ),
    ),
    _x(
        "index_live_prefix_placed_again",
        INDEX,
        "            if live is not None:\n                self._order.touch(live)\n                continue\n",
        "",
        equivalent=(
            "a live prefix longer than the hit would have been the hit (match takes the longest "
            "live one), and those at or below it are skipped just before; the plan places each "
            "position once"
        ),
    ),
    _x("index_placed_not_pinned", INDEX, "            placed.pins += 1\n", ""),
    _x(
        "index_no_final_chunk",
        INDEX,
        "        chunks.append(PrefillChunk(len(token_list), None))\n",
        "",
    ),
    _x(
        "index_release_unpins_discarded",
        INDEX,
        "            if self._by_slot.get(live.entry.slot) is live:  # not discarded since\n",
        "            if True:  # not discarded since\n",
        equivalent=(
            "it only lowers the pins of a dropped entry, which nothing reads again: the slot "
            "table, the repr, eviction and check_valid all read entries still in the slot table"
        ),
    ),
    _x(
        "index_release_twice_ok",
        INDEX,
        "        if outstanding is None or outstanding[0] != plan:",
        "        if outstanding is None:\n            return\n        if outstanding[0] != plan:",
    ),
    _x(
        "index_release_a_rebuilt_plan",
        INDEX,
        "        if outstanding is None or outstanding[0] != plan:",
        "        if outstanding is None:",
    ),
    _x(
        "index_publish_length_zero_ok",
        INDEX,
        "if not 1 <= length <= len(token_list):",
        "if not 0 <= length <= len(token_list):",
    ),
    _x(
        "index_publish_length_past_tokens_ok",
        INDEX,
        "if not 1 <= length <= len(token_list):",
        "if not 1 <= length <= len(token_list) + 1:",
    ),
    _x(
        "index_publish_live_placed_again",
        INDEX,
        "        if live is not None:\n            self._order.touch(live)\n            return None\n",
        "",
    ),
    _x(
        "index_publish_save_wrong_ticket",
        INDEX,
        "        e = placed.entry\n        return SsmPrefixSave(seq, e.slot, e.length, e.ticket)",
        "        e = placed.entry\n        return SsmPrefixSave(seq, e.slot, e.length, e.ticket + 1)",
    ),
    _x(
        "index_full_not_evicting",
        INDEX,
        "            victim = self._order.victim(own or {})\n",
        "            victim = None\n",
    ),
    _x(
        "index_victim_pinned_ok",
        EVICTION,
        "            if live.pins and id(live) not in own:",
        "            if False:",
    ),
    _x(
        "index_plan_may_not_evict_its_own",  # rule 6: a long plan keeps its first positions
        EVICTION,
        "            if live.pins and id(live) not in own:",
        "            if live.pins:",
    ),
    _x(
        "index_evicted_own_kept_in_the_plan",
        INDEX,
        "            if own:\n                own.pop(id(victim), None)\n",
        "",
    ),
    _x(
        "index_lru_evicts_newest",
        EVICTION,
        "return (rank, 0, live.used)",
        "return (rank, 0, -live.used)",
    ),
    _x(
        "index_demote_ignored",
        EVICTION,
        "        rank = 0 if live.demoted else 1\n",
        "        rank = 1\n",
    ),
    _x(
        "index_demoted_victim_raises_the_level",
        EVICTION,
        "        if not victim.demoted:\n",
        "        if True:\n",
    ),
    _x(
        "index_a_use_keeps_the_demotion",
        EVICTION,
        "        live.demoted = False\n",
        "",
    ),
    mutant(
        "sessions_a_sample_demotes_too",
        SESSIONS,
        "            elif request.kind in MOVES_ON:",
        "            elif True:",
        SESSIONS_TESTS,
    ),
    _x(
        "index_hold_pins_nothing",  # an agent's held answer end evicted while its tool ran
        INDEX,
        "        live.pins += 1\n        hold = PrefixHold(entry, tickets.mint_ticket())\n",
        "        hold = PrefixHold(entry, tickets.mint_ticket())\n",
    ),
    _x(
        "index_hold_is_a_use",
        INDEX,
        "        live.pins += 1\n        hold = PrefixHold(entry, tickets.mint_ticket())\n",
        "        live.pins += 1\n        self._order.touch(live)\n        hold = PrefixHold(entry, tickets.mint_ticket())\n",
    ),
    mutant(
        "sessions_agent_holds_nothing",
        SESSIONS,
        "        if request.resumes:  # the next request goes on from the end of the output\n",
        "        if False:  # the next request goes on from the end of the output\n",
        SESSIONS_TESTS,
    ),
    mutant(
        "sessions_hold_never_released",
        SESSIONS,
        "        if hold is not None:\n            self._index.release(hold)\n",
        "        if hold is not None:\n            pass\n",
        SESSIONS_TESTS,
    ),
    mutant(
        "trace_agent_resumes_after_its_last",
        TRACE,
        "ends_session=True, resumes=False)",
        "ends_session=True)",
        SESSIONS_TESTS,
    ),
    mutant(
        "sessions_shared_ends_are_a_sessions_own",
        SESSIONS,
        "e in live and e.length not in shared]",
        "e in live]",
        SESSIONS_TESTS,
    ),
    mutant(
        "sessions_dropped_branches_kept",
        SESSIONS,
        "        for entry in dropped:\n            self._index.demote(entry)\n",
        "",
        SESSIONS_TESTS,
    ),
    mutant(
        "sessions_dropped_branch_includes_its_prompt",
        SESSIONS,
        "if entry.length > prompt and on_branch:",
        "if on_branch:",
        SESSIONS_TESTS,
    ),
    mutant(
        "sessions_an_end_demotes_nothing",
        SESSIONS,
        "        if request.ends_session:  # nothing of it will be hit again\n",
        "        if False:\n",
        SESSIONS_TESTS,
    ),
    mutant(
        "trace_a_search_drops_every_branch",
        TRACE,
        "dropped = tuple(child for child in children if child not in kept)",
        "dropped = tuple(children)",
        SIMULATION_TESTS,
    ),
    mutant(
        "trace_every_session_ends",
        TRACE,
        "            if session in source.ended:\n",
        "            if True:\n",
        SIMULATION_TESTS,
    ),
    mutant(
        "workers_results_out_of_order",
        WORKERS,
        "return oracles, [results[index] for index in range(len(runs))]",
        "return oracles, [results[index] for index in reversed(range(len(runs)))]",
        SIMULATION_TESTS,
    ),
    mutant(
        "workers_fork_beside_threads",
        WORKERS,
        'safe_fork = sys.platform == "linux" and threading.active_count() == 1',
        'safe_fork = sys.platform == "linux"',
        SIMULATION_TESTS,
    ),
    mutant(
        "workers_one_job_ignored",  # always the pool: the per-request progress is lost
        WORKERS,
        "    if jobs == 1:\n",
        "    if False:\n",
        SIMULATION_TESTS,
    ),
    mutant(
        "workers_progress_counts_nothing",
        WORKERS,
        "                    done += len(trace)\n",
        "",
        SIMULATION_TESTS,
    ),
    mutant(
        "trace_the_edit_branch_point_everywhere",
        REQUESTS,
        "if self.editable and len(messages) >= 2",
        "if len(messages) >= 2",
        SIMULATION_TESTS,
    ),
    _x(
        "index_benefit_ignores_uses",
        EVICTION,
        "        return (self.entry.length - below) * (SCALE * (self.uses - 1) + first)\n",
        "        return (self.entry.length - below) * first\n",
    ),
    _x(
        "index_benefit_ignores_margin",
        EVICTION,
        "        return (self.entry.length - below) * (SCALE * (self.uses - 1) + first)\n",
        "        return self.entry.length * (SCALE * (self.uses - 1) + first)\n",
    ),
    _x(
        "index_benefit_no_first_use_discount",
        EVICTION,
        "        first = self.first_use if self.kids else SCALE\n",
        "        first = SCALE\n",
    ),
    _x(
        "index_first_use_ignores_the_rate",
        EVICTION,
        "        rate = SCALE * (self._branch_hits + 1) // (self._interiors + 2)\n",
        "        rate = SCALE // 2\n",
    ),
    _x(
        "index_entry_born_extended_not_discounted",
        EVICTION,
        "        if live.kids:  # placed between an entry and its kids\n            self._extended(live)\n",
        "",
    ),
    _x(
        "index_parent_not_refiled_at_its_first_kid",
        EVICTION,
        "            self._extended(parent)\n            self.file(parent)\n",
        "            self._extended(parent)\n",
    ),
    _x(
        "index_parent_extended_again_after_its_kids_move",
        EVICTION,
        "            self.file(kid)\n        live.parent = parent\n",
        "            self.file(kid)\n        live.parent = parent\n"
        "        first_kid = parent is not None and not parent.kids\n",
    ),
    _x(
        "index_branch_hits_not_counted",
        EVICTION,
        "        self._branch_hits += 1\n",
        "",
    ),
    _x(
        "index_childless_parent_not_refiled",
        EVICTION,
        "        if parent is not None and not parent.kids:  # a whole first use again (rule 7)\n"
        "            self.file(parent)\n",
        "",
    ),
    _x(
        "index_place_same_ticket",
        INDEX,
        "live = Live(PrefixEntry(length, slot, tickets.mint_ticket()), tuple(tokens[:length]))",
        "live = Live(PrefixEntry(length, slot, slot + 1), tuple(tokens[:length]))",
    ),
    _x("index_drop_slot_not_freed", INDEX, "        self._free.append(live.entry.slot)\n", ""),
    _x(
        "index_drop_pins_kept",
        INDEX,
        "        self._free.sort(reverse=True)\n        live.pins = 0\n",
        "        self._free.sort(reverse=True)\n",
        equivalent=(
            "it only keeps the pins of a dropped entry, which nothing reads again: release skips "
            "entries no longer in the slot table, and every other reader starts from that table"
        ),
    ),
    _x(
        "index_free_taken_highest_first",
        INDEX,
        "            slot = self._free.pop()\n",
        "            slot = self._free.pop(0)\n",
    ),
    _x(
        "index_touch_no_clock",
        EVICTION,
        "        self._clock += 1\n        live.used",
        "        live.used",
    ),
    _x(
        "index_discard_any_entry_at_slot",
        INDEX,
        "if live is None or live.entry != entry:",
        "if live is None:",
    ),
    _x(
        "index_eviction_name_unchecked",
        INDEX,
        "        if self._eviction not in EVICTIONS:\n",
        "        if False:\n",
    ),
    # -- a chat application weighing its conversations by their chance to come back -----------
    _live(
        "liveness_ignores_idle",
        LIVENESS,
        "longer = (gaps - bisect.bisect_right(self._gaps, idle)) / gaps",
        "longer = 1.0",
    ),
    _live(
        "liveness_ignores_sessions_that_ended",
        LIVENESS,
        "q = 1 - self._firsts / self._clock",
        "q = 1.0",
    ),
    _live(
        "liveness_share_unsmoothed",
        LIVENESS,
        "(self._reached[reach] + 1) / (self._reached.total() + len(_ALL))",
        "self._reached[reach] / max(1, self._reached.total())",
    ),
    _live(
        "liveness_gap_counted_from_the_first_request",
        LIVENESS,
        "        self._last[request.session] = self._clock\n",
        "        self._last.setdefault(request.session, self._clock)\n",
    ),
    _live(
        "sessions_make_room_demotes_the_hit",
        SESSIONS,
        "if e != hit  # what this request restores stays",
        "if True  # what this request restores stays",
    ),
    _live(
        "sessions_make_room_ignores_demoted",
        SESSIONS,
        "(index.capacity - len(live)) - len(demoted)",
        "(index.capacity - len(live))",
    ),
    _live(
        "sessions_make_room_ignores_the_chance_to_come_back",
        SESSIONS,
        "alive * self._saves(e.length, lengths, their_base, their_reach),",
        "self._saves(e.length, lengths, their_base, their_reach),",
    ),
    _live(
        "sessions_make_room_demotes_the_most_worth",
        SESSIONS,
        "worth.sort(key=lambda item: item[:2])",
        "worth.sort(key=lambda item: item[:2], reverse=True)",
    ),
    _live(
        "sessions_make_room_places_what_saves_nothing",
        SESSIONS,
        "idle = {p for p in mine if not self._saves(p, mine, base, reach)}",
        "idle = {p for p in mine if p < 0}",
    ),
    _live(
        "sessions_make_room_for_every_session",
        SESSIONS,
        "        if not request.ends_silently:\n            return wanted, 0\n",
        "",
    ),
    _live(
        "sessions_margin_without_fallback",
        SESSIONS,
        "for other in own if other <= at and other != length), default=base)",
        "for other in own if other <= at and other != length), default=0)",
    ),
    _live(
        "sessions_make_room_counts_the_hit_as_room",
        SESSIONS,
        "demoted = [e for e in index.demoted() if e != hit]",
        "demoted = list(index.demoted())",
    ),
    _live(
        "sessions_an_entry_placed_again_stays_nobodys",
        SESSIONS,
        "            kept += self._unowned(tokens, positions, kept)\n",
        "            pass\n",
    ),
    _live(
        "sessions_make_room_leaves_out_nothing",
        SESSIONS,
        "        short = max(0, short - len(idle))\n",
        "        short = max(0, short)\n",
    ),
    _live(
        "replay_make_room_demotions_uncounted",
        "_apps/prefix_sim/_replay.py",
        "            demoted += made\n",
        "            pass\n",
    ),
    _x(
        "index_demoted_lists_every_entry",
        INDEX,
        "            for slot in sorted(self._by_slot)\n            if self._by_slot[slot].demoted\n",
        "            for slot in sorted(self._by_slot)\n",
    ),
    _live(
        "trace_chat_says_when_it_ends",
        TRACE,
        "editable=editable, ends_silently=True)",
        "editable=editable)",
    ),
)
