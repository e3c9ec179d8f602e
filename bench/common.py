"""What the benchmarks share: the machine's description, the cached tiny policy family and a
cell's finished stage artifacts (found through the stage registry, adwm_core/pipeline.py)."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import mlflow
import torch

from adwm_core import pipeline
from adwm_core.cell import CellConfig
from adwm_core.specs import EnvSpec, PolicySpec
from adwm_core.envs.registry import DEFAULT_LOCAL_ENV
from adwm_core.paths import local_cache_dir
from adwm_core.policies.trainer import train_tiny_policies
from flows.cells import cell_config_path

RESULTS = Path(__file__).parent / "results"
CHECKPOINTS = {"iter0": 300, "iter1": 600, "iter2": 1200}
TRAIN_VARIATIONS = 40  # the first training variations fine-tune; episodes come from the rest


def default_env() -> EnvSpec:
    """The default local environment on training variations the tiny family never saw (horizon 12)."""
    name, task, options = DEFAULT_LOCAL_ENV
    return EnvSpec(name, task, options, split="train", max_steps=12, skip_variations=TRAIN_VARIATIONS)


def machine() -> dict:
    facts = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
             "python": platform.python_version(), "torch_threads": torch.get_num_threads(),
             "date": time.strftime("%Y-%m-%d")}
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
    return facts


def tiny_family() -> dict[str, str]:
    """The tiny GPT-2 family fitted to the default local environment, trained once under ``$ADWM_HOME``."""
    folder = os.path.join(local_cache_dir("bench"), "tiny-default")
    if all(os.path.exists(os.path.join(folder, name, "config.json")) for name in CHECKPOINTS):
        return {name: os.path.join(folder, name) for name in CHECKPOINTS}
    name, task, options = DEFAULT_LOCAL_ENV
    start = time.perf_counter()
    paths = train_tiny_policies(name, options, task, folder, CHECKPOINTS, n_variations=TRAIN_VARIATIONS)
    print(f"trained the tiny family in {time.perf_counter() - start:.0f} s", flush=True)
    return paths


def load_cell(cell: str) -> CellConfig:
    return CellConfig.load(cell_config_path(cell))


def evaluated(cell: CellConfig, label: str | None = None) -> PolicySpec:
    """The cell's π_e labelled ``label`` (default: its first)."""
    policies = cell.evaluation.policies
    found = [p for p in policies if label in (None, p.label)]
    if not found:
        raise SystemExit(f"{cell.name} evaluates no policy labelled {label!r}: {[p.label for p in policies]}")
    return found[0]


def artifact(cell: CellConfig, stage: str, label: str | None = None) -> pipeline.Artifact:
    """The finished artifact of ``stage`` for the cell as configured (of its π_e ``label``, default
    its first, for a per-π_e stage)."""
    policy = evaluated(cell, label) if pipeline.stage(stage).per_policy else None
    try:
        return pipeline.finished(cell, stage, policy)
    except FileNotFoundError as error:
        raise SystemExit(f"{error}\n(or run bench/main_results.py {cell.name})") from None


def stage_timings(home: str, cell: str) -> tuple[float, list[dict]]:
    """The latest flow run of ``cell`` tracked under artifact root ``home``: its wall seconds and
    each stage's ``{"stage", "start", "seconds"}`` (start in seconds after the flow's), by start."""
    mlflow.set_tracking_uri(f"sqlite:///{home}/mlflow.db")
    experiment = mlflow.get_experiment_by_name(f"cell/{cell}")
    runs = mlflow.search_runs([experiment.experiment_id], output_format="list",
                              order_by=["attributes.start_time DESC"])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    stages = sorted(({"stage": r.info.run_name, "start": (r.info.start_time - parent.info.start_time) / 1000,
                      "seconds": (r.info.end_time - r.info.start_time) / 1000} for r in children),
                    key=lambda s: s["start"])
    return (parent.info.end_time - parent.info.start_time) / 1000, stages
