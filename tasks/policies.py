"""Policy preparation: train a local cell's tiny family, or check a seed cell's weights and GPU."""

from __future__ import annotations

import dataclasses
import os

from prefect import task

from adwm_core.cell import LOCAL_PREFIX, CellConfig
from adwm_core.policies.trainer import train_tiny_policies

from .common import Artifact, finished_stage, run_stage

STAGE = "policies"


@task(name="prepare-policies")
def prepare_policies(cell: CellConfig, parent_run: str | None, train: bool = True) -> tuple[CellConfig, Artifact | None]:
    """The cell with every ``local:<checkpoint>`` replaced by the trained checkpoint's folder,
    and the family's artifact (None for cells without local policies); ``train=False`` only
    looks the family up (an error when the cell never trained it)."""
    check_runnable(cell)
    if cell.local_policies is None:
        return cell, None
    family = cell.local_policies

    def build(folder: str) -> None:
        train_tiny_policies(cell.env.name, cell.env.options, cell.env.task, f"{folder}/family", family.checkpoints,
                            n_variations=family.n_variations)

    settings = {"env": cell.env, "local_policies": family}
    artifact = (run_stage(cell.name, STAGE, settings, (), build, parent_run) if train
                else finished_stage(cell.name, STAGE, settings))

    def resolve(spec):
        if not spec.model.startswith(LOCAL_PREFIX):
            return spec
        return dataclasses.replace(spec, model=artifact.file(f"family/{spec.model[len(LOCAL_PREFIX):]}"))

    resolved = cell.model_copy(update={
        "behaviour": cell.behaviour.model_copy(update={"pool": tuple(resolve(p) for p in cell.behaviour.pool)}),
        "evaluation": cell.evaluation.model_copy(update={"policy": resolve(cell.evaluation.policy)}),
    })
    return resolved, artifact


def check_runnable(cell: CellConfig) -> None:
    """Fail the first stage, naming what is missing, when this machine cannot run the cell."""
    import torch

    if cell.needs_gpu and not torch.cuda.is_available():
        raise RuntimeError(f"cell {cell.name} needs a GPU (needs_gpu: true) and this worker has none: run it on "
                           "a worker of work pool 'gpu' (see README, 'Running it')")
    for where, spec in cell.policies():
        if spec.model.startswith(LOCAL_PREFIX) or not os.path.isabs(os.path.expanduser(spec.model)):
            continue
        if not os.path.isfile(os.path.join(os.path.expanduser(spec.model), "config.json")):
            raise FileNotFoundError(f"cell {cell.name}: {where}.model = {spec.model} holds no Hugging Face model "
                                    "(no config.json); download the weights there or point the field (or its "
                                    "environment variable) at them")
