"""Can a paired verdict speak more often and stay right? Scores of a pair of points tried on the
bench's measured errors (issue 73's "verdicts that are right when they speak"; no stage runs).

The recommended estimate says "a is better than b" where a pair's score clears a threshold t
calibrated on the other cells' pairs (``sign_threshold``: the lowest t at which the bench's
pairs at or above it were wrong at (wrong + 1) / (decided + 1) ≤ the rate). Its score is
|Ĵ_a − Ĵ_b| / u(a, b), u the models' disagreement (``error_unit``). This study keeps the
calibration and changes the score, on the headline estimator's differences d:

- ``disagreement``: |d| / u(a, b), today's score;
- ``scale``: |d| / S, S the cell's scale;
- ``agree(…)``: the score, or 0 where another of the named estimators orders the pair the other
  way (verdicts only where the models agree on the sign);
- ``weakest(…)``: the smallest |d_m| / S over the named estimators where all order the pair alike, else 0.

For each, every development cell of the shipped bench file (adwm_core/ope/statistics/
bench_calibration.json) whose truth splits at least 3 pairs gets t from all the other cells'
pairs, at the rates 0.05 (today's) and 0.10, and is graded: decided (the share of the pairs its
truth splits, |J_a − J_b| > 2 √(SE_a² + SE_b²), that get a verdict) and precision (the share of
verdicts ordered as J orders them). The calibration here reads every other cell, not only those
on the evaluated cell's side of the answered share, so ``disagreement`` is near but not equal to
bench/results/recommended.md's row. → bench/results/verdict_scores.{md,json}.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from itertools import combinations

import numpy as np

from adwm_core.ope.statistics.recommend import (MIN_SPLIT_PAIRS, BenchCalibration, BenchCell, error_unit,
                                                reads_spread, sign_threshold)
from bench.adoption import HEADLINE
from bench.common import RESULTS, machine

MODELS = (HEADLINE, "FQE", "kNN-WM:reward_sum")
RATES = (0.05, 0.10)
Score = Callable[[BenchCell, str, str], float]


def difference(cell: BenchCell, name: str, a: str, b: str) -> float:
    values = cell.estimates.get(name, {})
    return values.get(a, math.nan) - values.get(b, math.nan)


def disagreement(cell: BenchCell, a: str, b: str) -> float:
    return abs(difference(cell, HEADLINE, a, b)) / error_unit(cell.estimates, cell.scale, reads_spread(cell.estimates), a, b)


def scale(cell: BenchCell, a: str, b: str) -> float:
    return abs(difference(cell, HEADLINE, a, b)) / cell.scale


def agree(score: Score, names: tuple[str, ...]) -> Score:
    def scored(cell: BenchCell, a: str, b: str) -> float:
        signs = {np.sign(d) for d in (difference(cell, n, a, b) for n in names) if math.isfinite(d)}
        return score(cell, a, b) if len(signs) == 1 else 0.0
    return scored


def weakest(names: tuple[str, ...]) -> Score:
    def scored(cell: BenchCell, a: str, b: str) -> float:
        found = [d for d in (difference(cell, n, a, b) for n in names) if math.isfinite(d)]
        return min(abs(d) for d in found) / cell.scale if len({np.sign(d) for d in found}) == 1 else 0.0
    return scored


SCORES: dict[str, Score] = {
    "disagreement": disagreement,
    "scale": scale,
    "agree(ADWM, FQE, kNN-WM), disagreement": agree(disagreement, MODELS),
    "agree(ADWM, FQE, kNN-WM), scale": agree(scale, MODELS),
    "agree(ADWM, FQE), scale": agree(scale, MODELS[:2]),
    "agree(ADWM, FQE, kNN-WM, WIS, WPDIS), scale": agree(scale, (*MODELS, "WIS", "WPDIS")),
    "weakest(ADWM, FQE, kNN-WM)": weakest(MODELS),
    "weakest(ADWM, FQE)": weakest(MODELS[:2]),
}


def scored_pairs(cell: BenchCell, score: Score) -> list[tuple[float, bool, bool]]:
    """(score, the headline's sign right, the truth splits the pair) over the cell's pairs."""
    found = []
    for a, b in combinations(cell.truth, 2):
        value, truth = score(cell, a, b), cell.truth[a] - cell.truth[b]
        if math.isfinite(value):
            stderr = math.hypot(cell.truth_stderr.get(a, 0.0), cell.truth_stderr.get(b, 0.0))
            found.append((value, difference(cell, HEADLINE, a, b) * truth > 0, abs(truth) > 2 * stderr))
    return found


def graded(bench: BenchCalibration, score: Score, rate: float) -> dict[str, dict]:
    """Per counted cell: t from the other cells' pairs, the share of split pairs decided, precision."""
    pairs = {c.name: scored_pairs(c, score) for c in bench.cells}
    found = {}
    for cell in bench.cells:
        if cell.split_pairs < MIN_SPLIT_PAIRS:
            continue
        t = sign_threshold([(s, right) for other, found_pairs in pairs.items() if other != cell.name
                            for s, right, _ in found_pairs], rate)
        split = [s > t for s, _, apart in pairs[cell.name] if apart]
        decided = [right for s, right, _ in pairs[cell.name] if s > t]
        found[cell.name] = {"t": t, "decided": float(np.mean(split)) if split else math.nan,
                            "precision": float(np.mean(decided)) if decided else math.nan, "verdicts": len(decided)}
    return found


def main() -> None:
    bench = BenchCalibration.shipped()
    results = {f"{name} @ {rate:g}": graded(bench, score, rate) for name, score in SCORES.items() for rate in RATES}
    means = {k: {m: float(np.nanmean([c[m] for c in cells.values()])) for m in ("decided", "precision")}
             for k, cells in results.items()}
    (RESULTS / "verdict_scores.json").write_text(json.dumps(
        {"machine": machine(), "bench_commit": bench.commit, "means": means, "cells": results}, indent=2))
    counted = len(next(iter(results.values())))
    lines = ["# Scores of a paired verdict on the bench", "", __doc__.split("\n\n", 1)[1].strip(), "",
             f"Bench file measured at `{bench.commit}`; {counted} counted cells; means over them (precision over "
             "the cells that got a verdict).", "", "| score @ rate | decided | precision |", "|---|---|---|",
             *[f"| {k} | {m['decided']:.2f} | {m['precision']:.2f} |" for k, m in means.items()], "",
             f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "verdict_scores.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
