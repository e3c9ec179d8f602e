"""The ADWM stage: π_e over the ε family in imagined rollouts of a trained world model → the
estimates Parquet, its timings, imagined samples, per-rollout bounds and what answered the
steps (ope/imagination/driver.py)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from ..data.io import atomic_open
from ..ope.imagination.driver import run_adwm

if TYPE_CHECKING:
    from ..pipeline import StageRun


def _handover_actions(run: StageRun) -> str | None:
    """The table of π_e's greedy actions at the logged steps the hand-over's FQE reads (the log-prob
    stage's or the greedy-action stage's, ``adwm.handover_actions``), None where it hands nothing over."""
    source = run.cell.adwm.handover_actions
    if source not in run.inputs:
        return None
    return run.input(source, {"logprobs": "logprobs", "greedy": "actions"}[source])


def compute(run: StageRun) -> None:
    """The stage of a cell: imagined steps and where the time went (``wall_seconds``: the whole
    stage) kept as ``timings`` and reported as metrics."""
    cell, policy, timings = run.cell, run.resolved(run.policy), {}
    started = time.perf_counter()
    with run.tracker.progress(f"imagined rollouts [{policy.label}], seeds") as progress:
        run_adwm(run.input("behaviour", "trajectories"), run.input("world-model", "members"), policy, cell.env.name,
                 run.output("estimates"), cell=cell.name,
                 psi=run.input("psi", "adapter") if "psi" in run.inputs else None,
                 epsilons=cell.evaluation.epsilons, config=cell.adwm,
                 logprobs=_handover_actions(run),
                 fqe=cell.handover_fqe, timings=timings, progress=progress, units=run.units,
                 samples=run.output("samples"), rollouts=run.output("rollouts"), answers=run.output("answers"))
    timings["wall_seconds"] = time.perf_counter() - started
    with atomic_open(run.output("timings"), "w") as f:
        json.dump(timings, f, indent=2)
    run.tracker.metrics(timings)
