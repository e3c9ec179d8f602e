"""Behaviour data: π_b's pool × prompt variants run in the environment, or the user's own logs
imported (one stage either way: downstream stages read the same trajectories file)."""

from __future__ import annotations

from prefect import task
from prefect.tasks import exponential_backoff

from adwm_core.cell import CellConfig
from adwm_core.stages.collection import collect_behavior
from adwm_core.stages.logs import fingerprint, import_logs

from .common import Artifact, Stage, keyed, stage_progress


def _settings(cell: CellConfig) -> dict:
    """The behaviour section (unset fields left out) and, for imported logs, their content hash."""
    behaviour = cell.with_policies(keyed).behaviour.model_dump(mode="json", exclude_none=True)
    if cell.behaviour.logs is not None:
        behaviour["logs_sha256"] = fingerprint(cell.behaviour.logs)
    return {"env": cell.env, "behaviour": behaviour}


STAGE = Stage("behaviour", _settings)
FILE = "trajectories.parquet"


@task(name="behaviour-collection", retries=2, retry_delay_seconds=exponential_backoff(10))
def collect(cell: CellConfig, parent_run: str | None) -> Artifact:
    def build(folder: str) -> None:
        with stage_progress(cell.name, "behaviour episodes") as progress:
            collect_behavior(cell.env, cell.behaviour.pool, cell.behaviour.episodes, f"{folder}/{FILE}", cell=cell.name,
                             variants=cell.behaviour.variants, progress=progress)

    return STAGE.run(cell, build, parent_run)


@task(name="behaviour-import")
def import_behaviour(cell: CellConfig, parent_run: str | None) -> Artifact:
    """The cell's ``behaviour.logs`` read and validated into the trajectories contract."""
    def build(folder: str) -> None:
        table = import_logs(cell.behaviour.logs, f"{folder}/{FILE}", cell=cell.name)
        print(f"imported {table.num_rows} steps of {len(set(table['episode'].to_pylist()))} episodes "
              f"from {cell.behaviour.logs.path}")

    return STAGE.run(cell, build, parent_run)


def behaviour_data(cell: CellConfig, parent_run: str | None) -> Artifact:
    """The cell's behaviour trajectories: imported where it names logs, else collected."""
    return (import_behaviour if cell.behaviour.logs is not None else collect)(cell, parent_run)
