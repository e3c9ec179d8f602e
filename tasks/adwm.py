"""ADWM inference: one π_e^ε in imagined rollouts of the world model (imagined steps and where
the time went are logged to the stage's MLflow run)."""

from __future__ import annotations

from prefect import task

from adwm_core.cell import CellConfig
from adwm_core.specs import PolicySpec
from adwm_core.stages.adwm import run_adwm

from . import behaviour, psi, world_model
from .common import Artifact, Stage, evaluation_slice, log_metrics, stage_progress

STAGE = Stage("adwm", lambda cell, policy: {"adwm": cell.adwm, "evaluation": evaluation_slice(cell, policy)},
              per_policy=True)
FILE = "estimates.parquet"


@task(name="adwm-inference", task_run_name="adwm-inference [{policy.label}]", tags=["gpu"])
def adwm(cell: CellConfig, policy: PolicySpec, trajectories: Artifact, model: Artifact, adapter: Artifact | None,
         parent_run: str | None) -> Artifact:
    def build(folder: str) -> None:
        timings: dict[str, float] = {}
        with stage_progress(cell.name, f"imagined rollouts [{policy.label}], seeds") as progress:
            run_adwm(trajectories.file(behaviour.FILE), model.file(world_model.FOLDER), policy, cell.env.name,
                     f"{folder}/{FILE}", cell=cell.name, psi=adapter.file(psi.FOLDER) if adapter is not None else None,
                     epsilons=cell.evaluation.epsilons, config=cell.adwm, timings=timings, progress=progress)
        log_metrics(timings)

    inputs = (trajectories, model) + ((adapter,) if adapter is not None else ())
    return STAGE.run(cell, build, parent_run, policy=policy, inputs=inputs)
