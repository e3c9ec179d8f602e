"""Smoke mode (adwm_core/smoke.py): a seed cell's own config with stand-in models, on CPU,
scaled down, and official-format data written from offline sources; applied only when asked."""

import json
import os
import re

import pytest
import yaml

from adwm_core.cell import CellConfig, CellConfigError
from adwm_core.envs import make_env
from adwm_core.smoke import SMOKE_SETTINGS, smoke_cell
from flows.cells import cell_config_path

SEED_CELLS = ("hotpotqa-dpo", "hotpotqa-prm", "hotpotqa-cross", "scienceworld-eto", "alfworld-iter1",
              "alfworld-iter3", "webshop-iter1")
STAND_IN = "/models/stand-in"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def variables(cell: str) -> set[str]:
    with open(cell_config_path(cell)) as f:
        return set(re.findall(r"\$\{(\w+)\}", f.read()))


@pytest.mark.parametrize("cell", SEED_CELLS)
def test_the_overlay_keeps_the_cell_but_for_models_gpu_counts_and_name(cell, tmp_path):
    real = CellConfig.load(cell_config_path(cell), environ={v: f"/real/{v}" for v in variables(cell)})
    smoke, overlay = smoke_cell(cell_config_path(cell), STAND_IN, environ={}, data_root=str(tmp_path))
    assert smoke.name == f"{cell}-smoke" and not smoke.needs_gpu and real.needs_gpu
    assert {p.model for _, p in smoke.policies()} == {STAND_IN}
    # a tenth of a GPU each, so the smoke suite's cells fit on one card side by side
    assert {(p.backend, p.options["max_context"], p.options["gpu_memory_utilization"])
            for _, p in smoke.policies()} == {("vllm", 1024, 0.1)}
    # what a smoke run exists to exercise stays the cell's: backend, labels, variants, ε levels, horizon
    assert [(w, p.label, p.backend, p.variant) for w, p in smoke.policies()] == \
        [(w, p.label, p.backend, p.variant) for w, p in real.policies()]
    assert smoke.evaluation.epsilons == real.evaluation.epsilons
    assert (smoke.env.name, smoke.env.task, smoke.env.split, smoke.env.max_steps) == \
        (real.env.name, real.env.task, real.env.split, real.env.max_steps)
    assert smoke.adwm.horizon == real.adwm.horizon and smoke.adwm.reading == real.adwm.reading
    assert smoke.behaviour.episodes == SMOKE_SETTINGS["behaviour.episodes"] < real.behaviour.episodes
    assert smoke.ground_truth.episodes == SMOKE_SETTINGS["ground_truth.episodes"] < real.ground_truth.episodes
    assert smoke.world_model.steps == SMOKE_SETTINGS["world_model.steps"] and smoke.world_model.epochs is None
    assert overlay["models"] == {w: f"${{{v}}}" for (w, _), v in zip(
        real.policies(), [re.search(r"\$\{(\w+)\}", m).group(1) for m in _raw_models(cell)])}
    json.dumps(overlay)  # logged to MLflow as it is


def _raw_models(cell: str) -> list[str]:
    with open(cell_config_path(cell)) as f:
        raw = yaml.safe_load(f)
    return [p["model"] for p in raw["behaviour"]["pool"] + raw["evaluation"]["policies"]]


@pytest.mark.parametrize("cell, variable, official", [
    ("hotpotqa-dpo", "HOTPOTQA_DATA", "hotpot_dev_distractor_v1.json"),
    ("webshop-iter1", "WEBSHOP_DATA", "items_human_ins.json"),
    ("alfworld-iter1", "ALFWORLD_DATA", "json_2.1.1/valid_unseen"),
])
def test_unset_data_variables_get_official_files_that_the_official_loader_reads(cell, variable, official, tmp_path):
    smoke, overlay = smoke_cell(cell_config_path(cell), STAND_IN, environ={}, data_root=str(tmp_path))
    folder = overlay["data"][variable]
    assert smoke.env.options["data"] == folder and os.path.exists(os.path.join(folder, official))
    instances = smoke.env.instances()  # the official loader, on the cell's split
    assert instances
    task, variation = instances[0]
    with make_env(smoke.env.name, **smoke.env.options) as env:
        if hasattr(env, "official"):
            assert env.official
        env.reset(task, variation)
        results = [env.step(a) for a in env.gold_actions()]
    assert results[-1].done and results[-1].score > 0
    # a variable the user set keeps its value: their data, only the models stand in
    mine = tmp_path / "mine"
    smoke, overlay = smoke_cell(cell_config_path(cell), STAND_IN, environ={variable: str(mine)},
                                data_root=str(tmp_path))
    assert variable not in overlay["data"] and smoke.env.options["data"] == str(mine)


def test_a_local_cell_in_smoke_mode_drops_its_tiny_family(tmp_path):
    smoke, _ = smoke_cell(cell_config_path("local-simonsays"), STAND_IN, environ={}, data_root=str(tmp_path))
    assert smoke.local_policies is None and {p.model for _, p in smoke.policies()} == {STAND_IN}
    assert smoke.name == "local-simonsays-smoke"


def test_without_smoke_a_seed_cell_is_its_full_config(tmp_path, monkeypatch):
    from flows.ope_cell import load_cell

    for name in variables("webshop-iter1"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(CellConfigError, match="WEBSHOP_DATA is not set|LLAMA_31_8B_INSTRUCT is not set"):
        load_cell("webshop-iter1")  # what ope-cell runs without smoke: the YAML as written
    for name in variables("webshop-iter1"):
        monkeypatch.setenv(name, "/x")
    config, overlay = load_cell("webshop-iter1")
    assert overlay is None and config.name == "webshop-iter1" and config.needs_gpu
    assert config.behaviour.episodes == 640 and {p.model for _, p in config.policies()} == {"/x"}
    with pytest.raises(ValueError, match="only applies in smoke mode"):
        load_cell("webshop-iter1", stand_in=STAND_IN)
    path = cell_config_path("webshop-iter1")
    smoke_dir = tmp_path / "cell"
    smoke_dir.mkdir()
    renamed = smoke_dir / "c.yaml"
    with open(path) as f:
        raw = yaml.safe_load(f)
    renamed.write_text(yaml.safe_dump({**raw, "name": "webshop-iter1-smoke"}))
    with pytest.raises(CellConfigError, match="already a smoke cell"):
        smoke_cell(str(renamed), STAND_IN, environ={})


@pytest.mark.slow
def test_the_cheapest_seed_cell_runs_end_to_end_in_smoke_mode():
    """hotpotqa-prm as `python -m flows.ope_cell hotpotqa-prm --smoke` (embedded Prefect, MLflow on
    SQLite, SmolLM2 through vLLM, the official HotpotQA file written from the offline questions):
    about six minutes here (bench/results/smoke_cells.md)."""
    import subprocess
    import sys

    import mlflow

    from adwm_core.data import TRAJECTORIES, read_table

    home = os.environ["ADWM_HOME"]
    environ = {k: v for k, v in os.environ.items() if k not in ("HOTPOTQA_DATA", "MLFLOW_TRACKING_URI")}
    run = subprocess.run([sys.executable, "-m", "flows.ope_cell", "hotpotqa-prm", "--smoke"], env=environ,
                         cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    output = run.stdout + run.stderr  # Prefect's log of the printed overlay goes to stderr
    assert "smoke overlay of hotpotqa-prm" in output and "HOTPOTQA_DATA" in output
    cells = os.path.join(home, "cells")
    assert not os.path.exists(os.path.join(cells, "hotpotqa-prm"))  # nothing under the real cell's name
    stages = {s: os.listdir(os.path.join(cells, "hotpotqa-prm-smoke", s)) for s in os.listdir(
        os.path.join(cells, "hotpotqa-prm-smoke"))}
    assert {"behaviour", "ground-truth", "logprobs", "world-model", "adwm", "baselines", "report"} <= set(stages)
    for stage, keys in stages.items():
        assert all(os.path.exists(os.path.join(cells, "hotpotqa-prm-smoke", stage, k, "_COMPLETE")) for k in keys)

    (behaviour,) = stages["behaviour"]
    logged = read_table(os.path.join(cells, "hotpotqa-prm-smoke", "behaviour", behaviour, "trajectories.parquet"),
                        TRAJECTORIES).to_pandas()
    assert logged["episode"].nunique() == 8 and set(logged["policy"]) <= {"react-hotpotqa-sft@p0",
                                                                             "react-hotpotqa-sft@p1"}
    (report,) = stages["report"]
    with open(os.path.join(cells, "hotpotqa-prm-smoke", "report", report, "results.json")) as f:
        estimators = {row["estimator"] for row in json.load(f)}
    assert {"ADWM:reward_sum", "kNN-WM:reward_sum", "FQE", "DM", "WIS", "DR"} <= estimators

    mlflow.set_tracking_uri(f"sqlite:///{home}/mlflow.db")
    experiment = mlflow.get_experiment_by_name("cell/hotpotqa-prm-smoke")
    (parent,) = [r for r in mlflow.search_runs([experiment.experiment_id], output_format="list")
                 if "mlflow.parentRunId" not in r.data.tags]
    assert parent.data.tags["smoke"] == "true"
    overlay = mlflow.artifacts.load_dict(f"{parent.info.artifact_uri}/smoke_overlay.json")
    assert overlay["models"] == {"behaviour.pool[0]": "${HOTPOTQA_SFT_MODEL}",
                                 "evaluation.policies[0]": "${HOTPOTQA_PRM_MODEL}"}


def test_an_endpoint_policy_stands_in_on_transformers(tmp_path):
    cell = tmp_path / "endpoint.yaml"
    with open(cell_config_path("local-simonsays")) as f:
        raw = yaml.safe_load(f)
    raw["evaluation"]["policies"] = [{"label": "served", "model": "my-agent", "backend": "openai",
                                      "options": {"base_url": "http://10.0.0.1:8000/v1"}}]
    raw["adwm"] = {**raw.get("adwm", {}), "reading": "retrieval"}
    cell.write_text(yaml.safe_dump(raw))
    smoke, overlay = smoke_cell(str(cell), STAND_IN, environ={}, data_root=str(tmp_path))
    (agent,) = smoke.evaluation.policies
    assert (agent.model, agent.backend, dict(agent.options)) == (STAND_IN, "transformers", {"max_context": 1024})
    assert overlay["models"]["evaluation.policies[0]"] == "my-agent"
