"""Two runs of one new cell at once, as two nightly deployments or two users may start them:
each stage is computed by one run, the other waits for it (the stage's file lock) or reuses it."""

import glob
import os
import signal
import subprocess
import sys

import mlflow
import yaml
from conftest import tiny_cell

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_two_runs_of_one_cell_at_once_both_complete_and_compute_each_stage_once(tiny_policies, tmp_path):
    """Two processes run the same new cell side by side (each its own Prefect server and MLflow
    store, one artifact root): both finish, every stage has one artifact, and across the two
    runs each stage was computed by exactly one of them — the other waited for it (the stage's
    file lock) or found it finished."""
    config = yaml.safe_load(open(tiny_cell(tmp_path / "tiny-twice.yaml", tiny_policies)))
    config["name"] = "tiny-twice"
    config["adwm"].update(reading="retrieval", seeds=[0])  # what runs matters here, not how well: small sizes
    config["world_model"]["epochs"] = 5
    config["ground_truth"]["episodes"] = 2
    (tmp_path / "tiny-twice.yaml").write_text(yaml.safe_dump(config))
    runs = []
    for n in (1, 2):
        env = dict(os.environ, PREFECT_HOME=str(tmp_path / f"prefect-{n}"),
                   PREFECT_RESULTS_LOCAL_STORAGE_PATH=str(tmp_path / f"prefect-{n}" / "storage"),
                   PREFECT_MEMO_STORE_PATH=str(tmp_path / f"prefect-{n}" / "memo_store.toml"),
                   MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow-{n}.db")
        output = open(tmp_path / f"run-{n}.log", "w")
        runs.append((subprocess.Popen([sys.executable, "-m", "flows.ope_cell", str(tmp_path / "tiny-twice.yaml")],
                                      cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT,
                                      start_new_session=True), output))
    try:
        for process, _ in runs:
            process.wait(timeout=900)
    finally:
        for process, output in runs:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            output.close()
    logs = [(tmp_path / f"run-{n}.log").read_text() for n in (1, 2)]
    for (process, _), log in zip(runs, logs):
        assert process.returncode == 0, log[-3000:]
    cell = os.path.join(os.environ["ADWM_HOME"], "cells", "tiny-twice")
    computed: dict[str, int] = {}
    for n in (1, 2):
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow-{n}.db")
        for run in mlflow.search_runs(search_all_experiments=True, output_format="list"):
            if "reused" in run.data.params:
                computed[run.info.run_name] = computed.get(run.info.run_name, 0) + (run.data.params["reused"] == "False")
    stages = ("behaviour", "ground-truth", "logprobs", "world-model", "adwm", "baselines", "report")
    assert computed == {f"{s} [late]" if s in ("ground-truth", "logprobs", "adwm", "baselines") else s: 1
                        for s in stages}, computed
    for stage in stages:
        (folder,) = glob.glob(os.path.join(cell, stage, "*"))
        assert os.path.exists(os.path.join(folder, "_COMPLETE"))
    assert any("another run is computing" in log for log in logs)  # started together, they met at a stage
