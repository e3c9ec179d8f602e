"""Report: every estimator graded against ground truth; markdown, plot, MLflow and Prefect artifacts."""

from __future__ import annotations

import json

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


@task(name="report")
def report(cell: CellConfig, truth: Artifact, adwm_estimates: Artifact, baseline_estimates: Artifact,
           parent_run: str | None) -> Artifact:
    def build(folder: str) -> None:
        estimates = pa.concat_tables([read_table(adwm_estimates.file(adwm.FILE), ESTIMATES),
                                      read_table(baseline_estimates.file(baselines.FILE), ESTIMATES)])
        rows, curves = main_results(read_table(truth.file(ground_truth.SUMMARY), GROUND_TRUTH), estimates)
        text = markdown(cell.name, cell.evaluation.policy.name, rows, curves)
        fs, root = fsspec.core.url_to_fs(folder)
        for name, content in ((REPORT, text), (RESULTS, json.dumps(rows, indent=2)),
                              (CURVES, json.dumps(curves, indent=2))):
            with fs.open(f"{root}/{name}", "w") as f:
                f.write(content)
        with fs.open(f"{root}/{PLOT}", "wb") as f:
            plot(curves, f, f"{cell.name}: Ĵ over ε against ground truth")
        for row in rows:
            name = row["estimator"].replace(":", "_")
            mlflow.log_metrics({f"{name}.{k}": float(v) for k, v in row.items() if k not in ("estimator",)})
        mlflow.log_text(text, REPORT)
        mlflow.log_dict(curves, CURVES)
        with fs.open(f"{root}/{PLOT}", "rb") as f:
            mlflow.log_image(_image(f.read()), PLOT)

    artifact = run_stage(cell.name, "report", {"cell": cell.name}, (truth, adwm_estimates, baseline_estimates),
                         build, parent_run)
    with fsspec.open(artifact.file(RESULTS)) as f:
        rows = json.load(f)
    with fsspec.open(artifact.file(REPORT), "r") as f:
        text = f.read()
    create_table_artifact(rows, key=f"{cell.name}-main-results", description=f"{cell.name}: ρ per estimator")
    create_markdown_artifact(text, key=f"{cell.name}-report", description=f"{cell.name}: report")
    return artifact


def _image(png: bytes):
    import io

    from PIL import Image

    return Image.open(io.BytesIO(png))
