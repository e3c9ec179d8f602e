"""The policies stage of a local cell: its tiny family trained from the environment's gold
trajectories (policies/trainer.py), one Hugging Face folder per checkpoint under ``family``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..policies.trainer import train_tiny_policies

if TYPE_CHECKING:
    from ..pipeline import StageRun


def compute(run: StageRun) -> None:
    env, family = run.cell.env, run.cell.local_policies
    with run.tracker.progress("tiny-family training steps") as progress:
        train_tiny_policies(env.name, env.options, env.task, run.output("family"), family.checkpoints,
                            n_variations=family.n_variations, context=family.context, progress=progress)
