"""Two runs of one new cell at once, as two nightly deployments or two users may start them:
each stage is computed by one run, the other waits for it (the stage's file lock) or reuses it."""

import collections
import glob
import os
import signal
import subprocess
import sys

import mlflow
import pytest
import yaml
from conftest import tiny_cell

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ("behaviour", "ground-truth", "logprobs", "world-model", "adwm", "baselines", "report")
IN_PROCESS = "import sys; from adwm_core.cell import CellConfig; from adwm_core.pipeline import run_all; " \
             "run_all(CellConfig.load(sys.argv[1]))"


def small_cell(tmp_path, tiny_policies, name: str) -> str:
    """The tiny cell at the smallest sizes that run every stage (what runs matters here, not how well)."""
    config = yaml.safe_load(open(tiny_cell(tmp_path / f"{name}.yaml", tiny_policies)))
    config["name"] = name
    config["adwm"].update(reading="retrieval", seeds=[0])
    config["world_model"]["epochs"] = 5
    config["ground_truth"]["episodes"] = 2
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
    return str(tmp_path / f"{name}.yaml")


def run_twice(command: list[str], tmp_path, environments: list[dict]) -> list[str]:
    """``command`` in two processes started together, one per environment: their logs, once both
    ended with exit status 0."""
    runs = []
    for n, env in enumerate(environments, 1):
        output = open(tmp_path / f"run-{n}.log", "w")
        runs.append((subprocess.Popen(command, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT,
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
    return logs


def assert_one_artifact_per_stage(name: str) -> None:
    for stage in STAGES:
        (folder,) = glob.glob(os.path.join(os.environ["ADWM_HOME"], "cells", name, stage, "*"))
        assert os.path.exists(os.path.join(folder, "_COMPLETE"))


def test_two_in_process_runs_of_one_cell_at_once_both_complete_and_compute_each_stage_once(tiny_policies, tmp_path):
    """Two processes run the same new cell side by side without an orchestrator
    (``pipeline.run_all``: the Python API, ``adwm evaluate`` without a Prefect server), one
    artifact root: both finish, every stage has one artifact, and across the two runs each stage
    was computed by exactly one of them."""
    cell = small_cell(tmp_path, tiny_policies, "tiny-twice-in-process")
    logs = run_twice([sys.executable, "-c", IN_PROCESS, cell], tmp_path, [dict(os.environ)] * 2)
    computed = collections.Counter(line.split(":")[0] for log in logs for line in log.splitlines()
                                   if ": computing " in line)
    assert computed == {stage: 1 for stage in STAGES}, computed
    assert_one_artifact_per_stage("tiny-twice-in-process")
    assert any("another run is computing" in log for log in logs)  # started together, they met at a stage


@pytest.mark.slow  # two Prefect servers, ~1.5 min; the test above makes the same claim without Prefect
def test_two_runs_of_one_cell_at_once_both_complete_and_compute_each_stage_once(tiny_policies, tmp_path):
    """Two processes run the same new cell side by side (each its own Prefect server and MLflow
    store, one artifact root): both finish, every stage has one artifact, and across the two
    runs each stage was computed by exactly one of them — the other waited for it (the stage's
    file lock) or found it finished."""
    cell = small_cell(tmp_path, tiny_policies, "tiny-twice")
    logs = run_twice([sys.executable, "-m", "flows.ope_cell", cell], tmp_path, [dict(
        os.environ, PREFECT_HOME=str(tmp_path / f"prefect-{n}"),
        PREFECT_RESULTS_LOCAL_STORAGE_PATH=str(tmp_path / f"prefect-{n}" / "storage"),
        PREFECT_MEMO_STORE_PATH=str(tmp_path / f"prefect-{n}" / "memo_store.toml"),
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow-{n}.db") for n in (1, 2)])
    computed: dict[str, int] = {}
    for n in (1, 2):
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow-{n}.db")
        for run in mlflow.search_runs(search_all_experiments=True, output_format="list"):
            if "reused" in run.data.params:
                computed[run.info.run_name] = computed.get(run.info.run_name, 0) + (run.data.params["reused"] == "False")
    assert computed == {f"{s} [late]" if s in ("ground-truth", "logprobs", "adwm", "baselines") else s: 1
                        for s in STAGES}, computed
    assert_one_artifact_per_stage("tiny-twice")
    assert any("another run is computing" in log for log in logs)  # started together, they met at a stage


def test_a_failed_stage_is_named_first_on_the_flows_last_line_and_the_other_branches_are_kept(tiny_policies, tmp_path):
    """π_e's weights are unreadable: its ground truth, log-probs and ψ fail while the pool's behaviour
    and the world model finish (kept for a rerun); the run exits non-zero and its last line names the
    failed stages and their error first, then what they held back (issue 89)."""
    import shutil

    broken = tmp_path / "broken-late"
    shutil.copytree(tiny_policies["late"], broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    config = yaml.safe_load(open(small_cell(tmp_path, tiny_policies, "tiny-failing")))
    config["evaluation"]["policies"] = [{"label": "late", "model": str(broken)}]
    (tmp_path / "tiny-failing.yaml").write_text(yaml.safe_dump(config))
    run = subprocess.run([sys.executable, "-m", "flows.ope_cell", str(tmp_path / "tiny-failing.yaml")], cwd=REPO,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ope-cell ") and ": stage ground-truth [late@p0] failed: " in last, last
    assert last.index("failed") < last.index("held back") < last.index("adwm [late@p0]") < last.index("report"), last
    assert "finished and kept for a rerun: behaviour" in last and "world-model" in last, last
    for stage in ("behaviour", "world-model"):
        (folder,) = glob.glob(os.path.join(os.environ["ADWM_HOME"], "cells", "tiny-failing", stage, "*"))
        assert os.path.exists(os.path.join(folder, "_COMPLETE"))
