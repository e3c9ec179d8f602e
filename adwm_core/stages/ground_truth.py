"""The ground-truth stage: π_e^ε in the environment, every ε on the same episodes; the wall
seconds of each ε level are reported as metrics. Each finished level is kept as a unit, so a
killed run (a cancelled flow, a machine taken back) resumes at the first unfinished ε."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..collection import ground_truth_rollouts

if TYPE_CHECKING:
    from ..pipeline import StageRun


def compute(run: StageRun) -> None:
    cell, settings, policy = run.cell, run.cell.ground_truth, run.resolved(run.policy)
    seconds: dict[float, float] = {}
    with run.tracker.progress(f"ground-truth episodes of {policy.label}") as progress:
        ground_truth_rollouts(cell.env, policy, settings.episodes, run.output("episodes"), run.output("summary"),
                              cell=cell.name, epsilons=cell.evaluation.epsilons, seed=settings.seed,
                              progress=progress, timings=seconds, units=run.units)
    run.tracker.metrics({f"seconds_eps_{eps:g}": s for eps, s in seconds.items()})
