"""Log-prob extraction: log π_b and log π_e^ε of every logged action."""

from __future__ import annotations

from prefect import task
from prefect.tasks import exponential_backoff

from adwm_core.cell import CellConfig
from adwm_core.collection import extract_logprobs

from . import behaviour
from .common import Artifact, run_stage

FILE = "logprobs.parquet"


@task(name="logprob-extraction", retries=1, retry_delay_seconds=exponential_backoff(10), tags=["gpu"])
def logprobs(cell: CellConfig, trajectories: Artifact, parent_run: str | None) -> Artifact:
    def build(folder: str) -> None:
        extract_logprobs(trajectories.file(behaviour.FILE), cell.env.name, cell.behaviour.pool, cell.evaluation.policy,
                         f"{folder}/{FILE}", epsilons=cell.evaluation.epsilons)

    return run_stage(cell.name, "logprobs", {"evaluation": cell.evaluation}, (trajectories,), build, parent_run)
