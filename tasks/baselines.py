"""COBS baselines: DM, IS, PDIS, WIS, WPDIS, DR, WDR, FQE for π_e^ε from the logs."""

from __future__ import annotations

from prefect import task

from adwm_core.cell import CellConfig
from adwm_core.ope.baselines import run_baselines

from . import behaviour, logprobs, world_model
from .common import Artifact, run_stage

FILE = "estimates.parquet"


@task(name="cobs-baselines")
def baselines(cell: CellConfig, trajectories: Artifact, logps: Artifact, model: Artifact,
              parent_run: str | None) -> Artifact:
    def build(folder: str) -> None:
        run_baselines(trajectories.file(behaviour.FILE), logps.file(logprobs.FILE), model.file(world_model.FOLDER),
                      f"{folder}/{FILE}", cell=cell.name, policy=cell.evaluation.policy.name, config=cell.baselines)

    return run_stage(cell.name, "baselines", cell.baselines, (trajectories, logps, model), build, parent_run)
