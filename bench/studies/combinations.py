"""Do equal-weight combinations of the estimators rank the development cells better than ADWM
alone? A study over the finished reports (no stage runs), for issue 73's "combinations of ADWM
and FQE" candidate.

Per development cell whose truth splits at least 3 pairs (bench/ADOPTION.md), from its report's
estimates (each estimator's Ĵ averaged over seeds) and its ground truth:

- ρ (Spearman, Ĵ against J over the cell's points) and NMAE of each single estimator and of each
  combination in ``COMBINATIONS``: the plain mean of its members' Ĵ, in the return's own units;
- the paired Δρ of each against the headline (``HEADLINE``), its mean over cells with a 95 %
  bootstrap interval, and the environment groups where it averages below zero: the rule's
  ranking route and its breadth condition (the combinations have no interval, so the rule's
  coverage condition cannot be read; a failed ranking route keeps the default whatever it says);
- a choice made the way a product would make it: for each cell, the member of ``COMBINATIONS``
  and of the singles with the best mean ρ over the other cells (leave one cell out), graded on
  the cell left out. This is the honest figure of "pick the best combination on the bench".

Writes ``bench/results/combinations.{md,json}``. Usage: ``python -m bench.studies.combinations``.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq

from adwm_core.ope.statistics.metrics import normalised_absolute_error, spearman
from bench.adoption import HEADLINE, MIN_SPLIT_PAIRS, split_pairs
from bench.common import RESULTS, artifact, cell_config, development_cells, machine
from bench.figures import mean_with_interval, truth_points

SINGLES = (HEADLINE, "FQE", "kNN-WM:reward_sum", "WIS", "WPDIS", "DR")
COMBINATIONS = {  # the model-based estimators, then the weighted IS ones added; picked after a scratch look at
    # about 35 means (of values, ranks, z-scores) on these same cells, so only the leave-one-out figure is honest
    "ADWM+FQE": (HEADLINE, "FQE"),
    "ADWM+FQE+kNN-WM": (HEADLINE, "FQE", "kNN-WM:reward_sum"),
    "ADWM+FQE+kNN-WM+WPDIS": (HEADLINE, "FQE", "kNN-WM:reward_sum", "WPDIS"),
    "ADWM+FQE+kNN-WM+WIS+WPDIS": (HEADLINE, "FQE", "kNN-WM:reward_sum", "WIS", "WPDIS"),
}


def cell_estimates(cell: str) -> tuple[np.ndarray, dict[str, np.ndarray], str] | None:
    """(J over the cell's points, {estimator: seed-mean Ĵ over the same points}, environment group),
    or None where the cell's report or truth is unfinished or its truth splits < 3 pairs."""
    points, report = truth_points(cell), artifact(cell, "report", required=False)
    if points is None or report is None or split_pairs(points) < MIN_SPLIT_PAIRS:
        return None
    keys = [(p["policy"], p["epsilon"]) for p in points]
    by_estimator: dict[str, dict[tuple, list[float]]] = {}
    for row in pq.read_table(report.file("estimates"), columns=["estimator", "policy", "epsilon", "value"]).to_pylist():
        by_estimator.setdefault(row["estimator"], {}).setdefault((row["policy"], row["epsilon"]), []).append(row["value"])
    values = {e: np.array([np.mean(v[k]) if k in v else np.nan for k in keys]) for e, v in by_estimator.items()}
    for name, members in COMBINATIONS.items():
        values[name] = np.mean([values[m] for m in members], axis=0)
    return np.array([p["mean_return"] for p in points]), values, cell_config(cell).env.name


def grade(estimate: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    finite = bool(np.all(np.isfinite(estimate)))
    return {"rho": spearman(estimate, truth) if finite else float("nan"),
            "nmae": normalised_absolute_error(estimate, truth) if finite else float("inf")}


def leave_one_cell_out(rho: dict[str, dict[str, float]], cells: list[str]) -> dict[str, dict]:
    """Per cell: the candidate with the best mean ρ over the other cells, and its ρ on this one."""
    chosen = {}
    for cell in cells:
        means = {name: np.nanmean([rho[name][c] for c in cells if c != cell]) for name in rho}
        best = max(means, key=lambda name: -np.inf if np.isnan(means[name]) else means[name])
        chosen[cell] = {"chosen": best, "rho": rho[best][cell]}
    return chosen


def main() -> None:
    cells = {c: found for c in development_cells() if (found := cell_estimates(c)) is not None}
    names = [*SINGLES, *COMBINATIONS]
    grades = {n: {c: grade(values[n], truth) for c, (truth, values, _) in cells.items()} for n in names}
    rho = {n: {c: g["rho"] for c, g in by_cell.items()} for n, by_cell in grades.items()}
    groups = {c: group for c, (_, _, group) in cells.items()}
    rows = {}
    for n in names:
        deltas = {c: rho[n][c] - rho[HEADLINE][c] for c in cells if np.isfinite(rho[n][c] - rho[HEADLINE][c])}
        by_group = {g: float(np.mean([d for c, d in deltas.items() if groups[c] == g])) for g in sorted(set(groups.values()))}
        rows[n] = {"rho": float(np.nanmean(list(rho[n].values()))),
                   "nmae": float(np.mean([g["nmae"] for g in grades[n].values()])),
                   "delta_rho": mean_with_interval(list(deltas.values())) if n != HEADLINE else None,
                   "groups_below": [g for g, d in by_group.items() if d < 0] if n != HEADLINE else None}
    chosen = leave_one_cell_out(rho, list(cells))
    loo = float(np.nanmean([c["rho"] for c in chosen.values()]))
    report = {"machine": machine(), "cells": list(cells), "rows": rows, "per_cell_rho": rho,
              "leave_one_cell_out": {"cells": chosen, "rho": loo}}
    (RESULTS / "combinations.json").write_text(json.dumps(report, indent=2))
    lines = ["# Equal-weight combinations of the estimators on the development bench", "",
             __doc__.split("\n\n")[1].strip(), "", f"{len(cells)} counted cells.", "",
             f"| estimator | mean ρ | mean NMAE | Δρ vs {HEADLINE} [CI95] | groups where Δρ < 0 |", "|---|---|---|---|---|"]
    for n, r in rows.items():
        delta = "–" if r["delta_rho"] is None else "{:+.2f} [{:+.2f}, {:+.2f}]".format(*r["delta_rho"])
        below = "–" if r["groups_below"] is None else (", ".join(r["groups_below"]) or "none")
        lines.append(f"| {n} | {r['rho']:+.2f} | {r['nmae']:.2f} | {delta} | {below} |")
    lines += ["", f"**Chosen on the other cells, graded on the one left out: mean ρ {loo:+.2f}** "
              f"(the headline alone: {rows[HEADLINE]['rho']:+.2f})", "", "| cell | chosen | ρ |", "|---|---|---|",
              *[f"| {c} | {v['chosen']} | {v['rho']:+.2f} |" for c, v in chosen.items()], "",
              f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "combinations.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
