"""`ssm-rollback simulate --spec-tokens K --accept-rate R`: rollbacks served when boundaries
arrive in bursts of accepted drafts."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest

from ssm_rollback import InvalidArgumentError
from ssm_rollback._apps.decode_trace import TraceEvent, synthetic_trace
from ssm_rollback._apps.simulate import replay
from ssm_rollback.cli import main
from ssm_rollback.reserve import ENV_VAR


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


def report(*argv: str) -> dict[str, object]:
    status, text = run("simulate", "--json", *argv)
    assert status == 0
    data = json.loads(text)
    assert isinstance(data, dict)
    return data


def served(data: dict[str, object]) -> list[float]:
    rows = data["depths"]
    assert isinstance(rows, list)
    return [row["served_fraction"] for row in rows]


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def trace(**kwargs: float) -> list[TraceEvent]:
    arguments: dict[str, float] = {
        "sequences": 8,
        "tokens": 300,
        "boundary_rate": 0.2,
        "rollback_rate": 0.02,
        "back": 3,
        "seed": 1,
    }
    arguments.update(kwargs)
    return synthetic_trace(**arguments)  # type: ignore[arg-type]


# -- the synthetic trace ----------------------------------------------------------------------


def steps_of(events: list[TraceEvent]) -> list[tuple[int, int, int]]:
    """Check the trace's shape; return (seq, tokens before it, accepted) for each verify."""
    steps = []
    pending: dict[int, int] = Counter()
    sampled: dict[int, bool] = {}
    for event in events:
        if event.kind == "token":
            if not sampled.get(event.seq):
                sampled[event.seq] = True  # a token sampled alone: fed first next step
            else:
                pending[event.seq] += 1
        elif event.kind == "verify":
            assert 0 <= event.accepted <= event.drafts
            steps.append((event.seq, pending[event.seq], event.accepted))
            pending[event.seq] = 0
        else:
            assert pending[event.seq] == 0, "a rollback or finish in the middle of a step"
            sampled[event.seq] = False
    return steps


def test_each_verify_step_commits_its_accepted_drafts_and_the_bonus_token() -> None:
    events = trace(spec_tokens=6, accept_rate=0.8)
    steps = steps_of(events)
    assert steps
    assert all(tokens == accepted + 1 for _, tokens, accepted in steps)
    assert {event.drafts for event in events if event.kind == "verify"} == {6}
    per_sequence = Counter(event.seq for event in events if event.kind == "token")
    assert per_sequence == dict.fromkeys(range(8), 300)  # every token of the plain trace
    assert any(event.kind == "rollback" for event in events)


@pytest.mark.parametrize("spec_tokens", [1, 4, 8])
@pytest.mark.parametrize("accept_rate", [0.0, 0.5, 0.9, 1.0])
def test_accepted_drafts_follow_the_standard_model(spec_tokens: int, accept_rate: float) -> None:
    """Each draft accepted with ``accept_rate`` until the first rejection: E[n] = sum R^i."""
    events = trace(tokens=4000, rollback_rate=0.0, spec_tokens=spec_tokens, accept_rate=accept_rate)
    steps = steps_of(events)
    last = {seq: i for i, (seq, _, _) in enumerate(steps)}  # each one's last step may be cut
    accepted = [n for i, (_, _, n) in enumerate(steps) if i not in last.values()]
    expected = sum(accept_rate**i for i in range(1, spec_tokens + 1))
    assert abs(sum(accepted) / len(accepted) - expected) < 0.05 * spec_tokens
    if accept_rate in (0.0, 1.0):
        assert set(accepted) == {int(accept_rate) * spec_tokens}


def test_speculative_traces_are_reproducible_and_plain_ones_unchanged() -> None:
    assert trace(spec_tokens=4, seed=3) == trace(spec_tokens=4, seed=3)
    assert trace(spec_tokens=4, seed=3) != trace(spec_tokens=5, seed=3)
    plain = trace(spec_tokens=0, seed=3)
    assert not any(event.kind == "verify" for event in plain)
    assert plain == trace(seed=3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"spec_tokens": 65}, "'spec_tokens' must be an int from 0"),
        ({"spec_tokens": -1}, "'spec_tokens' must be an int from 0"),
        ({"spec_tokens": 2, "accept_rate": 1.5}, "'accept_rate' must be in"),
        ({"spec_tokens": 2, "accept_rate": -0.1}, "'accept_rate' must be in"),
    ],
)
def test_bad_speculative_parameters_are_refused(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        trace(**kwargs)


# -- replaying verify steps through real rings ------------------------------------------------


def token(boundary: bool = False) -> TraceEvent:
    return TraceEvent(0, "token", boundary=boundary)


def verify(drafts: int, accepted: int) -> TraceEvent:
    return TraceEvent(0, "verify", drafts=drafts, accepted=accepted)


def test_a_burst_of_boundaries_needs_a_ring_as_deep_as_the_burst() -> None:
    # Position 1 is sampled alone; one step commits 2..6 with boundaries at 2, 3, 4, 5;
    # the next step feeds 6 and commits 7. The rollback wants the boundary at 2.
    events = [token(), *(token(boundary=p in (2, 3, 4, 5)) for p in range(2, 7))]
    events += [verify(drafts=8, accepted=4), token(), verify(drafts=8, accepted=0)]
    events += [TraceEvent(0, "rollback", back=4)]
    results = [replay(events, depth) for depth in range(6)]
    assert [r.served for r in results] == [0, 0, 0, 0, 1, 1]
    assert results[4].tokens_regenerated == 5  # 3..7 dropped
    assert results[3].tokens_recomputed == 2


def test_rejected_drafts_never_take_a_slot() -> None:
    # A step that accepts none of 8 drafts (replayed as boundaries, the worst case) between
    # the boundary at 2 and the rollback: one slot still serves it.
    events = [token(), token(boundary=True), verify(drafts=1, accepted=0)]
    events += [token(), verify(drafts=8, accepted=0), token(), verify(drafts=8, accepted=0)]
    events += [TraceEvent(0, "rollback", back=1)]
    result = replay(events, 1)
    assert (result.rollbacks, result.served, result.tokens_regenerated) == (1, 1, 2)


def test_the_newest_token_has_no_state_until_the_next_step_feeds_it() -> None:
    # The bonus token at 3 is a boundary; its state exists only after the next step, so a
    # rollback to it now is served from the boundary at 2 ...
    events = [token(), token(boundary=True), token(boundary=True), verify(drafts=2, accepted=1)]
    result = replay([*events, TraceEvent(0, "rollback", back=1)], 4)
    assert (result.served, result.tokens_regenerated) == (1, 1)
    # ... and after one more step, from its own snapshot.
    events += [token(), verify(drafts=2, accepted=0), TraceEvent(0, "rollback", back=1)]
    assert replay(events, 4).tokens_regenerated == 1  # only 4 dropped


def test_after_a_rollback_the_next_token_is_sampled_alone() -> None:
    events = [token(), token(boundary=True), token(), verify(drafts=3, accepted=1)]
    events += [TraceEvent(0, "rollback", back=1), token(boundary=True), token(), token()]
    events += [verify(drafts=1, accepted=1), TraceEvent(0, "rollback", back=1)]
    result = replay(events, 2)
    # Back to 2 (dropping 3); then 3 sampled alone, a step commits 4 and 5 and records 3.
    assert (result.rollbacks, result.served, result.tokens_regenerated) == (2, 2, 3)


@pytest.mark.parametrize(
    ("events", "match"),
    [
        ([token(), token(), verify(drafts=2, accepted=1)], "must follow the 1 accepted drafts"),
        ([token(), token(), token(), verify(drafts=1, accepted=2)], "accepted <= drafts"),
        ([verify(drafts=2, accepted=0)], "after a token fed first"),
        ([token(), token(), TraceEvent(0, "rollback"), verify(1, 0)], "in the middle of a"),
    ],
)
def test_inconsistent_speculative_traces_are_refused(events: list[TraceEvent], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        replay(events, 2)


# -- the command ------------------------------------------------------------------------------


def test_the_report_keeps_its_shape_and_adds_the_speculative_parameters() -> None:
    data = report("--sequences", "8", "--tokens", "200", "--spec-tokens", "4")
    assert data["spec_tokens"] == 4
    assert data["accept_rate"] == 0.7  # the default
    per_step = data["tokens_per_step"]
    assert isinstance(per_step, float)
    assert 1.0 < per_step < 5.0
    rows = data["depths"]
    assert isinstance(rows, list)
    assert [row["depth"] for row in rows] == [0, 1, 2, 4, 8, 16]
    assert set(rows[0]) == set(report("--sequences", "1", "--tokens", "10")["depths"][0])  # type: ignore[index]
    assert "speculative: 4 drafts per verify step, accept rate 0.7" in str(data["source"])
    plain = report("--sequences", "2", "--tokens", "20")
    assert (plain["spec_tokens"], plain["accept_rate"], plain["tokens_per_step"]) == (
        None,
        None,
        None,
    )


def test_the_table_names_the_verify_steps() -> None:
    status, text = run(
        "simulate", "--sequences", "4", "--tokens", "100", "--spec-tokens", "3",
        "--accept-rate", "1",
    )  # fmt: skip
    assert status == 0
    lines = text.splitlines()
    assert "speculative: 3 drafts per verify step, accept rate 1.0" in lines[0]
    # Every step but each sequence's last commits all 3 drafts and the bonus token.
    per_step = float(lines[1].removeprefix("mean tokens committed per verify step: "))
    assert 3.8 < per_step <= 4.0
    assert lines[2].split() == ["depth", "rollbacks", "served", "served", "%", "recomputed",
                                "tokens", "memory", "/", "sequence"]  # fmt: skip


BURSTY = ("--sequences", "32", "--tokens", "400", "--boundary-rate", "0.3", "--seed", "2")


def test_bursts_of_accepted_boundaries_need_deeper_rings() -> None:
    plain = served(report(*BURSTY))
    bursty = served(report(*BURSTY, "--spec-tokens", "8", "--accept-rate", "0.9"))
    for fractions in (plain, bursty):
        assert fractions == sorted(fractions)  # a deeper ring never serves fewer
        assert fractions[0] == 0.0  # depth 0 serves nothing
        assert fractions[-1] > 0.95
    # Depth 4 (--back is 4) serves nearly every plain rollback, but in a burst the
    # boundaries the step committed after the trigger hold slots too.
    assert plain[3] > 0.95
    assert bursty[3] < plain[3] - 0.05
    # With every draft rejected each step commits one token: the bursts are gone.
    single = served(report(*BURSTY, "--spec-tokens", "8", "--accept-rate", "0"))
    assert single[3] > bursty[3] + 0.05


def test_more_drafts_make_longer_bursts() -> None:
    depth_two = []
    for spec_tokens in ("1", "4", "16"):
        data = report(*BURSTY, "--depths", "2", "--spec-tokens", spec_tokens, "--accept-rate", "1")
        depth_two.append(served(data)[0])
    assert depth_two == sorted(depth_two, reverse=True)
    assert depth_two[0] > depth_two[-1] + 0.1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--spec-tokens", "65"], "error: --spec-tokens: must be an int from 0 to 64"),
        (["--spec-tokens", str(2**64)], "error: --spec-tokens: must be an int from 0 to 64"),
        (["--spec-tokens", "x"], "argument --spec-tokens: must be an int"),
        (["--spec-tokens", "-1"], "argument --spec-tokens: must be an int"),
        (
            ["--spec-tokens", "2", "--accept-rate", "1.5"],
            "argument --accept-rate: must be a number",
        ),
        (
            ["--spec-tokens", "2", "--accept-rate", "nan"],
            "argument --accept-rate: must be a number",
        ),
        (["--spec-tokens", "2", "--accept-rate", "-0"], "argument --accept-rate: must be a number"),
        (["--accept-rate", "0.5"], "error: --accept-rate: needs --spec-tokens"),
        (
            ["--spec-tokens", "0", "--accept-rate", "0.5"],
            "error: --accept-rate: needs --spec-tokens",
        ),
        (["--spec-tokens", "2", "--trace", "TRACE"], "error: --spec-tokens: shapes the synthetic"),
    ],
)
def test_bad_speculative_flags_exit_2_naming_the_flag(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"seq": 0, "event": "token", "boundary": true}\n')
    argv = [str(path) if word == "TRACE" else word for word in argv]
    status, text = run("simulate", "--sequences", "2", "--tokens", "10", *argv)
    assert (status, text) == (2, "")
    assert message in capsys.readouterr().err
