"""Hostile input to the console script: every refusal is exit 2 and one line naming the flag."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ssm_rollback._apps.simulate
from ssm_rollback.cli import main
from ssm_rollback.cli.simulate import MAX_DEPTHS
from ssm_rollback.reserve import ENV_VAR, shipped_config

PLAN = ("plan", "--model", "nemotron-h-8b", "--free-memory", "20GiB")


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``argv``; assert exit 2, nothing on stdout, and return the error line."""
    out = io.StringIO()
    assert main(list(argv), out=out) == 2
    assert out.getvalue() == ""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


# -- sizes --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size",
    [
        "inf",
        "infGiB",
        "1e400",
        "1e3",
        "0.1",
        "1.0000000001GiB",
        "\u0662\u0660GiB",  # Arabic-Indic "20"
        "\uff12\uff10",  # full-width "20"
        "nan",
        "9" * 40,
        "17EiB",
        str(2**64 + 1),
    ],
)
def test_free_memory_that_is_not_a_whole_number_of_bytes_is_refused(
    size: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, "plan", "--model", "nemotron-h-8b", "--free-memory", size)
    assert "argument --free-memory:" in line


def test_the_largest_size_is_accepted() -> None:
    assert main(["plan", "--model", "mamba2-2.7b", "--free-memory", str(2**64)], io.StringIO()) == 0


# -- counts -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["simulate", "--sequences", "-1"], "--sequences"),
        (["simulate", "--sequences", "0"], "--sequences"),
        (["simulate", "--tokens", "0"], "--tokens"),
        (["simulate", "--back", "-3"], "--back"),
        (["simulate", "--depths", "0,-1"], "--depths"),
        (["simulate", "--depths", ""], "--depths"),
        (["simulate", "--seed", "-1"], "--seed"),
        (["simulate", "--tp", "0"], "--tp"),
        (["simulate", "--rollback-rate", "nan"], "--rollback-rate"),
        (["simulate", "--thinking-rate", "\u0660.5"], "--thinking-rate"),
        (["ring", "--capacity", "-1"], "--capacity"),
        (["ring", "--capacity", "\u0663"], "--capacity"),
        (["demo", "--capacity", "-1"], "--capacity"),
        (["demo", "--capacity", "100000"], "--capacity"),
        (["demo", "--length", "0"], "--length"),
        (["demo", "--seed", str(2**64)], "--seed"),
        ([*PLAN, "--max-seqs", "0"], "--max-seqs"),
        ([*PLAN, "--max-seqs", "-5"], "--max-seqs"),
        ([*PLAN, "--max-seqs", " 256"], "--max-seqs"),
        ([*PLAN, "--tp", "-1"], "--tp"),
        ([*PLAN, "--ring-slots", "1.5"], "--ring-slots"),
    ],
)
def test_bad_counts_name_their_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert f"argument {flag}:" in refused(capsys, *argv)


def test_too_big_a_synthetic_trace_is_refused_before_it_is_built(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = refused(capsys, "simulate", "--sequences", "100000", "--tokens", "100000")
    assert "--sequences x --tokens must be at most" in line
    # Within the token cap, but a sequence costs about five tokens: it ran for minutes.
    line = refused(capsys, "simulate", "--sequences", "10000000", "--tokens", "1")
    assert line.endswith(
        "error: --sequences: must be at most 2,000,000 (each is a ring of its own, replayed at "
        "every depth), got 10,000,000"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tp", "3"], "error: --tp 3 must divide config field"),
        (["--dtype", "int3"], "error: --dtype must be one of"),
        (["--ring-slots", "99"], "error: --ring-slots = 99 does not fit"),
    ],
)
def test_plan_errors_name_flags_not_parameters(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, *PLAN, *argv)
    assert message in line
    assert "'tp_size'" not in line
    assert "'dtype'" not in line


def test_a_bad_config_field_names_the_config_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama"}')
    line = refused(capsys, "plan", "--config", str(path), "--free-memory", "1GiB")
    assert f"error: --config {path}: config field 'model_type' must be one of" in line


# -- sizes past what any machine holds --------------------------------------------------------


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_a_config_size_past_what_a_machine_holds_names_the_field(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``mamba_num_heads`` 10**30 once planned 8e35 bytes a snapshot, 0 slots, exit 0."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**shipped_config("nemotron-h-8b"), "mamba_num_heads": 10**30}))
    argv = [command, "--config", str(path)] + (
        ["--free-memory", "1GiB"] if command == "plan" else []
    )
    line = refused(capsys, *argv)
    assert line == (
        f"ssm-rollback {command}: error: --config {path}: config field 'mamba_num_heads' must "
        f"be an int from 1 to 2**50 (nemotron_h; no machine holds more), got "
        f"1,000,000,000,000,000,000,000,000,000,000"
    )


def test_spec_tokens_past_what_a_machine_holds_name_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--spec-tokens 10**25`` once planned speculative buffers of 1e32 bytes, exit 0."""
    line = refused(capsys, *PLAN, "--spec-tokens", str(10**25))
    assert line.startswith("ssm-rollback plan: error: --spec-tokens gives about 10**")
    assert "speculative buffers per sequence for 10,000,000,000,000,000,000,000,000 draft " in line
    assert line.endswith("more than the 2**50 bytes (1 PiB) a machine holds (nemotron_h)")


@pytest.mark.parametrize("extra", [(), ("--prefix-slots", "1")], ids=["plain", "prefix slots"])
def test_sequences_past_what_a_machine_holds_name_the_flag(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...]
) -> None:
    """``--max-seqs 10**27`` printed a plan of 9e22 TiB with exit 0; with --prefix-slots the
    refusal blamed --prefix-slots."""
    line = refused(capsys, *PLAN, "--max-seqs", str(10**27), "--spec-tokens", "4", *extra)
    assert line.startswith("ssm-rollback plan: error: --max-seqs must be at most 44,090,691,840:")
    assert line.endswith("is past 2**64 bytes, more than any machine holds")
    assert main([*PLAN, "--max-seqs", "44090691840", "--spec-tokens", "4"], io.StringIO()) == 0


def test_more_depths_than_the_report_can_show_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--depths 0,1,...,9999`` replayed the whole trace ten thousand times; 64 still run."""
    many = ",".join(str(d) for d in range(MAX_DEPTHS + 1))
    line = refused(capsys, "simulate", "--tokens", "8", "--depths", many)
    assert line == (
        "ssm-rollback simulate: error: argument --depths: must list at most 64 depths (each "
        "replays the whole trace), got 65"
    )
    fits = ",".join(str(d) for d in range(MAX_DEPTHS))
    out = io.StringIO()
    argv = ["simulate", "--sequences", "1", "--tokens", "4", "--depths", fits, "--json"]
    assert main(argv, out=out) == 0
    assert len(json.loads(out.getvalue())["depths"]) == MAX_DEPTHS


def test_a_depth_past_what_a_machine_holds_names_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--depths 10**20`` once priced 9e15 TiB of snapshots per sequence, exit 0."""
    line = refused(capsys, "simulate", "--tokens", "8", "--depths", f"1,{10**20}")
    assert line == (
        "ssm-rollback simulate: error: --depths: depth 100000000000000000000 needs "
        "10,213,785,600,000,000,000,000,000,000 bytes of snapshots per sequence (102,137,856 a "
        "slot), more than the 2**50 bytes (1 PiB) a machine holds"
    )


# -- files --------------------------------------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "latin1.json").write_bytes(b'{"model_type": "mamba2", "name": "caf\xe9"}')
    (tmp_path / "broken.json").write_text('{"model_type": ')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "nan.json").write_text('{"model_type": "mamba2", "hidden_size": NaN}')
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "folder").mkdir()
    return {
        "latin1": str(tmp_path / "latin1.json"),
        "broken": str(tmp_path / "broken.json"),
        "list": str(tmp_path / "list.json"),
        "nan": str(tmp_path / "nan.json"),
        "deep": str(tmp_path / "deep.json"),
        "missing": str(tmp_path / "missing.json"),
        "folder": str(tmp_path / "folder"),
    }


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("latin1", "is not UTF-8 text"),
        ("broken", "is not JSON"),
        ("list", "must hold a JSON object"),
        ("nan", "NaN is not a JSON number"),
        ("deep", "nests JSON too deeply"),
        ("missing", "cannot read"),
        ("folder", "cannot read"),  # a model folder without config.json
    ],
)
def test_a_bad_config_file_names_the_flag(
    name: str, message: str, files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, "plan", "--config", files[name], "--free-memory", "1GiB")
    assert line.startswith("ssm-rollback plan: error: --config: ")
    assert message in line


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"seq": 0, "event": "token", "boundary": "caf\xe9"}\n', "not UTF-8 text (byte 45:"),
        (b'{"seq": 0, "event": "token", "bondary": true}\n', "trace.jsonl:1: a 'token' event"),
        (b'{"seq": 0, "event": "token"}\n{"seq": 0, "evnt": "rollback"}\n', "trace.jsonl:2: "),
    ],
)
def test_a_bad_trace_names_the_flag_and_line(
    content: bytes, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(content)
    line = refused(capsys, "simulate", "--trace", str(path))
    assert line.startswith("ssm-rollback simulate: error: --trace: ")
    assert message in line


def test_a_trace_folder_or_missing_trace_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "--trace: " in refused(capsys, "simulate", "--trace", str(tmp_path))
    assert "--trace: " in refused(capsys, "simulate", "--trace", str(tmp_path / "none"))


def test_a_path_or_trace_key_spelt_like_a_parameter_is_quoted_as_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Parameter names become flags only where the message names a parameter: a folder
    called ``free_bytes`` or a trace key ``boundary_rate`` was shown as ``--free-memory``."""
    missing = tmp_path / "free_bytes" / "config.json"
    line = refused(capsys, "plan", "--config", str(missing), "--free-memory", "1GiB")
    assert f"'{missing}'" in line
    folder = tmp_path / "tp_size"
    folder.mkdir()
    line = refused(capsys, "plan", "--config", str(folder), "--free-memory", "1GiB")
    assert str(folder / "config.json") in line
    trace = tmp_path / "rollback_rate.jsonl"
    trace.write_text('{"seq": 0, "event": "token", "boundary_rate": 1}\n')
    line = refused(capsys, "simulate", "--trace", str(trace))
    assert f"{trace}:1:" in line
    assert line.endswith("got 'boundary_rate'")
    assert "--" not in line.split("--trace: ", 1)[1]


def test_a_parameter_named_in_the_text_still_becomes_its_flag() -> None:
    from ssm_rollback._errors import InvalidArgumentError
    from ssm_rollback.cli import flag_message

    flags = {"free_bytes": "--free-memory", "tp_size": "--tp"}
    error = InvalidArgumentError("'tp_size' must divide 8, and free_bytes is 10 (see 'tp_size')")
    shown = flag_message(error, flags, None)
    assert shown == "--tp must divide 8, and --free-memory is 10 (see 'tp_size')"
    path = InvalidArgumentError("cannot read /x/free_bytes/a.json or free_bytes.json: gone")
    assert flag_message(path, flags, None) == str(path)


# -- --plot ---------------------------------------------------------------------------------


@pytest.fixture
def no_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any simulation fail the test: a bad --plot must be refused before one runs."""

    def replay(*args: object, **kwargs: object) -> None:
        raise AssertionError("the simulation ran before --plot was checked")

    monkeypatch.setattr(ssm_rollback._apps.simulate, "replay", replay)


@pytest.mark.usefixtures("no_replay")
def test_a_plot_in_a_missing_folder_is_refused_before_simulating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    line = refused(capsys, "simulate", "--plot", str(tmp_path / "missing" / "x.png"))
    assert "error: --plot: folder" in line
    assert "does not exist" in line
    assert "is a folder" in refused(capsys, "simulate", "--plot", str(tmp_path))
    dangling = tmp_path / "dangling.png"  # written through: its target's folder is missing
    dangling.symlink_to(tmp_path / "gone" / "plot.png")
    line = refused(capsys, "simulate", "--plot", str(dangling))
    assert f"error: --plot: folder '{tmp_path / 'gone'}' does not exist" in line


@pytest.mark.usefixtures("no_replay")
def test_a_plot_without_matplotlib_is_refused_before_simulating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # not installed
    line = refused(capsys, "simulate", "--plot", str(tmp_path / "x.png"))
    assert "error: --plot: needs matplotlib" in line


@pytest.mark.usefixtures("no_replay")
def test_a_plot_that_is_no_regular_file_is_refused_before_simulating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO, a device or an empty name passed the folder check: the whole run went first,
    then the FIFO failed with ': None' and /dev/null was reported as a plot written."""
    pytest.importorskip("matplotlib")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "is not a regular file" in refused(capsys, "simulate", "--plot", str(fifo))
    assert "is not a regular file" in refused(capsys, "simulate", "--plot", os.devnull)
    assert "--plot: must name a file, got ''" in refused(capsys, "simulate", "--plot", "")
    loop = tmp_path / "loop.png"
    loop.symlink_to(loop)
    assert "--plot: cannot write" in refused(capsys, "simulate", "--plot", str(loop))


def test_any_plot_name_gets_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "depths.weird"
    argv = ["simulate", "--depths", "0,2", "--sequences", "2", "--tokens", "20"]
    assert main([*argv, "--plot", str(plot)], io.StringIO()) == 0
    assert plot.read_bytes().startswith(b"\x89PNG")


# -- a closed pipe --------------------------------------------------------------------------


def test_a_closed_pipe_ends_quietly() -> None:
    """``ssm-rollback ring | head -3``: the reader is gone before the output is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # no reader at all: the first write fails, deterministically
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ssm_rollback", "ring"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (1, "")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_full_disk_is_one_line_not_a_traceback() -> None:
    """``ssm-rollback ring > /dev/full``: only a broken pipe was caught; ENOSPC leaked."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "ssm_rollback", "ring"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    assert done.returncode == 1
    assert (
        done.stderr
        == "ssm-rollback ring: error: cannot write the output: No space left on device\n"
    )


def test_a_closed_stdout_is_one_line_not_a_traceback() -> None:
    """``ssm-rollback ring >&-``: Python starts with ``sys.stdout`` None; the run failed on it."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; os.close(1); "
            "from ssm_rollback.cli import main; sys.stdout = None; sys.exit(main(['ring']))",
        ],
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert (
        done.stderr
        == "ssm-rollback ring: error: cannot write the output: standard output is closed\n"
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["plan", "--help"]])
def test_help_or_version_that_cannot_be_written_is_an_error(argv: list[str]) -> None:
    """argparse drops a failed write of --help or --version: the run said nothing, exit 0."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "ssm_rollback", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    assert (done.returncode, done.stderr) == (
        1,
        "ssm-rollback: error: cannot write the output: No space left on device\n",
    )
    closed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; os.close(1); from ssm_rollback.cli import main; "
            f"sys.stdout = None; sys.exit(main({argv!r}))",
        ],
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    assert (closed.returncode, closed.stderr) == (
        1,
        "ssm-rollback: error: cannot write the output: standard output is closed\n",
    )


def test_a_usage_error_with_stderr_closed_still_exits_2() -> None:
    """Only --help and --version write to a closed stdout as an error: a usage error whose
    stderr was closed exited 1 (as an unwritten output) once that check came in."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; os.close(2); from ssm_rollback.cli import main; "
            "sys.stderr = None; sys.exit(main(['plan', '--bogus']))",
        ],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    assert done.returncode == 2  # argparse then shows its usage on stdout, as it always did


def test_a_closed_stderr_leaves_the_progress_bar_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Started with ``2>&-``, ``sys.stderr`` is None: the progress bar asked it isatty()."""
    monkeypatch.setattr(sys, "stderr", None)
    out = io.StringIO()
    assert main(["simulate", "--sequences", "1", "--tokens", "5"], out) == 0
    assert "depth" in out.getvalue()


# -- demo model types -------------------------------------------------------------------------


def test_demo_refuses_a_model_type_it_cannot_build(capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, "demo", "--model-type", "glm5_next_text")
    assert "argument --model-type: invalid choice: 'glm5_next_text'" in line


def test_demo_help_lists_exactly_the_model_types_it_builds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ssm_rollback.cli.demo import MODEL_TYPES

    assert main(["demo", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert ", ".join(MODEL_TYPES) in help_text
    assert "glm5_next_text" not in help_text


def test_a_file_name_that_is_not_utf8_prints_escaped(tmp_path: Path) -> None:
    """A non-UTF-8 name reaches argv as surrogates, which a strict stdout cannot encode."""
    path = os.fsdecode(os.fsencode(tmp_path) + b"/\xff.json")
    Path(path).write_text(json.dumps(shipped_config("mamba2-2.7b")))
    out = io.StringIO()
    assert main(["plan", "--config", path, "--free-memory", "1GiB"], out=out) == 0
    out.getvalue().encode("utf-8")  # no lone surrogate left to fail a strict stream
    assert "\\udcff.json: mamba2" in out.getvalue()


@pytest.mark.parametrize(
    "argv",
    [["demo", "--g"], ["demo", "--gram"], ["ring", "--cap", "3"]],
    ids=" ".join,
)
def test_abbreviated_flags_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``--g`` must not be read as ``--grammar``: a typo never starts a different run."""
    assert "unrecognized arguments" in refused(capsys, *argv)


# -- what plan says when memory runs out ----------------------------------------------------


def test_plan_depth_zero_note_counts_the_shared_prefix_slots() -> None:
    """The note said the whole --free-memory was free, ignoring the shared slots' bytes."""
    out = io.StringIO()
    argv = ["plan", "--model", "nemotron-h-8b", "--free-memory", "1GiB", "--max-seqs", "1"]
    assert main([*argv, "--prefix-slots", "10"], out=out) == 0
    assert out.getvalue().splitlines()[-1] == (
        "depth 0 serves no rollback: one slot for each of 1 sequences needs 102,137,856 bytes "
        "(97.4 MiB), 52,363,264 (49.9 MiB) free after the shared prefix slots; lower --max-seqs "
        "or --prefix-slots or raise --free-memory"
    )


def test_plan_errors_name_flags_where_they_name_parameters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Past the first word, messages said 'free_bytes', a parameter the CLI user never sees."""
    base = ["plan", "--model", "nemotron-h-8b", "--free-memory", "10GB"]
    for more in (["--ring-slots", "1000"], ["--prefix-slots", "1000"]):
        line = refused(capsys, *base, *more)
        assert "free_bytes" not in line
        assert "but --free-memory is 10000000000" in line


def test_a_bad_config_dtype_is_named_as_the_configs_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``"torch_dtype": "auto"`` in a --config file was refused as if 'torch_dtype' were an
    argument, naming neither the flag nor the file."""
    config = {
        "model_type": "mamba2",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_heads": 8,
        "head_dim": 16,
        "expand": 2,
        "n_groups": 1,
        "state_size": 16,
        "torch_dtype": "auto",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    line = refused(capsys, "plan", "--config", str(path), "--free-memory", "10GB")
    assert line.startswith(
        f"ssm-rollback plan: error: --config {path}: config field 'torch_dtype' must be one of"
    )
    assert line.endswith("got 'auto'")
