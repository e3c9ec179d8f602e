"""The greedy-action stage: π_e's own action at every logged step and nothing scored — all that
FQE's target policy reads, V(s) = Σ_a π_e^ε(a|s) Q(s, a) with π_e^ε = (1 − ε)·greedy + ε·uniform.
ADWM's hand-over reads it where no importance weight is formed (``adwm.handover_actions:
greedy``, as evaluate-policy scores a new agent), instead of the log-prob stage, which also scores
π_e's log-prob of every logged action."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..collection import greedy_actions

if TYPE_CHECKING:
    from ..pipeline import StageRun


def compute(run: StageRun) -> None:
    cell = run.cell
    greedy_actions(run.input("behaviour", "trajectories"), cell.env.name, run.resolved(run.policy),
                   run.output("actions"), epsilons=cell.evaluation.epsilons)
