"""ADWM calibrated by k live episodes of π_e (adwm_core/ope/statistics/calibration.py, PPI++), measured.

`python -m bench.studies.calibration`: for every development cell (bench/bench.yaml; test cells are read
through the reading ledger only) whose ADWM and ground-truth stages are finished under today's code, and every point (π_e, ε) and k in
K: B times, k of the point's ground-truth episodes are drawn at random as the live slice and
the rest give the truth (the mean of the episodes not drawn); the slice is combined with ADWM's
imagined rollouts of that point (its samples.jsonl, every seed and member). Per cell and k, the share of
intervals holding the truth (coverage), their median width over the range of J, the mean
|θ̂ − J| / range (NMAE) and the mean Spearman ρ over the cell's points, for PPI++ (λ tuned),
classical PPI (λ = 1), the live slice alone (λ = 0) and ADWM's seed-averaged estimates of each
π_e's ε levels mapped onto the live slices' means by a line (its prediction interval, and the
interval of the line itself); ADWM alone beside them (its own intervals against the full
ground-truth mean). Nothing is tuned: k is the issue's, λ and the line the data's.
→ bench/results/calibration.{md,json}.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np
import pyarrow.parquet as pq
from scipy import stats

from adwm_core.ope.statistics.calibration import linear_calibration, live_by_point, prediction_powered, read_imagined
from bench.common import ADWM, RESULTS, artifact, cell_config, development_cells, machine

K = (5, 10, 20)
PPI = {"PPI++": None, "PPI": 1.0, "live only": 0.0}  # name → fixed power λ (None: tuned)
LINEAR = {"linear map": True, "linear map (line)": False}  # name → pointwise prediction interval
METHODS = (*PPI, *LINEAR)


def adwm_points(cell: str) -> dict[tuple[str, float], list[dict]]:
    """(policy, ε) → ADWM's estimates rows of the cell's report, one per seed."""
    by_point = defaultdict(list)
    for r in pq.read_table(artifact(cell, "report").file("estimates")).to_pylist():
        if r["estimator"] == ADWM:
            by_point[(r["policy"], float(r["epsilon"]))].append(r)
    return by_point


def adwm_alone(by_point: dict, truth: dict, spread: float) -> dict:
    """ADWM's own seed-averaged estimate and intervals against the full ground-truth means."""
    held = [r["ci_low"] <= truth[p] <= r["ci_high"] for p, rs in by_point.items() for r in rs]
    widths = [(r["ci_high"] - r["ci_low"]) / spread for rs in by_point.values() for r in rs]
    points = sorted(by_point)
    values = [np.mean([r["value"] for r in by_point[p]]) for p in points]
    return {"coverage": float(np.mean(held)), "width": float(np.median(widths)),
            "nmae": float(np.mean([abs(v - truth[p]) / spread for v, p in zip(values, points)])),
            "rho": float(stats.spearmanr(values, [truth[p] for p in points]).statistic)}


def calibrated(points: list, slices: dict, imagined: dict, adwm: dict) -> dict[str, list]:
    """Every method's Calibrated per point for one draw of live slices ((first observation, return)
    per point)."""
    out = {name: [] for name in METHODS}
    for p in points:
        starts, returns = zip(*imagined[p])
        live_starts, live_returns = zip(*slices[p])
        for name, power in PPI.items():
            out[name].append(prediction_powered(live_starts, live_returns, starts, returns, power=power))
    by_policy = defaultdict(list)
    for p in points:
        by_policy[p[0]].append(p)
    for name, pointwise in LINEAR.items():
        mapped = {}
        for members in by_policy.values():
            fits = linear_calibration([adwm[p] for p in members], [np.mean([g for _, g in slices[p]]) for p in members],
                                      pointwise=pointwise)
            mapped.update(zip(members, fits))
        out[name] = [mapped[p] for p in points]
    return out


def measure(cell: str, draws: int, seed: int) -> dict | None:
    """Every method × k of one cell, or None where its stages are not finished under today's code."""
    config = cell_config(cell)
    adwm = [artifact(cell, "adwm", p, required=False) for p in config.evaluation.policies]
    truth_stages = [artifact(cell, "ground-truth", p, required=False) for p in config.evaluation.policies]
    if None in adwm or None in truth_stages or artifact(cell, "report", required=False) is None:
        return None
    live, imagined = {}, {}
    for stage in truth_stages:
        live.update(live_by_point(pq.read_table(stage.file("episodes"), columns=[
            "policy", "epsilon", "seed", "episode", "t", "observation", "reward"])))
    for stage in adwm:
        imagined.update(read_imagined(stage.file("samples")))
    points = sorted(live)
    truth = {p: float(np.mean([g for _, g in live[p]])) for p in points}
    spread = max(truth.values()) - min(truth.values())
    rows = adwm_points(cell)
    estimate = {p: float(np.mean([r["value"] for r in rows[p]])) for p in points}
    rng = np.random.default_rng(seed)
    result = {"points": len(points), "range": spread, "ADWM alone": adwm_alone(rows, truth, spread)}
    for k in K:
        graded = {name: defaultdict(list) for name in METHODS}
        for _ in range(draws):
            slices, targets = {}, []
            for p in points:
                chosen = set(rng.choice(len(live[p]), size=k, replace=False).tolist())
                slices[p] = [live[p][i] for i in sorted(chosen)]
                targets.append(float(np.mean([g for i, (_, g) in enumerate(live[p]) if i not in chosen])))
            for name, fits in calibrated(points, slices, imagined, estimate).items():
                g = graded[name]
                g["held"] += [c.low <= target <= c.high for c, target in zip(fits, targets)]
                g["width"] += [(c.high - c.low) / spread for c in fits]
                g["error"] += [abs(c.value - target) / spread for c, target in zip(fits, targets)]
                g["power"] += [c.power for c in fits]
                g["rho"].append(stats.spearmanr([c.value for c in fits], targets).statistic)
        result[k] = {name: {"coverage": float(np.mean(g["held"])), "width": float(np.median(g["width"])),
                            "nmae": float(np.mean(g["error"])), "rho": float(np.nanmean(g["rho"])),
                            "power": float(np.mean(g["power"]))}
                     for name, g in graded.items()}
    return result


def table(title: str, results: dict[str, dict | None]) -> list[str]:
    measures = ("coverage", "width", "nmae", "rho")
    lines = [f"**{title}** (coverage / median width over the range of J / NMAE / mean ρ; PPI++'s λ and the "
             "linear map's slope b as their mean)", "",
             f"| cell | k | {' | '.join(METHODS)} | λ | b | ADWM alone |", "|---" * (len(METHODS) + 5) + "|"]

    def text(r: dict) -> str:
        return f"{r['coverage']:.2f} / {r['width']:.2f} / {r['nmae']:.2f} / {r['rho']:+.2f}"

    def row(cell: str, k: int, by_method: dict, alone: dict | None, powers: str) -> str:
        return (f"| {cell} | {k} | {' | '.join(text(by_method[m]) for m in METHODS)} | {powers} | "
                f"{text(alone) if alone else ''} |")

    for cell, result in results.items():
        if result is None:
            lines.append(f"| {cell} | – | not measured under today's code |" + " |" * (len(METHODS) + 2))
            continue
        for k in K:
            r = result[k]
            lines.append(row(cell, k, r, result["ADWM alone"] if k == K[0] else None,
                             f"{r['PPI++']['power']:.2f} | {r['linear map']['power']:+.2f}"))
    done = [r for r in results.values() if r is not None]
    for k in K if done else ():
        means = {name: {m: np.mean([r[k][name][m] for r in done]) for m in measures} for name in METHODS}
        alone = {m: np.mean([r["ADWM alone"][m] for r in done]) for m in measures} if k == K[0] else None
        lines.append(row(f"**mean of {len(done)} cells**", k, means, alone, " | "))
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=200, help="random live slices per point and k (B)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    groups = {"Development cells (tuned on)": development_cells()}  # test figures: the reading ledger only
    results = {title: {cell: measure(cell, args.draws, args.seed) for cell in cells} for title, cells in groups.items()}
    (RESULTS / "calibration.json").write_text(json.dumps(
        {"machine": machine(), "draws": args.draws, "k": list(K),
         "cells": {t: {c: (None if r is None else {str(key): v for key, v in r.items()}) for c, r in rs.items()}
                   for t, rs in results.items()}}, indent=2))
    lines = ["# ADWM calibrated by k live episodes (PPI++)", "", __doc__.split("\n\n")[1].replace("\n", " "), ""]
    for title, rs in results.items():
        lines += table(title, rs)
    (RESULTS / "calibration.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
