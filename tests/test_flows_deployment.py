"""The product's front door for real: a Prefect server and a worker on pool `gpu` on loopback,
`prefect deploy`, `prefect deployment run … --watch` to Completed, and the flow run's MLflow run.
(Named to run after test_flows.py, whose tiny cell it shares: its stages are then reused.)"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import mlflow
import pytest
import yaml

from adwm_core.policies.serving import free_port
from conftest import tiny_cell

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def start(args, env, log) -> subprocess.Popen:
    return subprocess.Popen(args, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s: a worker sometimes sits out its shutdown (31 s in one CI run),
    and a clean stop is test_stack's subject, not this module's."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


@pytest.fixture
def stack(tmp_path):
    """A Prefect server on a free loopback port with its own database, and a worker on pool gpu."""
    port = free_port()
    env = dict(os.environ, PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_API_URL=f"http://127.0.0.1:{port}/api",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_WORKER_QUERY_SECONDS="2",
               MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db", ADWM_REPO=REPO)
    os.makedirs(env["PREFECT_HOME"])
    log = open(tmp_path / "stack.log", "w")
    processes = [start([f"{BIN}/prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)], env, log)]
    try:
        for _ in range(180):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail(f"the Prefect server did not start: {(tmp_path / 'stack.log').read_text()[-2000:]}")
        prefect(env, "work-pool", "create", "gpu", "--type", "process")
        processes.append(start([f"{BIN}/prefect", "worker", "start", "--pool", "gpu", "--type", "process"], env, log))
        yield env
    finally:
        for process in reversed(processes):
            stop(process)
        log.close()


def prefect(env, *args, timeout=600) -> str:
    done = subprocess.run([f"{BIN}/prefect", *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def test_a_deployment_runs_through_the_cli_to_completed_and_is_tracked(stack, tiny_policies, tmp_path):
    """Through full-suite/test, which runs the cell as its own flow run of deployment ope-cell/tiny-flow
    (registered with the description, tags and version the project's prefect.yaml gives a cell)."""
    cell = tiny_cell(tmp_path / "tiny-flow.yaml", tiny_policies)
    with open(os.path.join(REPO, "prefect.yaml")) as f:
        (shipped,) = [d for d in yaml.safe_load(f)["deployments"] if d["name"] == "local-simonsays"]
    labels = {key: shipped[key] for key in ("description", "tags", "version")}
    project = {
        "name": "adwm-test", "prefect-version": "3.7.7",
        "pull": [{"prefect.deployments.steps.set_working_directory": {"directory": REPO}}],
        "deployments": [{"name": "tiny-flow", "entrypoint": "flows/ope_cell.py:ope_cell",
                         "parameters": {"cell": cell}, "work_pool": {"name": "gpu"}, **labels,
                         "concurrency_limit": {"limit": 1, "collision_strategy": "ENQUEUE"}},
                        {"name": "test", "entrypoint": "flows/full_suite.py:full_suite",
                         "parameters": {"cells": ["tiny-flow"]}, "work_pool": {"name": "gpu"}}],
    }
    (tmp_path / "prefect.yaml").write_text(yaml.safe_dump(project))
    prefect(stack, "--no-prompt", "deploy", "--all", "--prefect-file", str(tmp_path / "prefect.yaml"))
    registered = json.loads(prefect(stack, "deployment", "inspect", "ope-cell/tiny-flow", "-o", "json"))
    assert registered["global_concurrency_limit"]["limit"] == 1  # prefect.yaml's one run at a time
    assert registered["concurrency_options"]["collision_strategy"] == "ENQUEUE"
    assert {key: registered[key] for key in labels} == labels  # what the Prefect UI filters and shows
    output = prefect(stack, "deployment", "run", "full-suite/test", "--watch")
    assert "Flow run finished successfully in 'Completed'" in output, output[-3000:]
    suite_run = re.search(r"UUID:\s*([0-9a-f-]{36})", output).group(1)
    mlflow.set_tracking_uri(stack["MLFLOW_TRACKING_URI"])
    experiment = mlflow.get_experiment_by_name("cell/tiny-flow")
    parents = [r for r in mlflow.search_runs([experiment.experiment_id], output_format="list")
               if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    cell_run = json.loads(prefect(stack, "flow-run", "inspect", parents[0].data.params["flow_run_id"], "-o", "json"))
    # the cell ran as its own flow run of deployment ope-cell/tiny-flow, queued by the suite's run
    assert cell_run["id"] != suite_run and cell_run["state_type"] == "COMPLETED"
    assert cell_run["parameters"] == {"cell": cell}


@pytest.mark.slow  # a second Prefect server and worker, ~1 min: `make test-all`
def test_evaluate_logs_runs_as_a_deployment_on_the_worker(stack, tiny_behaviour, tiny_policies, tmp_path):
    """`adwm evaluate` as deployment evaluate-logs/<name>: the user's logs (JSONL) and agent as
    parameters, run by the worker to Completed, its estimates in the cell named after the logs."""
    from adwm_core.data import ESTIMATES, TRAJECTORIES, read_table
    from adwm_core.data.logs import export_jsonl
    from conftest import tiny_env_spec

    logs = str(tmp_path / "deployed-logs.jsonl")
    export_jsonl(read_table(tiny_behaviour, TRAJECTORIES), logs)
    env = tiny_env_spec()
    parameters = {"logs": logs, "env": env.name, "task": env.task, "agent_model": tiny_policies["late"],
                  "agent_backend": "transformers", "epsilons": [0.0, 1.0],
                  "overrides": {"world_model.steps": 20, "adwm.n_rollouts": 4, "adwm.horizon": 4, "adwm.seeds": [0],
                                "adwm.guidance": "none", "baselines.n_bootstrap": 50, "baselines.fqe.epochs": 2}}
    project = {
        "name": "adwm-test", "prefect-version": "3.7.7",
        "pull": [{"prefect.deployments.steps.set_working_directory": {"directory": REPO}}],
        "deployments": [{"name": "tiny", "entrypoint": "flows/evaluate_logs.py:evaluate_logs",
                         "parameters": parameters, "work_pool": {"name": "gpu"}}],
    }
    (tmp_path / "prefect.yaml").write_text(yaml.safe_dump(project))
    prefect(stack, "--no-prompt", "deploy", "--all", "--prefect-file", str(tmp_path / "prefect.yaml"))
    output = prefect(stack, "deployment", "run", "evaluate-logs/tiny", "--watch")
    assert "Flow run finished successfully in 'Completed'" in output, output[-3000:]
    reports = os.path.join(stack["ADWM_HOME"], "cells", "logs-deployed-logs", "report")
    (folder,) = os.listdir(reports)
    rows = read_table(os.path.join(reports, folder, "estimates.parquet"), ESTIMATES).to_pylist()
    assert {(r["estimator"], r["epsilon"]) for r in rows} >= {("ADWM:reward_sum", 0.0), ("ADWM:reward_sum", 1.0),
                                                            ("FQE", 0.0), ("DM", 1.0)}
    assert not {r["estimator"] for r in rows} & {"IS", "WIS", "DR"}  # no behaviour log-probs in these logs
