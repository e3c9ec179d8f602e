"""Scale-out through prefect-dask: with ADWM_TASK_RUNNER=dask a cell's stages run on the Dask
cluster at ADWM_DASK_ADDRESS — here a real local cluster of one worker process."""

import os

import pytest
from conftest import tiny_cell


def test_the_task_runner_comes_from_the_environment(monkeypatch):
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    from flows.runners import cell_task_runner

    monkeypatch.delenv("ADWM_TASK_RUNNER", raising=False)
    assert isinstance(cell_task_runner(), ThreadPoolTaskRunner)
    monkeypatch.setenv("ADWM_TASK_RUNNER", "dask")
    monkeypatch.setenv("ADWM_DASK_ADDRESS", "tcp://10.0.0.7:8786")
    runner = cell_task_runner()
    assert isinstance(runner, DaskTaskRunner) and runner.address == "tcp://10.0.0.7:8786"
    monkeypatch.setenv("ADWM_TASK_RUNNER", "spark")
    with pytest.raises(ValueError, match="ADWM_TASK_RUNNER='spark'; expected one of"):
        cell_task_runner()


@pytest.fixture
def environment_restored():
    """os.environ as it was before the test: Dask's nanny writes its workers' environment
    (OMP_NUM_THREADS=1, PYTHONHASHSEED, …) into this process's before it spawns them, and every
    later subprocess of the session would inherit it (a single-threaded torch there)."""
    kept = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(kept)


def test_ground_truth_rollouts_run_on_a_dask_worker(environment_restored, tmp_path, tiny_policies, monkeypatch):
    import dask
    from distributed import Client, LocalCluster, get_task_stream
    from prefect import flow
    from prefect.testing.utilities import prefect_test_harness

    from adwm_core.cell import CellConfig
    from adwm_core.data import GROUND_TRUTH, read_table
    from flows.runners import cell_task_runner
    from tasks.stages import submit

    config = CellConfig.load(tiny_cell(tmp_path / "tiny-dask.yaml", tiny_policies))
    config = config.replace(name="tiny-dask", ground_truth=config.ground_truth.replace(episodes=2))  # where, not how many
    # as README's `dask worker` line: non-daemonic workers, since a stage starts engine processes
    with dask.config.set({"distributed.worker.daemon": False}), LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client, prefect_test_harness(server_startup_timeout=120):
        monkeypatch.setenv("ADWM_TASK_RUNNER", "dask")
        monkeypatch.setenv("ADWM_DASK_ADDRESS", cluster.scheduler_address)

        @flow(task_runner=cell_task_runner())
        def rollouts():
            return submit("ground-truth", config, None, config.evaluation.policies[0]).result()

        with get_task_stream(client) as stream:
            artifact = rollouts()
    assert any(record["key"].startswith("ground_truth-") for record in stream.data), [r["key"] for r in stream.data]
    summary = read_table(artifact.file("summary"), GROUND_TRUTH)
    assert sorted(summary.column("epsilon").to_pylist()) == [0.0, 0.5, 1.0]
    assert os.path.exists(os.path.join(artifact.path, "_COMPLETE"))
