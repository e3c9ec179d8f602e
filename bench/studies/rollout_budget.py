"""How many imagined rollouts and seeds ADWM needs (issue 39): the estimate a smaller budget buys,
read from the rollouts the ADWM stage already imagined.

`python -m bench.studies.rollout_budget`: for every development cell whose report is finished under
today's code, the ADWM stage's samples.jsonl (every rollout's return, per point, seed and member)
is cut to the first S seeds and M rollouts per seed, for S in SEEDS and M in ROLLOUTS, and scored
as the stage scores it: Ĵ of a point is the mean return over the rollouts kept. Per budget and
cell: ρ and NMAE against the ground truth, the largest |Ĵ_budget − Ĵ_full| over the range of J,
and the half-width of a 95 % interval over the kept rollouts (normal, with the between-rollout
standard deviation) over the range of J. A seed's first M rollouts are M rollouts as a run of M
would draw them (the same starts; its own random numbers, so the same in distribution, not
bitwise). Cost is S·M over today's 5 × 32. The test cells are not read.
→ bench/results/rollout_budget.{md,json}.
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
from scipy import stats

from bench.common import RESULTS, artifact, cell_config, development_cells, machine, point_truth

SEEDS = (1, 2, 3, 5)
ROLLOUTS = (8, 16, 32)


def imagined_returns(cell: str) -> dict[tuple[str, float], dict[int, list[float]]] | None:
    """(policy, ε) → seed → imagined returns in the order the stage drew them (every member);
    None where an ADWM stage of the cell is not finished under today's code."""
    returns: dict = defaultdict(lambda: defaultdict(list))
    for policy in cell_config(cell).evaluation.policies:
        stage = artifact(cell, "adwm", policy, required=False)
        if stage is None:
            return None
        with open(stage.file("samples")) as f:
            for line in f:
                episode = json.loads(line)
                returns[episode["policy"], float(episode["epsilon"])][episode["seed"]].append(float(episode["reward"]))
    return returns


def scored(returns: dict, truth: dict, n_seeds: int, n_rollouts: int) -> dict[str, float]:
    """ρ, NMAE and the interval's half-width over the range of J of the first ``n_seeds`` seeds'
    first ``n_rollouts`` rollouts at every point, and each point's Ĵ."""
    points = sorted(p for p in returns if p in truth)
    spread = float(np.ptp([truth[p] for p in points]))
    kept = {p: np.concatenate([np.asarray(returns[p][s][:n_rollouts]) for s in sorted(returns[p])[:n_seeds]])
            for p in points}
    values = np.array([kept[p].mean() for p in points])
    truths = np.array([truth[p] for p in points])
    half = [stats.norm.ppf(0.975) * kept[p].std(ddof=1) / np.sqrt(len(kept[p])) for p in points]
    return {"rho": float(stats.spearmanr(values, truths).statistic), "nmae": float(np.mean(np.abs(values - truths)) / spread),
            "half_width": float(np.median(half) / spread), "values": values.tolist(), "spread": spread}


def measure(cell: str) -> dict | None:
    report, returns = artifact(cell, "report", required=False), imagined_returns(cell)
    truth = point_truth(report) if report is not None else None
    if returns is None or truth is None or np.ptp(list(truth.values())) == 0:
        return None
    full = scored(returns, truth, max(SEEDS), max(ROLLOUTS))
    result = {}
    for n_seeds in SEEDS:
        for n_rollouts in ROLLOUTS:
            r = scored(returns, truth, n_seeds, n_rollouts)
            r["shift"] = float(np.max(np.abs(np.subtract(r.pop("values"), full["values"]))) / r.pop("spread"))
            result[f"{n_seeds}x{n_rollouts}"] = r
    return result


def main() -> None:
    cells = development_cells()
    results = {cell: measure(cell) for cell in cells}
    (RESULTS / "rollout_budget.json").write_text(json.dumps({"machine": machine(), "cells": results}, indent=2))
    budgets = [f"{s}x{m}" for s in SEEDS for m in ROLLOUTS]
    lines = ["# ADWM's rollout budget", "", __doc__.split("\n\n", 1)[1].rsplit("→", 1)[0].strip(), "",
             "ρ / NMAE / largest shift of Ĵ from the full budget / interval half-width, the last two over the range "
             "of J; budget S×M = seeds × rollouts per seed", "",
             f"| budget | cost | {' | '.join(results)} | mean |", "|---" * (len(results) + 3) + "|"]
    done = {c: r for c, r in results.items() if r is not None}
    for budget in budgets:
        n_seeds, n_rollouts = map(int, budget.split("x"))
        shown = [f"{r[budget]['rho']:+.2f} / {r[budget]['nmae']:.2f} / {r[budget]['shift']:.2f} / "
                 f"{r[budget]['half_width']:.2f}" if r is not None else "not measured" for r in results.values()]
        mean = (" / ".join(f"{np.mean([r[budget][m] for r in done.values()]):{f}}"
                           for m, f in (("rho", "+.2f"), ("nmae", ".2f"), ("shift", ".2f"), ("half_width", ".2f")))
                if done else "")
        lines.append(f"| {budget} | {n_seeds * n_rollouts / (max(SEEDS) * max(ROLLOUTS)):.2f} | {' | '.join(shown)} | {mean} |")
    lines += ["", f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "rollout_budget.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
