"""What the benchmarks share: where the repository and the results are, the machine's description,
the default local environment with its cached tiny policy family, which cells are development
and admitted test cells, and a cell's finished stage artifacts — found, through the stage
registry (adwm_core/pipeline.py), by :func:`artifact` and nothing else.

Importing this module costs no torch, Prefect or MLflow (each loads where a function needs it),
so a bench runs its ``--help`` at once and ``bench.costs.gpu_smoke`` imports it on a bare worker.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from adwm_core import pipeline
from adwm_core.cell import CellConfig
from adwm_core.data import TRAJECTORIES, read_table
from adwm_core.envs.registry import DEFAULT_LOCAL_ENV
from adwm_core.paths import local_cache_dir
from adwm_core.specs import EnvSpec, PolicySpec
from flows.cells import cell_config_path

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"  # every bench writes here (bench/results/*.md, *.json)

# --------------------------------------------------------------------------- the default local cell

CHECKPOINTS = {"iter0": 300, "iter1": 600, "iter2": 1200}
TRAIN_VARIATIONS = 40  # the first training variations fine-tune; episodes come from the rest


def default_env() -> EnvSpec:
    """The default local environment on training variations the tiny family never saw (horizon 12)."""
    name, task, options = DEFAULT_LOCAL_ENV
    return EnvSpec(name, task, options, split="train", max_steps=12, skip_variations=TRAIN_VARIATIONS)


def machine() -> dict:
    import torch

    facts = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
             "python": platform.python_version(), "torch_threads": torch.get_num_threads(),
             "date": time.strftime("%Y-%m-%d")}
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
    return facts


def tiny_family() -> dict[str, str]:
    """The tiny GPT-2 family fitted to the default local environment, trained once under ``$ADWM_HOME``."""
    from adwm_core.policies.trainer import train_tiny_policies

    folder = os.path.join(local_cache_dir("bench"), "tiny-default")
    if all(os.path.exists(os.path.join(folder, name, "config.json")) for name in CHECKPOINTS):
        return {name: os.path.join(folder, name) for name in CHECKPOINTS}
    name, task, options = DEFAULT_LOCAL_ENV
    start = time.perf_counter()
    paths = train_tiny_policies(name, options, task, folder, CHECKPOINTS, n_variations=TRAIN_VARIATIONS)
    print(f"trained the tiny family in {time.perf_counter() - start:.0f} s", flush=True)
    return paths


def default_behaviour(n_episodes: int, family: dict[str, str]):
    """``n_episodes`` behaviour episodes of the tiny ``family`` × prompts on :func:`default_env`,
    collected once under ``$ADWM_HOME/bench/world-model`` (bench.costs.world_model_training trains
    on them, bench.tables.adwm_estimates estimates from them)."""
    from adwm_core.collection import collect_behavior

    path = os.path.join(local_cache_dir("bench", "world-model"), f"behaviour-{n_episodes}.parquet")
    if not os.path.exists(path):
        pool = [PolicySpec(f"tiny-{label}", family[label]) for label in CHECKPOINTS]
        collect_behavior(default_env(), pool, n_episodes, path, cell="bench")
    return read_table(path, TRAJECTORIES)


# ------------------------------------------------------------------------------------------ cells

TEST = "test-"  # the prefix of every declared test cell's name (deployments/TEST_CELLS.md)
ADWM = "ADWM:reward_sum"  # the estimator the tables and studies grade
BENCH = REPO / "bench" / "bench.yaml"  # which cells are development cells, which form test batches


def _bench() -> dict:
    return yaml.safe_load(BENCH.read_text())


def development_cells() -> list[str]:
    """Every development cell (bench/bench.yaml): every cell whose estimator figures were read."""
    return list(_bench()["development"])


def test_batches() -> dict[str, list[str]]:
    """Each declared test batch's cells (bench/bench.yaml), by batch name."""
    return {batch: list(entry["cells"]) for batch, entry in (_bench().get("test") or {}).items()}


def stored_world_models() -> list[str]:
    """The cells whose world model bench/store keeps whole (bench/bench.yaml, ``store``); the others'
    are trained again on restore and checked against the SHA-256 kept of them."""
    return list((_bench().get("store") or {}).get("world_models") or [])


def batch_cells(batch: str) -> list[str]:
    """The admitted cells of a declared test batch, in declaration order."""
    batches = test_batches()
    if batch not in batches:
        raise SystemExit(f"no test batch {batch!r} in bench/bench.yaml; batches: {sorted(batches)}")
    return [cell for cell in batches[batch] if cell in admitted_cells()]


def bench_cells(names: list[str]) -> list[str]:
    """Cells named, a test batch's admitted cells where a name is a batch, every development cell
    for ``development``: each once, in order."""
    batches = test_batches()
    found = [cell for name in names for cell in (development_cells() if name == "development" else
                                                 batch_cells(name) if name in batches else [name])]
    return list(dict.fromkeys(found))


def cell_config(cell: str) -> CellConfig:
    """The config of ``cell`` (a name under deployments/ or a YAML path), as written."""
    return CellConfig.load(cell_config_path(cell))


def admitted_cells() -> list[str]:
    """The test cells the admission rule admitted (bench/results/admission.json)."""
    path = RESULTS / "admission.json"
    if not path.exists():
        raise SystemExit("no admission yet: run python -m bench.tables.heldout --admit")
    return [c for c, v in json.loads(path.read_text())["cells"].items() if v["admitted"]]


def write_grouped(name: str, title: str, doc: str, results: dict[str, dict],
                  table: Callable[[str, dict], list[str]]) -> None:
    """A study's results by group of cells (title → cell → result) → bench/results/<name>.json and
    <name>.md: the title, ``doc`` (the module docstring) between its first paragraph and its "→"
    line, a ``table`` per group and the machine; the markdown printed."""
    (RESULTS / f"{name}.json").write_text(json.dumps({"machine": machine(), "cells": results}, indent=2))
    lines = [f"# {title}", "", doc.split("\n\n", 1)[1].rsplit("→", 1)[0].strip(), ""]
    for group, by_cell in results.items():
        lines += table(group, by_cell)
    lines.append(f"Machine: `{json.dumps(machine())}`")
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def slug(settings: dict[str, object]) -> str:
    """A file name for ``--set`` settings, e.g. ``{"adwm.off_log": "fqe"}`` → ``adwm.off-log-fqe``."""
    return "_".join(re.sub(r"[^A-Za-z0-9.]+", "-", f"{k}-{v}") for k, v in sorted(settings.items()))


# ------------------------------------------------------------------------------- finished artifacts

def evaluated(cell: CellConfig, label: str | None = None) -> PolicySpec:
    """The cell's π_e labelled ``label`` (default: its first)."""
    policies = cell.evaluation.policies
    found = [p for p in policies if label in (None, p.label)]
    if not found:
        raise SystemExit(f"{cell.name} evaluates no policy labelled {label!r}: {[p.label for p in policies]}")
    return found[0]


def stage_file(root: str | None, cell: str, stage: str, name: str) -> str:
    """The one ``name`` of ``cell``'s ``stage`` under the artifact root ``root`` (stage folders found
    by name, whatever their key: artifacts of an earlier commit whose rows today's code reproduces
    serve as they are); ``root`` None: of the stage finished under today's code in $ADWM_HOME
    (``cell`` a name or a variant's YAML)."""
    if root is None:
        return f"{artifact(cell, stage).path}/{name}"
    found = glob.glob(f"{root}/cells/{cell}/{stage}/*/{name}")
    if len(found) != 1:
        raise SystemExit(f"{cell}: {len(found)} finished {stage} stages hold {name} under {root}/cells (one needed)")
    return found[0]


def evaluated_in_root(root: str | None, cell: str) -> PolicySpec:
    """The cell's first π_e, a ``local:`` checkpoint read from the policies stage under ``root``
    (None: today's in $ADWM_HOME)."""
    from adwm_core.cell import LOCAL_PREFIX

    spec = evaluated(cell_config(cell))
    if not spec.model.startswith(LOCAL_PREFIX):
        return spec
    return spec.replace(model=f"{stage_file(root, cell, 'policies', 'family')}/{spec.model[len(LOCAL_PREFIX):]}")


def artifact(cell: CellConfig | str, stage: str, policy: PolicySpec | str | None = None, *,
             required: bool = True) -> pipeline.Artifact | None:
    """The finished artifact of ``stage`` for ``cell`` (a config, a cell name or a YAML path) as
    configured under today's code (``pipeline.finished``); for a per-π_e stage, of ``policy`` (a
    spec, or the label of one of the cell's π_e; default its first). Where it is not finished:
    exit with the pipeline's message, or None when not ``required``."""
    config = cell if isinstance(cell, CellConfig) else cell_config(cell)
    if pipeline.stage(stage).per_policy and not isinstance(policy, PolicySpec):
        policy = evaluated(config, policy)
    try:
        return pipeline.finished(config, stage, policy)
    except FileNotFoundError as error:
        if not required:
            return None
        raise SystemExit(f"{error}\n(or run python -m bench.tables.main_results {config.name})") from None


def ground_truth(cell: str) -> list[dict]:
    """The cell's ground-truth points (policy, epsilon, mean_return, stderr, n_episodes),
    computing the ``policies`` and ``ground-truth`` stages where they are not finished."""
    import pyarrow.parquet as pq

    config = cell_config(cell)
    if config.local_policies:
        pipeline.run(config, "policies")
    points = []
    for policy in config.evaluation.policies:
        summary = pipeline.run(config, "ground-truth", policy).file("summary")
        points += pq.read_table(summary, columns=["policy", "epsilon", "mean_return", "stderr",
                                                  "n_episodes"]).to_pylist()
    return points


def point_truth(report: pipeline.Artifact) -> dict[tuple[str, float], float]:
    """(policy, ε) → J of a finished report's points (its curves' ground truth)."""
    with open(report.file("curves")) as f:
        curves = json.load(f)
    return {(p, float(e)): j for p, e, j in zip(curves["policy"], curves["epsilon"], curves["ground_truth"])}


def world_model_histories(cell: str) -> list[dict] | None:
    """The last training round of each member of the cell's finished world model (its
    history.json: seconds so far, transitions/s, ...); None where it is not finished."""
    from adwm_core.model.world_model import member_paths
    from adwm_core.training.world_model import HISTORY_FILE

    stage = artifact(cell, "world-model", required=False)
    if stage is None:
        return None
    return [json.loads(open(f"{member}/{HISTORY_FILE}").read())["epochs"][-1]
            for member in member_paths(stage.file("members"))]


def evaluated_policy(cell: CellConfig, preset: str):
    """(π_e as the cell's first evaluated policy, π_e with its ψ adapter under a soft-token
    reading — the cell's ψ stage, computed where not finished — else ``None``; the ADWM settings
    under ``preset``)."""
    from adwm_core.model.psi import PsiAdapter
    from adwm_core.ope.settings import ADWM_PRESETS
    from adwm_core.policies.loading import ModelCache
    from adwm_core.policies.soft_prompt import SoftPromptPolicy

    policy = evaluated(cell)
    spec = pipeline.resolved(cell, policy)
    config = cell.adwm.replace(preset=preset, **dict.fromkeys(ADWM_PRESETS[preset]))
    llm = ModelCache().policy(spec, cell.env.name)
    soft = None
    if config.reading == "soft_tokens":
        adapter = pipeline.run(cell, "psi", policy).file("adapter")
        soft = SoftPromptPolicy(llm, PsiAdapter.load(adapter))
    return spec, llm, soft, config


# ------------------------------------------------------------------------------------- flow runs

def stage_timings(home: str, cell: str) -> tuple[float, list[dict]]:
    """The latest flow run of ``cell`` tracked under artifact root ``home``: its wall seconds and
    each stage's ``{"stage", "start", "seconds"}`` (start in seconds after the flow's), by start."""
    import mlflow

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
