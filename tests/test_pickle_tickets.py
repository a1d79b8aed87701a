"""Tickets across processes: what holds tickets carries the counter's high water when pickled.

Every process counts its tickets from the same start. A ring, prefix index or
pool unpickled in a fresh process used to mint again the tickets its pool's
slots held, so a restore the new process planned could take the old
process's state (a prefix hit restored another prefix's snapshot). Each test
pickles here and goes on in a fresh interpreter, as a restarted scheduler would.
"""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import textwrap

from ssm_rollback import (
    PrefixSnapshotIndex,
    SsmDecodeRing,
    SsmSnapshotSave,
    apply_effects,
)
from ssm_rollback._core.ring import tickets
from ssm_rollback.backends.fake import FakeSnapshotPool

#: The child's start: ``loaded`` unpickled; then its counter is brought up to where the
#: pickling process minted ``held`` (a long-lived process restarted gets there in time).
PRELUDE = """
import pickle, sys
from ssm_rollback._core.ring import _tickets
loaded, held = pickle.loads(sys.stdin.buffer.read())
while _tickets.mint_ticket() + (1 << 16) < held:
    pass
"""


def in_a_fresh_process(script: str, pickled: object, held: int) -> str:
    """Run ``script`` in a new interpreter with ``loaded`` unpickled from ``pickled``, after
    its counter has minted everything below ``held``, a ticket the pickled slots hold."""
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script)],
        input=pickle.dumps((pickled, held)),
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


def test_a_ring_unpickled_in_a_fresh_process_never_mints_a_ticket_its_pool_holds() -> None:
    ring, pool = SsmDecodeRing(1), FakeSnapshotPool(1, 1)
    pool.live[0] = "branch A after 5"
    ring.record(5)
    entry = ring.entry_for(5)
    assert entry is not None
    apply_effects(pool, [SsmSnapshotSave(0, entry.snapshot_slot, 5, entry.ticket)], [ring])
    ring.truncate_after(4)  # a rollback before position 5: the ring forgets its ticket
    out = in_a_fresh_process(
        """
        from ssm_rollback import SsmSnapshotRestore, StaleSnapshotError
        ring, pool = loaded
        pool.live[0] = "branch B after 5"  # another branch reaches 5 again
        ring.record(5)
        entry = ring.entry_for(5)
        try:  # restored before the new save ran: the slot holds branch A
            pool.restore([SsmSnapshotRestore(0, entry.snapshot_slot, 5, entry.ticket)])
        except StaleSnapshotError:
            print("refused")
        else:
            print("restored", pool.live[0])
        """,
        (ring, pool),
        entry.ticket,
    )
    assert out == "refused"


def test_an_index_unpickled_in_a_fresh_process_never_hits_with_another_prefixs_state() -> None:
    index = PrefixSnapshotIndex(1)
    pool = FakeSnapshotPool(2, 1, shared_slots=1)
    plan = index.plan_prefill(0, [1, 2, 3, 4, 5], publish_at=[4])
    pool.live[0] = (1, 2, 3, 4)
    save = plan.chunks[0].save
    assert save is not None
    apply_effects(pool, [save], [], prefix_index=index)
    index.release(plan)
    out = in_a_fresh_process(
        """
        from ssm_rollback import StaleSnapshotError, apply_effects
        index, pool = loaded
        new = [7, 7, 7, 7, 7]
        index.release(index.plan_prefill(0, new, publish_at=[4]))  # evicts; its save never ran
        hit = index.plan_prefill(1, [*new, 8]).hit
        try:
            apply_effects(pool, [hit.restore], [], prefix_index=index)
        except StaleSnapshotError:
            print("refused")
        else:
            print("restored", pool.live[1])
        """,
        (index, pool),
        index.entries()[0].ticket,
    )
    assert out == "refused"


def test_a_pool_unpickled_in_a_fresh_process_takes_the_new_processs_saves() -> None:
    """A fresh ring's first save goes into a slot the old process saved: rule 6 took it for
    an older save and refused it, so an unpickled pool could not be used at all."""
    ring, pool = SsmDecodeRing(1), FakeSnapshotPool(1, 1)
    ring.record(9)
    entry = ring.entry_for(9)
    assert entry is not None
    pool.live[0] = "old"
    apply_effects(pool, [SsmSnapshotSave(0, entry.snapshot_slot, 9, entry.ticket)], [ring])
    out = in_a_fresh_process(
        """
        from ssm_rollback import SsmDecodeRing, SsmSnapshotRestore, SsmSnapshotSave, apply_effects
        pool = loaded
        ring = SsmDecodeRing(1)
        slot = ring.record(3)
        entry = ring.entry_for(3)
        pool.live[0] = "new"
        apply_effects(pool, [SsmSnapshotSave(0, slot, 3, entry.ticket)], [ring])
        pool.live[0] = "later"
        pool.restore([SsmSnapshotRestore(0, slot, 3, entry.ticket)])
        print(pool.live[0])
        """,
        pool,
        entry.ticket,
    )
    assert out == "new"


def test_unpickling_moves_the_counter_past_what_the_pickling_process_minted() -> None:
    """In one process: a state whose high water is ahead of the counter moves it on (the
    fresh-process case); one behind it, as a copy's is, leaves every later ticket newer."""
    ring = SsmDecodeRing(2)
    ring.record(1)
    state = ring.__getstate__()
    assert isinstance(state, dict)
    ahead = state["__ticket_high_water__"]
    assert isinstance(ahead, int)
    assert ahead > max(entry.ticket for entry in ring.entries)
    far = {**state, "__ticket_high_water__": ahead + 10**9}
    clone = SsmDecodeRing.__new__(SsmDecodeRing)
    clone.__setstate__(far)
    assert tickets.mint_ticket() > ahead + 10**9
    copied = copy.deepcopy(ring)
    before = tickets.mint_ticket()
    copied.record(2)
    entry = copied.entry_for(2)
    assert entry is not None
    assert entry.ticket > before
    assert copied.entries == (*ring.entries, entry)


def test_a_state_pickled_without_a_high_water_still_moves_past_the_tickets_it_holds() -> None:
    ring = SsmDecodeRing(2)
    ring.record(1)
    state = ring.__getstate__()
    assert isinstance(state, dict)
    held = max(entry.ticket for entry in ring.entries)
    old = {k: v for k, v in state.items() if k != "__ticket_high_water__"}
    old["_tickets"] = [held + 10**9]
    clone = SsmDecodeRing.__new__(SsmDecodeRing)
    clone.__setstate__(old)
    assert tickets.mint_ticket() > held + 10**9


def test_a_shallow_copy_of_a_ring_an_index_or_a_pools_tags_is_independent() -> None:
    """``copy.copy`` shared the slot tables (the tree, the tags) but not the cursor or the
    counts: one's change showed in the other, whose check_valid() then failed."""
    ring = SsmDecodeRing(2)
    ring.record(1)
    ring.record(2)
    twin = copy.copy(ring)
    ring.truncate_after(1)
    ring.record(5)
    assert [e.token_position for e in twin.entries] == [1, 2]
    twin.check_valid()
    index = PrefixSnapshotIndex(2)
    index.release(index.plan_prefill(0, [1, 2, 3, 4], publish_at=[2]))
    other = copy.copy(index)
    index.release(index.plan_prefill(0, [7, 8, 9], publish_at=[2]))
    assert len(other.entries()) == 1
    other.check_valid()
    index.check_valid()
    pool = FakeSnapshotPool(1, 1)
    tags = pool._slot_tags()
    copied = copy.copy(tags)
    entry = ring.entries[-1]
    apply_effects(pool, [SsmSnapshotSave(0, 0, entry.token_position, entry.ticket)], [ring])
    assert copied.stored_ticket(0, 0) is None
    assert tags.stored_ticket(0, 0) == entry.ticket
