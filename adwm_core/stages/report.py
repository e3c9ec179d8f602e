"""The report stage: every estimator of the cell graded against ground truth (report.py) —
markdown, results and curves JSON, the plot, every estimate and every ADWM rollout in one Parquet
each (with the points' verdicts and what the log cannot tell); the ρ table,
the coverage and width of each interval method and the trust diagnostics as metrics, the
report, curves and plot kept with the tracked run."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import fsspec
import pyarrow as pa

from ..data import ESTIMATES, GROUND_TRUTH, ROLLOUTS, read_table, write_table
from ..ope.statistics.bounds import PROTOCOL, ReturnRange
from ..report import read_reasons, report_metrics, write_report

if TYPE_CHECKING:
    from ..pipeline import StageRun

REPORTED = ("report", "results", "curves", "plot")


def declared_return_range(cell) -> tuple[float, float]:
    """An episode's return range as the cell's environment declares it; where it declares none,
    the protocol's step range [−1, 1], which bounds the return of the normalised-score games."""
    returns = ReturnRange.declared(cell.env.name)
    return tuple(returns.episode) if returns.episode is not None else PROTOCOL.reward


def compute(run: StageRun) -> None:
    """The cell's report; without a ``ground-truth`` input (a cell that cannot be run) it is ungraded."""
    estimates = pa.concat_tables([read_table(path, ESTIMATES) for stage in ("adwm", "baselines")
                                  for path in run.each_input(stage, "estimates")])
    summaries = run.each_input("ground-truth", "summary")
    truth = pa.concat_tables([read_table(path, GROUND_TRUTH) for path in summaries]) if summaries else None
    rollouts = pa.concat_tables([read_table(path, ROLLOUTS) for path in run.each_input("adwm", "rollouts")])
    write_table(estimates, run.output("estimates"), ESTIMATES)
    write_table(rollouts, run.output("rollouts"), ROLLOUTS)
    answers = {}
    for path in run.each_input("adwm", "answers"):
        with fsspec.open(path) as f:
            found = json.load(f)
        answers[found["policy"]] = found
    rows, curves = write_report(run.cell.name, estimates, truth, read_reasons(run.each_input("baselines", "not_applicable")),
                                {role: run.output(role) for role in REPORTED}, run.tracker.keep, rollouts=rollouts,
                                answers=answers, confidence=run.cell.adwm.confidence,
                                n_resamples=run.cell.adwm.n_bootstrap, return_range=declared_return_range(run.cell))
    run.tracker.metrics(report_metrics(rows, curves))
