"""The report stage: every estimator of the cell graded against ground truth (report.py) —
markdown, results and curves JSON, the plot, and every estimate in one Parquet; the ρ table,
the coverage and width of each interval method and the trust diagnostics as metrics, the
report, curves and plot kept with the tracked run."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from ..data import ESTIMATES, GROUND_TRUTH, read_table, write_table
from ..report import read_reasons, report_metrics, write_report

if TYPE_CHECKING:
    from ..pipeline import StageRun

REPORTED = ("report", "results", "curves", "plot")


def compute(run: StageRun) -> None:
    """The cell's report; without a ``ground-truth`` input (a cell that cannot be run) it is ungraded."""
    estimates = pa.concat_tables([read_table(path, ESTIMATES) for stage in ("adwm", "baselines")
                                  for path in run.each_input(stage, "estimates")])
    summaries = run.each_input("ground-truth", "summary")
    truth = pa.concat_tables([read_table(path, GROUND_TRUTH) for path in summaries]) if summaries else None
    write_table(estimates, run.output("estimates"), ESTIMATES)
    rows, curves = write_report(run.cell.name, estimates, truth, read_reasons(run.each_input("baselines", "not_applicable")),
                                {role: run.output(role) for role in REPORTED}, run.tracker.keep)
    run.tracker.metrics(report_metrics(rows, curves))
