"""Log-prob extraction: log π_b and log π_e^ε of every logged action (one π_e per task)."""

from __future__ import annotations

from prefect import task
from prefect.tasks import exponential_backoff

from adwm_core.cell import CellConfig
from adwm_core.specs import PolicySpec
from adwm_core.stages.collection import extract_logprobs

from . import behaviour
from .common import Artifact, Stage, evaluation_slice

STAGE = Stage("logprobs", lambda cell, policy: {"evaluation": evaluation_slice(cell, policy)}, per_policy=True)
FILE = "logprobs.parquet"


@task(name="logprob-extraction", task_run_name="logprob-extraction [{policy.label}]", retries=1,
      retry_delay_seconds=exponential_backoff(10), tags=["gpu"])
def logprobs(cell: CellConfig, policy: PolicySpec, trajectories: Artifact, parent_run: str | None) -> Artifact:
    def build(folder: str) -> None:
        extract_logprobs(trajectories.file(behaviour.FILE), cell.env.name, cell.behaviour.pool, policy,
                         f"{folder}/{FILE}", epsilons=cell.evaluation.epsilons)

    return STAGE.run(cell, build, parent_run, policy=policy, inputs=(trajectories,))
