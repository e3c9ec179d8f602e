"""The bench's measured errors, shipped with the package for the recommended estimate
(adwm_core/ope/statistics/bench_calibration.json, read by ope/statistics/recommend.py; issue 73).

`python -m bench.calibrate [--from-main-results]`: per development cell with a finished report under today's code, each
estimator's seed-mean Ĵ and the ground truth J at every point, the environment's declared return
range and the share of π_e's imagined steps the log answered (the bench loop runs it after a
default run). `python -m bench.calibrate --from-main-results`: the same from the curves of
bench/results/main_results.json, the only per-point figures committed before the loop's first run
(their commit is recorded, and the recommended estimate names it). Either way it then grades the
recommended estimate on the bench itself, each cell recommended from the others alone
(leave-one-cell-out): ρ, NMAE, the coverage of its intervals, the share of the pairs of points it
decides and the precision of those verdicts → bench/results/recommended.{md,json}.
Test cells never enter it: their figures come through the ledger alone.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from adwm_core.ope.statistics.metrics import normalised_absolute_error, spearman, verdict_scores
from adwm_core.ope.statistics.recommend import SHIPPED, BenchCalibration, BenchCell, point_key, recommend
from adwm_core.report import HEADLINE, RECOMMENDED, on_the_return_scale
from adwm_core.data import TRAJECTORIES, read_table
from adwm_core.stages.report import return_range_and_scale
from bench.common import RESULTS, artifact, cell_config, development_cells, machine


def bench_cell(name: str, curves: dict, logged: bool = True) -> BenchCell | None:
    """A cell's record from its report's curves (None: no ground truth in them, or no scale: an
    environment that declares no return range, its behaviour log not at hand or not ``logged``)."""
    if curves.get("ground_truth") is None:
        return None
    config = cell_config(name)
    behaviour = artifact(config, "behaviour", required=False) if logged else None
    trajectories = None if behaviour is None else read_table(behaviour.file("trajectories"), TRAJECTORIES)
    (low, high), scale = return_range_and_scale(config, trajectories)
    if scale is None:
        return None
    labels = [point_key(p, e) for p, e in zip(curves["policy"], curves["epsilon"])]
    answered = curves.get("diagnostics", {}).get(HEADLINE, {}).get("log_share", math.nan)
    return BenchCell(name, config.env.name, low, high, scale, answered, dict(zip(labels, curves["ground_truth"])),
                     {estimator: dict(zip(labels, values)) for estimator, values in curves["estimators"].items()
                      if estimator != RECOMMENDED and on_the_return_scale(estimator)})


def from_reports(cells: list[str]) -> tuple[BenchCell, ...]:
    """The records of the cells whose report is finished under today's code."""
    found = []
    for name in cells:
        report = artifact(name, "report", required=False)
        if report is not None:
            with open(report.file("curves")) as f:
                found.append(bench_cell(name, json.load(f)))
    return tuple(c for c in found if c is not None)


def from_main_results() -> tuple[tuple[BenchCell, ...], str]:
    """The development cells' records in bench/results/main_results.json, and their commit (their
    behaviour logs are not read: a cell whose environment declares no return range has no scale)."""
    results = json.loads((RESULTS / "main_results.json").read_text())
    development = set(development_cells())
    cells = [bench_cell(c["cell"], c["curves"], logged=False) for c in results["cells"] if c["cell"] in development]
    commits = sorted({c["commit"] for c in results["cells"] if c["cell"] in development})
    return tuple(c for c in cells if c is not None), ",".join(commits)


def leave_one_cell_out(bench: BenchCalibration) -> dict[str, dict]:
    """Per bench cell, the recommended estimate from the other cells alone, graded on its truth (a
    pair counts as split where its truths differ at all: the file keeps no standard errors)."""
    graded = {}
    for cell in bench.cells:
        reading = recommend(cell.estimates, return_range=(cell.low, cell.high), answered=cell.answered, bench=bench,
                            cell=cell.name)
        if not reading.values:
            graded[cell.name] = {"source": reading.source}
            continue
        points = list(reading.values)
        j = [cell.truth[p] for p in points]
        scores = verdict_scores(reading.verdicts, cell.truth, dict.fromkeys(points, 0.0))
        graded[cell.name] = {
            "source": reading.source, "rho": spearman([reading.values[p] for p in points], j),
            "nmae": normalised_absolute_error([reading.values[p] for p in points], j) if np.ptp(j) > 0 else math.nan,
            "coverage": float(np.mean([reading.low[p] <= cell.truth[p] <= reading.high[p] for p in points])),
            "half_width": reading.half_width / (cell.high - cell.low), "decided": scores.decided,
            "precision": scores.precision}
    return graded


def write_grades(bench: BenchCalibration, graded: dict[str, dict]) -> None:
    keys = ("rho", "nmae", "coverage", "half_width", "decided", "precision")
    rows = [f"| {name} | {g['source']} | " + " | ".join("–" if g.get(k) is None or g[k] != g[k] else f"{g[k]:.2f}"
                                                        for k in keys) + " |" for name, g in graded.items()]
    means = [np.nanmean([g[k] for g in graded.values() if k in g]) for k in keys]
    lines = ["# The recommended estimate on the bench, each cell from the others alone", "",
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"Bench: {len(bench.cells)} cells measured at `{bench.commit}` ({SHIPPED.rsplit('/', 1)[-1]}); "
             f"95 % intervals; half-width over the return range.", "",
             "| cell | recommended | ρ | NMAE | coverage | half-width | decided | precision |",
             "|---|---|---|---|---|---|---|---|", *rows,
             "| **mean** | | " + " | ".join(f"{m:.2f}" for m in means) + " |", "", f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "recommended.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "recommended.json").write_text(json.dumps({"commit": bench.commit, "cells": graded}, indent=2))
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-main-results", action="store_true",
                        help="from bench/results/main_results.json's curves instead of today's reports")
    args = parser.parse_args()
    if args.from_main_results:
        cells, commit = from_main_results()
    else:
        from adwm_core.provenance import source_version

        cells, commit = from_reports(development_cells()), source_version()
    if not cells:
        raise SystemExit("no development cell has a finished report under today's code: run `python -m bench.loop`")
    bench = BenchCalibration(cells, commit)
    bench.save(SHIPPED)
    print(f"{SHIPPED}: {len(cells)} cells ({', '.join(c.name for c in cells)}) at {commit}")
    write_grades(bench, leave_one_cell_out(bench))


if __name__ == "__main__":
    main()
