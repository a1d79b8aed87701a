"""``simulate --plot``: the file checked before the run, the depth plot drawn after it."""

from __future__ import annotations

import importlib.util
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import shown
from ._common import FlagError

if TYPE_CHECKING:
    from .._apps.simulate import DepthResult

__all__ = ["check_plot", "plot_depths"]


def check_plot(path: str) -> None:
    """Refuse a --plot that cannot be written before the simulation runs, not after: a
    missing or read-only folder, a folder, a FIFO or a device, a file it cannot replace."""
    if importlib.util.find_spec("matplotlib") is None:
        raise FlagError("--plot", "needs matplotlib: pip install 'ssm-rollback[plot]'")
    if not path:
        raise FlagError("--plot", "must name a file, got ''")
    # A symlink is written through: its target's folder is the one that must exist (a
    # dangling link into a missing folder failed only after the simulation).
    folder = Path(os.path.realpath(path) if os.path.islink(path) else path).parent
    # os.path.isdir: Path.is_dir raises for a name too long or with a NUL in it.
    if not os.path.isdir(folder):
        raise FlagError("--plot", f"folder {shown(str(folder))} does not exist")
    if os.path.isdir(path):
        raise FlagError("--plot", f"{shown(path)} is a folder, not a file name")
    if not os.access(folder, os.W_OK):
        raise FlagError("--plot", f"folder {shown(str(folder))} is not writable")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return  # a new file in a writable folder
    except (OSError, ValueError) as error:  # a symlink loop, a NUL in the name
        raise FlagError("--plot", f"cannot write {shown(path)}: {_reason(error)}") from None
    if not stat.S_ISREG(mode):
        raise FlagError("--plot", f"{shown(path)} is not a regular file (a FIFO or a device?)")
    if not os.access(path, os.W_OK):
        raise FlagError("--plot", f"{shown(path)} is not writable")


def _reason(error: Exception) -> str:
    """Why writing failed: the OS's words, or the error's type where it has none."""
    return getattr(error, "strerror", None) or type(error).__name__


def plot_depths(path: str, results: list[DepthResult], per_slot: int, model_type: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    depths = [r.depth for r in results]
    figure, served_axis = pyplot.subplots(figsize=(7, 4))
    served_axis.plot(depths, [100 * r.served_fraction for r in results], "o-", color="tab:blue")
    served_axis.set_xlabel("ring depth (snapshot slots per sequence)")
    served_axis.set_ylabel("rollbacks served (%)", color="tab:blue")
    served_axis.set_ylim(0, 105)
    memory_axis = served_axis.twinx()
    memory = [d * per_slot / 2**20 for d in depths]
    memory_axis.plot(depths, memory, "s--", color="tab:orange")
    memory_axis.set_ylabel("snapshot memory per sequence (MiB)", color="tab:orange")
    served_axis.set_title(f"{model_type}: rollbacks served vs snapshot memory")
    figure.tight_layout()
    try:
        # format="png" whatever the suffix: --plot promises a PNG, and an unknown
        # suffix would otherwise be a matplotlib error after the whole run.
        figure.savefig(path, dpi=100, format="png")
    except OSError as error:
        raise FlagError("--plot", f"cannot write {shown(path)}: {_reason(error)}") from None
    finally:
        pyplot.close(figure)
