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
  the cell left out. This is the honest figure of "pick the best combination on the bench";
- a fallback read from the logs alone (issue 73's "the estimator the bench trusts most when the
  log answers little of π_e's rollout"): where the share of ADWM's imagined steps handed over to
  Q̂ (the report's answers, averaged over the cell's points) exceeds τ, another single estimator's
  ranking replaces ADWM's; τ and that estimator chosen on the other cells, graded on the one left out.

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


def cell_estimates(cell: str) -> tuple[np.ndarray, dict[str, np.ndarray], str, float] | None:
    """(J over the cell's points, {estimator: seed-mean Ĵ over the same points}, environment group,
    the share of ADWM's imagined steps handed over to Q̂), or None where the cell's report or truth
    is unfinished or its truth splits < 3 pairs."""
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
    with open(report.file("curves")) as f:
        answers = json.load(f).get("answers") or {}
    handed_over = [level["shares"]["value"] for found in answers.values() for level in found["by_epsilon"].values()]
    return (np.array([p["mean_return"] for p in points]), values, cell_config(cell).env.name,
            float(np.mean(handed_over)) if handed_over else float("nan"))


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


def fallback_out_of_cell(rho: dict[str, dict[str, float]], handed_over: dict[str, float]) -> dict[str, dict]:
    """Per cell: the (τ, estimator) whose fallback rule — that estimator's ρ where the hand-over
    share exceeds τ, ADWM's elsewhere — has the best mean ρ over the other cells; its ρ on this one."""
    cells, others = list(handed_over), [n for n in SINGLES if n != HEADLINE]
    thresholds = sorted(set(handed_over.values())) + [np.inf]

    def ruled(cell: str, tau: float, name: str) -> float:
        return rho[name][cell] if handed_over[cell] > tau else rho[HEADLINE][cell]

    chosen = {}
    for cell in cells:
        rest = [c for c in cells if c != cell]
        score = {(tau, name): np.nanmean([ruled(c, tau, name) for c in rest]) for tau in thresholds for name in others}
        tau, name = max(score, key=lambda k: -np.inf if np.isnan(score[k]) else score[k])
        chosen[cell] = {"handed_over": handed_over[cell], "tau": float(tau), "fallback": name, "rho": ruled(cell, tau, name)}
    return chosen


def main() -> None:
    cells = {c: found for c in development_cells() if (found := cell_estimates(c)) is not None}
    names = [*SINGLES, *COMBINATIONS]
    grades = {n: {c: grade(values[n], truth) for c, (truth, values, _, _) in cells.items()} for n in names}
    rho = {n: {c: g["rho"] for c, g in by_cell.items()} for n, by_cell in grades.items()}
    groups = {c: group for c, (_, _, group, _) in cells.items()}
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
    fallback = fallback_out_of_cell(rho, {c: found[3] for c, found in cells.items()})
    fallback_rho = float(np.nanmean([c["rho"] for c in fallback.values()]))
    report = {"machine": machine(), "cells": list(cells), "rows": rows, "per_cell_rho": rho,
              "leave_one_cell_out": {"cells": chosen, "rho": loo}, "fallback": {"cells": fallback, "rho": fallback_rho}}
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
              f"**The fallback, chosen on the other cells, graded on the one left out: mean ρ {fallback_rho:+.2f}**", "",
              "| cell | share handed over to Q̂ | τ chosen | fallback | ρ |", "|---|---|---|---|---|",
              *[f"| {c} | {v['handed_over']:.2f} | {v['tau']:.2f} | {v['fallback'] if v['handed_over'] > v['tau'] else '– (ADWM)'} "
                f"| {v['rho']:+.2f} |" for c, v in fallback.items()], "",
              f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "combinations.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
