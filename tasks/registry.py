"""MLflow conventions for what a cell trains on and what it trains: the behaviour log as a
dataset input (``mlflow.log_input``, digest = the behaviour artifact's key, which holds the
logs' SHA-256 for imported logs), and each world model registered as a version of
:data:`WORLD_MODEL` with the cell's name as its alias, so ``models:/adwm-world-model@<cell>``
finds the one the cell uses now. The model files stay in the artifact root (an external
model: MLflow keeps its address, tags and lineage, not a copy)."""

from __future__ import annotations

import warnings

import mlflow
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.meta_dataset import MetaDataset
from mlflow.exceptions import MlflowException

from adwm_core import pipeline
from adwm_core.cell import CellConfig
from adwm_core.pipeline import Artifact

WORLD_MODEL = "adwm-world-model"
KEY_TAG = "adwm.stage_key"


def log_behaviour_input(cell: CellConfig, behaviour: Artifact, context: str) -> None:
    """The cell's behaviour log as a dataset input of the active run (``context``: what the run did with it)."""
    uri = cell.behaviour.logs.path if cell.behaviour.logs is not None else behaviour.file("trajectories")
    with warnings.catch_warnings():  # a local path matches two equivalent local-artifact sources: MLflow warns
        warnings.simplefilter("ignore", UserWarning)
        source = resolve_dataset_source(uri)
    mlflow.log_input(MetaDataset(source, name=f"{cell.name}/behaviour", digest=behaviour.key[:16]), context=context)


def register_world_model(cell: CellConfig, model: Artifact, run_id: str) -> str:
    """Version of :data:`WORLD_MODEL` holding ``model`` (registered unless the alias ``cell.name``
    already points at this very artifact), aliased ``cell.name``; returns ``models:/…@<cell>``."""
    client = mlflow.MlflowClient()
    uri = f"models:/{WORLD_MODEL}@{cell.name}"
    try:
        if client.get_model_version_by_alias(WORLD_MODEL, cell.name).tags.get(KEY_TAG) == model.key:
            return uri
    except MlflowException:  # no such model or alias yet
        pass
    logged = mlflow.create_external_model(name=f"{cell.name}-world-model", source_run_id=run_id,
                                          tags={KEY_TAG: model.key, "adwm.cell": cell.name, "adwm.path": model.path})
    version = mlflow.register_model(f"models:/{logged.model_id}", WORLD_MODEL,
                                    tags={KEY_TAG: model.key, "adwm.cell": cell.name, "adwm.path": model.path})
    client.set_registered_model_alias(WORLD_MODEL, cell.name, version.version)
    return uri


def behaviour_of(cell: CellConfig, name: str, artifact: Artifact) -> Artifact:
    """The behaviour artifact stage ``name`` (whose own artifact is ``artifact``) reads."""
    return artifact if name == "behaviour" else pipeline.stage_key(cell, name)[1]["behaviour"][0]
