"""The report stage: every estimator of the cell graded against ground truth (report.py) —
markdown, results and curves JSON, the plot, and every estimate in one Parquet; the ρ table,
the coverage and width of each interval method and the trust diagnostics as metrics, the
report, curves and plot kept with the tracked run."""

from __future__ import annotations

import json
import os
import tempfile
from typing import TYPE_CHECKING

import fsspec
import pyarrow as pa

from ..data import ESTIMATES, GROUND_TRUTH, read_table, write_table
from ..report import main_results, markdown, plot

if TYPE_CHECKING:
    from ..pipeline import StageRun


def compute(run: StageRun) -> None:
    """The cell's report; without a ``ground-truth`` input (a cell that cannot be run) it is ungraded."""
    cell = run.cell.name
    estimates = pa.concat_tables([read_table(path, ESTIMATES) for stage in ("adwm", "baselines")
                                  for path in run.each_input(stage, "estimates")])
    summaries = run.each_input("ground-truth", "summary")
    truth = pa.concat_tables([read_table(path, GROUND_TRUTH) for path in summaries]) if summaries else None
    rows, curves = main_results(truth, estimates)
    curves["not_applicable"] = not_applicable(run.each_input("baselines", "not_applicable"))
    write_table(estimates, run.output("estimates"), ESTIMATES)
    text = markdown(cell, rows, curves)
    with tempfile.TemporaryDirectory() as scratch:
        for role, content in (("report", text), ("results", json.dumps(rows, indent=2)),
                              ("curves", json.dumps(curves, indent=2))):
            with open(os.path.join(scratch, os.path.basename(run.output(role))), "w") as f:
                f.write(content)
        plot(curves, os.path.join(scratch, os.path.basename(run.output("plot"))),
             f"{cell}: Ĵ over ε" + (" against ground truth" if summaries else ""))
        fs, root = fsspec.core.url_to_fs(run.artifact.path)
        for role in ("report", "results", "curves", "plot"):
            local = os.path.join(scratch, os.path.basename(run.output(role)))
            fs.put_file(local, f"{root}/{os.path.basename(local)}")
            if role != "results":
                run.tracker.keep(local)
    for row in rows:
        name = row["estimator"].replace(":", "_")
        run.tracker.metrics({f"{name}.{k}": float(v) for k, v in row.items() if k not in ("estimator", "rho_seeds")})
    for estimator, diagnostics in curves["diagnostics"].items():
        run.tracker.metrics({f"{estimator.replace(':', '_')}.{k}": v for k, v in diagnostics.items()})
    for estimator, by_method in curves.get("intervals", {}).items():
        run.tracker.metrics({f"{estimator.replace(':', '_')}.{k}_{method}": float(v)
                             for method, graded in by_method.items() for k, v in graded.items()})


def not_applicable(paths: list[str]) -> dict[str, str]:
    """Estimator → why the logs could not feed it, over the π_e of the cell."""
    reasons: dict[str, str] = {}
    for path in paths:
        with fsspec.open(path, "r") as f:
            reasons.update(json.load(f))
    return reasons
