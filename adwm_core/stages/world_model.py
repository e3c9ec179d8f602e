"""The world-model stage: trained once per environment and behaviour pool (π_e plays no part);
a pool ADWM cannot read (no success for success-bank guidance) is refused before training."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..data import TRAJECTORIES, read_table
from ..training.world_model import train_world_model

if TYPE_CHECKING:
    from ..pipeline import StageRun


def check(run: StageRun) -> None:
    run.cell.adwm.check_behaviour(read_table(run.input("behaviour", "trajectories"), TRAJECTORIES))


def compute(run: StageRun) -> None:
    config = run.cell.world_model
    table = read_table(run.input("behaviour", "trajectories"), TRAJECTORIES)
    with run.tracker.progress("world-model rounds") as progress:
        def on_epoch(epoch: int, metrics: dict) -> None:
            run.tracker.metrics(metrics, step=epoch)
            if progress is not None:
                progress(epoch + 1, config.rounds)

        train_world_model(table, run.output("model"), config, on_epoch=on_epoch)
    if "://" not in run.output("model"):
        run.tracker.keep(run.output("model"), "world_model")  # the selected checkpoint and its config
