"""World-model training, once per environment and behaviour pool (π_e plays no part); a pool
ADWM cannot read (no success for success-bank guidance) is refused before training."""

from __future__ import annotations

import mlflow
from prefect import task

from adwm_core.cell import CellConfig
from adwm_core.data import TRAJECTORIES, read_table
from adwm_core.training.world_model import train_world_model

from . import behaviour
from .common import Artifact, Stage, epoch_logger, stage_progress

STAGE = Stage("world-model", lambda cell: cell.world_model)
FOLDER = "model"


@task(name="world-model-training", tags=["gpu"])
def world_model(cell: CellConfig, trajectories: Artifact, parent_run: str | None) -> Artifact:
    config = cell.world_model
    cell.adwm.check_behaviour(read_table(trajectories.file(behaviour.FILE), TRAJECTORIES))  # before training

    def build(folder: str) -> None:
        log = epoch_logger()
        with stage_progress(cell.name, "world-model rounds") as progress:
            def on_epoch(epoch: int, metrics: dict) -> None:
                log(epoch, metrics)
                progress(epoch + 1, config.rounds)

            train_world_model(read_table(trajectories.file(behaviour.FILE), TRAJECTORIES), f"{folder}/{FOLDER}",
                              config, on_epoch=on_epoch)
        if mlflow.active_run() is not None and "://" not in folder:
            mlflow.log_artifacts(f"{folder}/{FOLDER}", "world_model")  # the selected checkpoint and its config

    return STAGE.run(cell, build, parent_run, inputs=(trajectories,))
