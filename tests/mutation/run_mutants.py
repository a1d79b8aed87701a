"""Apply each hand-written mutant of ``mutants.py`` to a copy of the repository and run its tests.

Usage (from the repository root, in the project's virtual environment)::

    HYPOTHESIS_PROFILE=ci python tests/mutation/run_mutants.py [--jobs 2] [--only NAME ...]
        [--module MODULE ...]

For every mutant: copy ``src/``, ``tests/``, ``docs/``, ``pyproject.toml`` and
``README.md`` into ``<workdir>/<name>``, replace the mutant's original snippet
(which must occur exactly once) in the copy, and run
``python -m pytest -x -q -p no:cacheprovider <its test files>`` there with
``PYTHONPATH=<copy>/src``. A pytest plugin loaded into that run writes the
file ``ssm_rollback`` was imported from; a run that imported any other copy
is an error, never a kill. Nothing under the checkout is modified.

A mutant is *killed* when pytest fails, *timeout* when it ran past the
per-mutant limit (counted as killed, and shown as such), *survived* when the
tests pass. Mutants marked equivalent in ``mutants.py`` are run too but left
out of the score. This file is not named ``test_*.py``: pytest never
collects it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mutant_base import Mutant
from mutants import MUTANTS

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("src", "tests", "docs", "pyproject.toml", "README.md")
PLUGIN_DIR = "_mutation_plugin"
PLUGIN = '''\
"""Record which ssm_rollback this pytest run imported (written by run_mutants.py)."""

import os


def pytest_configure(config):
    try:
        import ssm_rollback

        origin = ssm_rollback.__file__
    except Exception as error:  # a mutant that breaks the import is still a kill
        origin = f"import failed: {error!r}"
    with open(os.environ["MUTANT_ORIGIN_FILE"], "w", encoding="utf-8") as f:
        f.write(str(origin))
'''
FAILED = re.compile(r"^(FAILED|ERROR) (\S+)", re.MULTILINE)


def extract(dest: Path, rev: str, names: Sequence[str]) -> None:
    """Write ``names`` (those ``rev`` has) as they are at ``rev`` under ``dest``."""
    present = subprocess.run(
        ["git", "ls-tree", "--name-only", rev, *names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not present:
        return
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, *present],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def copy_repository(
    dest: Path, rev: str | None, overlay: Sequence[str], overlay_rev: str | None = None
) -> None:
    """A fresh copy of what the tests need: the work tree's, or ``rev``'s plus ``overlay``.

    The overlay comes from the work tree, or from ``overlay_rev`` when given.
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if rev is None:
        names: Sequence[str] = COPIED
    else:
        extract(dest, rev, COPIED)
        names = overlay
        if overlay_rev is not None:
            extract(dest, overlay_rev, overlay)
            names = ()
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.pyc", ".pytest_cache")
    for name in names:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore, dirs_exist_ok=True)
        elif source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    plugin = dest / PLUGIN_DIR
    plugin.mkdir()
    (plugin / "mutant_origin.py").write_text(PLUGIN, encoding="utf-8")


def apply_mutant(dest: Path, mutant: Mutant) -> str:
    """Mutate the copy; return why not (the code moved on) or ``""``."""
    path = dest / "src" / "ssm_rollback" / mutant.module
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    count = text.count(mutant.original)
    if count != 1:
        return f"the original snippet occurs {count} times in {mutant.module}, expected once"
    path.write_text(text.replace(mutant.original, mutant.replacement), encoding="utf-8")
    return ""


def run_one(
    mutant: Mutant | None,
    args: argparse.Namespace,
    selection: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
) -> dict[str, object]:
    """Copy, mutate, run; ``mutant=None`` is an unmutated run of ``selection``."""
    if mutant is None:
        tests, selector = list(selection[0]), list(selection[1])
        name = f"baseline-{abs(hash(selection)) % 10**8}"
    else:
        tests, selector, name = list(mutant.tests), list(mutant.select), mutant.name
    dest = args.workdir / name
    copy_repository(dest, args.rev, args.overlay, args.overlay_rev)
    stale = "" if mutant is None else apply_mutant(dest, mutant)
    if stale:
        shutil.rmtree(dest, ignore_errors=True)
        return {
            "name": name,
            "module": mutant.module if mutant else "-",
            "status": "error",
            "killer": "",
            "seconds": 0.0,
            "missing": [],
            "origin": "",
            "equivalent": mutant.equivalent if mutant else "",
            "tail": stale,
        }
    # A test file this tree does not have yet is left out (and shown in the output).
    missing = [t for t in tests if not (dest / t).exists()]
    tests = [t for t in tests if t not in missing]
    origin_file = dest / ".origin"
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(dest / "src"), str(dest / PLUGIN_DIR)]),
        MUTANT_ORIGIN_FILE=str(origin_file),
        HYPOTHESIS_PROFILE=os.environ.get("HYPOTHESIS_PROFILE", "ci"),
        OMP_NUM_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "mutant_origin",
        *tests,
        *selector,
    ]
    start = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=dest, env=env, capture_output=True, text=True, timeout=args.timeout
        )
    except subprocess.TimeoutExpired:
        status, rc, output = "timeout", None, ""
    else:
        rc, output = done.returncode, done.stdout + done.stderr
        status = "survived" if rc == 0 else "killed"
    seconds = round(time.monotonic() - start, 1)
    origin = origin_file.read_text(encoding="utf-8") if origin_file.exists() else "(not written)"
    inside = origin.startswith((str(dest / "src"), "import failed"))
    if status != "timeout" and not inside:
        status = "error"  # the run did not test this copy: never a kill
    if status == "killed" and rc not in (1, 2):
        status = "error"  # pytest itself broke (usage error, internal error)
    killer = ""
    if status == "killed":
        found = FAILED.search(output)
        killer = found.group(2) if found else f"pytest exit {rc}"
    shutil.rmtree(dest, ignore_errors=True)
    return {
        "name": name,
        "module": "-" if mutant is None else mutant.module,
        "status": status,
        "killer": killer,
        "seconds": seconds,
        "missing": missing,
        "origin": origin,
        "equivalent": "" if mutant is None else mutant.equivalent,
        "tail": output[-3000:] if status in ("error", "survived") else "",
    }


def markdown_table(results: list[dict[str, object]]) -> str:
    """The results as a markdown table: name, module, result, killing test or argument."""
    lines = ["| mutant | module | result | killing test / why equivalent |", "|---|---|---|---|"]
    for r in results:
        status = str(r["status"])
        note = str(r["killer"])
        if r["equivalent"]:
            status = "equivalent" if status == "survived" else f"equivalent? ({status})"
            note = str(r["equivalent"])
        lines.append(f"| `{r['name']}` | `{r['module']}` | {status} | {note} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="parallel runs (default 2)")
    parser.add_argument("--only", nargs="*", default=[], help="run only these mutants")
    parser.add_argument(
        "--module",
        nargs="*",
        default=[],
        help="run only the mutants of these modules (paths under src/ssm_rollback)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mutants"))
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--markdown", type=Path, help="also write the table here, as markdown")
    parser.add_argument("--rev", help="copy this commit instead of the work tree (git archive)")
    parser.add_argument(
        "--overlay",
        nargs="*",
        default=[],
        help="with --rev: work-tree files copied over the commit's (new tests)",
    )
    parser.add_argument(
        "--overlay-rev",
        help="with --rev: take the --overlay files from this commit instead of the work tree",
    )
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--check",
        action="store_true",
        help="run nothing: check that each chosen mutant's snippet occurs exactly once "
        "in the work tree (or --rev) and that its test files exist",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        help="run nothing: report the results of these --json files, later ones winning",
    )
    args = parser.parse_args(argv)
    if args.overlay_rev is not None and args.rev is None:
        raise SystemExit("--overlay-rev needs --rev")
    if args.rev is not None:  # one commit for every copy, even if the branch moves meanwhile
        args.rev = _commit(args.rev)
        print(f"mutating commit {args.rev}")
    if args.overlay_rev is not None:
        args.overlay_rev = _commit(args.overlay_rev)
        print(f"overlay {' '.join(args.overlay)} from commit {args.overlay_rev}")

    names = [m.name for m in MUTANTS]
    if len(set(names)) != len(names):
        raise SystemExit("mutant names must be unique")
    if args.list:
        for m in MUTANTS:
            print(f"{m.name:40} {m.module:32} {'equivalent' if m.equivalent else ''}")
        return 0
    if args.merge:
        merged: dict[str, dict[str, object]] = {}
        for path in args.merge:  # later files win: a re-run after new tests replaces the first
            for result in json.loads(path.read_text(encoding="utf-8")):
                merged[result["name"]] = result
        order = {name: k for k, name in enumerate(names)}
        return report(sorted(merged.values(), key=lambda r: order.get(str(r["name"]), 0)), args)
    unknown = set(args.only) - set(names)
    if unknown:
        raise SystemExit(f"unknown mutants: {sorted(unknown)}")
    unknown = set(args.module) - {m.module for m in MUTANTS}
    if unknown:
        raise SystemExit(f"no mutants of these modules: {sorted(unknown)}")
    chosen = [
        m
        for m in MUTANTS
        if (not args.only or m.name in args.only) and (not args.module or m.module in args.module)
    ]

    if args.check:
        return check(chosen, args)

    jobs = max(1, min(args.jobs, 2))  # at most two: the machine is shared
    results: list[dict[str, object]] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        # Sanity first: every test selection passes unmutated, importing the copy's package.
        selections = sorted({(m.tests, m.select) for m in chosen})
        baselines = [pool.submit(run_one, None, args, s) for s in selections]
        broken = False
        for selection, future in zip(selections, baselines, strict=True):
            base = future.result()
            print(f"baseline {' '.join(selection[0] + selection[1])}: {base['status']}")
            print(f"  ssm_rollback imported from {base['origin']}", flush=True)
            if base["missing"]:
                print(f"  left out, not in this tree: {base['missing']}")
            if base["status"] != "survived":
                print(base["tail"])
                broken = True
        if broken:
            return 2
        futures = [pool.submit(run_one, m, args) for m in chosen]
        for future in futures:
            result = future.result()
            results.append(result)
            print(f"{result['name']:40} {result['status']:9} {result['seconds']:7}s", flush=True)
    return report(results, args)


def _source(module: str, rev: str | None) -> str:
    """The text of ``src/ssm_rollback/<module>`` in the work tree or at ``rev`` ("" if absent)."""
    relative = f"src/ssm_rollback/{module}"
    if rev is None:
        path = ROOT / relative
        return path.read_text(encoding="utf-8") if path.is_file() else ""
    shown = subprocess.run(
        ["git", "show", f"{rev}:{relative}"], cwd=ROOT, capture_output=True, text=True
    )
    return shown.stdout if shown.returncode == 0 else ""


def check(chosen: Sequence[Mutant], args: argparse.Namespace) -> int:
    """Report every mutant whose snippet is not there exactly once, or whose tests are missing.

    No copy, no test run: seconds, so a stale snippet is found as soon as the code moves.
    """
    texts: dict[str, str] = {}
    stale = 0
    for m in chosen:
        if m.module not in texts:
            texts[m.module] = _source(m.module, args.rev)
        problems = []
        count = texts[m.module].count(m.original)
        if count != 1:
            problems.append(f"snippet occurs {count} times")
        elif m.original == m.replacement:
            problems.append("replacement equals the original")
        missing = [t for t in m.tests if not (ROOT / t).exists()]
        if missing:
            problems.append(f"test files missing: {missing}")
        if problems:
            stale += 1
            print(f"STALE {m.name:40} {m.module:32} {'; '.join(problems)}")
    modules = sorted({m.module for m in chosen})
    print(f"{len(chosen) - stale} of {len(chosen)} mutants apply ({len(modules)} modules)")
    return 1 if stale else 0


def _commit(rev: str) -> str:
    """``rev`` as a full commit id."""
    return subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def report(results: list[dict[str, object]], args: argparse.Namespace) -> int:
    """Print the table and the score; write the JSON and markdown files asked for."""
    print()
    print(f"{'mutant':40} {'module':32} {'result':10} killing test")
    for r in results:
        status = str(r["status"])
        if r["equivalent"]:
            status = "equivalent" if status == "survived" else f"EQUIV?{status}"
        print(f"{r['name']!s:40} {r['module']!s:32} {status:10} {r['killer']}")
    meaningful = [r for r in results if not r["equivalent"]]
    killed = [r for r in meaningful if r["status"] in ("killed", "timeout")]
    timeouts = [r for r in meaningful if r["status"] == "timeout"]
    errors = [r for r in results if r["status"] == "error"]
    survived = [r for r in meaningful if r["status"] == "survived"]
    equivalent = [r for r in results if r["equivalent"]]
    score = 100.0 * len(killed) / len(meaningful) if meaningful else 0.0
    print()
    print(
        f"score: {len(killed)}/{len(meaningful)} meaningful mutants killed ({score:.1f}%), "
        f"{len(timeouts)} of them by timeout; {len(equivalent)} equivalent left out"
    )
    for r in survived:
        print(f"SURVIVED {r['name']} ({r['module']})")
    for r in errors:
        print(f"ERROR {r['name']} (ssm_rollback from {r['origin']}):\n{r['tail']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(markdown_table(results), encoding="utf-8")
    return 0 if not errors and not survived else 1


if __name__ == "__main__":
    sys.exit(main())
