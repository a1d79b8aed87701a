"""The CLI reads configs and traces only from regular files, and only up to a size limit.

``plan --config`` and ``simulate --trace`` once read a FIFO, ``/dev/zero`` or
``/dev/urandom`` without end (a hang; under a memory cap a MemoryError
traceback), and ``--config ''`` read ``./config.json``. Each is now exit 2 and
one line naming the flag. The cases that hung run in a child process with a
timeout, so that a regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ssm_rollback
from ssm_rollback.cli import main
from ssm_rollback.cli._common import FlagError
from ssm_rollback.cli._files import MAX_CONFIG_BYTES, MAX_TRACE_BYTES, read_file
from ssm_rollback.reserve import ENV_VAR, shipped_config

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev are POSIX")

SOURCE = str(Path(ssm_rollback.__file__).resolve().parents[1])
FLAGS = {"plan": ("plan", "--free-memory", "1GiB", "--config"), "simulate": ("simulate", "--trace")}
NAMED = {"plan": "--config", "simulate": "--trace"}


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def isolated(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    """``ssm-rollback *args`` (or ``python -c code``) in a child that may not run past 120 s."""
    command = ["-c", code] if code is not None else ["-m", "ssm_rollback", *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SOURCE, os.environ.get("PYTHONPATH", "")])}
    env.pop(ENV_VAR, None)
    return subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    out = io.StringIO()
    assert main(list(argv), out=out) == 2
    assert out.getvalue() == ""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip()


# -- what hung ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_a_fifo_is_refused_not_waited_on(command: str, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    line = one_error_line(isolated(*FLAGS[command], str(fifo)))
    assert line == (
        f"ssm-rollback {command}: error: {NAMED[command]}: '{fifo}' is a FIFO, not a regular file"
    )


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_an_endless_device_is_refused_not_read(command: str, device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"no {device} here")
    line = one_error_line(isolated(*FLAGS[command], device))
    assert line == (
        f"ssm-rollback {command}: error: {NAMED[command]}: '{device}' is a character device, "
        f"not a regular file"
    )


def test_a_fifo_put_in_place_after_the_path_was_looked_at_is_refused(tmp_path: Path) -> None:
    """The open descriptor is checked, not only the path: a FIFO swapped in between is caught
    (and opening it does not wait for a writer)."""
    fifo, decoy = tmp_path / "pipe", tmp_path / "decoy.json"
    os.mkfifo(fifo)
    decoy.write_text("{}")
    code = textwrap.dedent(
        f"""
        import os
        from ssm_rollback.cli._files import read_file

        real_stat = os.stat
        os.stat = lambda path, *a, **k: real_stat({str(decoy)!r} if path == {str(fifo)!r} else path)
        try:
            read_file("--config", {str(fifo)!r}, limit=100)
        except Exception as error:
            print(type(error).__name__, error)
        """
    )
    done = isolated(code=code)
    assert done.stdout.strip() == f"FlagError --config: '{fifo}' is a FIFO, not a regular file"


# -- what else is not a regular file --------------------------------------------------------


def test_a_trace_that_is_a_directory_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, "simulate", "--trace", str(tmp_path))
    assert line.endswith(f"--trace: '{tmp_path}' is a directory, not a regular file")


@pytest.mark.parametrize("kind", ["directory", "FIFO"])
def test_a_model_folder_whose_config_is_not_a_file_is_named(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inner = tmp_path / "config.json"
    if kind == "directory":
        inner.mkdir()
    else:
        os.mkfifo(inner)  # refused by its path before it is opened: no wait here either
    line = refused(capsys, *FLAGS["plan"], str(tmp_path))
    assert line.endswith(f"--config: '{inner}' is a {kind}, not a regular file")


def test_a_symbolic_link_to_a_config_is_followed(tmp_path: Path) -> None:
    """A Hugging Face cache's snapshot config.json is a link into its blobs."""
    blob = tmp_path / "blob"
    blob.write_text(json.dumps(shipped_config("mamba2-2.7b")))
    (tmp_path / "config.json").symlink_to(blob)
    assert main([*FLAGS["plan"], str(tmp_path)], out=io.StringIO()) == 0


# -- sizes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "limit"), [("plan", MAX_CONFIG_BYTES), ("simulate", MAX_TRACE_BYTES)]
)
def test_a_file_past_the_limit_is_refused_unread(
    command: str, limit: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big"
    with big.open("wb") as file:
        file.truncate(limit + 1)  # sparse: no disk used
    line = refused(capsys, *FLAGS[command], str(big))
    mib = limit // 2**20
    assert line.endswith(
        f"{NAMED[command]}: '{big}' is {limit + 1:,} bytes, larger than the {mib} MiB "
        f"({limit:,} bytes) limit"
    )


def test_a_config_of_exactly_the_limit_is_read(tmp_path: Path) -> None:
    text = json.dumps(shipped_config("mamba2-2.7b"))
    path = tmp_path / "config.json"
    path.write_text(text + " " * (MAX_CONFIG_BYTES - len(text)))
    assert path.stat().st_size == MAX_CONFIG_BYTES
    assert main([*FLAGS["plan"], str(path)], out=io.StringIO()) == 0


def test_a_file_longer_than_its_stated_size_stops_at_the_limit() -> None:
    """Files in /proc state size 0 and hold more; a file can also grow after fstat."""
    status = "/proc/self/status"
    if not os.path.exists(status):
        pytest.skip("no /proc here")
    with pytest.raises(FlagError, match="'/proc/self/status' holds more than the 16 bytes limit"):
        read_file("--config", status, limit=16)
    path, data = read_file("--config", status, limit=MAX_CONFIG_BYTES)
    assert path == status
    assert data.startswith(b"Name:")


# -- an empty path --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_an_empty_path_is_refused_not_read_as_the_working_directory(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(shipped_config("mamba2-2.7b")))
    monkeypatch.chdir(tmp_path)
    line = refused(capsys, *FLAGS[command], "")
    assert (
        line
        == f"ssm-rollback {command}: error: {NAMED[command]}: must name a file, got an empty path"
    )
