"""``ssm-rollback --version``, the README's ``plan`` example and ``plan``'s word on depth 0."""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from ssm_rollback.cli import main

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
# A one-line ``sh`` block running ``plan``, then the ``text`` block that shows its output.
_EXAMPLE = re.compile(
    r"^```sh\nssm-rollback (plan [^\n]*)\n```\n\n```text\n(.*?)^```", re.DOTALL | re.MULTILINE
)


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


def test_version_prints_the_installed_version_and_exits_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"ssm-rollback {version('ssm-rollback')}\n"


def test_version_works_as_a_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ssm_rollback", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == f"ssm-rollback {version('ssm-rollback')}\n"


def test_the_readme_shows_exactly_what_plan_prints() -> None:
    examples = _EXAMPLE.findall(README)
    assert examples, "the README shows no `ssm-rollback plan` example with its output"
    for command, shown in examples:
        status, text = run(*shlex.split(command))
        assert status == 0
        assert text == shown, command


def test_the_readme_plan_example_fits_a_ring() -> None:
    ((command, shown),) = _EXAMPLE.findall(README)
    depth = re.search(r"^ring depth +(\d+) ", shown, re.MULTILINE)
    assert depth is not None
    assert int(depth[1]) > 0, command


def test_depth_0_from_memory_says_what_one_slot_needs_and_what_to_change() -> None:
    """256 sequences of nemotron-h-8b in 20 GiB once printed a bare "ring depth 0"."""
    status, text = run(
        "plan", "--model", "nemotron-h-8b", "--free-memory", "20GiB", "--max-seqs", "256"
    )
    assert status == 0
    assert "ring depth                     0 (rule: memory)" in text
    assert text.splitlines()[-1] == (
        "depth 0 serves no rollback: one slot for each of 256 sequences needs "
        "26,147,291,136 bytes (24.4 GiB), 21,474,836,480 (20.0 GiB) free; "
        "lower --max-seqs or raise --free-memory"
    )


def test_depth_0_with_speculative_buffers_counts_what_they_leave() -> None:
    status, text = run(
        "plan", "--model", "nemotron-h-8b", "--free-memory", "20GiB", "--spec-tokens", "4"
    )
    assert status == 0
    assert text.splitlines()[-1].endswith(
        "0 (0 B) free after the speculative buffers; "
        "lower --max-seqs or --spec-tokens or raise --free-memory"
    )


@pytest.mark.parametrize("argv", [["--ring-slots", "0"], ["--max-seqs", "64"]])
def test_no_hint_when_the_depth_was_asked_for_or_fits(argv: list[str]) -> None:
    status, text = run("plan", "--model", "nemotron-h-8b", "--free-memory", "20GiB", *argv)
    assert status == 0
    assert "serves no rollback" not in text
