"""Report: every estimator graded against ground truth; markdown, plot, MLflow and Prefect artifacts."""

from __future__ import annotations

import json
import os
import tempfile

import fsspec
import mlflow
import pyarrow as pa
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from adwm_core.cell import CellConfig
from adwm_core.data import ESTIMATES, GROUND_TRUTH, read_table
from adwm_core.report import main_results, markdown, plot

from . import adwm, baselines, ground_truth
from .common import Artifact, run_stage

REPORT, RESULTS, CURVES, PLOT = "report.md", "results.json", "curves.json", "estimates_vs_truth.png"
FORMAT = 2  # of results.json; a report written in an older format is recomputed (2: rho_p, rho_seeds)


@task(name="report")
def report(cell: CellConfig, truths: list[Artifact], adwm_estimates: list[Artifact],
           baseline_estimates: list[Artifact], parent_run: str | None) -> Artifact:
    """``truths`` empty: a cell without ground truth, reported ungraded."""
    def build(folder: str) -> None:
        estimates = pa.concat_tables([read_table(a.file(adwm.FILE), ESTIMATES) for a in adwm_estimates] +
                                     [read_table(a.file(baselines.FILE), ESTIMATES) for a in baseline_estimates])
        truth = (pa.concat_tables([read_table(a.file(ground_truth.SUMMARY), GROUND_TRUTH) for a in truths])
                 if truths else None)
        rows, curves = main_results(truth, estimates)
        text = markdown(cell.name, rows, curves)
        fs, root = fsspec.core.url_to_fs(folder)
        for name, content in ((REPORT, text), (RESULTS, json.dumps(rows, indent=2)),
                              (CURVES, json.dumps(curves, indent=2))):
            with fs.open(f"{root}/{name}", "w") as f:
                f.write(content)
        with tempfile.TemporaryDirectory() as scratch:
            figure = os.path.join(scratch, PLOT)
            plot(curves, figure, f"{cell.name}: Ĵ over ε" + (" against ground truth" if truths else ""))
            fs.put_file(figure, f"{root}/{PLOT}")
            mlflow.log_artifact(figure)
        for row in rows:
            name = row["estimator"].replace(":", "_")
            mlflow.log_metrics({f"{name}.{k}": float(v) for k, v in row.items() if k not in ("estimator", "rho_seeds")})
        mlflow.log_text(text, REPORT)
        mlflow.log_dict(curves, CURVES)

    inputs = (*truths, *adwm_estimates, *baseline_estimates)
    artifact = run_stage(cell.name, "report", {"cell": cell.name, "format": FORMAT}, inputs, build, parent_run)
    with fsspec.open(artifact.file(RESULTS)) as f:
        rows = json.load(f)
    with fsspec.open(artifact.file(REPORT), "r") as f:
        text = f.read()
    if rows:
        create_table_artifact(rows, key=f"{cell.name}-main-results", description=f"{cell.name}: ρ per estimator")
    create_markdown_artifact(text, key=f"{cell.name}-report", description=f"{cell.name}: report")
    return artifact
