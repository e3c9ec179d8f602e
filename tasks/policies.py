"""Before any stage: the cell checked and its GPU shared (adwm_core/runnable.py), as a Prefect task."""

from __future__ import annotations

from prefect import task

from adwm_core.cell import CellConfig
from adwm_core.runnable import prepared


@task(name="prepare-policies")
def prepare_policies(cell: CellConfig, environment: bool = True) -> CellConfig:
    """:func:`adwm_core.runnable.prepared` in the flow run."""
    return prepared(cell, environment=environment)
