"""Hypothesis profiles, chosen by ``HYPOTHESIS_PROFILE`` (default ``ci``).

- ``ci``: deterministic and bounded, what CI and the README's test command run;
- ``dev``: quick, random, for the edit-test loop;
- ``soak``: 100x the ``ci`` examples, random, for a long run before a release.

Under pytest-xdist (the README's ``-n logical``) every worker keeps torch to one
thread: the workers already fill the cores, and two workers each spinning a pool
per core only fight over them.

``launch_ranks`` runs the rank programs of the tensor-parallel tests (each such
test file, run as a script, is one rank) as subprocesses, bounded by ``JOIN_S``,
so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Final, final

import pytest
from hypothesis import HealthCheck, settings

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Read when torch is first imported, which no worker has done yet; the ranks and
    # runs that tests start as subprocesses inherit it.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

settings.register_profile(
    "ci",
    max_examples=300,
    stateful_step_count=50,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=30, stateful_step_count=30, deadline=None)
settings.register_profile(
    "soak",
    max_examples=30_000,
    stateful_step_count=50,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def quiet_warnings() -> Iterator[None]:
    """Silence warnings for a test (``pytestmark = pytest.mark.usefixtures("quiet_warnings")``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


#: How long the ranks of one launch may run, together, before the test fails and kills them.
JOIN_S: Final = 120


@final
class RankLauncher:
    """Starts rank programs (``sys.executable`` with each argument list) and waits for them."""

    @staticmethod
    def port() -> int:
        """A free loopback port, for one group's rendezvous."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
            return port

    @staticmethod
    def run(ranks: Mapping[str, Sequence[str]]) -> None:
        """Start every rank at once (by name, its arguments); fail, killing them all, when one
        exits non-zero or they are not all done within ``JOIN_S``."""
        procs = {
            name: subprocess.Popen(
                [sys.executable, *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name, argv in ranks.items()
        }
        errors = []
        try:
            for name, proc in procs.items():
                _, stderr = proc.communicate(timeout=JOIN_S)
                if proc.returncode:
                    errors.append(f"{name} exited {proc.returncode}:\n{stderr[-3000:]}")
        except subprocess.TimeoutExpired:
            pytest.fail(f"{len(procs)} ranks did not finish within {JOIN_S} s")
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        assert not errors, "\n".join(errors)


@pytest.fixture(scope="session")
def launch_ranks() -> RankLauncher:
    """Runs the ranks of a tensor-parallel test as subprocesses (``RankLauncher``)."""
    return RankLauncher()
