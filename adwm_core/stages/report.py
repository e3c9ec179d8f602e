"""The report stage: every estimator of the cell graded against ground truth (report.py) —
markdown, results and curves JSON, the plot, every estimate and every ADWM rollout in one Parquet
each (with the points' verdicts and what the log cannot tell); the ρ table,
the coverage and width of each interval method and the trust diagnostics as metrics, the
report, curves and plot kept with the tracked run."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..data import ESTIMATES, GROUND_TRUTH, ROLLOUTS, read_table, write_table
from ..ope.statistics.bounds import ReturnRange
from ..report import read_reasons, report_metrics, write_report

if TYPE_CHECKING:
    from ..pipeline import StageRun

REPORTED = ("report", "results", "curves", "plot")


def return_range_and_scale(cell, trajectories: pa.Table | None) -> tuple[tuple[float, float], float | None]:
    """What the recommended estimate reads of the cell (ope/statistics/recommend.py): the return
    range — the environment's declared episode range, else its step range times the horizon
    (``env.max_steps``) — and the scale its errors are measured in, one kind of unit for every
    cell: the span of the logged episodes' returns (read without the truth; where the log is not at
    hand or its returns do not spread, the declared range's width, else None)."""
    returns = ReturnRange.declared(cell.env.name)
    declared = None if returns.episode is None else tuple(float(r) for r in returns.episode)
    low, high = declared or tuple(float(cell.env.max_steps * r) for r in returns.reward)
    fallback = None if declared is None else high - low
    if trajectories is None:
        return (low, high), fallback
    episode = [c for c in ("policy", "episode") if c in trajectories.column_names]
    spread = float(np.ptp(trajectories.group_by(episode).aggregate([("reward", "sum")])["reward_sum"].to_numpy()))
    return (low, high), spread if spread > 0 else fallback


def logged_rewards(path: str) -> pa.Table:
    """The behaviour log's policy, episode and reward columns alone (its texts are never read here;
    the behaviour stage validated the whole file when it wrote it)."""
    with fsspec.open(path, "rb") as f:
        present = pq.read_schema(f).names
    with fsspec.open(path, "rb") as f:
        return pq.read_table(f, columns=[c for c in ("policy", "episode", "reward") if c in present])


def compute(run: StageRun) -> None:
    """The cell's report; without a ``ground-truth`` input (a cell that cannot be run) it is ungraded."""
    estimates = pa.concat_tables([read_table(path, ESTIMATES) for stage in ("adwm", "baselines")
                                  for path in run.each_input(stage, "estimates")])
    summaries = run.each_input("ground-truth", "summary")
    truth = pa.concat_tables([read_table(path, GROUND_TRUTH) for path in summaries]) if summaries else None
    rollouts = pa.concat_tables([read_table(path, ROLLOUTS) for path in run.each_input("adwm", "rollouts")])
    write_table(estimates, run.output("estimates"), ESTIMATES)
    write_table(rollouts, run.output("rollouts"), ROLLOUTS)
    return_range, scale = return_range_and_scale(run.cell, logged_rewards(run.input("behaviour", "trajectories")))
    answers = {}
    for path in run.each_input("adwm", "answers"):
        with fsspec.open(path) as f:
            found = json.load(f)
        answers[found["policy"]] = found
    rows, curves = write_report(run.cell.name, estimates, truth, read_reasons(run.each_input("baselines", "not_applicable")),
                                {role: run.output(role) for role in REPORTED}, run.tracker.keep, rollouts=rollouts,
                                answers=answers, confidence=run.cell.adwm.confidence,
                                n_resamples=run.cell.adwm.n_bootstrap, return_range=return_range, scale=scale)
    run.tracker.metrics(report_metrics(rows, curves))
