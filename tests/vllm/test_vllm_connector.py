"""SsmPrefixConnector inside a real vLLM engine (SPEC 16), on a tiny hybrid model built here.

One engine per configuration, each in a fresh process (``workload.py``),
each shared by every test of this module.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ssm_rollback import PrefixSnapshotIndex

if importlib.util.find_spec("vllm") is None:  # vLLM is imported by the engine processes only
    pytest.skip("needs the vllm extra (its own environment)", allow_module_level=True)

HERE = Path(__file__).resolve().parent
#: As ``workload.PREFIX_SLOTS``: enough that nothing is evicted, so the prediction is exact.
PREFIX_SLOTS = 32

#: The CPU kernels differ by about 1e-6 from run to run; SPEC 16 allows the kernels' own noise.
TOLERANCE = 1e-4
Run = list[dict[str, object]]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-nemotron-h")
    subprocess.run(
        [sys.executable, str(HERE / "tiny_model.py"), str(directory)], check=True, timeout=300
    )
    return directory


def _run(model: Path, mode: str) -> Run | dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(HERE / "workload.py"), str(model), mode],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=HERE,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(("RESULT ", "{"))]
    assert lines, done.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("RESULT "))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def runs(model: Path) -> dict[str, Run]:
    return {mode: _run(model, mode) for mode in ("none", "connector", "no-ssm", "stale")}  # type: ignore[misc]


def _predicted(run: Run) -> list[int]:
    """The hit of each request, from an index fed the same publishes as the connector's."""
    index = PrefixSnapshotIndex(PREFIX_SLOTS)
    hits = []
    for request in run:
        prompt, tokens = list(request["prompt"]), list(request["tokens"])  # type: ignore[call-overload]
        entry = index.match(prompt)
        hits.append(0 if entry is None else entry.length)
        index.publish(0, prompt, len(prompt))
        computed = len(prompt) + len(tokens) - 1
        if computed > len(prompt):
            index.publish(0, prompt + tokens, computed)
    return hits


def _max_diff(a: Run, b: Run) -> float:
    return max(
        abs(float(x) - float(y))
        for ra, rb in zip(a, b, strict=True)
        for x, y in zip(ra["logprobs"], rb["logprobs"], strict=True)  # type: ignore[call-overload]
    )


def test_the_workload_is_twelve_requests_in_four_conversations(runs: dict[str, Run]) -> None:
    names = [r["name"] for r in runs["none"]]
    assert len([n for n in names if str(n).startswith("c")]) == 12
    assert {str(n)[:2] for n in names if str(n).startswith("c")} == {"c0", "c1", "c2", "c3"}


def test_the_connector_gives_the_same_tokens_and_logprobs(runs: dict[str, Run]) -> None:
    base, ours = runs["none"], runs["connector"]
    assert [r["tokens"] for r in ours] == [r["tokens"] for r in base]
    assert _max_diff(base, ours) <= TOLERANCE


def test_every_hit_the_index_predicts_is_skipped(runs: dict[str, Run]) -> None:
    ours = runs["connector"]
    predicted = _predicted(ours)
    assert [r["cached"] for r in ours] == predicted
    assert sum(1 for hit in predicted if hit) >= 12  # every conversation turn hits
    assert all(r["cached"] == 0 for r in runs["none"])


def test_a_broken_ssm_copy_changes_the_logprobs(runs: dict[str, Run]) -> None:
    assert [r["cached"] for r in runs["no-ssm"]] == [r["cached"] for r in runs["connector"]]
    assert _max_diff(runs["none"], runs["no-ssm"]) > 100 * TOLERANCE


def test_a_stale_slot_is_never_loaded_and_the_request_recomputes(runs: dict[str, Run]) -> None:
    base, stale = runs["none"], runs["stale"]
    assert all(r["cached"] == 0 for r in stale)
    assert [r["tokens"] for r in stale] == [r["tokens"] for r in base]
    assert _max_diff(base, stale) <= TOLERANCE


def test_prefix_caching_on_is_refused_at_startup(model: Path) -> None:
    refused = _run(model, "refuse")
    assert refused["refused"] == "UnsupportedEngineError", refused  # type: ignore[call-overload]
    assert "enable_prefix_caching" in str(refused["message"])  # type: ignore[call-overload]


def test_a_request_fed_prompt_embeds_neither_loads_nor_publishes(model: Path) -> None:
    """Such a request's ids are vLLM's placeholders: it raised on its empty ids (every later
    step failed too), and its state, published under the placeholders, was loaded for a
    request of those ids (silently other tokens)."""
    base, ours = _run(model, "embeds"), _run(model, "embeds-connector")
    names = ["embeds", "placeholders", "embeds, loading", "ids"]
    assert [r["name"] for r in ours] == names  # type: ignore[index]
    assert [r["tokens"] for r in ours] == [r["tokens"] for r in base]  # type: ignore[index]
    assert [r["cached"] for r in ours] == [0, 0, 0, 0]  # type: ignore[index]
