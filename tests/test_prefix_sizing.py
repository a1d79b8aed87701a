"""Shared prefix slots in the depth policy (SPEC 5, 13) and in ``ssm-rollback plan``."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_rollback import InvalidArgumentError
from ssm_rollback.cli import main
from ssm_rollback.reserve import (
    ENV_VAR,
    DepthRule,
    RingDepth,
    decode_rollback_ring_slots,
    shipped_config,
    state_spec_from_hf_config,
)

SPEC = state_spec_from_hf_config(shipped_config("nemotron-h-8b"))
PER = SPEC.bytes_per_snapshot  # 102,137,856 bytes: vLLM keeps the h-state in float32
SPEC3 = state_spec_from_hf_config(shipped_config("nemotron-h-8b"), num_speculative_tokens=3)
SEQS = 64
NO_ENV: dict[str, str] = {}


def depth(free: int, **kwargs: object) -> RingDepth:
    kwargs.setdefault("env", NO_ENV)
    return decode_rollback_ring_slots(SPEC, max_sequences=SEQS, free_bytes=free, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


# -- the policy -----------------------------------------------------------------------------


def test_shared_slots_come_out_of_free_bytes_before_the_rings() -> None:
    free = 80 * 2**30
    assert depth(free) == depth(free, prefix_slots=0)  # the default reserves nothing
    assert (depth(free).fit, depth(free).prefix_bytes) == (13, 0)
    shared = depth(free, prefix_slots=512)
    assert (shared.prefix_slots, shared.prefix_bytes) == (512, 512 * PER)
    assert shared.fit == (free - 512 * PER) // (SEQS * PER) == 5
    assert (shared.slots, shared.rule) == (5, DepthRule.MEMORY)
    assert shared.bytes_total == 5 * SEQS * PER  # the rings only, as before
    assert shared.bytes_total + shared.prefix_bytes <= free


def test_shared_slots_are_taken_after_the_speculative_buffers() -> None:
    free = 100 * 2**30
    spec_only = decode_rollback_ring_slots(
        SPEC3, max_sequences=256, free_bytes=free, env=NO_ENV, prefix_slots=0
    )
    both = decode_rollback_ring_slots(
        SPEC3, max_sequences=256, free_bytes=free, env=NO_ENV, prefix_slots=40
    )
    speculative = 256 * SPEC3.speculative_bytes_per_sequence
    assert both.speculative_bytes == spec_only.speculative_bytes == speculative
    assert spec_only.fit == (free - speculative) // (256 * PER) == 1
    assert both.fit == (free - speculative - 40 * PER) // (256 * PER) == 0  # 40 cost the ring
    most = (free - speculative) // PER
    decode_rollback_ring_slots(
        SPEC3, max_sequences=256, free_bytes=free, env=NO_ENV, prefix_slots=most
    )  # exactly what fits beside the speculative buffers: taken, with no ring left
    with pytest.raises(
        InvalidArgumentError,
        match=f"'prefix_slots' must fit in free_bytes, got {most + 1} shared slots x {PER} bytes"
        f" = {(most + 1) * PER} bytes, but free_bytes is {free} after {speculative} bytes of "
        f"speculative buffers \\(at most {most} shared slots fit\\)",
    ):
        decode_rollback_ring_slots(
            SPEC3, max_sequences=256, free_bytes=free, env=NO_ENV, prefix_slots=most + 1
        )


def test_shared_slots_that_fill_free_bytes_leave_zero_ring_slots() -> None:
    got = depth(841 * PER + SEQS * PER - 1, prefix_slots=841)
    assert (got.slots, got.fit, got.rule, got.bytes_total) == (0, 0, DepthRule.MEMORY, 0)


def test_shared_slots_that_take_exactly_free_bytes_are_taken_with_no_ring_left() -> None:
    """The bound is inclusive: shared slots whose bytes equal free_bytes fit."""
    got = depth(512 * PER, prefix_slots=512)
    assert (got.prefix_bytes, got.fit, got.slots, got.bytes_total) == (512 * PER, 0, 0, 0)
    with pytest.raises(InvalidArgumentError, match="at most 512 shared slots fit"):
        depth(512 * PER, prefix_slots=513)


@pytest.mark.parametrize(
    ("prefix_slots", "error", "message"),
    [
        (-1, ValueError, "'prefix_slots' must be an int >= 0, got -1"),
        (True, TypeError, "'prefix_slots' must be an int >= 0, got True"),
        (2.0, TypeError, "'prefix_slots' must be an int >= 0, got 2.0"),
        ("4", TypeError, "'prefix_slots' must be an int >= 0, got '4'"),
        (None, TypeError, "'prefix_slots' must be an int >= 0, got None"),
        (842, ValueError, "'prefix_slots' must fit in free_bytes, got 842 shared slots"),
        (10**30, ValueError, "at most 841 shared slots fit"),
    ],
)
def test_bad_prefix_slots_are_refused_naming_the_argument(
    prefix_slots: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        depth(80 * 2**30, prefix_slots=prefix_slots)
    assert isinstance(caught.value, error)


@pytest.mark.parametrize(
    ("kwargs", "source"),
    [({"override": 6}, "--ring-slots"), ({"env": {ENV_VAR: "6"}}, ENV_VAR)],
    ids=["flag", "env"],
)
def test_an_override_must_fit_beside_the_shared_slots(
    kwargs: dict[str, object], source: str
) -> None:
    free = 80 * 2**30
    assert depth(free, **kwargs).slots == 6  # alone it fits (13 would)
    assert depth(free, override=5, prefix_slots=512).slots == 5
    with pytest.raises(
        InvalidArgumentError,
        match=f"{source} = 6 does not fit: .* but free_bytes is {free} after {512 * PER} bytes "
        "of 512 shared prefix slots \\(at most 5 slots fit\\)",
    ):
        depth(free, prefix_slots=512, **kwargs)


@given(
    free=st.integers(0, 2000 * PER),
    shared=st.integers(0, 1000),
    maximum=st.integers(0, 32),
)
def test_the_rings_and_the_shared_slots_never_exceed_free_bytes(
    free: int, shared: int, maximum: int
) -> None:
    if shared * PER > free:
        with pytest.raises(InvalidArgumentError, match="'prefix_slots' must fit"):
            depth(free, prefix_slots=shared, max_slots=maximum)
        return
    got = depth(free, prefix_slots=shared, max_slots=maximum)
    alone = depth(free - shared * PER, max_slots=maximum)
    assert got.prefix_bytes == shared * PER
    assert (got.slots, got.fit, got.rule) == (alone.slots, alone.fit, alone.rule)
    assert got.bytes_total + got.prefix_bytes <= free
    assert got.slots <= depth(free, max_slots=maximum).slots  # shared slots never add ring slots


# -- ssm-rollback plan ----------------------------------------------------------------------

PLAN = ("plan", "--model", "nemotron-h-8b", "--free-memory", "80GiB", "--max-seqs", "64")


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


def test_plan_shows_the_shared_slots_bytes_and_the_ring_depth_left() -> None:
    status, text = run(*PLAN, "--prefix-slots", "512")
    assert status == 0
    lines = text.splitlines()
    assert "shared prefix slots               512" in lines
    assert "shared prefix bytes               52,294,582,272 (48.7 GiB)" in lines
    assert "slots that fit per sequence       5" in lines
    assert "ring depth                        5 (rule: memory)" in lines
    assert "bytes reserved                    32,684,113,920 (30.4 GiB)" in lines
    assert "bytes reserved with shared slots  84,978,696,192 (79.1 GiB)" in lines


def test_plan_without_prefix_slots_prints_no_shared_rows() -> None:
    status, text = run(*PLAN)
    assert status == 0
    assert "shared" not in text
    assert "ring depth                     8 (rule: maximum)" in text.splitlines()


def test_plan_json_reports_the_shared_slots() -> None:
    status, text = run(*PLAN, "--prefix-slots", "512", "--json")
    assert status == 0
    report = json.loads(text)
    assert (report["prefix_slots"], report["prefix_bytes"]) == (512, 512 * PER)
    assert (report["fit"], report["slots"], report["rule"]) == (5, 5, "memory")
    assert report["bytes_total"] == 5 * 64 * PER
    _, text = run(*PLAN, "--json")
    assert (json.loads(text)["prefix_slots"], json.loads(text)["prefix_bytes"]) == (0, 0)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "argument --prefix-slots: must be an int >= 0, got '-1'"),
        ("two", "argument --prefix-slots: must be an int >= 0, got 'two'"),
        ("1.5", "argument --prefix-slots: must be an int >= 0, got '1.5'"),
        ("", "argument --prefix-slots: must be an int >= 0, got ''"),
        ("\u0664", "argument --prefix-slots: must be an int >= 0"),  # Arabic-Indic 4
        ("9" * 40, "argument --prefix-slots: must be an int >= 0"),
        ("842", "error: --prefix-slots must fit in --free-memory, got 842 shared slots"),
        ("9" * 29, "error: --prefix-slots must fit in --free-memory, got " + "9" * 29),
    ],
)
def test_plan_refuses_bad_prefix_slots_naming_the_flag(
    value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, text = run(*PLAN, "--prefix-slots", value)
    assert (status, text) == (2, "")
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert message in err.strip().splitlines()[-1]


def test_plan_names_the_shared_slots_when_a_ring_override_no_longer_fits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(*PLAN, "--prefix-slots", "512", "--ring-slots", "5")[0] == 0
    status, _ = run(*PLAN, "--prefix-slots", "512", "--ring-slots", "6")
    assert status == 2
    assert "after 52294582272 bytes of 512 shared prefix slots (at most 5 slots fit)" in (
        capsys.readouterr().err
    )
