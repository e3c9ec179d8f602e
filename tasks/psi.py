"""ψ-adapter training for one π_e on the trained world model's latents."""

from __future__ import annotations

from prefect import task

from adwm_core.cell import CellConfig
from adwm_core.specs import PolicySpec
from adwm_core.stages.psi import run_psi

from . import behaviour, world_model
from .common import Artifact, Stage, epoch_logger

STAGE = Stage("psi", lambda cell, policy: {"psi": cell.psi, "policy": policy}, per_policy=True)
FOLDER = "adapter"


@task(name="psi-training", task_run_name="psi-training [{policy.label}]", tags=["gpu"])
def psi(cell: CellConfig, policy: PolicySpec, trajectories: Artifact, model: Artifact,
        parent_run: str | None) -> Artifact:
    def build(folder: str) -> None:
        run_psi(trajectories.file(behaviour.FILE), model.file(world_model.FOLDER), policy, f"{folder}/{FOLDER}",
                cell.psi, on_epoch=epoch_logger("psi_"))

    return STAGE.run(cell, build, parent_run, policy=policy, inputs=(trajectories, model))
