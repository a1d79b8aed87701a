"""Tests the mutation check (``tests/mutation``) showed missing: each names the mutant it kills."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from transformers import PreTrainedModel

from ssm_rollback import SsmDecodeRing
from ssm_rollback.distributed import AgreementError, SlotDispute, retire_disputed


def test_retire_disputed_keeps_an_entry_whose_ticket_no_rank_holds() -> None:
    """A dispute over a slot whose ring entry is newer than every rank's ticket (the slot was
    recorded again since) retires nothing: only the save that reached some ranks is disputed.
    Kills ``agreement_retire_ignores_tickets``."""
    ring = SsmDecodeRing(4)
    ring.record(3)
    ring.record(5)
    old, new = ring.entries
    disputes = (
        SlotDispute(0, old.snapshot_slot, (old.ticket, None)),
        SlotDispute(0, new.snapshot_slot, (new.ticket - 1, None)),  # another save's ticket
    )
    retired = retire_disputed([ring], AgreementError("ranks disagree", 1, disputes))
    assert retired == (old,)
    assert ring.entries == (new,)


def test_retire_disputed_skips_a_row_without_a_ring() -> None:
    """A dispute for a row past the rings given is skipped, never an IndexError.
    Kills ``agreement_retire_row_bound_inclusive``."""
    ring = SsmDecodeRing(2)
    ring.record(1)
    (entry,) = ring.entries
    disputes = (SlotDispute(1, 0, (entry.ticket, None)), SlotDispute(0, 0, (entry.ticket, None)))
    assert retire_disputed([ring], AgreementError("x", 0, disputes)) == (entry,)
    assert ring.entries == ()


def test_a_verify_step_one_behind_the_rings_newest_snapshot_is_refused() -> None:
    """``first_position`` one below the ring's newest position recomputes a recorded state:
    refused, and the ring is unchanged. Kills ``verify_order_one_behind_ok``."""
    from ssm_rollback import OutOfOrderError
    from ssm_rollback.rollback import commit_verified

    ring = SsmDecodeRing(4)
    ring.record(5)
    before = ring.entries
    with pytest.raises(OutOfOrderError, match="'first_position'"):
        commit_verified(
            ring, seq=0, first_position=4, accepted=0, is_boundary=[False], in_thinking=[False]
        )
    assert ring.entries == before


def test_a_save_batch_checks_its_sources_column() -> None:
    """``sources``: one per row, each an intermediate index or ``LIVE`` (-1, read back as
    ``None``); a shorter column or one below ``LIVE`` raises naming it. Kills
    ``sb_sources_length_ignored``, ``sb_sources_live_refused``, ``sb_sources_below_live_ok``
    and ``sb_source_live_not_none``."""
    from ssm_rollback import InvalidArgumentError, SaveBatch
    from ssm_rollback._core.save_batch import LIVE

    batch = SaveBatch([0, 1], [0, 0], [1, 1], [1, 2], sources=[LIVE, 0])
    assert (batch.source(0), batch.source(1)) == (None, 0)
    assert (batch[0].source, batch[1].source) == (None, 0)
    with pytest.raises(InvalidArgumentError, match="one length"):
        SaveBatch([0, 1], [0, 0], [1, 1], [1, 2], sources=[LIVE])
    with pytest.raises(InvalidArgumentError, match="'sources"):
        SaveBatch([0], [0], [1], [1], sources=[LIVE - 1])


def test_an_int_argument_of_a_verify_step_is_checked_for_type_and_bound() -> None:
    """``seq`` must be an int >= 0: ``True`` and ``-1`` are refused by name, the ring unchanged.
    Kills ``col_int_value_bool_ok`` and ``col_int_value_least_off_by_one``."""
    from ssm_rollback._errors import InvalidArgumentError, InvalidArgumentTypeError
    from ssm_rollback.rollback import commit_verified

    ring = SsmDecodeRing(4)
    flags = {"is_boundary": [True], "in_thinking": [False]}
    with pytest.raises(InvalidArgumentTypeError, match="'seq' must be an int >= 0, got True"):
        commit_verified(ring, seq=True, first_position=1, accepted=0, **flags)
    with pytest.raises(InvalidArgumentError, match="'seq' must be an int >= 0, got -1"):
        commit_verified(ring, seq=-1, first_position=1, accepted=0, **flags)
    assert ring.entries == ()


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@functools.cache
def _model() -> PreTrainedModel:
    from transformers import AutoModelForCausalLM

    from ssm_rollback.testing import tiny_config

    torch.manual_seed(0)
    built: PreTrainedModel = AutoModelForCausalLM.from_config(tiny_config("mamba2"))  # type: ignore[no-untyped-call]
    built.eval()  # type: ignore[no-untyped-call]
    return built


@pytest.mark.usefixtures("quiet_warnings")
def test_an_eos_among_accepted_drafts_ends_the_speculative_output_there() -> None:
    """Drafts the target accepts may hold an EOS before the step's last token: the output
    ends at that EOS, as greedy decoding would. Kills ``spec_cut_keeps_tokens_after_eos`` and
    ``spec_cut_drops_the_eos``."""
    from ssm_rollback.integrations.transformers import speculative_generate

    prompt = torch.tensor([[5, 9, 17, 5, 9, 17, 5, 9]])
    plain = speculative_generate(
        _model(), prompt, max_new_tokens=8, num_draft_tokens=0, eos_token_id=()
    )
    greedy = plain.sequences[0, prompt.shape[1] :].tolist()
    eos = greedy[2]
    cut = greedy[: greedy.index(eos) + 1]

    def oracle(tokens: list[int], k: int) -> list[int]:
        done = len(tokens) - prompt.shape[1]
        return greedy[done : done + k]  # the target's own tokens: all accepted

    result = speculative_generate(
        _model(), prompt, max_new_tokens=8, draft=oracle, num_draft_tokens=4, eos_token_id=eos
    )
    assert result.report.drafts_accepted > 0
    assert result.sequences[0, prompt.shape[1] :].tolist() == cut


def test_a_verify_batch_naming_a_row_twice_is_refused_and_no_ring_moves() -> None:
    """``rows`` naming one row twice would record two steps into one ring: refused by name
    before any ring changes. Kills ``verify_batch_duplicate_rows_ok``."""
    from ssm_rollback import InvalidArgumentError
    from ssm_rollback.rollback import commit_verified_batch

    rings = [SsmDecodeRing(4), SsmDecodeRing(4)]
    with pytest.raises(InvalidArgumentError, match="'rows' must name each row once"):
        commit_verified_batch(
            rings,
            first_positions=[1, 1],
            accepted=[0, 0],
            is_boundary=[[True], [True]],
            in_thinking=[[False], [False]],
            rows=[0, 0],
        )
    assert [ring.entries for ring in rings] == [(), ()]


def test_a_verify_step_with_no_flags_is_named_for_its_flags() -> None:
    """A step feeds at least one token, so an empty ``is_boundary`` is refused naming that,
    not as an ``accepted`` out of range. Kills ``verify_empty_flags_ok``."""
    from ssm_rollback import InvalidArgumentError
    from ssm_rollback.rollback import commit_verified

    ring = SsmDecodeRing(4)
    with pytest.raises(
        InvalidArgumentError,
        match=r"'is_boundary' must have one flag per fed token \(at least one\)",
    ):
        commit_verified(ring, seq=0, first_position=1, accepted=0, is_boundary=[], in_thinking=[])
    assert ring.entries == ()


@pytest.mark.usefixtures("quiet_warnings")
def test_every_boundary_snapshot_of_speculative_decoding_holds_the_state_at_its_position() -> None:
    """Restoring each snapshot the speculative loop left in its ring (through the HF pool, the
    KV cut to the same length) and feeding the next token gives the logits of a fresh decode
    of exactly that prefix. Kills ``spec_snapshot_fed_one_past_the_boundary``."""
    from transformers import AutoModelForCausalLM

    from ssm_rollback import SsmSnapshotRestore
    from ssm_rollback.integrations._hf import stream as stream_module
    from ssm_rollback.integrations.transformers import speculative_generate
    from ssm_rollback.testing import tiny_config

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config("bamba")).eval()  # type: ignore[no-untyped-call]
    prompt = torch.randint(1, 60, (1, 12), generator=torch.Generator().manual_seed(2))
    seen: list[tuple[stream_module._Stream, SsmDecodeRing]] = []
    original = stream_module._Stream.save

    def save(self: stream_module._Stream, snapshot: object, ring: SsmDecodeRing) -> bool:
        seen.append((self, ring))
        return original(self, snapshot, ring)  # type: ignore[arg-type]

    plain = speculative_generate(
        model, prompt, max_new_tokens=16, num_draft_tokens=0, eos_token_id=()
    )
    greedy = plain.sequences[0, prompt.shape[1] :].tolist()

    def drafter(tokens: list[int], k: int) -> list[int]:
        # The target's own tokens but the last one wrong: a boundary among the accepted
        # drafts is recorded by a replay that feeds up to it, then saves.
        done = len(tokens) - prompt.shape[1]
        right = greedy[done : done + k]
        return [*right[:-1], (right[-1] + 1) % 64] if len(right) > 1 else right

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stream_module._Stream, "save", save)
        result = speculative_generate(
            model,
            prompt,
            max_new_tokens=16,
            draft=drafter,
            num_draft_tokens=4,
            is_boundary=lambda token: token % 2 == 0,
            capacity=16,
            eos_token_id=(),
        )
    assert result.sequences[0, prompt.shape[1] :].tolist() == greedy
    assert seen
    stream, ring = seen[-1]
    ids = result.sequences[0].tolist()
    base = prompt.shape[1]
    checked = 0
    for entry in sorted(ring.entries, key=lambda e: -e.token_position):  # crops only shrink
        at = entry.token_position
        if base + at >= len(ids):
            continue
        restore = SsmSnapshotRestore(0, entry.snapshot_slot, at, entry.ticket)
        stream.queued = []
        stream.restore(restore, base + at)
        restored = stream.feed([ids[base + at]])[-1]
        fresh = stream_module._Stream(model, restored.shape[-1], 0)
        expected = fresh.feed(ids[:base])[-1]
        for token in ids[base : base + at + 1]:
            expected = fresh.feed([token])[-1]
        # Multi-token forward passes round differently from single steps (up to ~2e-3 here);
        # a state one token off is ~0.4 away.
        assert torch.allclose(restored, expected, atol=5e-2, rtol=0), at
        checked += 1
    assert checked >= 2
