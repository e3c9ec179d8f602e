"""Live verdicts calibrated on the bench: issue 73's "`--live K` keeps the same calibration, and its
verdicts use it", graded on the shipped bench file without running a stage.

With K live returns per point, ``with_live`` combines each pair's logs-only difference (a prior
sized by the bench's errors) with the live means' difference into d' of sd σ'. Two rules decide
"a is better" from it (a verdict the logs gave stands under both unless d' overturns it):

- ``normal band``: |d'| > z σ', z = z_{0.975} (the rule before 2026-12-01);
- ``calibrated``: |d'| > t' σ', t' calibrated like the logs-only verdicts' t on the signs the
  bench got right, with K live returns per point simulated on every other bench cell
  (``live_sign_threshold``: at most ``VERDICT_ERROR_RATE`` of its decided pairs wrong).

Each development cell of adwm_core/ope/statistics/bench_calibration.json whose truth splits at
least 3 pairs is read from the others alone (``recommend``, leave one cell out), then given
``LIVE_DRAWS`` draws of K = ``LIVE_EPISODES`` live returns per point. No cell's ground-truth
episodes are at hand here (only their mean, standard error and sample s.d. are in the file), so
a live return is drawn as N(J, s_J²): an approximation, checked by the ``normal band`` row
against bench/results/recommended.json's ``+live8`` grades, which drew the real episodes.
Graded as bench/calibrate.py grades: coverage, decided (of the pairs the truth splits) and
precision, means over the counted cells. → bench/results/live_verdicts.{md,json}.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np

from adwm_core.ope.statistics.recommend import (MIN_SPLIT_PAIRS, BenchCalibration, recommend,
                                                simulated_live_returns, with_live)
from bench.calibrate import grades
from bench.common import RESULTS, machine
from bench.studies.verdicts import LIVE_DRAWS, LIVE_EPISODES

KEYS = ("coverage", "decided", "precision")


def graded(bench: BenchCalibration, rule_bench: BenchCalibration) -> dict[str, dict]:
    """Per counted cell, the mean grades over the draws of its leave-one-cell-out reading with live
    returns folded in under ``rule_bench`` (the same cells; without ``return_sd``: the normal band)."""
    found, rng = {}, np.random.default_rng(0)
    for cell in bench.cells:
        if cell.split_pairs < MIN_SPLIT_PAIRS:
            continue
        reading = recommend(cell.estimates, return_range=(cell.low, cell.high), answered=cell.answered,
                            bench=bench, cell=cell.name, scale=cell.scale)
        if not reading.values:
            continue
        draws = [with_live(reading, simulated_live_returns(cell, LIVE_EPISODES, rng), rule_bench) for _ in range(LIVE_DRAWS)]
        scores = [grades(d, cell) for d in draws]
        found[cell.name] = {**{k: float(np.nanmean([s[k] for s in scores])) for k in KEYS},
                            "threshold": draws[0].live_threshold}
    return found


def main() -> None:
    bench = BenchCalibration.shipped()
    rules = {"normal band": BenchCalibration(tuple(replace(c, return_sd={}) for c in bench.cells), bench.commit),
             "calibrated": bench}
    results = {name: graded(bench, rule_bench) for name, rule_bench in rules.items()}
    official = json.loads((RESULTS / "recommended.json").read_text())["cells"]
    real = {name: official[name]["live"] for name in results["normal band"] if "live" in official.get(name, {})}
    means = {name: {k: float(np.nanmean([c[k] for c in cells.values()])) for k in KEYS} for name, cells in
             [*results.items(), ("normal band, real episodes (recommended.json)", real)]}
    (RESULTS / "live_verdicts.json").write_text(json.dumps(
        {"machine": machine(), "bench_commit": bench.commit, "live_episodes": LIVE_EPISODES, "draws": LIVE_DRAWS,
         "means": means, "cells": results}, indent=2))
    cells = list(results["calibrated"])
    lines = ["# Live verdicts calibrated on the bench", "", __doc__.split("\n\n", 1)[1].strip(), "",
             f"Bench file measured at `{bench.commit}`; {len(cells)} counted cells; K = {LIVE_EPISODES}, "
             f"{LIVE_DRAWS} draws per cell.", "", "| rule | coverage | decided | precision |", "|---|---|---|---|",
             *[f"| {name} | " + " | ".join(f"{m[k]:.3f}" for k in KEYS) + " |" for name, m in means.items()], "",
             "Per cell (coverage / decided / precision; t' of the calibrated rule)", "",
             "| cell | normal band | calibrated | t' |", "|---|---|---|---|",
             *[f"| {c} | " + " | ".join(" / ".join(f"{results[r][c][k]:.2f}" for k in KEYS) for r in rules)
               + f" | {results['calibrated'][c]['threshold']:.2f} |" for c in cells], "",
             f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "live_verdicts.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
