"""World-model training, once per environment and behaviour pool (π_e plays no part)."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from adwm_core.cell import CellConfig
from adwm_core.data import TRAJECTORIES, read_table
from adwm_core.training.world_model import train_world_model

from . import behaviour
from .common import Artifact, epoch_logger, run_stage

STAGE, FOLDER = "world-model", "model"


@task(name="world-model-training", tags=["gpu"])
def world_model(cell: CellConfig, trajectories: Artifact, parent_run: str | None) -> Artifact:
    config = cell.world_model

    def build(folder: str) -> None:
        progress = create_progress_artifact(0.0, description=f"{cell.name}: world-model epochs")
        log = epoch_logger()

        def on_epoch(epoch: int, metrics: dict) -> None:
            log(epoch, metrics)
            update_progress_artifact(progress, 100.0 * (epoch + 1) / config.epochs)

        train_world_model(read_table(trajectories.file(behaviour.FILE), TRAJECTORIES), f"{folder}/{FOLDER}", config,
                          on_epoch=on_epoch)

    return run_stage(cell.name, STAGE, config_slice(cell), (trajectories,), build, parent_run)


def config_slice(cell: CellConfig):
    return cell.world_model
