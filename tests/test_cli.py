"""The console script: the demo (the main job) and the ring walk."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ssm_rollback.cli import main
from ssm_rollback.cli.demo import MODEL_TYPES as DEMO_MODEL_TYPES

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


def test_ring_walks_the_ring_and_exits_0() -> None:
    status, text = run("ring")
    assert status == 0
    assert "roll back to 4" in text
    assert "token 7 (boundary)" in text


def test_ring_with_capacity_zero_records_nothing() -> None:
    status, text = run("ring", "--capacity", "0")
    assert status == 0
    assert "(no snapshot)" in text


@pytest.mark.parametrize("command", ["ring", "demo"])
def test_negative_capacity_is_a_usage_error(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--capacity", "-1"]) == 2
    assert "argument --capacity: must be an int " in capsys.readouterr().err


def test_a_command_is_required() -> None:
    assert main([]) == 2


def test_python_dash_m_runs_the_same_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ssm_rollback", "ring"], capture_output=True, text=True, check=True
    )
    assert "scripted decode" in done.stdout


def test_demo_without_transformers_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ssm_rollback._apps.demo", None)  # import fails
    status, _ = run("demo")
    assert status == 1
    assert "pip install 'ssm-rollback[transformers]'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def demo_json() -> dict[str, object]:
    pytest.importorskip("transformers")
    status, text = run("demo", "--json", "--length", "40")
    assert status == 0
    report = json.loads(text)
    assert isinstance(report, dict)
    return report


def test_demo_json_serves_rollbacks_with_no_mismatch(demo_json: dict[str, object]) -> None:
    assert demo_json["mismatches"] == 0
    rollbacks = demo_json["rollbacks_served"]
    assert isinstance(rollbacks, int)
    assert rollbacks > 0
    assert demo_json["tokens"] == 40
    assert {"rollbacks_declined", "tokens_regenerated", "time_saved_seconds"} <= set(demo_json)


def test_demo_with_a_small_ring_declines_some_rollbacks() -> None:
    pytest.importorskip("transformers")
    status, text = run("demo", "--json", "--capacity", "0", "--length", "24")
    report = json.loads(text)
    assert status == 0
    assert report["rollbacks_served"] == 0
    assert report["rollbacks_declined"] > 0


def test_demo_prints_a_summary_table() -> None:
    pytest.importorskip("transformers")
    status, text = run("demo", "--model-type", "qwen3_next", "--length", "16", "--seed", "3")
    assert status == 0
    assert "qwen3_next (tiny, random weights, seed 3)" in text
    assert "mismatches vs fresh decode  0" in text


def test_demo_refuses_an_untested_model_type(capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = run("demo", "--model-type", "llama")
    assert status == 2
    assert "argument --model-type: invalid choice: 'llama'" in capsys.readouterr().err


def test_the_readme_shows_the_demo_summary() -> None:
    shown = README.split("```text\n", 1)[1].split("```", 1)[0]
    for line in ("rollbacks served", "rollbacks declined", "mismatches vs fresh decode  0"):
        assert line in shown


def test_the_readme_shows_what_the_demo_prints() -> None:
    """Every line of the README's demo block but the three timings (they vary by machine) is
    what ``ssm-rollback demo`` prints: the block had gone stale (13 boundaries shown, 11 made)."""
    pytest.importorskip("transformers")
    shown = README.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    status, text = run("demo")
    assert status == 0
    timed = ("rollback (restore + crop)", "recompute from the prompt", "time saved")
    printed = text.splitlines()
    assert [line.split()[0] for line in printed] == [line.split()[0] for line in shown]
    kept = [line for line in printed if not line.startswith(timed)]
    assert kept == [line for line in shown if not line.startswith(timed)]


@pytest.mark.parametrize("model_type", DEMO_MODEL_TYPES)
def test_the_demo_builds_every_model_type_it_offers(model_type: str) -> None:
    pytest.importorskip("transformers")
    status, text = run("demo", "--json", "--model-type", model_type, "--length", "6")
    assert status == 0
    assert json.loads(text)["tokens"] == 6


def test_the_demo_leaves_out_only_the_tested_type_without_an_lm_head() -> None:
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM

    from ssm_rollback.testing import TESTED_MODEL_TYPES, tiny_config

    assert set(DEMO_MODEL_TYPES) < set(TESTED_MODEL_TYPES)
    (left_out,) = set(TESTED_MODEL_TYPES) - set(DEMO_MODEL_TYPES)
    with pytest.raises(ValueError, match="Unrecognized configuration class"):
        AutoModelForCausalLM.from_config(tiny_config(left_out))  # type: ignore[no-untyped-call]


def test_the_demo_runs_without_the_test_kit_installed() -> None:
    """The transformers extra has neither hypothesis nor pytest."""
    pytest.importorskip("transformers")
    code = (
        "import sys; sys.modules['hypothesis'] = sys.modules['pytest'] = None; "
        "from ssm_rollback.cli import main; "
        "sys.exit(main(['demo', '--length', '4', '--model-type', 'mamba2']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "mismatches vs fresh decode  0" in done.stdout


# -- simulate --workload: prefix-snapshot placement (SPEC 13) --------------------------

PREFIX = ("simulate", "--workload", "branching", "--requests", "40", "--prefix-slots", "4,8")


def test_simulate_workload_prints_every_rule_and_the_trace_parameters() -> None:
    status, text = run(*PREFIX)
    assert status == 0
    for shown in ("workload branching", "trace parameters:", "samples: 4", "oracle", "declined"):
        assert shown in text
    for rule in ("app", "vllm-align", "sglang", "trtllm", "llamacpp"):
        for eviction in ("lru", "benefit"):
            assert f"{rule}/{eviction}" in text
    assert "4 shared slots:" in text
    assert "8 shared slots:" in text
    assert "x oracle@8 (clairvoyant)" in text  # the clairvoyant oracle at equal slots


def test_simulate_workload_json_is_one_object_and_seeded() -> None:
    status, text = run(*PREFIX, "--json", "--seed", "3")
    assert status == 0
    data = json.loads(text)
    assert data["params"]["seed"] == 3
    assert data["params"]["requests"] == 40
    assert {row["slots"] for row in data["results"]} == {4, 8}
    assert all(row["mismatches"] == 0 for row in data["results"])
    assert [row["label"] for row in data["clairvoyant"]] == ["oracle@4", "oracle@8"]
    assert all(row["mismatches"] == 0 for row in data["clairvoyant"])


def test_simulate_workload_jobs_print_the_same_results() -> None:
    status, alone = run(*PREFIX, "--json")
    assert status == 0
    status, shared = run(*PREFIX, "--json", "--jobs", "2")
    assert status == 0
    assert json.loads(shared) == json.loads(alone)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("simulate", "--prefix-slots", "4"), "--prefix-slots"),
        (("simulate", "--requests", "4"), "--requests"),
        (("simulate", "--jobs", "2"), "--jobs"),
        (("simulate", "--workload", "chess"), "--workload"),
        (("simulate", "--workload", "chat", "--jobs", "0"), "--jobs"),
        (("simulate", "--workload", "chat", "--jobs", "2.5"), "--jobs"),
        (("simulate", "--workload", "chat", "--prefix-slots", "4,x"), "--prefix-slots"),
        (("simulate", "--workload", "chat", "--prefix-slots", "4,4"), "--prefix-slots"),
        (("simulate", "--workload", "chat", "--requests", "0"), "--requests"),
        (("simulate", "--workload", "chat", "--trace", "t.jsonl"), "--trace"),
    ],
)
def test_simulate_workload_bad_flags_exit_2_naming_the_flag(
    argv: tuple[str, ...], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(*argv)[0] == 2
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize(
    "given",
    [
        ("--depths", "7"),
        ("--sequences", "2"),
        ("--tokens", "50"),
        ("--boundary-rate", "0.9"),
        ("--rollback-rate", "0.5"),
        ("--back", "9"),
        ("--thinking-rate", "0.5"),
        ("--accept-rate", "0.5"),
        ("--spec-tokens", "3"),
        ("--model", "jamba-1.5-mini"),
        ("--config", "config.json"),
        ("--tp", "2"),
        ("--dtype", "float32"),
        ("--layout", "sglang"),
        ("--conv-dtype", "float32"),
        ("--ssm-dtype", "float32"),
    ],
)
def test_simulate_workload_refuses_the_depth_simulations_flags(
    given: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Beside --workload they changed nothing: the same JSON, exit 0, not a word."""
    assert run(*PREFIX, *given)[0] == 2
    assert f"{given[0]}: sets the depth simulation" in capsys.readouterr().err


@pytest.mark.parametrize(
    "given",
    [
        ("--depths", "0,1,2,4,8,16"),
        ("--model", "nemotron-h-8b"),
        ("--tokens", "512"),
        ("--layout", "vllm"),
        ("--tp", "1"),
        ("--spec-tokens", "0"),
    ],
)
def test_simulate_workload_refuses_a_depth_flag_given_its_default_value(
    given: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Compared with their defaults, these passed: given, and silently ignored."""
    assert run(*PREFIX, *given)[0] == 2
    assert f"{given[0]}: sets the depth simulation" in capsys.readouterr().err


def test_simulate_refuses_a_repeated_depth(capsys: pytest.CaptureFixture[str]) -> None:
    """``--depths 4,4,4`` simulated and printed depth 4 three times."""
    assert run("simulate", "--depths", "4,4,4")[0] == 2
    assert "--depths: must not repeat a depth, got '4,4,4'" in capsys.readouterr().err


def test_simulate_workload_plot_without_matplotlib_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "matplotlib" else real(name, *rest),
    )
    assert run(*PREFIX, "--plot", str(tmp_path / "p.png"))[0] == 2
    assert "--plot: needs matplotlib" in capsys.readouterr().err


def test_simulate_workload_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "prefix.png"
    status, text = run(*PREFIX, "--plot", str(path))
    assert status == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "plot written to" in text
