"""``ssm-rollback demo --grammar``: tool calls under a schema, refused values rolled back."""

from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path

import pytest

from ssm_rollback import InvalidArgumentError
from ssm_rollback._apps.grammar_demo import GrammarDemoOptions
from ssm_rollback._apps.grammar_demo._judge import Judge
from ssm_rollback._apps.grammar_demo._scan import leaves
from ssm_rollback._apps.grammar_demo._tool_call import (
    CITY_UNIT,
    TOOL_CALL_SCHEMA,
    Policy,
    schema_problems,
)
from ssm_rollback.cli import main

PIECES = [bytes([i]) for i in range(256)]
GOOD = b'{"name":"weather","arguments":{"city":"Reno","unit":"F","days":2}}'
POLICY = Policy(frozenset({"weather"}), frozenset({"Reno", "Oslo"}), 3)


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


# -- the parts that need no model -------------------------------------------------------------


def test_the_scanner_finds_each_value_and_where_it_starts() -> None:
    found = leaves(GOOD)
    assert [leaf.path for leaf in found] == [
        ("name",),
        ("arguments", "city"),
        ("arguments", "unit"),
        ("arguments", "days"),
    ]
    assert [leaf.value() for leaf in found] == ["weather", "Reno", "F", 2]
    city = found[1]
    assert GOOD[city.start - 1 : city.start] == b'"'  # the boundary in front: the quote
    assert GOOD[city.start - 2 : city.start - 1] == b":"


def test_the_scanner_leaves_an_open_value_open() -> None:
    (name,) = leaves(b'{"name":"wea')
    assert name.end is None
    assert leaves(b'{"na') == []  # a key is not a value
    (number,) = leaves(b'{"days":4')
    assert number.end is None  # "4" may still become "42"
    (text,) = leaves(b'{"a":"x\\"y"')
    assert text.value() == 'x"y'


def test_the_schema_check_accepts_a_conforming_call_and_names_what_breaks() -> None:
    assert schema_problems(json.loads(GOOD), TOOL_CALL_SCHEMA) == []
    bad = {"name": "nap", "arguments": {"city": "Reno", "unit": "F", "days": 9, "x": 1}}
    problems = schema_problems(bad, TOOL_CALL_SCHEMA)
    assert any("$.name" in p for p in problems)
    assert any("$.arguments.days: expected <= 7" in p for p in problems)
    assert any("unexpected key 'x'" in p for p in problems)
    assert schema_problems({"name": "weather"}, TOOL_CALL_SCHEMA) == ["$: missing 'arguments'"]
    assert schema_problems(True, {"type": "integer"}) == ["$: expected an integer, got True"]
    with pytest.raises(ValueError, match="pattern"):
        schema_problems("x", {"type": "string", "pattern": "x"})


def test_the_policy_refuses_what_the_schema_allows() -> None:
    assert POLICY.problems(json.loads(GOOD)) == []
    call = {"name": "alerts", "arguments": {"city": "Oslo", "unit": "F", "days": 5}}
    problems = POLICY.problems(call)
    assert len(problems) == 3
    assert "tool 'alerts' is not enabled" in problems[0]
    assert "unit 'F' disagrees with Oslo (C)" in problems[1]
    assert "5 days is beyond today's limit of 3" in problems[2]
    assert schema_problems(call, TOOL_CALL_SCHEMA) == []


def test_a_drawn_policy_allows_a_minority_of_the_values() -> None:
    policy = Policy.drawn(random.Random(7))
    assert len(policy.tools) == 2
    assert policy.cities < set(CITY_UNIT)
    assert len(policy.cities) < len(CITY_UNIT) / 2


def test_the_judge_rolls_a_refused_string_back_to_its_opening_quote() -> None:
    judge = Judge(POLICY, PIECES, retries=2)
    text = b'{"name":"weather","arguments":{"city":"Kyiv"'
    keep = judge(list(text))
    assert keep == text.index(b"Kyiv")
    assert text[:keep].endswith(b'"city":"')
    (rejection,) = judge.rejections
    assert rejection.ban == ord("K")  # the value's first token, not the closing quote
    assert rejection.value == "Kyiv"


def test_the_judge_rolls_a_refused_number_back_to_its_colon() -> None:
    judge = Judge(POLICY, PIECES, retries=2)
    text = b'{"name":"weather","arguments":{"city":"Reno","unit":"F","days":6}'
    keep = judge(list(text))
    assert keep is not None
    assert text[:keep].endswith(b'"days":')
    assert judge.rejections[0].ban == ord("6")


def test_the_judge_keeps_values_it_approves_and_tokens_that_end_nothing() -> None:
    judge = Judge(POLICY, PIECES, retries=2)
    for end in range(1, len(GOOD) + 1):
        assert judge(list(GOOD[:end])) is None
    assert judge.rejections == []


def test_the_judge_gives_up_after_its_retries_and_says_so() -> None:
    judge = Judge(POLICY, PIECES, retries=2)
    text = list(b'{"name":"alerts"')
    assert judge(text) is not None
    assert judge(text) is not None
    assert judge(text) is None  # kept: the call will count as refused
    assert judge.gave_up == 1
    assert len(judge.rejections) == 2


def test_the_banning_matcher_masks_refused_first_tokens_only_where_the_value_starts() -> None:
    pytest.importorskip("xgrammar")
    from ssm_rollback._apps.grammar_demo._bans import BanningMatcher
    from ssm_rollback.integrations.grammar import ByteTokenizer, allocate_token_bitmask

    tokenizer = ByteTokenizer()
    matcher = BanningMatcher(tokenizer.xgrammar_json_matcher(TOOL_CALL_SCHEMA))

    def allowed() -> set[int]:
        bitmask = allocate_token_bitmask(1, matcher.vocab_size)
        matcher.fill_next_token_bitmask(bitmask, 0)
        bits = [(int(bitmask[0, t // 32]) >> (t % 32)) & 1 for t in range(matcher.vocab_size)]
        return {t for t, bit in enumerate(bits) if bit}

    prefix = b'{"name":"'
    for token in prefix:
        assert matcher.accept_token(token)
    assert allowed() == set(b"wfa")
    matcher.ban(len(prefix), ord("w"))
    matcher.ban(len(prefix), ord("f"))
    assert allowed() == {ord("a")}
    assert matcher.accept_token(ord("w"))  # the ban is a mask, not a refusal
    assert allowed() == {ord("e")}  # and applies at its own position only
    matcher.rollback(1)
    assert allowed() == {ord("a")}  # rolled back to the position: the bans are still there
    matcher.rollback(1)
    assert matcher.accept_token(ord('"'))
    assert allowed() == set(b"wfa")  # rolled back before it: the bans are gone
    matcher.ban(len(prefix), ord("w"))
    matcher.ban(len(prefix), ord("f"))
    matcher.ban(len(prefix), ord("a"))
    assert allowed() == set(b"wfa"), "bans that would leave nothing are not applied"


# -- options and flags ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("calls", 0, "'calls' must be an int from 1 to 200, got 0"),
        ("calls", True, "'calls' must be an int from 1 to 200, got True of type bool"),
        ("max_tokens", 257, "'max_tokens' must be an int from 1 to 256"),
        ("engine", "outlines", "'engine' must be one of xgrammar, llguidance, got 'outlines'"),
        ("model_type", "llama", "'model_type' must be one of"),
    ],
)
def test_options_name_the_bad_argument(field: str, value: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        GrammarDemoOptions(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--calls", "3"], "error: --calls: only with --grammar"),
        (["--engine", "llguidance"], "error: --engine: only with --grammar"),
        (["--grammar", "--calls", "0"], "argument --calls: must be an int from 1 to 200"),
        (["--grammar", "--calls", "201"], "argument --calls: must be an int from 1 to 200"),
        (["--grammar", "--engine", "outlines"], "argument --engine: invalid choice"),
        (["--grammar", "--length", "0"], "argument --length: must be an int from 1 to 256"),
    ],
)
def test_bad_grammar_flags_exit_2_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = run("demo", *argv)
    err = capsys.readouterr().err
    assert status == 2
    assert out == ""
    assert message in err.splitlines()[-1]
    assert "Traceback" not in err


# -- runs -------------------------------------------------------------------------------------


def test_a_run_that_fails_its_checks_says_which_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--length 1`` leaves no room for a tool call: exit 1 came with no word of why."""
    pytest.importorskip("transformers")
    pytest.importorskip("xgrammar")
    status, _ = run("demo", "--grammar", "--calls", "2", "--length", "1")
    assert status == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "ssm-rollback demo: 0 of 2 tool calls came out schema-valid and 0 approved within "
        "--length 1 tokens (raise --length to give every call room)"
    )


def _counts(report: dict[str, object]) -> dict[str, int]:
    return {k: v for k, v in report.items() if isinstance(v, int) and not isinstance(v, bool)}


def _outputs(report: dict[str, object]) -> list[dict[str, object]]:
    outputs = report["outputs"]
    assert isinstance(outputs, list)
    return outputs


def _policy(output: dict[str, object]) -> Policy:
    drawn = output["policy"]
    assert isinstance(drawn, dict)
    return Policy(frozenset(drawn["tools"]), frozenset(drawn["cities"]), drawn["max_days"])


def _check_invariants(report: dict[str, object]) -> None:
    n, outputs = _counts(report), _outputs(report)
    assert len(outputs) == n["calls"]
    assert n["mismatches"] == 0
    assert n["matcher_mismatches"] == 0
    # Every refusal asked for one rollback, which was served or declined.
    assert n["values_rejected"] == n["rollbacks_served"] + n["rollbacks_declined"]
    rejections = [r for o in outputs for r in o["rejections"]]  # type: ignore[attr-defined]
    assert len(rejections) == n["values_rejected"]
    assert all(r["reason"] for r in rejections)
    # A matcher check after each rollback followed by another offer, and one per call.
    assert n["matcher_checks"] >= n["calls"]
    for output in outputs:
        if output["schema_valid"]:
            assert isinstance(output["text"], str)
            call = json.loads(output["text"])
            assert schema_problems(call, TOOL_CALL_SCHEMA) == []
            assert output["approved"] == (_policy(output).problems(call) == [])
        else:
            assert not output["approved"]
    assert n["schema_valid"] == sum(bool(o["schema_valid"]) for o in outputs)
    assert n["validator_approved"] == sum(bool(o["approved"]) for o in outputs)


@pytest.fixture(scope="module")
def grammar_json() -> dict[str, object]:
    pytest.importorskip("transformers")
    pytest.importorskip("xgrammar")
    status, text = run("demo", "--grammar", "--json", "--calls", "4", "--seed", "1")
    report = json.loads(text)
    assert isinstance(report, dict)
    assert status == (0 if report["ok"] else 1)
    return report


def test_every_call_is_schema_valid_and_approved(grammar_json: dict[str, object]) -> None:
    _check_invariants(grammar_json)
    assert grammar_json["schema_valid"] == grammar_json["validator_approved"] == 4
    assert grammar_json["ok"] is True
    assert grammar_json["engine"] == "xgrammar"


def test_refused_values_roll_back_at_least_once_a_call(grammar_json: dict[str, object]) -> None:
    n = _counts(grammar_json)
    assert n["rollbacks_served"] >= n["calls"]
    assert n["rollbacks_declined"] == 0
    assert n["tokens_regenerated"] > 0


def test_llguidance_runs_the_same_demo_and_prints_a_table() -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("llguidance")
    status, text = run("demo", "--grammar", "--engine", "llguidance", "--calls", "2")
    assert status == 0
    assert "llguidance, JSON schema of a tool call" in text
    assert "schema-valid                2/2" in text
    assert "validator-approved          2/2" in text
    assert "mismatches vs fresh decode  0" in text
    assert "matcher mismatches          0 of " in text


def test_without_a_ring_every_rollback_is_declined_and_counted_honestly() -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("xgrammar")
    status, text = run("demo", "--grammar", "--json", "--calls", "2", "--capacity", "0")
    report = json.loads(text)
    _check_invariants(report)
    n = _counts(report)
    assert n["rollbacks_served"] == 0
    assert n["rollbacks_declined"] == n["values_rejected"] > 0
    # A refused value that could not be rolled back stays: schema-valid, not approved.
    assert n["schema_valid"] == 2
    assert n["validator_approved"] < 2
    assert report["ok"] is False
    assert status == 1


def test_the_readme_and_the_docs_show_the_same_default_run() -> None:
    root = Path(__file__).resolve().parent.parent
    shown = [
        block
        for page in (root / "README.md", root / "docs" / "grammar-demo.md")
        for block in re.findall(r"^```text\n(.*?)^```", page.read_text("utf-8"), re.S | re.M)
        if block.startswith("model ") and "\ngrammar " in block
    ]
    assert len(shown) == 2
    assert shown[0] == shown[1]
    for line in (
        "tool calls                  20",
        "schema-valid                20/20",
        "validator-approved          20/20",
        "mismatches vs fresh decode  0",
        "matcher mismatches          0 of ",
    ):
        assert line in shown[0]
