"""The behaviour stage: π_b's pool × prompt variants run in the environment, or the user's logs
imported (data/logs.py) — one trajectories file either way."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..collection import collect_behavior
from ..data.logs import SUMMARY_FILE, import_logs

if TYPE_CHECKING:
    from ..pipeline import StageRun


def compute(run: StageRun) -> None:
    cell, out = run.cell, run.output("trajectories")
    if cell.behaviour.logs is not None:
        summary = import_logs(cell.behaviour.logs, out, cell=cell.name)
        print("\n".join(summary.lines()))
        run.tracker.keep(os.path.join(os.path.dirname(out), SUMMARY_FILE))  # how the logs were read, in MLflow
        run.tracker.metrics({"episodes": summary.episodes, "steps": summary.steps, "successes": summary.successes})
        return
    pool = [run.resolved(spec) for spec in cell.behaviour.pool]
    with run.tracker.progress("behaviour episodes") as progress:
        collect_behavior(cell.env, pool, cell.behaviour.episodes, out, cell=cell.name,
                         variants=cell.behaviour.variants, progress=progress)
