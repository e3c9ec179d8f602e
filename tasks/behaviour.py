"""Behaviour collection: π_b's pool × prompt variants in the environment."""

from __future__ import annotations

from prefect import task
from prefect.tasks import exponential_backoff

from adwm_core.cell import CellConfig
from adwm_core.collection import collect_behavior

from .common import Artifact, run_stage, stage_progress

STAGE, FILE = "behaviour", "trajectories.parquet"


@task(name="behaviour-collection", retries=2, retry_delay_seconds=exponential_backoff(10))
def collect(cell: CellConfig, parent_run: str | None) -> Artifact:
    def build(folder: str) -> None:
        with stage_progress(cell.name, "behaviour episodes") as progress:
            collect_behavior(cell.env, cell.behaviour.pool, cell.behaviour.episodes, f"{folder}/{FILE}", cell=cell.name,
                             variants=cell.behaviour.variants, progress=progress)

    return run_stage(cell.name, STAGE, config_slice(cell), (), build, parent_run)


def config_slice(cell: CellConfig) -> dict:
    return {"env": cell.env, "behaviour": cell.behaviour}
