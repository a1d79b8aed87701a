"""The docs import only the public API: a reader's copy must survive a private rename."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
# ``from ssm_rollback.x._y import`` or ``import ssm_rollback._x``: any private module on the way.
_PRIVATE = re.compile(r"^\s*(?:from|import)\s+ssm_rollback(?:\.\w+)*\._\w*", re.MULTILINE)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_examples_import_only_public_modules(page: Path) -> None:
    assert _PRIVATE.findall(page.read_text(encoding="utf-8")) == []


def test_the_pattern_catches_a_private_import() -> None:
    assert _PRIVATE.findall("from ssm_rollback.testing._tiny import tiny_model\n")
    assert not _PRIVATE.findall("from ssm_rollback.testing import tiny_config\n")
