"""What the stage tasks share: MLflow tracking (a parent run per flow run, a nested run per
stage) and Prefect progress artifacts."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import mlflow
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from adwm_core.paths import artifact_path
from adwm_core.progress import progress_bar
from adwm_core.provenance import source_version


@contextlib.contextmanager
def stage_run(parent_run: str | None, stage: str) -> Iterator[object]:
    """An MLflow run for one stage, nested under the flow run's parent run (none: untracked)."""
    if parent_run is None:
        yield None
        return
    with mlflow.start_run(run_name=stage, nested=True, parent_run_id=parent_run,
                          experiment_id=mlflow.get_run(parent_run).info.experiment_id) as run:
        yield run


@contextlib.contextmanager
def stage_progress(cell: str, what: str) -> Iterator[Callable[..., None]]:
    """``update(done, total, **counts)`` for a long stage: a Prefect progress artifact (updated per
    whole percent, with the counts' rates) beside the terminal's progress bar (adwm_core/progress.py)."""
    artifact = create_progress_artifact(0.0, description=f"{cell}: {what}")
    shown = -1
    with progress_bar(f"{cell}: {what}") as bar:
        def update(done: int, total: int, **counts: int) -> None:
            nonlocal shown
            rates = bar(done, total, **counts)
            percent = int(100 * done / total)
            if percent > shown:
                rated = "".join(f", {name} {rate}" for name, rate in rates.items())
                update_progress_artifact(artifact, float(percent), description=f"{cell}: {what}{rated}" if rated else None)
                shown = percent

        yield update


def use_tracking_store() -> str | None:
    """Point MLflow at ``MLFLOW_TRACKING_URI``, else at a SQLite store under the artifact root
    (MLflow refuses its file store); the URI given, None for the local store."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri is None and "://" in artifact_path():
        raise RuntimeError("ADWM_HOME is remote: set MLFLOW_TRACKING_URI to your MLflow server")
    mlflow.set_tracking_uri(uri or f"sqlite:///{os.path.abspath(artifact_path('mlflow.db'))}")
    return uri


SOURCE_TAG = "adwm.source"  # the code a flow ran: MLflow's own commit tag cannot say the tree was ahead of it


def _is_server(uri: str | None) -> bool:
    """A tracking server keeps the runs' artifacts where it was told to; a database URI (SQLite)
    has no artifact store of its own, and MLflow would default to ./mlruns of the working folder."""
    return uri is not None and uri.split("://", 1)[0].lower() in ("http", "https", "databricks")


def _local_artifacts() -> str:
    root = artifact_path("mlartifacts")
    return root if "://" in root else os.path.abspath(root)


@contextlib.contextmanager
def cell_run(cell: str, run_name: str) -> Iterator[str]:
    """The flow run's parent MLflow run in experiment ``cell/<cell>`` (tracking as in
    :func:`use_tracking_store`, run artifacts under ``$ADWM_HOME/mlartifacts``); yields its id."""
    uri = use_tracking_store()
    name = f"cell/{cell}"
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is None:
        mlflow.create_experiment(name, artifact_location=None if _is_server(uri) else _local_artifacts())
    mlflow.set_experiment(name)
    with mlflow.start_run(run_name=run_name) as run:
        source = source_version()
        if source is not None:
            mlflow.set_tag(SOURCE_TAG, source)
        yield run.info.run_id
