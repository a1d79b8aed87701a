"""The console script."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from ssm_rollback.cli import main


def test_demo_walks_the_ring_and_exits_0() -> None:
    out = io.StringIO()
    assert main(["demo"], out=out) == 0
    text = out.getvalue()
    assert "roll back to 4" in text
    assert "token 7 (boundary)" in text


def test_demo_with_a_disabled_ring_records_nothing() -> None:
    out = io.StringIO()
    assert main(["demo", "--capacity", "0"], out=out) == 0
    assert "(no snapshot)" in out.getvalue()


def test_negative_capacity_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--capacity", "-1"]) == 2
    assert "--capacity must be an int >= 0, got -1" in capsys.readouterr().err


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


def test_python_dash_m_runs_the_same_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ssm_rollback", "demo"], capture_output=True, text=True, check=True
    )
    assert "scripted decode" in done.stdout


def test_the_readme_shows_the_demo_output_verbatim() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    shown = readme.split("```text\n", 1)[1].split("```", 1)[0]
    out = io.StringIO()
    main(["demo"], out=out)
    assert out.getvalue() == shown
