"""One Prefect task per stage of the registry (adwm_core/pipeline.py): the stage runs in an
MLflow run nested under the flow run's (named ``"<stage> [<π_e label>]"`` per π_e), its key,
folder and whether it was reused as the run's parameters, its metrics and kept files in it,
its progress as a Prefect progress artifact; the behaviour log is the behaviour and world-model
runs' dataset input and each world model a registered MLflow model (tasks/registry.py). Stages
hand each other folders found by key, not objects: ``after`` only orders the tasks (and draws
the DAG in the Prefect UI)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager

import mlflow
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture
from prefect.tasks import Task, exponential_backoff

from adwm_core import pipeline
from adwm_core.cell import CellConfig
from adwm_core.pipeline import Artifact, Tracker
from adwm_core.specs import PolicySpec

from .common import stage_progress, stage_run
from .registry import behaviour_of, log_behaviour_input, register_world_model

TRAINED_ON_BEHAVIOUR = {"behaviour": "behaviour", "world-model": "training"}  # stage → dataset input context


class MlflowTracker(Tracker):
    """A stage's metrics and kept files to the active MLflow run; progress to Prefect."""

    def __init__(self, cell: str) -> None:
        self.cell = cell

    def metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        if mlflow.active_run() is not None:
            mlflow.log_metrics({k: float(v) for k, v in values.items()}, step=step)

    def keep(self, local_path: str, name: str | None = None) -> None:
        if mlflow.active_run() is None:
            return
        (mlflow.log_artifacts if os.path.isdir(local_path) else mlflow.log_artifact)(local_path, name)

    def progress(self, what: str) -> AbstractContextManager:
        return stage_progress(self.cell, what)


def _run_stage(name: str, cell: CellConfig, policy: PolicySpec | None, parent_run: str | None) -> Artifact:
    logger = get_run_logger()

    def started(artifact: Artifact, reused: bool) -> None:
        if mlflow.active_run() is not None:
            mlflow.log_params({"stage_key": artifact.key[:16], "artifact": artifact.path, "reused": reused})
            if name in TRAINED_ON_BEHAVIOUR:
                log_behaviour_input(cell, behaviour_of(cell, name, artifact), TRAINED_ON_BEHAVIOUR[name])

    with stage_run(parent_run, pipeline.stage(name).run_name(None if policy is None else policy.label)) as run:
        artifact = pipeline.run(cell, name, policy, tracker=MlflowTracker(cell.name), log=logger.info,
                                on_start=started)
        if run is not None and name == "world-model":
            logger.info(f"world model registered as {register_world_model(cell, artifact, run.info.run_id)}")
        return artifact


def _task(stage: pipeline.Stage) -> Task:
    def run(cell: CellConfig, policy: PolicySpec | None, parent_run: str | None) -> Artifact:
        return _run_stage(stage.name, cell, policy, parent_run)

    run.__name__ = run.__qualname__ = stage.name.replace("-", "_")  # what Dask and Prefect call it
    # the registry is the cache: Prefect keeps no result of its own (NO_CACHE, nothing persisted)
    return task(run, name=stage.name, task_run_name=stage.name + " [{policy.label}]" * stage.per_policy,
                tags=["gpu"] if stage.gpu else [], retries=stage.retries,
                retry_delay_seconds=exponential_backoff(10) if stage.retries else 0, cache_policy=NO_CACHE,
                persist_result=False)


TASKS = {name: _task(stage) for name, stage in pipeline.STAGES.items()}


def submit(name: str, cell: CellConfig, parent_run: str | None, policy: PolicySpec | None = None,
           after: Iterable[PrefectFuture | None] = ()) -> PrefectFuture:
    """Stage ``name`` of ``cell`` (for π_e ``policy``) submitted to the flow's task runner, to
    start once the futures ``after`` finished."""
    return TASKS[name].submit(cell, policy, parent_run, wait_for=[f for f in after if f is not None])


def call(name: str, cell: CellConfig, parent_run: str | None, policy: PolicySpec | None = None) -> Artifact:
    """Stage ``name`` of ``cell`` (for π_e ``policy``) run now, in the calling flow."""
    return TASKS[name](cell, policy, parent_run)


def submit_plan(cell: CellConfig, parent_run: str | None,
                submit_one: Callable[..., PrefectFuture] = submit) -> dict[tuple[str, str | None], PrefectFuture]:
    """Every step of ``pipeline.plan(cell)`` submitted, each to start once the steps it reads
    finished: the futures by step (in the plan's order)."""
    futures: dict[tuple[str, str | None], PrefectFuture] = {}
    for step in pipeline.plan(cell):
        futures[step.index] = submit_one(step.name, cell, parent_run, step.policy, [futures[i] for i in step.after])
    return futures
