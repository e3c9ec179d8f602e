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
from adwm_core.data import ESTIMATES, GROUND_TRUTH, read_table, write_table
from adwm_core.report import main_results, markdown, plot, summary_lines

from . import adwm, baselines, ground_truth
from .common import Artifact, Stage, use_tracking_store

REPORT, RESULTS, CURVES, PLOT = "report.md", "results.json", "curves.json", "estimates_vs_truth.png"
ESTIMATES_FILE = "estimates.parquet"  # every estimator's rows of the cell, intervals included
FORMAT = 2  # of results.json; a report written in an older format is recomputed (2: rho_p, rho_seeds)
STAGE = Stage("report", lambda cell: {"cell": cell.name, "format": FORMAT})


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
        curves["not_applicable"] = not_applicable(baseline_estimates)
        write_table(estimates, f"{folder}/{ESTIMATES_FILE}", ESTIMATES)
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
    artifact = STAGE.run(cell, build, parent_run, inputs=inputs)
    with fsspec.open(artifact.file(RESULTS)) as f:
        rows = json.load(f)
    with fsspec.open(artifact.file(REPORT), "r") as f:
        text = f.read()
    if rows:
        create_table_artifact(rows, key=f"{cell.name}-main-results", description=f"{cell.name}: ρ per estimator")
    create_markdown_artifact(text, key=f"{cell.name}-report", description=f"{cell.name}: report")
    return artifact


def not_applicable(baseline_estimates: list[Artifact]) -> dict[str, str]:
    """Estimator → why the logs could not feed it, over the π_e of the cell (artifacts written
    before the baselines stage recorded this have no file: nothing was left out then)."""
    reasons: dict[str, str] = {}
    for artifact in baseline_estimates:
        fs, path = fsspec.core.url_to_fs(artifact.file(baselines.NOT_APPLICABLE))
        if fs.exists(path):
            with fs.open(path, "r") as f:
                reasons.update(json.load(f))
    return reasons


def closing_screen(folder: str, flow_run_id: str | None) -> str:
    """What a finished cell run tells its user on the terminal: ρ per estimator, where the
    report, the plot and the MLflow run are, and how to open the UIs (the full report stays in
    its file)."""
    with fsspec.open(f"{folder}/{RESULTS}") as f, fsspec.open(f"{folder}/{CURVES}") as g:
        rows, curves = json.load(f), json.load(g)
    graded = curves["ground_truth"] is not None
    lines = ["", "Spearman ρ of each estimator's Ĵ against ground truth over the π_e family (NMAE: |Ĵ−J|/range)"
             if graded else "No ground truth for this cell: each estimator's Ĵ per point", *summary_lines(rows, curves),
             "", f"report   {folder}/{REPORT}", f"plot     {folder}/{PLOT}"]
    uri = use_tracking_store() or mlflow.get_tracking_uri()
    runs = mlflow.search_runs(search_all_experiments=True, filter_string=f"params.flow_run_id = '{flow_run_id}'",
                              output_format="list") if flow_run_id else []
    if runs:
        run = runs[0].info
        lines.append(f"MLflow   experiment {run.experiment_id}, run {run.run_id} (store {uri})")
        lines += ["", "open the Prefect and MLflow UIs on these stores: make up, then",
                  "         http://127.0.0.1:4200 (flow runs)   "
                  f"http://127.0.0.1:5000/#/experiments/{run.experiment_id}/runs/{run.run_id}"]
    return "\n".join(lines)
