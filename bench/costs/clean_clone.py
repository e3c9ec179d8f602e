"""The bench from a clean clone (issue 86): `make loop` twice and `make prepare-test BATCH=third`, timed.

Clones this repository's HEAD into a temporary folder (``git clone``: what a user gets), then, with an
empty ``ADWM_HOME`` each time, runs in the clone what the make targets run, with the project's installed
environment (``--venv``: install excluded; the clone's own code is read, its folder first on the path):

- ``make loop``: restores bench/store and reads every development cell (the world models the store
  does not keep whole are trained again, and checked against the digests it keeps);
- ``make loop`` again on the same root: everything reused;
- ``make prepare-test BATCH=third`` on another empty root: the third batch's upstream restored,
  nothing of it computed (not run, and said so, where the store lacks some of it: it would compute
  hours of upstream, not time a restore).

Each command's wall time, the loop's per-cell seconds (its bench.json) and whether its rows equal
those committed in bench/results/bench.json, figure by figure → bench/results/clean_clone.{json,md}.
Usage: ``python -m bench.costs.clean_clone [--venv .venv] [--keep] [--keep-home DIR] [--prepare-only] [CELL ...]``
(nothing else should run meanwhile). ``--prepare-only``: only ``make prepare-test BATCH=third``, timed
into bench/results/clean_clone_prepare.{json,md} (the loops' report is left as it is). Named cells: the two loops over those development cells only (where the store is
complete for them alone), their rows compared, and no test batch prepared. ``--keep``: the files the
loops wrote in the clone (bench.md/json, the manifest, the recommended estimate's calibration, the
README's results block, …) are copied into this repository as the second loop left them (the reports
keyed by the calibration the first loop wrote, so a later clone's first loop reads the same): the table
as a clean clone measured it, which the next clean clone's rows are compared with. ``--keep-home
DIR``: the loops' artifact root is kept there, so a candidate's loop (``make loop SET=…``) reuses
its stages, with the loops' logs beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import REPO, RESULTS, bench_cells, development_cells, machine
from bench.store import missing

GRADES = ("rho", "nmae", "coverage", "decided", "precision")


def timed(command: list[str], cwd: Path, home: Path, log: Path) -> float:
    """``command`` run in ``cwd`` with ``ADWM_HOME=home``, its output to ``log``: its wall seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADWM_", "PREFECT_", "MLFLOW_"))}
    env.update(ADWM_HOME=str(home), PREFECT_HOME=str(home / "prefect"), PYTHONPATH=str(cwd))
    started = time.perf_counter()
    with open(log, "w") as output:
        subprocess.run(command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - started


def changed_files(clone: Path) -> list[str]:
    """The files a command changed or added in ``clone``'s working tree (git's porcelain status)."""
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone,
                            capture_output=True, text=True, check=True).stdout
    return [line[3:] for line in status.splitlines() if line[:2] in (" M", "??", "M ", "A ")]


def differences(measured: dict, committed: dict, cells: list[str]) -> list[str]:
    """Every figure of the clone's bench.json rows of ``cells`` that is not the committed one's (to 1e-9)."""
    found = [f"{cell}: no committed row (a cell added since)" for cell in cells if cell not in committed["rows"]]
    for cell, row in committed["rows"].items():
        if cell not in cells:
            continue
        mine = measured["rows"].get(cell)
        if mine is None:
            found.append(f"{cell}: not read")
            continue
        for estimator, grades in (row.get("estimators") or {}).items():
            for grade in GRADES:
                a, b = grades.get(grade), (mine.get("estimators") or {}).get(estimator, {}).get(grade)
                if not (a == b or (a is not None and b is not None and (abs(a - b) <= 1e-9 or a != a and b != b))):
                    found.append(f"{cell} {estimator} {grade}: {a} committed, {b} here")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", default=str(REPO / ".venv"), help="the installed environment (install excluded)")
    parser.add_argument("--keep", action="store_true",
                        help="copy the files the loops wrote in the clone into this repository")
    parser.add_argument("--keep-home", type=Path, help="a path that does not exist yet: the loops' ADWM_HOME is "
                        "moved there afterwards (a candidate's loop then reuses its stages)")
    parser.add_argument("--prepare-only", action="store_true",
                        help="only time `make prepare-test BATCH=third` (clean_clone_prepare.{json,md})")
    parser.add_argument("cells", nargs="*", help="development cells to loop over (default: all; then no test batch)")
    args = parser.parse_args()
    if args.keep_home and args.keep_home.exists():
        parser.error(f"--keep-home {args.keep_home} exists; name a new path (the loops' artifact root is moved there)")
    if args.prepare_only and (lacking := missing(bench_cells(["third"]))):  # refused before the clone
        parser.error(f"the store lacks {sum(map(len, lacking.values()))} upstream stage(s) of the third batch "
                     f"({', '.join(lacking)}): prepare-test would compute them, not time a restore")
    cells = args.cells or development_cells()
    committed = json.loads((RESULTS / "bench.json").read_text())
    with tempfile.TemporaryDirectory(prefix="adwm-clean-clone-") as scratch:
        root = Path(scratch)
        clone = root / "clone"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True,
                              check=True).stdout.strip()
        python = [str(Path(args.venv) / "bin" / "python"), "-m"]
        if args.prepare_only:
            return prepare_only(python, clone, root, head)
        seconds = {"loop": timed([*python, "bench.loop", *args.cells], clone, root / "home", root / "loop.log")}
        measured = json.loads((clone / "bench" / "results" / "bench.json").read_text())  # the first loop's rows
        seconds["loop again"] = timed([*python, "bench.loop", *args.cells], clone, root / "home", root / "loop-again.log")
        written = {name: (clone / name).read_bytes() for name in changed_files(clone)} if args.keep else {}
        lacking = {} if args.cells else missing(bench_cells(["third"]))
        if not args.cells and not lacking:
            seconds["prepare-test third"] = timed([*python, "bench.ledger", "prepare", "third"], clone,
                                                  root / "home-third", root / "prepare.log")
        moved = differences(measured, committed, cells)
        restored = [line for line in (root / "loop.log").read_text().splitlines()
                    if "trained again" in line or line.startswith("restored ")]
        if args.keep_home:  # the artifact root, and beside it the commands' logs (each stage's start is stamped)
            shutil.move(root / "home", args.keep_home)
            for log in root.glob("*.log"):
                shutil.copy(log, Path(args.keep_home) / log.name)
    if args.keep:
        for name, content in written.items():
            (REPO / name).write_bytes(content)
    report = {"commit": head, "machine": machine(), "cells_read": cells, "seconds": seconds,
              "third_batch_lacking": lacking, "kept": sorted(written),
              "cells": {c: r.get("seconds") for c, r in measured["rows"].items()},
              "rows_equal_committed": not moved, "differences": moved, "world_models": restored}
    (RESULTS / "clean_clone.json").write_text(json.dumps(report, indent=2))
    targets = {"loop": 75 * 60, "loop again": 3 * 60, "prepare-test third": 10 * 60}
    lines = [f"# The bench from a clean clone of `{head}`", "", __doc__.split("\n\n")[1].replace("\n", " "), "",
             *([f"Only {', '.join(args.cells)}: the cells whose upstream the store holds complete today; the "
                f"targets are for all {len(development_cells())}.", ""] if args.cells else []),
             "| command | wall | target |", "|---|---|---|",
             *[f"| `make {name.removesuffix(' again')}`{', again' * name.endswith(' again')} | {s / 60:.1f} min | "
               f"≤ {targets[name] / 60:.0f} min |" for name, s in seconds.items()],
             *([f"| `make prepare-test BATCH=third` | not run: the store lacks {sum(map(len, lacking.values()))} "
                f"upstream stage(s) of {len(lacking)} of its cells | ≤ 10 min |"] if lacking else []),
             "", "Per cell, the loop's seconds (restore excluded):", "", "| cell | seconds |", "|---|---|",
             *[f"| {c} | {s:.0f} |" for c, s in report["cells"].items() if s is not None], "",
             "Rows against bench/results/bench.json as committed: "
             + ("every figure equal." if not moved else f"{len(moved)} figure(s) differ:"),
             *[f"- {d}" for d in moved[:40]], "",
             *([f"Kept (`--keep`), as the second loop left them: {', '.join(report['kept'])}; they are the "
                "committed table now.", ""] if args.keep else []),
             "World models:", *[f"- {w}" for w in restored], "",
             f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "clean_clone.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def prepare_only(python: list[str], clone: Path, root: Path, head: str) -> None:
    """``make prepare-test BATCH=third`` alone in ``clone`` on an empty root, timed, with the world
    models it trained again (each checked against the store's digests) →
    bench/results/clean_clone_prepare.{json,md}."""
    seconds = timed([*python, "bench.ledger", "prepare", "third"], clone, root / "home-third", root / "prepare.log")
    trained = [line for line in (root / "prepare.log").read_text().splitlines() if "trained again" in line]
    report = {"commit": head, "machine": machine(), "seconds": {"prepare-test third": seconds}, "world_models": trained}
    (RESULTS / "clean_clone_prepare.json").write_text(json.dumps(report, indent=2))
    lines = [f"# `make prepare-test BATCH=third` from a clean clone of `{head}`", "",
             "An empty `ADWM_HOME`; the third batch's upstream restored from bench/store, the world models it "
             "keeps only as digests trained again and checked against them; nothing else ran.", "",
             f"Wall: **{seconds / 60:.1f} min** (target ≤ 10 min).", "", "World models trained again:",
             *[f"- {line}" for line in trained], "", f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "clean_clone_prepare.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
