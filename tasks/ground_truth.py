"""Ground truth: π_e^ε in the environment, every ε on the same episodes."""

from __future__ import annotations

from prefect import task
from prefect.tasks import exponential_backoff

from adwm_core.cell import CellConfig
from adwm_core.collection import ground_truth_rollouts

from .common import Artifact, run_stage

EPISODES, SUMMARY = "episodes.parquet", "summary.parquet"


@task(name="ground-truth", retries=2, retry_delay_seconds=exponential_backoff(10))
def ground_truth(cell: CellConfig, parent_run: str | None) -> Artifact:
    settings = cell.ground_truth

    def build(folder: str) -> None:
        ground_truth_rollouts(cell.env, cell.evaluation.policy, settings.episodes, f"{folder}/{EPISODES}",
                              f"{folder}/{SUMMARY}", cell=cell.name, epsilons=cell.evaluation.epsilons,
                              seed=settings.seed)

    config = {"env": cell.env, "evaluation": cell.evaluation, "ground_truth": settings}
    return run_stage(cell.name, "ground-truth", config, (), build, parent_run)
