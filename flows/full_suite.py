"""full-suite: every cell as its own flow run of deployment ``ope-cell/<cell>`` on the work
pool (scheduled nightly in prefect.yaml); fails when any cell fails, after all have run."""

from __future__ import annotations

import fnmatch

from prefect import flow, task
from prefect.deployments import run_deployment

from flows.cells import cell_names


@task(name="run-cell")
def queue_cell(cell: str, smoke: bool = False) -> str:
    """Queue deployment ``ope-cell/<cell>`` (in smoke mode if ``smoke``) and wait for its flow
    run; its final state."""
    parameters = {"smoke": True} if smoke else None  # a real run's parameters stay the deployment's own
    return run_deployment(f"ope-cell/{cell}", parameters=parameters, timeout=None, as_subflow=True).state.type.value


@flow(name="full-suite", log_prints=True)
def full_suite(cells: list[str] | None = None, pattern: str = "*", smoke: bool = False) -> dict[str, str]:
    """``cells``: names under deployments/ (default: every one matching ``pattern``, e.g.
    ``local-*`` for the cells that run offline on CPU). ``smoke``: each cell in smoke mode
    (stand-in models, CPU, minutes; adwm_core/smoke.py). Returns cell → final state."""
    names = cells or fnmatch.filter(cell_names(), pattern)
    if not names:
        raise ValueError(f"no cell under deployments/ matches {pattern!r}")
    states = dict(zip(names, queue_cell.map(names, smoke=smoke).result()))
    print("\n".join(f"{name}: {state}" for name, state in states.items()))
    failed = [name for name, state in states.items() if state != "COMPLETED"]
    if failed:
        raise RuntimeError(f"cells that did not complete: {failed}")
    return states
