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
