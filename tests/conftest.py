"""Hypothesis profiles, chosen by ``HYPOTHESIS_PROFILE`` (default ``ci``).

- ``ci``: deterministic and bounded, what CI and the README's test command run;
- ``dev``: quick, random, for the edit-test loop;
- ``soak``: 100x the ``ci`` examples, random, for a long run before a release.

Under pytest-xdist (the README's ``-n logical``) every worker keeps torch to one
thread: the workers already fill the cores, and two workers each spinning a pool
per core only fight over them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

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
