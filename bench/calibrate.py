"""The bench's measured errors, shipped with the package for the recommended estimate
(adwm_core/ope/statistics/bench_calibration.json, read by ope/statistics/recommend.py; issue 73).

`python -m bench.calibrate [--from-main-results]`: per development cell with a finished report under today's code, each
estimator's seed-mean Ĵ and the share of points its own intervals held J, the ground truth J and its
standard error at every point, the environment's declared return range and the share of π_e's imagined steps the log answered (the bench loop runs it after a
default run). `python -m bench.calibrate --from-main-results`: the same from the curves of
bench/results/main_results.json, the only per-point figures committed before the loop's first run
(their commit is recorded, and the recommended estimate names it). Either way it then grades the
recommended estimate on the bench itself, each cell recommended from the others alone
(leave-one-cell-out): ρ, NMAE, the coverage of its intervals, the share of the pairs of points it
decides and the precision of those verdicts, alone and with live episodes folded in →
bench/results/recommended.{md,json}.
Test cells never enter it: their figures come through the ledger alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
from dataclasses import asdict

import numpy as np

from adwm_core.data import TRAJECTORIES, read_table
from adwm_core.fingerprints import code_fingerprint
from adwm_core.paths import artifact_path
from adwm_core.ope.statistics.calibration import live_by_point
from adwm_core.ope.statistics.metrics import normalised_absolute_error, spearman, verdict_scores
from adwm_core.ope.statistics.recommend import (MIN_SPLIT_PAIRS, SHIPPED, BenchCalibration, BenchCell,
                                                Recommendation, live_only, point_key, recommend, with_live)
from adwm_core.report import HEADLINE, RECOMMENDED, on_the_return_scale
from adwm_core.stages.report import logged_rewards, return_range_and_scale
from bench.common import REPO, RESULTS, artifact, cell_config, development_cells, machine
from bench.figures import report_results, truth_points
from bench.studies.verdicts import LIVE_DRAWS, LIVE_EPISODES, LIVE_ONLY, RECOMMENDED_LIVE, live_results

# the statistics the bench's grades of a cell call (with what of adwm_core they import: code_fingerprint)
GRADING_MODULES = ("adwm_core.report", "adwm_core.stages.report", "adwm_core.ope.statistics.recommend",
                   "adwm_core.ope.statistics.calibration", "adwm_core.ope.statistics.bounds",
                   "adwm_core.ope.statistics.verdicts", "adwm_core.ope.statistics.metrics")


def bench_cell(name: str, curves: dict, logged: bool = True, coverage: dict[str, float] | None = None,
               stderr: dict[str, float] | None = None, returns: dict[str, list[float]] | None = None) -> BenchCell | None:
    """A cell's record from its report's curves, each estimator's ``coverage`` of its own intervals,
    J's standard error by point and the sample s.d. of the ground truth's ``returns`` there (None:
    no ground truth in the curves, or no scale: an environment that declares no return range, its
    behaviour log not at hand or not ``logged``)."""
    if curves.get("ground_truth") is None:
        return None
    config = cell_config(name)
    behaviour = artifact(config, "behaviour", required=False) if logged else None
    trajectories = None if behaviour is None else logged_rewards(behaviour.file("trajectories"))
    (low, high), scale = return_range_and_scale(config, trajectories)
    if scale is None:
        return None
    labels = [point_key(p, e) for p, e in zip(curves["policy"], curves["epsilon"])]
    answered = curves.get("diagnostics", {}).get(HEADLINE, {}).get("log_share", math.nan)
    return BenchCell(name, config.env.name, low, high, scale, answered, dict(zip(labels, curves["ground_truth"])),
                     {estimator: dict(zip(labels, values)) for estimator, values in curves["estimators"].items()
                      if estimator != RECOMMENDED and on_the_return_scale(estimator)},
                     coverage or {}, stderr or {},
                     {p: float(np.std(runs, ddof=1)) for p, runs in (returns or {}).items() if len(runs) > 1})


def live_returns(name: str) -> tuple[dict[str, float], dict[str, list[float]]] | None:
    """J's standard error and the ground truth's episode returns, by point, of a cell whose
    ground-truth stages are finished (read from them alone)."""
    config, returns = cell_config(name), {}
    points = truth_points(config)
    if points is None:
        return None
    for policy in config.evaluation.policies:
        truth = artifact(config, "ground-truth", policy)
        for point, runs in live_by_point(read_table(truth.file("episodes"), TRAJECTORIES)).items():
            returns[point_key(*point)] = [g for _, g in runs]
    return {point_key(p["policy"], p["epsilon"]): p["stderr"] for p in points}, returns


def cell_results(report, cell: str) -> dict[str, dict] | None:
    """:func:`report_results` of a finished report, with ADWM topped up by live episodes
    (``ADWM+live8``: bench/studies/verdicts.py) and the recommended estimate with them folded in
    (``recommended+live8``: bench/calibrate.py) where the cell's ground truth holds them, each with
    the same live episodes alone beside it. Kept beside the artifacts under the report's key and
    the grading code's fingerprint, so that a second loop reads them rather than drawing again."""
    kept = _graded_path(report)
    if kept is not None and os.path.exists(kept):
        with open(kept) as f:
            return json.load(f)
    results = report_results(report, cell)
    live = live_results(cell) if results is not None else None
    if live is not None:
        results.update(live)
        for name, alone in ((RECOMMENDED_LIVE, False), (LIVE_ONLY, True)):
            recommended = recommended_live_results(report, cell, alone)
            if recommended is not None:
                results[name] = recommended
    if kept is not None and results is not None:
        os.makedirs(os.path.dirname(kept), exist_ok=True)
        with open(f"{kept}.partial-{os.getpid()}", "w") as f:
            json.dump(results, f)
        os.replace(f"{kept}.partial-{os.getpid()}", kept)
    return results


def _graded_path(report) -> str | None:
    """Where :func:`cell_results` keeps a report's grades: by the report's key (its inputs: the
    estimates, the ground truth, the shipped calibration) and the code that grades them (bench's
    modules and the statistics they call); None where the root is not a local folder."""
    code = hashlib.sha256(code_fingerprint(*GRADING_MODULES).encode())
    for source in sorted((REPO / "bench").rglob("*.py")):
        code.update(source.read_bytes())
    cell = os.path.basename(os.path.dirname(os.path.dirname(report.path)))  # …/cells/<cell>/report/<key[:16]>
    path = artifact_path("bench", "cell-results", cell, f"{report.key[:16]}-{code.hexdigest()[:16]}.json")
    return None if "://" in path else path


def recommended_live_results(report, cell: str, alone: bool = False) -> dict | None:
    """The report's recommended reading (calibrated without this cell) with 8 of each point's
    ground-truth episodes folded in (``alone``: those episodes with no offline estimate): ρ, NMAE,
    coverage, half-width, decided, precision, mean of the draws."""
    found = _printed_reading(report, cell)
    if found is None:
        return None
    reading, record_cell, returns = found
    return live_grades(reading, record_cell, returns, alone=alone)


def recommended_grades(report, cell: str) -> dict | None:
    """The report's recommended reading as the product printed it, graded on the cell's truth
    (:func:`grades`, its half-width over the return range among them), and its verdict on the cell's
    two agents at ε = 0 beside the truth (a test batch's table: bench/ledger.py)."""
    found = _printed_reading(report, cell)
    if found is None or not found[0].values:
        return None
    reading, record_cell, _ = found
    return {**grades(reading, record_cell), "agents": agents_verdict(reading, record_cell)}


def _printed_reading(report, cell: str) -> tuple[Recommendation, BenchCell, dict[str, list[float]]] | None:
    """The report's recommended reading, the cell's record and its ground truth's episode returns by
    point (None: no recommended reading, or the ground truth or the scale is missing)."""
    with open(report.file("curves")) as f:
        curves = json.load(f)
    record, found = curves.get("recommended"), live_returns(cell)
    if not record or found is None:
        return None
    record_cell = bench_cell(cell, curves, stderr=found[0])
    return None if record_cell is None else (Recommendation.from_record(record), record_cell, found[1])


def from_reports(cells: list[str]) -> tuple[tuple[BenchCell, ...], dict[str, dict[str, list[float]]]]:
    """The records of the cells whose report is finished under today's code, and their ground
    truth's episode returns by point (for the grades with live episodes)."""
    found, returns = [], {}
    for name in cells:
        report = artifact(name, "report", required=False)
        if report is not None:
            with open(report.file("curves")) as f:
                curves = json.load(f)
            coverage = {e: r["coverage"] for e, r in (report_results(report, name) or {}).items()
                        if r.get("coverage") is not None and e != RECOMMENDED}  # it reads this file: no loop
            live = live_returns(name)
            found.append(bench_cell(name, curves, coverage=coverage, stderr=live[0] if live else None,
                                    returns=live[1] if live else None))
            if live:
                returns[name] = live[1]
    return tuple(c for c in found if c is not None), returns


def from_main_results() -> tuple[tuple[BenchCell, ...], str]:
    """The development cells' records in bench/results/main_results.json, and their commit (their
    behaviour logs are not read: a cell whose environment declares no return range has no scale)."""
    results = json.loads((RESULTS / "main_results.json").read_text())
    development = set(development_cells())
    cells = [bench_cell(c["cell"], c["curves"], logged=False) for c in results["cells"] if c["cell"] in development]
    commits = sorted({c["commit"] for c in results["cells"] if c["cell"] in development})
    return tuple(c for c in cells if c is not None), ",".join(commits)


def save_calibration(cells: tuple[BenchCell, ...], commit: str) -> bool:
    """Write the shipped calibration where its cells' records changed; False (kept, with the commit
    it names) where they did not: the file keys every report (adwm_core/pipeline.py), so a new
    commit label over the same errors would recompute them all for nothing."""
    def records(found: tuple[BenchCell, ...]) -> str:  # NaN (an unmeasured share) equals itself here
        return json.dumps([asdict(c) for c in found])

    try:
        if records(BenchCalibration.load(SHIPPED).cells) == records(cells):
            return False
    except (OSError, ValueError):  # none yet, or not one (a hand-edited file): written anew
        pass
    partial = f"{SHIPPED}.partial"  # written whole, then moved: a stopped run leaves the old file
    BenchCalibration(cells, commit).save(partial)
    os.replace(partial, SHIPPED)
    return True


def grades(reading: Recommendation, cell: BenchCell) -> dict:
    """The reading graded on the cell's truth: ρ, NMAE, coverage, the mean half-width of its printed
    (clipped) intervals over the return range, verdicts decided (of the pairs the truth splits;
    every pair whose truths differ where the record has no standard errors) and precision."""
    points = list(reading.values)
    j = [cell.truth[p] for p in points]
    scores = verdict_scores(reading.verdicts, cell.truth, {p: cell.truth_stderr.get(p, 0.0) for p in points})
    return {"rho": spearman([reading.values[p] for p in points], j),
            "nmae": normalised_absolute_error([reading.values[p] for p in points], j) if np.ptp(j) > 0 else math.nan,
            "coverage": float(np.mean([reading.low[p] <= cell.truth[p] <= reading.high[p] for p in points])),
            "half_width": float(np.mean([(reading.high[p] - reading.low[p]) / 2 for p in points])) / (cell.high - cell.low),
            "decided": scores.decided, "precision": scores.precision}


def leave_one_cell_out(bench: BenchCalibration, live: dict[str, dict[str, list[float]]] | None = None) -> dict[str, dict]:
    """Per bench cell, the recommended estimate from the other cells alone, graded on its truth; and
    where ``live`` holds the cell's ground-truth returns by point, the same with ``LIVE_EPISODES`` of
    them folded in (``with_live``; the same episode numbers at every point, ``LIVE_DRAWS`` draws)
    and the same episodes alone (``live_only``); and the verdict on the cell's two agents at ε = 0."""
    graded = {}
    for cell in bench.cells:
        reading = recommend(cell.estimates, return_range=(cell.low, cell.high), answered=cell.answered, bench=bench,
                            cell=cell.name, scale=cell.scale)
        if not reading.values:
            graded[cell.name] = {"source": reading.source}
            continue
        graded[cell.name] = {"source": reading.source, **grades(reading, cell), "agents": agents_verdict(reading, cell)}
        for key, alone in (("live", False), ("live_alone", True)):
            topped = live_grades(reading, cell, (live or {}).get(cell.name) or {}, bench, alone)
            if topped is not None:
                graded[cell.name][key] = topped
    return graded


def agents_verdict(reading: Recommendation, cell: BenchCell) -> str | None:
    """The verdict on the cell's first two agents at ε = 0 (the question a user brings) beside the
    truth: "a > b (truth a > b)", "cannot tell (truth …)"; None where the cell has one agent."""
    at_zero = [p for p in reading.values if p.endswith(" ε=0")]
    if len(at_zero) < 2:
        return None
    a, b = at_zero[:2]
    verdict = next(v for v in reading.verdicts if {v.a, v.b} == {a, b})
    agent = {p: p.rsplit(" ε=", 1)[0] for p in (a, b)}
    said = "cannot tell" if verdict.better is None else f"{agent[verdict.better]} better"
    gap, se = cell.truth[a] - cell.truth[b], math.hypot(cell.truth_stderr.get(a, 0.0), cell.truth_stderr.get(b, 0.0))
    truth = (f"{agent[a] if gap > 0 else agent[b]} better" if abs(gap) > 1.96 * se else "not split") + \
        f", J {cell.truth[a]:+.2f} vs {cell.truth[b]:+.2f}"
    return f"{said} (truth: {truth})"


def live_grades(reading: Recommendation, cell: BenchCell, returns: dict[str, list[float]],
                bench: BenchCalibration | None = None, alone: bool = False) -> dict | None:
    """The reading with ``LIVE_EPISODES`` of each point's ground-truth ``returns`` folded in
    (``with_live`` on ``bench``, None: the shipped one; ``alone``: the same episodes with no offline
    estimate, ``live_only``; the same episode numbers at every point), graded, the mean of
    ``LIVE_DRAWS`` draws (None: fewer returns than that at some point)."""
    if not reading.values or any(len(returns.get(p, ())) < LIVE_EPISODES for p in reading.values):
        return None
    rng, n = np.random.default_rng(0), min(len(returns[p]) for p in reading.values)
    read = (lambda live: live_only(reading, live)) if alone else (lambda live: with_live(reading, live, bench))
    draws = [grades(read({p: [returns[p][i] for i in drawn] for p in reading.values}), cell)
             for drawn in (rng.choice(n, LIVE_EPISODES, replace=False) for _ in range(LIVE_DRAWS))]
    return {k: float(np.nanmean([d[k] for d in draws])) for k in draws[0]}


def write_grades(bench: BenchCalibration, graded: dict[str, dict]) -> None:
    keys = ("rho", "nmae", "coverage", "half_width", "decided", "precision")
    live_keys = ("coverage", "half_width", "decided", "precision")
    splits = {c.name: c.split_pairs for c in bench.cells}
    counted = [g for name, g in graded.items() if splits[name] >= MIN_SPLIT_PAIRS]

    def cells(values: list) -> str:
        return " | ".join("–" if v is None or v != v else f"{v:.2f}" for v in values)

    rows = [f"| {name}{'' if splits[name] >= MIN_SPLIT_PAIRS else ' (not counted)'} | {splits[name]} | {g['source']} | "
            + cells([g.get(k) for k in keys]) + " | " + cells([g.get("live", {}).get(k) for k in live_keys]) + " | "
            + cells([g.get("live_alone", {}).get(k) for k in live_keys]) + f" | {g.get('agents') or '–'} |"
            for name, g in graded.items()]
    means = [np.nanmean([g[k] for g in counted if k in g] or [np.nan]) for k in keys]
    live_means = [np.nanmean([g[side][k] for g in counted if side in g] or [np.nan])
                  for side in ("live", "live_alone") for k in live_keys]
    lowest = min((g["coverage"] for g in counted if "coverage" in g), default=math.nan)
    lines = ["# The recommended estimate on the bench, each cell from the others alone", "",
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"Bench: {len(bench.cells)} cells measured at `{bench.commit}` ({SHIPPED.rsplit('/', 1)[-1]}); "
             f"95 % intervals; half-width over the return range; decided: of the pairs of points the truth splits. "
             f"With {LIVE_EPISODES} live episodes per point folded in (`with_live`, the mean of {LIVE_DRAWS} draws "
             f"from the ground truth's episodes), and beside it the same episodes alone (`live_only`): coverage / "
             f"half-width / decided / precision. Agents at ε = 0: the verdict on the cell's two agents, the question "
             f"a user brings, beside what the truth says. Means over the {len(counted)} cells "
             f"whose truth splits at least {MIN_SPLIT_PAIRS} pairs (bench/ADOPTION.md); lowest coverage there "
             f"{lowest:.2f}.", "",
             "| cell | split pairs | recommended | ρ | NMAE | coverage | half-width | decided | precision | "
             f"+live{LIVE_EPISODES} coverage | half-width | decided | precision | live{LIVE_EPISODES} alone coverage | "
             "half-width | decided | precision | agents at ε = 0 |", "|---" * 18 + "|",
             *rows, "| **mean** | | | " + cells(means) + " | " + cells(live_means) + " | |", "",
             f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "recommended.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "recommended.json").write_text(json.dumps({"commit": bench.commit, "cells": graded}, indent=2))
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-main-results", action="store_true",
                        help="from bench/results/main_results.json's curves instead of today's reports")
    args = parser.parse_args()
    live = {}
    if args.from_main_results:
        cells, commit = from_main_results()
    else:
        from adwm_core.provenance import source_version

        (cells, live), commit = from_reports(development_cells()), source_version()
    if not cells:
        raise SystemExit("no development cell has a finished report under today's code: run `python -m bench.loop`")
    written = save_calibration(cells, commit)
    bench = BenchCalibration.load(SHIPPED)
    print(f"{SHIPPED}: {len(cells)} cells ({', '.join(c.name for c in cells)}) "
          + (f"at {commit}" if written else f"unchanged, measured at {bench.commit}"))
    write_grades(bench, leave_one_cell_out(bench, live))


if __name__ == "__main__":
    main()
