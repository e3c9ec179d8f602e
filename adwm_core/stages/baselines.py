"""The COBS baselines stage: behaviour trajectories + log-probs + a trained world model → every
configured classical estimator's rows (ope/classical/meta.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ope.classical.meta import run_baselines

if TYPE_CHECKING:
    from ..pipeline import StageRun


def compute(run: StageRun) -> None:
    run_baselines(run.input("behaviour", "trajectories"), run.input("logprobs", "logprobs"),
                  run.input("world-model", "members"), run.output("estimates"), cell=run.cell.name,
                  policy=run.policy.name, config=run.cell.baselines, not_applicable_out=run.output("not_applicable"))
