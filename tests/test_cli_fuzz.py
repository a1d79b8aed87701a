"""No argument list ends in a traceback: each subcommand driven with generated arguments."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_rollback.cli import main
from ssm_rollback.reserve import ENV_VAR, shipped_config

# Values every flag gets tried with: valid ones kept small so that a simulation that does
# run stays fast, and the ways a value goes wrong.
_NUMBERS = ["0", "1", "2", "5", "-1", "-0", "1.5", "1e3", "1e400", "inf", "-inf", "nan"]
_HUGE = [str(2**64), str(10**40), "9" * 5000]
_UNICODE = ["\u0662\u0660", "\uff15", "\u0661.\u0665GiB", "\u00e9", "\U0001f600", " 2", "2 ", ""]
_SIZES = ["20GiB", "512MB", "1.5 GiB", "0.1", "20XB", "1_0", "_1", "GiB"]
_WORDS = ["nemotron-h-8b", "jamba-1.5-mini", "bfloat16", "float32", "int3", "engine", "x"]
_DEPTHS = ["0,1,2", "3", "1,,2", "0,-1", str(2**64)]


def _flags_and_values(flags: list[str], files: dict[str, str]) -> st.SearchStrategy[list[str]]:
    anything = st.sampled_from(
        _NUMBERS + _HUGE + _UNICODE + _SIZES + _WORDS + _DEPTHS + list(files.values())
    ) | st.text(max_size=8)
    # A path flag mostly gets one of the prepared files, or a file would hardly ever be read.
    paths = st.sampled_from(list(files.values()))

    def value(flag: str) -> st.SearchStrategy[str]:
        return paths | anything if flag in ("--config", "--trace", "--plot") else anything

    flag = st.sampled_from([*flags, "--no-such-flag", "-x", "--"])
    pair = flag.flatmap(lambda f: value(f).map(lambda v: [f, v]))
    alone = flag.map(lambda f: [f])  # a flag without its value
    parts = st.lists(pair | alone, max_size=6)
    return parts.map(lambda words: [word for part in words for word in part])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("fuzz")
    (root / "config.json").write_text(json.dumps(shipped_config("mamba2-2.7b")))
    (root / "latin1.json").write_bytes(b'{"model_type": "caf\xe9"}')
    (root / "broken.json").write_text('{"model_type": ')
    (root / "trace.jsonl").write_text('{"seq": 0, "event": "token", "boundary": true}\n')
    (root / "typo.jsonl").write_text('{"seq": 0, "event": "token", "bondary": true}\n')
    (root / "folder").mkdir()
    return {
        "config": str(root / "config.json"),
        "latin1": str(root / "latin1.json"),
        "broken": str(root / "broken.json"),
        "trace": str(root / "trace.jsonl"),
        "typo": str(root / "typo.jsonl"),
        "folder": str(root / "folder"),
        "missing": str(root / "missing" / "x.png"),
    }


def exit_status(argv: list[str]) -> tuple[int, str]:
    """``main(argv)`` in-process: its exit status and stderr; any exception fails the test."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        status = main(argv, out=out)
    return status, err.getvalue()


def check(status: int, err: str) -> None:
    assert status in (0, 2), err
    assert "Traceback" not in err
    if status == 2:
        assert err.rstrip().splitlines()[-1].startswith("ssm-rollback"), err


_MODEL = ["--config", "--model", "--tp", "--dtype", "--layout", "--json"]
PLAN = [*_MODEL, "--free-memory", "--max-seqs", "--ring-slots"]
SIMULATE = [
    *_MODEL,
    *("--depths", "--trace", "--sequences", "--tokens", "--boundary-rate", "--rollback-rate"),
    *("--back", "--thinking-rate", "--seed", "--plot", "--spec-tokens", "--accept-rate"),
]


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.fixture(autouse=True, scope="module")
def _in_a_scratch_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Generated relative paths (a --plot of "0", say) must land here, not in the checkout.
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("cwd"))
        yield


@given(data=st.data())
def test_plan_never_raises(files: dict[str, str], data: st.DataObject) -> None:
    source = data.draw(st.sampled_from(["--model", "--config"]))
    value = (
        "mamba2-2.7b" if source == "--model" else data.draw(st.sampled_from(list(files.values())))
    )
    argv = data.draw(_flags_and_values(PLAN, files))
    check(*exit_status(["plan", source, value, "--free-memory", "20GiB", *argv]))


@given(data=st.data())
def test_simulate_never_raises(files: dict[str, str], data: st.DataObject) -> None:
    argv = data.draw(_flags_and_values(SIMULATE, files))
    # Small by default so that the runs that pass validation stay quick.
    check(*exit_status(["simulate", "--sequences", "2", "--tokens", "16", *argv]))


@given(data=st.data())
def test_ring_never_raises(files: dict[str, str], data: st.DataObject) -> None:
    argv = data.draw(_flags_and_values(["--capacity"], files))
    check(*exit_status(["ring", *argv]))


DEMO = ["--model-type", "--capacity", "--length", "--seed", "--json", "--grammar"]
DEMO_GRAMMAR = ["--calls", "--engine"]


@given(data=st.data())
def test_demo_arguments_never_raise(files: dict[str, str], data: st.DataObject) -> None:
    argv = data.draw(_flags_and_values([*DEMO, *DEMO_GRAMMAR], files))
    # A demo run builds a model (seconds): the unknown flag at the end keeps every example
    # to argument checking, which is what can go wrong with hostile input.
    status, err = exit_status(["demo", *argv, "--no-such-flag"])
    check(status, err)
    assert status == 2 or "-h" in argv or "--help" in argv


@given(data=st.data())
def test_demo_grammar_flags_without_grammar_never_raise(
    files: dict[str, str], data: st.DataObject
) -> None:
    # Past argparse: --calls or --engine without --grammar is refused before a model is built.
    flag = data.draw(st.sampled_from(DEMO_GRAMMAR))
    value = "3" if flag == "--calls" else "llguidance"
    argv = data.draw(_flags_and_values([f for f in DEMO if f != "--grammar"], files))
    status, err = exit_status(["demo", flag, value, *argv])
    check(status, err)
    assert status == 2 or "-h" in argv or "--help" in argv


@given(argv=st.lists(st.text(max_size=12), max_size=5))
def test_any_words_never_raise(argv: list[str]) -> None:
    check(*exit_status(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--model", "nemotron-h-8b", "--free-memory", "inf"],
        ["simulate", "--trace", "LATIN1"],
        ["simulate", "--sequences", "-1"],
        ["demo", "--model-type", "glm5_next_text"],
        ["demo", "--calls", "3"],
        ["demo", "--grammar", "--calls", "0"],
    ],
)
def test_the_console_script_refuses_bad_input_without_a_traceback(
    argv: list[str], files: dict[str, str]
) -> None:
    script = Path(sys.executable).parent / "ssm-rollback"
    argv = [files["latin1"] if word == "LATIN1" else word for word in argv]
    done = subprocess.run([str(script), *argv], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith(f"ssm-rollback {argv[0]}: error: ")
    assert done.stdout == ""
