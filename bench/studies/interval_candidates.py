"""Which interval around ADWM's estimate could hold the truth (issue 38), measured without live
episodes on the finished reports.

`python -m bench.studies.interval_candidates`: for every development cell (bench/bench.yaml; test
cells are read through the reading ledger only) whose report is finished under today's code, ADWM ``reward_sum``'s rows (one per point and seed)
with, as candidate intervals:
- ``bootstrap``: its own percentile bootstrap over rollouts (what the report prints);
- ``seed hull``: the span of the point's five seed intervals;
- ``+ kNN-WM``: the span of it and the kNN-WM reference's interval of the same seed (two world
  models' disagreement);
- ``+ kNN-WM, FQE``: the span of those and FQE's;
- ``extrapolation c``: each side widened by c × (1 − log share) × the range of the behaviour
  episodes' returns, the log share being the share of the seed's imagined steps the log answered.
Coverage is the share of rows whose interval holds J; width the median width over the range of J.
``reach`` bounds every interval at once: the share of ADWM's rows within 0.25 × the range of J
(what an interval centred on Ĵ and 0.5 × the range wide can hold at most) and within 0.5 × the
range (what any interval that holds Ĵ and is that wide can hold at most).
A candidate would replace the bootstrap if the development cells' mean coverage reached 0.85
at a median width ≤ 0.5 (issue 38's target).
→ bench/results/interval_candidates.{md,json}.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common import ADWM, artifact, development_cells, point_truth, write_grouped

KNN, FQE = "kNN-WM:reward_sum", "FQE"
WIDENING = (0.25, 0.5)  # c of the extrapolation-widened interval
CANDIDATES = ("bootstrap", "seed hull", "+ kNN-WM", "+ kNN-WM, FQE", *(f"extrapolation {c}" for c in WIDENING))


def behaviour_return_range(cell: str) -> float:
    """max − min of the behaviour episodes' returns (the log's own scale of a return)."""
    steps = pq.read_table(artifact(cell, "behaviour").file("trajectories"))
    if "source" in steps.column_names:
        steps = steps.filter(pc.equal(steps["source"], "behavior"))
    returns = steps.group_by(["policy", "episode"]).aggregate([("reward", "sum")])["reward_sum"].to_numpy()
    return float(np.ptp(returns)) if len(returns) else 0.0


def candidate_intervals(rows: dict, truth: dict, scale: float) -> dict[str, list[tuple[float, float, float]]]:
    """Candidate → [(low, high, J)] per ADWM row (point and seed) whose point has a ground truth."""
    adwm, knn = rows[ADWM], rows.get(KNN, {})
    fqe = {(p, e): r for (p, e, _), r in rows.get(FQE, {}).items()}  # the baselines run one seed
    seeds = defaultdict(list)
    for (p, e, _), r in adwm.items():
        seeds[p, e].append(r)
    out = defaultdict(list)
    for (p, e, s), r in adwm.items():
        if (p, e) not in truth:
            continue
        truth_here = truth[p, e]
        low, high = r["ci_low"], r["ci_high"]
        spans = {"bootstrap": [(low, high)],
                 "seed hull": [(v["ci_low"], v["ci_high"]) for v in seeds[p, e]]}
        if (p, e, s) in knn:
            spans["+ kNN-WM"] = [(low, high), (knn[p, e, s]["ci_low"], knn[p, e, s]["ci_high"])]
            if (p, e) in fqe:
                spans["+ kNN-WM, FQE"] = spans["+ kNN-WM"] + [(fqe[p, e]["ci_low"], fqe[p, e]["ci_high"])]
        off_log = 1.0 - (r["log_share"] if r.get("log_share") is not None else 0.0)
        for c in WIDENING:
            spans[f"extrapolation {c}"] = [(low - c * off_log * scale, high + c * off_log * scale)]
        for name, parts in spans.items():
            out[name].append((min(lo for lo, _ in parts), max(hi for _, hi in parts), truth_here))
    return out


def measure(cell: str) -> dict | None:
    """Coverage and width of every candidate, and the reach bound, for one cell (None: not finished)."""
    report = artifact(cell, "report", required=False)
    if report is None:
        return None
    truth = point_truth(report)
    spread = float(np.ptp(list(truth.values())))
    if spread == 0:
        return None
    rows: dict[str, dict] = defaultdict(dict)
    for r in pq.read_table(report.file("estimates")).to_pylist():
        rows[r["estimator"]][r["policy"], float(r["epsilon"]), r["seed"]] = r
    result = {name: {"coverage": float(np.mean([lo <= j <= hi for lo, hi, j in xs])),
                     "width": float(np.median([hi - lo for lo, hi, _ in xs]) / spread)}
              for name, xs in candidate_intervals(rows, truth, behaviour_return_range(cell)).items()}
    errors = np.array([abs(r["value"] - truth[p, e]) / spread for (p, e, _), r in rows[ADWM].items() if (p, e) in truth])
    result["reach"] = {"centred": float(np.mean(errors <= 0.25)), "holding": float(np.mean(errors <= 0.5))}
    return result


def table(title: str, results: dict[str, dict | None]) -> list[str]:
    lines = [f"**{title}** (coverage / median width over the range of J; reach: centred / holding Ĵ)", "",
             f"| cell | {' | '.join(CANDIDATES)} | reach |", "|---" * (len(CANDIDATES) + 2) + "|"]

    def cells_of(r: dict) -> str:
        shown = [f"{r[c]['coverage']:.2f} / {r[c]['width']:.2f}" if c in r else "–" for c in CANDIDATES]
        return " | ".join(shown) + f" | {r['reach']['centred']:.2f} / {r['reach']['holding']:.2f}"

    for cell, r in results.items():
        lines.append(f"| {cell} | " + ("not measured under today's code" + " |" * (len(CANDIDATES) + 1)
                                       if r is None else cells_of(r) + " |"))
    done = [r for r in results.values() if r is not None]
    if done:
        mean = {c: {m: float(np.mean([r[c][m] for r in done if c in r])) for m in ("coverage", "width")}
                for c in CANDIDATES if any(c in r for r in done)}
        mean["reach"] = {m: float(np.mean([r["reach"][m] for r in done])) for m in ("centred", "holding")}
        lines.append(f"| **mean of {len(done)} cells** | {cells_of(mean)} |")
    return lines + [""]


def main() -> None:
    groups = {"Development cells (tuned on)": development_cells()}  # test figures: the reading ledger only
    results = {title: {cell: measure(cell) for cell in cells} for title, cells in groups.items()}
    write_grouped("interval_candidates", "Candidate intervals around ADWM's estimate", __doc__, results, table)


if __name__ == "__main__":
    main()
