"""The world-model stage: trained once per environment and behaviour pool (π_e plays no part),
as ``world_model.members`` models (member 0 in the ``members`` folder, the others inside it);
a pool ADWM cannot read (no success for success-bank guidance) is refused before training."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..data import TRAJECTORIES, read_table
from ..training.world_model import train_ensemble

if TYPE_CHECKING:
    from ..pipeline import StageRun


def check(run: StageRun) -> None:
    run.cell.adwm.check_behaviour(read_table(run.input("behaviour", "trajectories"), TRAJECTORIES))


def compute(run: StageRun) -> None:
    config = run.cell.world_model
    table = read_table(run.input("behaviour", "trajectories"), TRAJECTORIES)
    with run.tracker.progress("world-model rounds") as progress:
        def on_epoch(member: int, epoch: int, metrics: dict) -> None:
            step = member * config.rounds + epoch  # members one after another on one axis
            run.tracker.metrics({**metrics, "member": member}, step=step)
            if progress is not None:
                progress(step + 1, config.members * config.rounds)

        train_ensemble(table, run.output("members"), config, on_epoch=on_epoch)
    if "://" not in run.output("members"):
        run.tracker.keep(run.output("members"), "world_model")  # the selected checkpoints and their configs
