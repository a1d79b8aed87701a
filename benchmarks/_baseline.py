"""The library as it was at another git revision, importable beside today's: ``--baseline-rev``.

Not a benchmark: the benchmarks that take ``--baseline-rev REV`` import it.
(Run as a script, as the CI's smoke pass runs every file here, it does nothing.)

``git archive REV src/ssm_rollback`` is extracted into a folder and the
package renamed ``ssm_rollback_baseline``. Its modules, in subpackages too,
import each other relatively, so the new name is all it needs. A few import
``ssm_rollback.`` absolutely (those under ``testing/``, ``__main__``): under
the new name they would run today's code, not the baseline's. So the
benchmarks take only the public API - the top level, ``backends.torch``,
``distributed`` - through ``Baseline.take``, which checks that what it hands
out was defined in the baseline package and that no baseline module loaded
so far imports ``ssm_rollback`` absolutely.

``Baseline.take(obj)`` returns the baseline's object of the same name, typed
as today's ``obj``: it is the same public API at another revision, so the
benchmarks run today's and the baseline's through the same code. ``TODAY``
has the same ``take``, returning today's object itself.
"""

from __future__ import annotations

import ast
import atexit
import importlib
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Protocol, TypeVar

PACKAGE = "ssm_rollback_baseline"
_REPO = Path(__file__).resolve().parent.parent


class _Named(Protocol):
    __name__: str


T = TypeVar("T", bound=_Named)


class Library:
    """Today's library: ``take(obj)`` is ``obj``."""

    label = "today"

    def take(self, today: T, module: str = "") -> T:
        """The library's ``today.__name__``, from its top level or from its ``module``."""
        return today

    def has(self, today: _Named, module: str = "") -> bool:
        """Whether the library has ``today.__name__`` (at its top level or in ``module``)."""
        return True


TODAY = Library()


class Baseline(Library):
    """The library extracted by ``extract(rev, folder)``, imported as ``ssm_rollback_baseline``.

    Only one baseline can be imported per process.
    """

    def __init__(self, rev: str, folder: Path) -> None:
        loaded = sys.modules.get(PACKAGE)
        if loaded is not None and Path(loaded.__path__[0]).parent != folder:
            raise RuntimeError(f"another {PACKAGE} is already imported from {loaded.__path__[0]}")
        self.label = rev
        self.folder = folder
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        importlib.import_module(PACKAGE)
        self._checked: set[str] = set()

    def take(self, today: T, module: str = "") -> T:
        """The baseline's ``today.__name__``, typed as today's ``today``.

        Raises ``AttributeError`` if the baseline has no such name (it is
        older than the API the benchmark times), ``RuntimeError`` if the
        object, or a module the baseline imported, comes from today's package.
        """
        name = today.__name__
        where = importlib.import_module(f"{PACKAGE}.{module}" if module else PACKAGE)
        value: T = getattr(where, name)
        home = getattr(value, "__module__", "")
        if not home.startswith(PACKAGE):
            raise RuntimeError(f"the baseline's {name} comes from {home}, not from {PACKAGE}")
        self._check_imports()
        return value

    def has(self, today: _Named, module: str = "") -> bool:
        """Whether the baseline has ``today.__name__`` (at its top level or in ``module``)."""
        try:
            where = importlib.import_module(f"{PACKAGE}.{module}" if module else PACKAGE)
        except ModuleNotFoundError:
            return False
        return hasattr(where, today.__name__)

    def _check_imports(self) -> None:
        """No baseline module imported so far imports ``ssm_rollback`` (today's) absolutely."""
        for name, module in list(sys.modules.items()):
            ours = name == PACKAGE or name.startswith(PACKAGE + ".")
            if not ours or name in self._checked:
                continue
            self._checked.add(name)
            file = getattr(module, "__file__", None)
            if not file or not file.endswith(".py"):
                continue
            absolute = _absolute_imports(Path(file).read_text(encoding="utf-8"))
            if absolute:
                raise RuntimeError(
                    f"the baseline module {name} imports {', '.join(absolute)}: today's package, "
                    f"not the baseline's; time only the public API"
                )


def _absolute_imports(source: str) -> list[str]:
    """The ``ssm_rollback`` modules ``source`` imports absolutely, outside ``if TYPE_CHECKING``."""
    found: list[str] = []
    pending: list[ast.AST] = [ast.parse(source)]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending.extend(node.orelse)
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found += [n for n in names if n == "ssm_rollback" or n.startswith("ssm_rollback.")]
        pending.extend(ast.iter_child_nodes(node))
    return found


def extract(rev: str, into: Path) -> Path:
    """Write the package as it was at git revision ``rev`` to ``into / PACKAGE``; return ``into``.

    Needs git and this repository's history; exits with git's message if
    ``rev`` is not there.
    """
    try:
        archive = subprocess.run(
            ["git", "archive", rev, "src/ssm_rollback"],
            cwd=_REPO,
            capture_output=True,
            check=True,
        ).stdout
    except subprocess.CalledProcessError as error:
        detail = error.stderr.decode(errors="replace").strip()
        raise SystemExit(f"--baseline-rev {rev}: git archive failed: {detail}") from None
    except OSError as error:  # no git here
        raise SystemExit(f"--baseline-rev {rev}: cannot run git: {error}") from None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "src" / "ssm_rollback").rename(into / PACKAGE)
    return into


def baseline_package(rev: str) -> Baseline:
    """The library as it was at git revision ``rev``, importable beside today's.

    Extracted into a temporary folder, removed when the process exits.
    """
    folder = Path(tempfile.mkdtemp(prefix="ssm-rollback-baseline-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return Baseline(rev, extract(rev, folder))
