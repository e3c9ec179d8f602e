"""COBS baselines: DM, IS, PDIS, WIS, WPDIS, DR, WDR, FQE for one π_e^ε from the logs."""

from __future__ import annotations

from prefect import task

from adwm_core.cell import CellConfig
from adwm_core.specs import PolicySpec
from adwm_core.stages.baselines import run_baselines

from . import behaviour, logprobs, world_model
from .common import Artifact, Stage

STAGE = Stage("baselines", lambda cell, policy: {"baselines": cell.baselines, "policy": policy.name}, per_policy=True)
FILE = "estimates.parquet"
NOT_APPLICABLE = "not_applicable.json"  # estimator → why the logs cannot feed it


@task(name="cobs-baselines", task_run_name="cobs-baselines [{policy.label}]")
def baselines(cell: CellConfig, policy: PolicySpec, trajectories: Artifact, logps: Artifact, model: Artifact,
              parent_run: str | None) -> Artifact:
    def build(folder: str) -> None:
        run_baselines(trajectories.file(behaviour.FILE), logps.file(logprobs.FILE), model.file(world_model.FOLDER),
                      f"{folder}/{FILE}", cell=cell.name, policy=policy.name, config=cell.baselines,
                      not_applicable_out=f"{folder}/{NOT_APPLICABLE}")

    return STAGE.run(cell, build, parent_run, policy=policy, inputs=(trajectories, logps, model))
