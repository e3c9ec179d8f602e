"""Which interval ADWM prints, and how often its verdicts on pairs of points speak and are right
(issue 58; the rule, written before its run: docs/notebook.md, "Which interval ADWM prints").

`python -m bench.studies.verdicts`: for every development cell and every seen cell whose ADWM
stages are finished under today's code, the rollouts table of each π_e (one row per imagined
rollout with its identified bounds, the ``rollouts`` contract) graded against ground truth under
each candidate interval (adwm_core/ope/statistics/bounds.py):
- ``bootstrap``: the imagined returns' own spread;
- ``bounds``: the identified bounds on the environment's declared ranges;
- ``bounds, log ranges``: the same on the behaviour log's ranges of step rewards and returns
  (an assumption: no unlogged action pays what no logged one did).
Per cell: coverage (the share of (point, seed) rows whose interval holds J), width (the median
over those rows, over the range of J), and the verdicts on every pair of points, over every
seed's rollouts at once: decided (the share of distinguishable pairs given one) and precision
(the share of decided pairs ordered as J orders them). Beside them ``ADWM+live``: ADWM topped up
by 8 of each point's ground-truth episodes (``live_grades``, the same episode numbers at every
point, 100 draws; verdicts paired by start), and ``live alone``: those episodes, verdicts read apart.
→ bench/results/verdicts.{md,json}.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from adwm_core.ope.settings import AdwmConfig
from adwm_core.ope.statistics.bounds import ReturnRange, candidates_from_rows, identified_bounds, interval, verdicts
from adwm_core.data import TRAJECTORIES, read_table
from adwm_core.ope.statistics.calibration import ToppedUp, live_by_point, read_imagined, top_up, topped_up_verdicts
from adwm_core.ope.statistics.metrics import normalised_absolute_error, spearman, verdict_scores
from bench.common import artifact, cell_config, development_cells, write_grouped

CANDIDATES = ("bootstrap", "bounds", "bounds, log ranges", "ADWM+live", "live alone")
LIVE_EPISODES, LIVE_DRAWS = 8, 100  # K live episodes per point, drawn this many times from the ground truth
LIVE = f"ADWM+live{LIVE_EPISODES}"  # the bench's row of ADWM topped up by that many live episodes per point
RECOMMENDED_LIVE = f"recommended+live{LIVE_EPISODES}"  # the recommended estimate with them folded in (with_live)
LIVE_ONLY = f"live{LIVE_EPISODES} alone"  # the same episodes with no offline estimate, beside recommended+live (live_only)
LIVE_ALONE = f"live{LIVE_EPISODES} alone (PPI λ=0)"  # the same episodes as ADWM+live reads them with λ = 0, beside it


def log_ranges(trajectories: str) -> ReturnRange:
    """The behaviour log's ranges of step rewards and episode returns."""
    steps = pq.read_table(trajectories, columns=["source", "policy", "episode", "reward"])
    steps = steps.filter(pc.equal(steps["source"], "behavior"))
    returns = steps.group_by(["policy", "episode"]).aggregate([("reward", "sum")])["reward_sum"].to_numpy()
    return ReturnRange.of_log(steps["reward"].to_numpy(), returns)


def rebounded(rows: list[dict], config: AdwmConfig, returns: ReturnRange) -> list[dict]:
    """The rollout rows with their bounds on other ranges (from each row's known part)."""
    out = []
    for row in rows:
        if row["log_steps"] == row["steps"]:
            out.append(row)
            continue
        low, high = identified_bounds(row["known"], row["log_steps"], horizon=config.horizon, gamma=config.gamma,
                                      returns=returns)
        out.append({**row, "low": low, "high": high})
    return out


def grade(rows: list[dict], truth: dict, stderr: dict, config: AdwmConfig,
          error_range: tuple[float, float] | None = None) -> dict:
    """Coverage, width, decided and precision of one candidate's rows: ``truth`` and ``stderr`` by
    (policy, ε); the rows carry the candidate's bounds (``bootstrap``: L = U = the value), or
    ``error_range`` reads them calibrated."""
    spread = float(np.ptp(list(truth.values())))
    held, widths = [], []
    by_seed = candidates_from_rows(rows, ("policy", "epsilon", "seed"), error_range=error_range)
    for (policy, epsilon, seed), candidate in by_seed.items():
        low, high = interval(candidate, n_resamples=config.n_bootstrap, confidence=config.confidence, seed=seed)
        held.append(low <= truth[policy, epsilon] <= high)
        widths.append((high - low) / spread)
    pooled = candidates_from_rows(rows, ("policy", "epsilon"), error_range=error_range)
    found = verdicts(pooled, n_resamples=config.n_bootstrap, confidence=config.confidence, seed=0)
    scores = verdict_scores(found, truth, stderr)
    return {"coverage": float(np.mean(held)), "width": float(np.median(widths)), "decided": scores.decided,
            "precision": scores.precision, "pairs": scores.pairs, "distinguishable": scores.distinguishable,
            "decided_pairs": sum(v.better is not None for v in found)}


def live_grades(imagined: dict, episodes: dict, truth: dict, stderr: dict, *, k: int, draws: int,
                confidence: float, seed: int = 0) -> dict:
    """ADWM topped up by k live episodes per point (``top_up``), the same k episode numbers drawn
    without replacement at every point (the ground truth plays episode i of every point on the
    same instance and seed) ``draws`` times: coverage of J, the median width over the
    range of J, the median width over the live episodes' own interval, and the verdicts on every
    pair of points (``topped_up_verdicts``): decided and precision, each a mean over draws. The
    same draws give the live episodes alone (λ = 0) their own row."""
    rng = np.random.default_rng(seed)
    spread = float(np.ptp(list(truth.values())))
    order = sorted(truth)
    graded = {name: defaultdict(list) for name in ("ADWM+live", "live alone")}
    n = min(len(episodes[point]) for point in truth)
    for _ in range(draws):  # the same episode numbers at every point: the ground truth's instances and seeds
        drawn = rng.choice(n, k, replace=False)
        live = {point: [episodes[point][i] for i in drawn] for point in truth}
        topped = top_up(imagined, live, confidence=confidence)
        alone = [ToppedUp(t.point, t.adwm, t.live, t.live) for t in topped]
        for name, found in (("ADWM+live", topped), ("live alone", alone)):
            g = graded[name]
            g["coverage"] += [t.topped.low <= truth[t.point] <= t.topped.high for t in found]
            g["width"] += [(t.topped.high - t.topped.low) / spread for t in found]
            g["width_over_live"] += [(t.topped.high - t.topped.low) / (t.live.high - t.live.low)
                                     if t.live.high > t.live.low else np.nan for t in found]  # live all alike: none
            scores = verdict_scores(topped_up_verdicts(found, confidence=confidence),
                                    {f"{p} ε={e:g}": truth[p, e] for p, e in truth},
                                    {f"{p} ε={e:g}": stderr[p, e] for p, e in truth})
            g["decided"].append(scores.decided)
            g["precision"].append(scores.precision)
            value = {t.point: t.topped.value for t in found}
            g["rho"].append(spearman([value[p] for p in order], [truth[p] for p in order]))
            g["nmae"].append(normalised_absolute_error([value[p] for p in order], [truth[p] for p in order]))
    return {name: {"rho": float(np.nanmean(g["rho"])), "nmae": float(np.mean(g["nmae"])),
                   "coverage": float(np.mean(g["coverage"])), "width": float(np.median(g["width"])),
                   "width_over_live": float(np.nanmedian(g["width_over_live"])),
                   "decided": float(np.nanmean(g["decided"])), "precision": float(np.nanmean(g["precision"]))}
            for name, g in graded.items()}


def measure_rows(rows: list[dict], truth: dict, stderr: dict, config: AdwmConfig, log: ReturnRange) -> dict:
    """Every candidate on one cell's rollout rows."""
    bootstrap = [{**row, "low": row["value"], "high": row["value"]} for row in rows]
    return {"bootstrap": grade(bootstrap, truth, stderr, config),
            "bounds": grade(rows, truth, stderr, config),
            "bounds, log ranges": grade(rebounded(rows, config, log), truth, stderr, config)}


def finished_points(cell: str) -> tuple[list, dict, dict, dict, dict] | None:
    """The cell's ADWM rollout rows, imagined episodes, ground-truth episodes, J and its standard
    error by point (None: its ADWM or ground-truth stages are not finished under today's code)."""
    config = cell_config(cell)
    rows, truth, stderr, imagined, episodes = [], {}, {}, {}, {}
    for policy in config.evaluation.policies:
        adwm, gt = artifact(config, "adwm", policy, required=False), artifact(config, "ground-truth", policy,
                                                                                required=False)
        if adwm is None or gt is None:
            return None
        rows += pq.read_table(adwm.file("rollouts")).to_pylist()
        imagined.update(read_imagined(adwm.file("samples")))
        episodes.update(live_by_point(read_table(gt.file("episodes"), TRAJECTORIES)))
        for point in pq.read_table(gt.file("summary")).to_pylist():
            truth[point["policy"], float(point["epsilon"])] = point["mean_return"]
            stderr[point["policy"], float(point["epsilon"])] = point["stderr"]
    return rows, imagined, episodes, truth, stderr


def live_results(cell: str) -> dict[str, dict] | None:
    """ADWM topped up by ``LIVE_EPISODES`` live episodes per point (``live_grades``) on a finished
    cell, and the same episodes alone: the held-out table's ``ADWM+live<K>`` row and the live-only
    row beside it (None: not finished under today's code)."""
    found = finished_points(cell)
    if found is None:
        return None
    _, imagined, episodes, truth, stderr = found
    graded = live_grades(imagined, episodes, truth, stderr, k=LIVE_EPISODES, draws=LIVE_DRAWS,
                         confidence=cell_config(cell).adwm.confidence)
    return {LIVE: graded["ADWM+live"], LIVE_ALONE: graded["live alone"]}


def measure(cell: str) -> dict | None:
    """One cell's grades (None: its ADWM or ground-truth stages are not finished under today's code)."""
    found = finished_points(cell)
    if found is None:
        return None
    rows, imagined, episodes, truth, stderr = found
    config = cell_config(cell)
    log = log_ranges(artifact(config, "behaviour").file("trajectories"))
    return {**measure_rows([r for r in rows if r["estimator"] == "ADWM"], truth, stderr, config.adwm, log),
            **live_grades(imagined, episodes, truth, stderr, k=LIVE_EPISODES, draws=LIVE_DRAWS,
                          confidence=config.adwm.confidence)}


def table(title: str, results: dict[str, dict | None]) -> list[str]:
    lines = [f"**{title}** (coverage / median width over the range of J / decided / precision)", "",
             f"| cell | {' | '.join(CANDIDATES)} |", "|---" * (len(CANDIDATES) + 1) + "|"]
    for cell, r in results.items():
        if r is None:
            lines.append(f"| {cell} | not measured under today's code" + " |" * len(CANDIDATES))
            continue
        lines.append(f"| {cell} | " + " | ".join(
            f"{r[c]['coverage']:.2f} / {r[c]['width']:.2f} / {r[c]['decided']:.2f} / {r[c]['precision']:.2f}"
            for c in CANDIDATES) + " |")
    done = [r for r in results.values() if r is not None]
    if done:
        mean = defaultdict(dict)
        for c in CANDIDATES:
            for m in ("coverage", "width", "decided", "precision"):
                mean[c][m] = float(np.nanmean([r[c][m] for r in done]))
        lines.append(f"| **mean of {len(done)} cells** | " + " | ".join(
            f"{mean[c]['coverage']:.2f} / {mean[c]['width']:.2f} / {mean[c]['decided']:.2f} / "
            f"{mean[c]['precision']:.2f}" for c in CANDIDATES) + " |")
    return lines + [""]


def main() -> None:
    groups = {"Development cells (tuned on)": development_cells()}
    results = {title: {cell: measure(cell) for cell in cells} for title, cells in groups.items()}
    write_grouped("verdicts", "ADWM's interval and verdicts against ground truth", __doc__, results, table)


if __name__ == "__main__":
    main()
