"""ADWM inference: π_e^ε in imagined rollouts of the world model."""

from __future__ import annotations

from prefect import task

from adwm_core.cell import CellConfig
from adwm_core.ope.adwm import run_adwm

from . import behaviour, psi, world_model
from .common import Artifact, run_stage

FILE = "estimates.parquet"


@task(name="adwm-inference", tags=["gpu"])
def adwm(cell: CellConfig, trajectories: Artifact, model: Artifact, adapter: Artifact | None,
         parent_run: str | None) -> Artifact:
    def build(folder: str) -> None:
        run_adwm(trajectories.file(behaviour.FILE), model.file(world_model.FOLDER), cell.evaluation.policy,
                 cell.env.name, f"{folder}/{FILE}", cell=cell.name,
                 psi=adapter.file(psi.FOLDER) if adapter is not None else None,
                 epsilons=cell.evaluation.epsilons, config=cell.adwm)

    inputs = (trajectories, model) + ((adapter,) if adapter is not None else ())
    return run_stage(cell.name, "adwm", {"adwm": cell.adwm, "evaluation": cell.evaluation}, inputs, build, parent_run)
