"""Before any stage: check that this machine can run a cell, and split a GPU among its engines
(the Prefect task ``prepare-policies`` and the Python API both start here)."""

from __future__ import annotations

import os

from . import pipeline
from .cell import LOCAL_PREFIX, CellConfig
from .data import TRAJECTORIES, read_table
from .endpoints import hub_reachable
from .policies.local_models import OFFLINE_PREFIX, check_offline_model
from .specs import REMOTE_BACKENDS


def prepared(cell: CellConfig, environment: bool = True) -> CellConfig:
    """The cell, checked (:func:`check_runnable`), with each vLLM engine's share of the GPU
    where CUDA is present (not part of any stage key)."""
    check_runnable(cell, environment=environment)
    if any(spec.backend == "vllm" for _, spec in cell.policies()) and _has_cuda():
        # the vLLM backend imports transformers: loaded only where a GPU is shared
        from .policies.vllm_backend import share_gpu_memory

        cell = cell.with_policies(share_gpu_memory(cell.policies()))
    return cell


def _has_cuda() -> bool:
    """A CUDA device is visible (torch imported here, not when the command starts)."""
    import torch

    return torch.cuda.is_available()


def check_runnable(cell: CellConfig, environment: bool = True) -> None:
    """Fail the first stage, naming what is missing, when this machine cannot run the cell: its GPU,
    its models' weights, its environment (the engine's own error: Java, a package, a data
    folder's missing file, an unknown task; skipped with ``environment=False``); and ADWM's settings
    against a behaviour log already finished (the paper's success-bank guidance refuses a log
    without a success: said now, not after the world model and ψ)."""
    _check_finished_behaviour(cell)
    if cell.needs_gpu and not _has_cuda():
        raise RuntimeError(f"cell {cell.name} needs a GPU (needs_gpu: true) and this worker has none: run it on "
                           "a worker of work pool 'gpu' (see docs/operations.md, 'Running it as a service')")
    for where, spec in cell.policies():
        if spec.model.startswith(LOCAL_PREFIX) or spec.backend in REMOTE_BACKENDS:  # an endpoint: checked when reached
            continue
        if spec.model.startswith(OFFLINE_PREFIX):
            check_offline_model(spec.model)
            continue
        folder = os.path.expanduser(spec.model)
        if os.path.isabs(folder) or os.path.isdir(folder):
            if not os.path.isfile(os.path.join(folder, "config.json")):
                raise FileNotFoundError(f"cell {cell.name}: {where}.model = {spec.model} holds no Hugging Face "
                                        "model (no config.json); download the weights there or point the field "
                                        "(or its environment variable) at them")
        elif not _on_hub(spec.model):
            raise FileNotFoundError(
                f"cell {cell.name}: {where}.model = {spec.model!r} is neither a local folder nor in this machine's "
                "Hugging Face cache, and the hub cannot be reached: on a connected machine run "
                f"`hf download {spec.model}` (then copy the cache, $HF_HOME) or point the field (or its "
                "environment variable) at a folder holding the weights")
    if environment and cell.runs_environment:
        cell.env.instances()


def _on_hub(name: str) -> bool:
    """The model is in the local Hugging Face cache, or (unless HF_HUB_OFFLINE) the hub answers for it."""
    import huggingface_hub
    import huggingface_hub.constants  # huggingface_hub 2.4 no longer loads it on attribute access

    if isinstance(huggingface_hub.try_to_load_from_cache(name, "config.json"), str):
        return True
    if huggingface_hub.constants.HF_HUB_OFFLINE or not hub_reachable():  # no request where none can answer
        return False
    try:
        huggingface_hub.model_info(name, timeout=10)
    except Exception:  # offline, unknown, gated: the loader would fail the same way, later
        return False
    return True


def _check_finished_behaviour(cell: CellConfig) -> None:
    """``AdwmConfig.check_behaviour`` on the cell's finished behaviour log, where its settings ask
    for success-bank guidance (a variant reuses the log and the world model, whose stage asks it)."""
    if cell.adwm.guidance != "success_bank":
        return
    behaviour = pipeline.locate(cell, "behaviour")
    if pipeline.is_finished(behaviour):
        cell.adwm.check_behaviour(read_table(behaviour.file("trajectories"), TRAJECTORIES))
