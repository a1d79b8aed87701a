"""The package's layout holds: no import circle, layers that point one way, one home per rule.

- every module imports first in a fresh interpreter (a circle shows up as a module that
  cannot be imported before its partner);
- no private module file at the top level but ``_errors.py``;
- ``_core/`` imports nothing of the package above it, and nothing but ``attrs`` outside
  the standard library;
- the apps and the CLI import only public names (public modules, the exception family)
  or their own layer;
- nothing outside the ring (``_core/ring/``) reads the ring's private fields.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import ssm_rollback
from ssm_rollback import SsmDecodeRing

PACKAGE = Path(ssm_rollback.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> list[str]:
    return sorted(_module_name(p) for p in PACKAGE.rglob("*.py"))


def _imports(path: Path) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """``(line, absolute module, names)`` for every import statement of ``path``."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            names = tuple(alias.name for alias in node.names)
            # ``from package import module`` imports the module.
            submodules = [n for n in names if f"{target}.{n}" in _ALL_MODULES]
            if submodules:
                for name in submodules:
                    yield node.lineno, f"{target}.{name}", ()
                names = tuple(n for n in names if n not in submodules)
                if not names:
                    continue
            yield node.lineno, target, names


_ALL_MODULES = frozenset(_modules())

# Third-party packages the preloader imports before forking: an import circle can only run
# through the package's own modules, so loading these first hides none, and each child then
# imports one module of ours in a few milliseconds instead of a few seconds.
_PRELOAD = textwrap.dedent(
    """
    import importlib, os, sys, traceback
    for name in ("attrs", "numpy", "torch", "torch.distributed", "transformers",
                 "transformers.cache_utils", "hypothesis", "pytest", "xgrammar", "llguidance"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    assert not any(m == "ssm_rollback" or m.startswith("ssm_rollback.") for m in sys.modules)
    failed = []
    for name in sys.argv[1:]:
        pid = os.fork()
        if pid == 0:
            try:
                importlib.import_module(name)
            except ImportError as error:
                if getattr(error, "name", None) in ("xgrammar", "llguidance", "matplotlib", "vllm"):
                    os._exit(0)  # an optional extra this machine lacks
                traceback.print_exc()
                os._exit(1)
            except BaseException:
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if status:
            failed.append(name)
    print("FAILED:" + ",".join(failed))
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="forks a fresh import per module")
def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    modules = [m for m in _modules() if m != "ssm_rollback.__main__"]  # runs the CLI
    done = subprocess.run(
        [sys.executable, "-c", _PRELOAD, *modules],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    failed = done.stdout.strip().rpartition("FAILED:")[2]
    assert failed == "", f"modules that fail as the first import: {failed}\n{done.stderr}"


def test_the_preloaded_check_catches_a_circle(tmp_path: Path) -> None:
    """The check bites: two modules that import each other's names fail as first imports."""
    pkg = tmp_path / "circle"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import B\nA = 1\n")
    (pkg / "b.py").write_text("from .a import A\nB = 2\n")
    done = subprocess.run(
        [sys.executable, "-c", _PRELOAD, "circle.a", "circle.b"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": ""},
    )
    assert done.stdout.strip().endswith("FAILED:circle.a,circle.b"), done.stderr


def test_no_private_module_file_at_the_top_level_but_the_errors() -> None:
    top = sorted(p.name for p in PACKAGE.glob("_*.py"))
    assert top == ["__init__.py", "__main__.py", "_errors.py"]


_CORE = "ssm_rollback._core"
_CORE_MAY_IMPORT = ("__future__", "attrs", "ssm_rollback._errors", _CORE)


def _stdlib(module: str) -> bool:
    return module.partition(".")[0] in sys.stdlib_module_names


def test_the_core_imports_nothing_above_it() -> None:
    found = []
    for path in (PACKAGE / "_core").rglob("*.py"):
        for line, module, _ in _imports(path):
            allowed = module.startswith(_CORE_MAY_IMPORT) or _stdlib(module)
            if not allowed:
                found.append(f"{path.relative_to(PACKAGE)}:{line} imports {module}")
    assert found == []


def _public(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split("."))


# The application layer: the apps use the library's public names (and the exception family,
# whose names the top level re-exports); the CLI runs the apps.
_OWN = {"_apps": ("ssm_rollback._apps",), "cli": ("ssm_rollback.cli", "ssm_rollback._apps")}


@pytest.mark.parametrize("layer", sorted(_OWN))
def test_apps_and_cli_import_only_public_names(layer: str) -> None:
    found = []
    for path in (PACKAGE / layer).rglob("*.py"):
        for line, module, names in _imports(path):
            if not module.startswith("ssm_rollback") or module.startswith(_OWN[layer]):
                continue
            where = f"{path.relative_to(PACKAGE)}:{line}"
            if module == "ssm_rollback._errors":
                continue
            if not _public(module):
                found.append(f"{where} imports private module {module}")
                continue
            exported = set(getattr(sys.modules.get(module) or _load(module), "__all__", ()))
            private = [n for n in names if n not in exported]
            if private:
                found.append(f"{where} imports {private} from {module}, not in its __all__")
    assert found == []


def _load(module: str) -> object:
    import importlib

    return importlib.import_module(module)


def _ring_private_names() -> frozenset[str]:
    names = {name for name in vars(SsmDecodeRing) if name.startswith("_")}
    names |= {f"_{field.name.lstrip('_')}" for field in SsmDecodeRing.__attrs_attrs__}
    return frozenset(n for n in names if not n.startswith("__"))


def test_nothing_outside_the_ring_reads_its_private_fields() -> None:
    """A ``name._field`` read of one of the ring's private names, outside ``_core/ring/``,
    where ``name`` is not ``self``/``cls`` (other classes may have fields of the same name)."""
    private = _ring_private_names()
    assert {"_newest", "_cursor", "_positions", "_tickets", "_capacity"} <= private
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent == PACKAGE / "_core" / "ring":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in private
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} reads .{node.attr}")
            if isinstance(node, ast.Constant) and node.value in private:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} names {node.value!r}")
    assert found == []


_ORDER_MARKS = ("noqa: E402", "isort: skip", "after the public module")


def test_tests_and_benchmarks_carry_no_import_order_workarounds() -> None:
    root = PACKAGE.parent.parent
    found = []
    paths = [*root.glob("tests/*.py"), *root.glob("benchmarks/*.py"), *PACKAGE.rglob("*.py")]
    for path in paths:
        if path.name == "test_layout.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if any(
                mark in line for mark in ("noqa: E402", "isort: skip", "after the public module")
            ):
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == []
