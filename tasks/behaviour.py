"""Behaviour collection: π_b's pool × prompt variants in the environment."""

from __future__ import annotations

from prefect import task
from prefect.tasks import exponential_backoff

from adwm_core.cell import CellConfig
from adwm_core.stages.collection import collect_behavior

from .common import Artifact, Stage, stage_progress

STAGE = Stage("behaviour", lambda cell: {"env": cell.env, "behaviour": cell.behaviour})
FILE = "trajectories.parquet"


@task(name="behaviour-collection", retries=2, retry_delay_seconds=exponential_backoff(10))
def collect(cell: CellConfig, parent_run: str | None) -> Artifact:
    def build(folder: str) -> None:
        with stage_progress(cell.name, "behaviour episodes") as progress:
            collect_behavior(cell.env, cell.behaviour.pool, cell.behaviour.episodes, f"{folder}/{FILE}", cell=cell.name,
                             variants=cell.behaviour.variants, progress=progress)

    return STAGE.run(cell, build, parent_run)
