"""What the bench reads from a cell's finished stages: each estimator's grades in its report, the
cell's ground-truth points and how many of their pairs the truth splits, and means over cells.

Shared by the held-out table (bench/tables/heldout.py), the calibration (bench/calibrate.py), the
bench loop (bench/loop.py) and the reading ledger (bench/ledger.py); it reads no other bench module
but the rule's.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq

from adwm_core.cell import CellConfig
from adwm_core.ope.statistics.intervals import percentile_bootstrap
from adwm_core.ope.statistics.metrics import verdict_scores
from adwm_core.ope.statistics.verdicts import unpaired
from adwm_core.report import first_seed_rows, printed_verdicts
from bench.adoption import split_pairs
from bench.common import ADWM, artifact, cell_config


def report_results(report, cell: str | None = None) -> dict[str, dict] | None:
    """``{estimator: {"rho", "nmae", "coverage", "width", "decided", "precision"}}`` of a finished
    report (None: none); ``decided`` and ``precision`` where ``cell``'s ground truth is finished
    (the recommended estimate's from its own row: its calibrated verdicts)."""
    if report is None:
        return None
    with open(report.file("results")) as f:
        results = {r["estimator"]: {key: r[key] for key in ("rho", "nmae", "coverage", "width", "decided", "precision")
                                    if key in r} for r in json.load(f)}  # the recommended row grades its verdicts
    for estimator, graded in (verdict_grades(report, cell) if cell else {}).items():
        results.setdefault(estimator, {}).update(graded)
    return results


def truth_points(cell: CellConfig | str) -> list[dict] | None:
    """The cell's ground-truth points (policy, epsilon, mean_return, stderr, n_episodes) from its
    finished ground-truth stages; None where one is not finished."""
    config = cell if isinstance(cell, CellConfig) else cell_config(cell)
    points = []
    for policy in config.evaluation.policies:
        summary = artifact(config, "ground-truth", policy, required=False)
        if summary is None:
            return None
        points += pq.read_table(summary.file("summary"), columns=["policy", "epsilon", "mean_return", "stderr",
                                                                  "n_episodes"]).to_pylist()
    return points


def truth_split_pairs(cell: CellConfig | str) -> int | None:
    """How many pairs of the cell's points its ground truth splits (bench/ADOPTION.md); None where
    its ground truth is not finished."""
    points = truth_points(cell)
    return None if points is None else split_pairs(points)


def verdict_grades(report, cell: str) -> dict[str, dict]:
    """Per estimator, how its verdicts on the cell's pairs of points fare against ground truth
    (``verdict_scores``): ADWM's from the report's paired reading, every other estimator's from
    its first seed's intervals read apart (``unpaired``)."""
    points = truth_points(cell)
    if points is None:
        return {}
    truth = {f"{p['policy']} ε={p['epsilon']:g}": p["mean_return"] for p in points}
    stderr = {f"{p['policy']} ε={p['epsilon']:g}": p["stderr"] for p in points}
    with open(report.file("curves")) as f:
        paired = printed_verdicts(json.load(f).get("comparisons") or {})
    graded = {ADWM: {"decided": paired["decided"], "precision": paired["precision"]}} if paired else {}
    by_estimator: dict[str, dict] = {}
    for row in first_seed_rows(pq.read_table(report.file("estimates"))):
        label = f"{row['policy']} ε={row['epsilon']:g}"
        if row["estimator"] != ADWM and label in truth:
            by_estimator.setdefault(row["estimator"], {})[label] = (row["value"], row["ci_low"], row["ci_high"])
    for estimator, intervals in by_estimator.items():
        scores = verdict_scores(unpaired(intervals), truth, stderr)
        graded[estimator] = {"decided": scores.decided, "precision": scores.precision}
    return graded


def mean_with_interval(values: list[float], seed: int = 0) -> tuple[float, float, float]:
    """Mean over cells and its 95 % percentile-bootstrap interval over cells."""
    x = np.asarray(values, float)
    low, high = percentile_bootstrap(lambda resamples: x[resamples].mean(1), len(x), n_resamples=2000,
                                     confidence=0.95, seed=seed)
    return float(x.mean()), float(low), float(high)
