"""How high can a ρ read on the development bench be? The ground truth J of a point is itself a
mean of finitely many episodes, so even an exact estimator ranks a cell's points against noisy J.

Per development cell of the shipped bench file whose truth splits at least 3 pairs: the
**ceiling**, the mean over 2000 draws of Spearman ρ(J, J + SE·N(0, 1)), J and SE as the file
records them (J stands in for the true values it estimates, so the ceiling is if anything a little
high); beside it the headline's ρ and the best ρ reached on the cell by a single estimator the
recommended estimate may choose (finite and inside the return range at every point:
``eligibility``), chosen with the truth in hand: what a perfect choice among today's estimators
would read. Means over the counted cells. No stage runs. → bench/results/rank_ceiling.{md,json}.
"""

from __future__ import annotations

import json
import math

import numpy as np

from adwm_core.ope.statistics.metrics import spearman
from adwm_core.ope.statistics.recommend import MIN_SPLIT_PAIRS, BenchCalibration, BenchCell, eligibility
from bench.adoption import HEADLINE
from bench.common import RESULTS, machine

DRAWS = 2000


def ceiling(cell: BenchCell, rng: np.random.Generator) -> float:
    """The mean ρ of the exact values against J redrawn within its standard errors."""
    points = list(cell.truth)
    truth = np.array([cell.truth[p] for p in points])
    stderr = np.array([cell.truth_stderr.get(p, 0.0) for p in points])
    return float(np.mean([spearman(truth, truth + stderr * rng.standard_normal(len(points))) for _ in range(DRAWS)]))


def main() -> None:
    bench, rng, rows = BenchCalibration.shipped(), np.random.default_rng(0), {}
    for cell in bench.cells:
        if cell.split_pairs < MIN_SPLIT_PAIRS:
            continue
        rhos = {name: cell.rho(name) for name in cell.estimates}
        barred = eligibility(cell.estimates, {}, cell.low, cell.high, set(cell.estimates))
        best = max((name for name, r in rhos.items() if math.isfinite(r) and name not in barred), key=rhos.get)
        rows[cell.name] = {"points": len(cell.truth), "ceiling": ceiling(cell, rng), "headline": rhos[HEADLINE],
                           "best": rhos[best], "best_estimator": best}
    means = {k: float(np.mean([r[k] for r in rows.values()])) for k in ("ceiling", "headline", "best")}
    (RESULTS / "rank_ceiling.json").write_text(json.dumps(
        {"machine": machine(), "bench_commit": bench.commit, "means": means, "cells": rows}, indent=2))
    lines = ["# The highest ρ the development bench can read", "", __doc__.split("\n\n", 1)[1].strip(), "",
             f"Bench file measured at `{bench.commit}`; {len(rows)} counted cells.", "",
             f"| cell | points | ceiling | {HEADLINE} | best eligible estimator |", "|---|---|---|---|---|",
             *[f"| {name} | {r['points']} | {r['ceiling']:+.2f} | {r['headline']:+.2f} | {r['best']:+.2f} "
               f"({r['best_estimator']}) |" for name, r in rows.items()],
             f"| **mean** | | {means['ceiling']:+.3f} | {means['headline']:+.3f} | {means['best']:+.3f} |", "",
             f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "rank_ceiling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
