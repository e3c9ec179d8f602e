"""The report's Prefect artifacts (the ρ table and the markdown) and the closing screen."""

from __future__ import annotations

import json

import fsspec
import mlflow
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from adwm_core.pipeline import Artifact, stage
from adwm_core.report import cannot_tell_lines, printed_verdicts, summary_lines, verdict_grades

from .common import use_tracking_store

REPORT, RESULTS, CURVES, PLOT, ESTIMATES_FILE, ROLLOUTS_FILE = (
    stage("report").outputs[role] for role in ("report", "results", "curves", "plot", "estimates", "rollouts"))


def publish(cell: str, report: Artifact) -> None:
    """The report stage's ρ table and markdown as Prefect artifacts of the flow run."""
    with fsspec.open(report.file("results")) as f:
        rows = json.load(f)
    with fsspec.open(report.file("report"), "r") as f:
        text = f.read()
    if rows:
        create_table_artifact(rows, key=f"{cell}-main-results", description=f"{cell}: ρ per estimator")
    create_markdown_artifact(text, key=f"{cell}-report", description=f"{cell}: report")


def closing_screen(folder: str, flow_run_id: str | None) -> str:
    """What a finished cell run tells its user on the terminal: ρ per estimator, where the
    report, the plot and the MLflow run are, and how to open the UIs (the full report stays in
    its file)."""
    with fsspec.open(f"{folder}/{RESULTS}") as f, fsspec.open(f"{folder}/{CURVES}") as g:
        rows, curves = json.load(f), json.load(g)
    graded = curves["ground_truth"] is not None
    lines = ["", "Spearman ρ of each estimator's Ĵ against ground truth over the π_e family (NMAE: |Ĵ−J|/range)"
             if graded else "No ground truth for this cell: each estimator's Ĵ per point", *summary_lines(rows, curves)]
    if curves.get("answers"):
        lines += ["", "what the log cannot tell", *cannot_tell_lines(curves["answers"], min(curves["epsilon"]))]
    graded_verdicts = printed_verdicts(curves.get("comparisons") or {})
    if graded_verdicts:
        lines.append(f"ADWM's verdicts on pairs of points: {verdict_grades(graded_verdicts)}")
    lines += ["", f"report   {folder}/{REPORT}", f"plot     {folder}/{PLOT}"]
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
