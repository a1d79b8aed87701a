"""The console script: the demo (the main job) and the ring walk."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ssm_rollback.cli import main

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


def test_ring_walks_the_ring_and_exits_0() -> None:
    status, text = run("ring")
    assert status == 0
    assert "roll back to 4" in text
    assert "token 7 (boundary)" in text


def test_ring_with_capacity_zero_records_nothing() -> None:
    status, text = run("ring", "--capacity", "0")
    assert status == 0
    assert "(no snapshot)" in text


@pytest.mark.parametrize("command", ["ring", "demo"])
def test_negative_capacity_is_a_usage_error(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--capacity", "-1"])
    assert info.value.code == 2
    assert "--capacity must be an int >= 0, got -1" in capsys.readouterr().err


def test_a_command_is_required() -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


def test_python_dash_m_runs_the_same_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ssm_rollback", "ring"], capture_output=True, text=True, check=True
    )
    assert "scripted decode" in done.stdout


def test_demo_without_transformers_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ssm_rollback._demo", None)  # import fails
    status, _ = run("demo")
    assert status == 1
    assert "pip install 'ssm-rollback[transformers]'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def demo_json() -> dict[str, object]:
    pytest.importorskip("transformers")
    status, text = run("demo", "--json", "--length", "40")
    assert status == 0
    report = json.loads(text)
    assert isinstance(report, dict)
    return report


def test_demo_json_serves_rollbacks_with_no_mismatch(demo_json: dict[str, object]) -> None:
    assert demo_json["mismatches"] == 0
    rollbacks = demo_json["rollbacks_served"]
    assert isinstance(rollbacks, int)
    assert rollbacks > 0
    assert demo_json["tokens"] == 40
    assert {"rollbacks_declined", "tokens_regenerated", "time_saved_seconds"} <= set(demo_json)


def test_demo_with_a_small_ring_declines_some_rollbacks() -> None:
    pytest.importorskip("transformers")
    status, text = run("demo", "--json", "--capacity", "0", "--length", "24")
    report = json.loads(text)
    assert status == 0
    assert report["rollbacks_served"] == 0
    assert report["rollbacks_declined"] > 0


def test_demo_prints_a_summary_table() -> None:
    pytest.importorskip("transformers")
    status, text = run("demo", "--model-type", "qwen3_next", "--length", "16", "--seed", "3")
    assert status == 0
    assert "qwen3_next (tiny, random weights, seed 3)" in text
    assert "mismatches vs fresh decode  0" in text


def test_demo_refuses_an_untested_model_type(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    status, _ = run("demo", "--model-type", "llama")
    assert status == 2
    assert "--model-type must be one of" in capsys.readouterr().err


def test_the_readme_shows_the_demo_summary() -> None:
    shown = README.split("```text\n", 1)[1].split("```", 1)[0]
    for line in ("rollbacks served", "rollbacks declined", "mismatches vs fresh decode  0"):
        assert line in shown
