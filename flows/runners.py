"""The task runner of a cell's flow, chosen where the flow runs (a worker's environment or a
deployment's job variables), never in code:

    ADWM_TASK_RUNNER unset or "threads"   Prefect's thread pool on the worker (the default)
    ADWM_TASK_RUNNER=dask                 prefect-dask: stages go to the Dask cluster at
                                          ADWM_DASK_ADDRESS (tcp://host:8786), or to a local
                                          cluster of the worker's cores when it is unset

A Dask cluster of CPU nodes spreads the environment-heavy stages (behaviour collection and
ground-truth rollouts of local cells) beyond one machine; every node needs this repository's
environment and the artifact root ``ADWM_HOME`` on shared storage (an fsspec URL or a shared
mount), since stages hand each other folders, not objects. A stage starts its own engine
processes, which Dask's default daemonic workers may not: start workers with
``DASK_DISTRIBUTED__WORKER__DAEMON=False dask worker <scheduler address>`` (a local cluster
is configured so here).
"""

from __future__ import annotations

import os

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

RUNNERS = ("threads", "dask")


def cell_task_runner() -> TaskRunner:
    kind = os.environ.get("ADWM_TASK_RUNNER", "threads")
    if kind == "threads":
        return ThreadPoolTaskRunner()
    if kind == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError:
            raise RuntimeError('ADWM_TASK_RUNNER=dask needs prefect-dask: pip install -e ".[dask]"') from None
        import dask

        dask.config.set({"distributed.worker.daemon": False})  # stages start engine processes
        address = os.environ.get("ADWM_DASK_ADDRESS")
        return DaskTaskRunner(address=address) if address else DaskTaskRunner()
    raise ValueError(f"ADWM_TASK_RUNNER={kind!r}; expected one of {RUNNERS}")
