"""Every Python example in docs/ and the README runs, so the docs never rot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(page: Path) -> list[str]:
    return _BLOCK.findall(page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_examples_run(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for module in ("torch", "transformers"):
        if f"import {module}" in text or f"from {module} " in text:
            pytest.importorskip(module)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for index, block in enumerate(python_blocks(page)):
        code = compile(block, f"{page.name}[block {index}]", "exec")
        exec(code, namespace)  # blocks of one page share a namespace, as a reader's would


def test_the_docs_have_examples() -> None:
    assert sum(len(python_blocks(page)) for page in PAGES) >= 8
