"""The public surface is exactly what docs/api.md lists."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

API = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def documented(module: str) -> set[str]:
    """Names bulleted under the ``## `module` `` heading of docs/api.md."""
    text = API.read_text(encoding="utf-8")
    section = re.search(rf"^## `{re.escape(module)}`\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section is not None, f"docs/api.md has no section for {module}"
    names: set[str] = set()
    for bullet in re.findall(r"^- (.*?)(?: - |:\n|: as above)", section.group(1), re.M | re.S):
        names.update(re.findall(r"`(\w+)`", bullet))
    return names


MODULES = sorted(re.findall(r"^## `([\w.]+)`", API.read_text(encoding="utf-8"), re.M))


def test_every_public_module_is_documented() -> None:
    assert {
        "ssm_rollback",
        "ssm_rollback.backends.fake",
        "ssm_rollback.pool",
        "ssm_rollback.rollback",
        "ssm_rollback.testing",
    } <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_all_is_exactly_what_the_docs_list(module: str) -> None:
    if module.endswith((".torch", ".distributed")):
        pytest.importorskip("torch")
    if module.endswith(".transformers"):
        pytest.importorskip("transformers")
    if module.endswith(".vllm") and importlib.util.find_spec("vllm") is None:
        pytest.skip("needs the vllm extra (its own environment)")
    imported = importlib.import_module(module)
    assert set(imported.__all__) == documented(module)
    assert len(imported.__all__) == len(set(imported.__all__))
    for name in imported.__all__:
        assert getattr(imported, name) is not None


def test_the_core_imports_neither_torch_nor_transformers() -> None:
    import subprocess
    import sys

    code = (
        "import sys, ssm_rollback; "
        "bad = {'torch', 'transformers', 'hypothesis'} & set(sys.modules); "
        "sys.exit(f'core imported {bad}' if bad else 0)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
