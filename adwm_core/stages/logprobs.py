"""The log-prob stage: log π_b and log π_e^ε of every logged action, for one π_e (its progress in
steps scored or acted on, each model's batches as they finish)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..collection import extract_logprobs

if TYPE_CHECKING:
    from ..pipeline import StageRun


def compute(run: StageRun) -> None:
    cell = run.cell
    with run.tracker.progress(f"log-prob steps of {run.policy.label}") as progress:
        extract_logprobs(run.input("behaviour", "trajectories"), cell.env.name,
                         [run.resolved(spec) for spec in cell.behaviour.pool], run.resolved(run.policy),
                         run.output("logprobs"), epsilons=cell.evaluation.epsilons, progress=progress)
