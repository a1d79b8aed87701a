"""`ssm-rollback plan` and `ssm-rollback simulate`."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from ssm_rollback import InvalidArgumentError
from ssm_rollback._apps.decode_trace import TraceEvent, parse_trace, synthetic_trace
from ssm_rollback._apps.simulate import replay
from ssm_rollback.cli import main, parse_size
from ssm_rollback.reserve import ENV_VAR, shipped_config


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


# -- plan -------------------------------------------------------------------------------------


def test_plan_json_is_one_object_with_the_promised_keys() -> None:
    status, text = run(
        "plan", "--model", "nemotron-h-8b", "--free-memory", "20GiB", "--max-seqs", "256", "--json"
    )
    assert status == 0
    report = json.loads(text)
    # vLLM keeps Nemotron-H's h-state in float32: 97.4 MiB a slot, so 20 GiB buys none.
    per_slot = 24 * ((8_192 + 2 * 8 * 128) * 3 * 2 + 128 * 64 * 128 * 4)
    assert report["bytes_per_slot"] == per_slot
    assert report["slots"] == 20 * 2**30 // (256 * per_slot) == 0
    assert report["rule"] == "memory"
    assert report["bytes_total"] == 0
    assert len(report["layers"]) == 24


def test_plan_prints_the_layer_table_and_the_decision() -> None:
    status, text = run("plan", "--model", "jamba-1.5-mini", "--free-memory", "1TiB")
    assert status == 0
    assert "28 SSM layers of 32" in text
    assert "conv 8192x3 bfloat16, ssm 8192x16 bfloat16" in text
    assert "ring depth                     8 (rule: maximum)" in text


def test_plan_overrides_flag_beats_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "2")
    _, text = run("plan", "--model", "jamba-1.5-mini", "--free-memory", "1TiB", "--json")
    assert json.loads(text)["rule"] == "env"
    _, text = run(
        "plan", "--model", "jamba-1.5-mini", "--free-memory", "1TiB", "--ring-slots", "12",
        "--json",
    )  # fmt: skip
    assert (json.loads(text)["slots"], json.loads(text)["rule"]) == (12, "override")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--ring-slots", "9"], None, "--ring-slots = 9 does not fit"),
        (["--ring-slots", "-1"], None, "argument --ring-slots: must be an int >= 0, got '-1'"),
        ([], "", f"{ENV_VAR} must be an integer >= 0, got an empty string"),
        ([], "many", f"{ENV_VAR} must be an integer >= 0, got 'many'"),
        (["--tp", "3"], None, "error: --tp 3 must divide config field 'mamba_num_heads'"),
        (["--dtype", "int3"], None, "error: --dtype must be one of"),
    ],
)
def test_plan_errors_name_their_source(
    argv: list[str],
    env: str | None,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if env is not None:
        monkeypatch.setenv(ENV_VAR, env)
    status, _ = run("plan", "--model", "nemotron-h-8b", "--free-memory", "20GiB", *argv)
    assert status == 2
    assert message in capsys.readouterr().err


def test_plan_reads_a_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(shipped_config("qwen3-next-80b-a3b")))
    status, text = run("plan", "--config", str(path), "--free-memory", "512MB", "--json")
    assert status == 0
    assert json.loads(text)["model_type"] == "qwen3_next"
    status, _ = run("plan", "--config", str(tmp_path / "nope.json"), "--free-memory", "1GB")
    assert status == 2
    assert "error: --config: cannot read" in capsys.readouterr().err


def test_plan_needs_a_model_and_free_memory() -> None:
    assert main(["plan", "--free-memory", "1GB"]) == 2
    assert main(["plan", "--model", "nemotron-h-8b"]) == 2


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("40GiB", 40 * 2**30),
        ("512MB", 512 * 10**6),
        ("1073741824", 2**30),
        ("1.5 GiB", 3 * 2**29),
        ("0.5kib", 512),
        ("0", 0),
        ("2kib", 2048),
        ("7b", 7),
        ("1_000", 1000),
    ],
)
def test_sizes_parse(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "GiB", "-1GiB", "12XB", "nan", "1e3GiB GiB", "_1", "1__0"])
def test_bad_sizes_are_clear_errors(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="must be a size such as 40GiB"):
        parse_size(text)


# -- simulate ---------------------------------------------------------------------------


def test_simulate_serves_more_rollbacks_as_the_ring_deepens() -> None:
    status, text = run("simulate", "--json", "--sequences", "16", "--tokens", "400")
    assert status == 0
    rows = json.loads(text)["depths"]
    assert [r["depth"] for r in rows] == [0, 1, 2, 4, 8, 16]
    served = [r["served_fraction"] for r in rows]
    assert served == sorted(served)
    assert served[0] == 0.0
    assert served[-1] > 0.9
    recomputed = [r["tokens_recomputed"] for r in rows]
    assert recomputed == sorted(recomputed, reverse=True)
    assert rows[3]["bytes_per_sequence"] == 4 * rows[1]["bytes_per_sequence"]


def test_simulate_prints_a_table_and_writes_a_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "depths.png"
    status, text = run(
        "simulate", "--model", "qwen3-next-80b-a3b", "--depths", "0,2,8", "--sequences", "4",
        "--plot", str(plot),
    )  # fmt: skip
    assert status == 0
    assert "qwen3_next: synthetic trace: 4 sequences x 512 tokens" in text
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_simulate_replays_a_jsonl_trace(tmp_path: Path) -> None:
    lines = [{"seq": 0, "event": "token", "boundary": n % 2 == 0} for n in range(1, 9)]
    lines += [{"seq": 0, "event": "rollback", "back": 3}, {"seq": 0, "event": "finish"}]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    status, text = run("simulate", "--trace", str(path), "--depths", "1,2,3", "--json")
    assert status == 0
    served = [row["served"] for row in json.loads(text)["depths"]]
    assert served == [0, 0, 1]  # boundaries 2, 4, 6, 8: going back 3 needs the one at 4


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "a trace line must be JSON"),
        ("[1]", "must be a JSON object"),
        ('{"seq": 0, "event": "jump"}', "'event' must be 'token', 'rollback' or 'finish'"),
        ('{"event": "token", "seq": -1}', "'seq' must be an int >= 0"),
        ('{"seq": 0, "event": "rollback", "back": 0}', "'back' must be an int >= 1"),
        ('{"seq": 0, "event": "token", "boundary": "yes"}', "'boundary' must be true or false"),
        ('{"seq": 0, "event": "token", "bondary": true}', "only the keys .* got 'bondary'"),
        ('{"seq": 0, "event": "token", "back": 2}', "got 'back'"),
        ('{"seq": 0, "event": "finish", "boundary": false}', "got 'boundary'"),
        ('{"event": "token"}', "needs a 'seq' key"),
        ('{"seq": 0}', "'event' must be"),
        ('{"seq": 1' + "0" * 5000 + ', "event": "token"}', "must be JSON"),
    ],
)
def test_bad_trace_lines_name_the_line(line: str, message: str) -> None:
    data = ('{"seq": 0, "event": "token"}\n' + line + "\n").encode()
    with pytest.raises(InvalidArgumentError, match=f"trace.jsonl:2: .*{message}"):
        parse_trace(data, "trace.jsonl")


def test_simulate_rejects_bad_depths_and_rates(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("simulate", "--depths", "1,x")[0] == 2
    assert "argument --depths: must be comma-separated ints" in capsys.readouterr().err
    assert run("simulate", "--boundary-rate", "1.5")[0] == 2
    assert "argument --boundary-rate: must be a number in [0, 1]" in capsys.readouterr().err
    assert run("simulate", "--back", "0")[0] == 2
    assert "argument --back: must be an int >= 1" in capsys.readouterr().err


def test_thinking_boundaries_have_no_snapshot_so_an_earlier_one_is_restored() -> None:
    events = [TraceEvent(0, "token", boundary=True)]
    events += [TraceEvent(0, "token", boundary=True, thinking=True)]
    events += [TraceEvent(0, "token"), TraceEvent(0, "rollback", back=1)]
    result = replay(events, depth=4)
    assert (result.rollbacks, result.served, result.tokens_regenerated) == (1, 1, 2)


def test_synthetic_traces_are_reproducible() -> None:
    kwargs = {"sequences": 3, "tokens": 50, "boundary_rate": 0.2, "rollback_rate": 0.1, "back": 2}
    assert synthetic_trace(**kwargs, seed=1) == synthetic_trace(**kwargs, seed=1)  # type: ignore[arg-type]
    assert synthetic_trace(**kwargs, seed=1) != synthetic_trace(**kwargs, seed=2)  # type: ignore[arg-type]
