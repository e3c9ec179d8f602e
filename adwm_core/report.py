"""The cell report: every estimator graded against ground truth over the π_e family — each
π_e of the cell at each ε level, a *point*.

Per estimator, Ĵ is the mean over seeds of its estimate at each point (exact, in signed-log
form; ranked by its order, the data contract's rule, where its float saturates); against the
ground-truth mean return it gets Spearman ρ (with a percentile-bootstrap interval over points,
2000 resamples as in the paper's Table main_results, marked degenerate where every resample
ranks alike, and the exact permutation p-value: ope/statistics/metrics.py), the per-seed ρ
(each, and mean ± s.d.), regret@1 and the normalised mean absolute error
(|Ĵ − J| / range of J; meaningful for estimators on the return scale —
``ADWM:success_similarity`` is a cosine, ranked but not calibrated), and the coverage and
width of its 95 % intervals. Rows ``<estimator>@<interval>`` carry the estimator's Ĵ with
another interval (ope/classical/meta.py): they are not ranked again, only their coverage and
width are shown beside the bootstrap's, in the interval-methods table.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .ope.answers import ADWM, SOURCES
from .ope.statistics.bounds import candidates_from_rows
from .ope.statistics.verdicts import CANNOT_TELL
from .ranking import PrintedInterval, compare
from .ope.statistics.calibration import topped_up_verdicts
from .ope.statistics.recommend import RANGE_SLACK, BenchCalibration, Recommendation, point_key, recommend, withheld
from .ope.statistics.diagnostics import verdicts
from .ope.statistics.signed_log import SignedLog, signed_sum
from .ope.statistics.metrics import (normalised_absolute_error, per_seed_spearman, regret_at_1, spearman_with_interval,
                                     verdict_scores)

RESULT_COLUMNS = ("estimator", "rho", "rho_ci_low", "rho_ci_high", "rho_ci_degenerate", "rho_p", "rho_seeds",
                  "rho_seed_mean", "rho_seed_sd", "regret_at_1", "nmae", "coverage", "width", "n_seeds")

Point = tuple[str, float]  # (π_e name, ε): one policy of the evaluated family
INTERVAL_MARK = "@"  # <estimator>@<interval>: the estimator's Ĵ with another interval
DIAGNOSTICS = ("log_share", "off_log_distance", "ess", "top_weight_share")  # estimates columns (ope/statistics/diagnostics.py)


RECOMMENDED = "recommended"  # the report's row and curves entry of the recommended estimate
HEADLINE = f"{ADWM}:reward_sum"


def on_the_return_scale(estimator: str) -> bool:
    """Whether an estimator's Ĵ is a return (``…:success_similarity`` is a cosine: ranked, never recommended)."""
    return not estimator.endswith(":success_similarity")


def estimate_curves(estimates: pa.Table, points: list[Point]) -> dict[str, list[list[SignedLog]]]:
    """estimator → its estimates, seeds × points, as exact signed logs (from ``log_abs_value`` and
    ``sign``, or ``value`` where a table has only that); seeds missing a point are left out."""
    exact = {"log_abs_value", "sign"} <= set(estimates.column_names)
    columns = ["estimator", "seed", "policy", "epsilon", *(("log_abs_value", "sign") if exact else ("value",))]
    values: dict[str, dict[int, dict[Point, SignedLog]]] = defaultdict(lambda: defaultdict(dict))
    for row in estimates.select(columns).to_pylist():
        values[row["estimator"]][row["seed"]][(row["policy"], row["epsilon"])] = (
            SignedLog(row["log_abs_value"], row["sign"]) if exact else SignedLog.of(row["value"]))
    return {name: [[by_point[p] for p in points] for by_point in seeds.values() if all(p in by_point for p in points)]
            for name, seeds in sorted(values.items())}


def seed_mean(values: Sequence[SignedLog]) -> SignedLog:
    """The mean of signed logs, exact: Σ_s sign_s e^{log|x_s|} / n in log space."""
    total = signed_sum(np.array([v.log_abs for v in values]), np.array([v.sign for v in values]))
    return SignedLog(total.log_abs - np.log(len(values)), total.sign) if total.sign else total


def main_results(ground_truth: pa.Table | None, estimates: pa.Table, *, seed: int = 0) -> tuple[list[dict], dict]:
    """(one row per estimator, the curves: the (policy, ε) points, ground truth and each
    estimator's mean Ĵ). Several π_e are ranked together over all their points (HotpotQA-cross);
    without ground truth (an environment that cannot be run) there are curves but no rows."""
    source = estimates if ground_truth is None else ground_truth
    points = sorted({(r["policy"], r["epsilon"]) for r in source.select(["policy", "epsilon"]).to_pylist()})
    curves = {"policy": [p for p, _ in points], "epsilon": [e for _, e in points], "ground_truth": None,
              "estimators": {}}
    truth = None
    if ground_truth is not None:
        by_point = {(r["policy"], r["epsilon"]): r["mean_return"] for r in ground_truth.to_pylist()}
        truth = curves["ground_truth"] = [by_point[p] for p in points]
        curves["intervals"] = interval_methods(estimates, by_point)
    estimates = estimates.filter(pc.invert(pc.match_substring(estimates["estimator"], INTERVAL_MARK)))
    present = [c for c in DIAGNOSTICS if c in estimates.column_names]
    curves["diagnostics"] = trust_diagnostics(estimates)
    curves["verdicts"] = verdicts(estimates.select(["estimator", *present]).to_pylist())
    rows = []
    for name, per_seed in estimate_curves(estimates, points).items():
        if len(per_seed) == 0:
            continue
        means = [seed_mean(column) for column in zip(*per_seed)]
        mean = np.array([m.value for m in means])  # saturated at ±float max: for the curves and errors
        curves["estimators"][name] = mean.tolist()
        if truth is None:
            continue
        # ranks from the exact values' order (the data contract), not the saturated floats
        seed_rhos, _ = per_seed_spearman([[v.order_key for v in curve] for curve in per_seed], truth)
        rank = spearman_with_interval([m.order_key for m in means], truth, seed=seed)
        rows.append({
            "estimator": name, "rho": rank.rho, "rho_ci_low": rank.ci_low, "rho_ci_high": rank.ci_high,
            "rho_ci_degenerate": rank.degenerate, "rho_p": rank.p_value, "rho_seeds": [float(r) for r in seed_rhos],
            "rho_seed_mean": float(np.nanmean(seed_rhos)) if not np.all(np.isnan(seed_rhos)) else float("nan"),
            "rho_seed_sd": float(np.nanstd(seed_rhos)) if not np.all(np.isnan(seed_rhos)) else float("nan"),
            **_errors([m.order_key for m in means], mean, truth),
            **interval_coverage(estimates, name, by_point),
            "n_seeds": len(per_seed),
        })
    return rows, curves


def recommended_reading(cell: str, curves: dict, rollouts: pa.Table | None, return_range: tuple[float, float],
                        scale: float | None, bench: BenchCalibration, confidence: float) -> Recommendation:
    """The recommended estimate of every point (ope/statistics/recommend.py) from the curves'
    seed means, ADWM's share of steps the log answered, the importance weights' smallest ESS and
    the spread of ADWM's imagined returns at each point; the cell's ground truth is not read."""
    labels = _point_keys(curves)
    estimates = {name: dict(zip(labels, values)) for name, values in curves["estimators"].items()
                 if on_the_return_scale(name)}
    diagnostics = curves.get("diagnostics", {})
    variance = {}
    if rollouts is not None and rollouts.num_rows:
        mine = rollouts.filter(pc.equal(rollouts["estimator"], ADWM))
        spread = mine.group_by(["policy", "epsilon"]).aggregate(
            [("value", "variance", pc.VarianceOptions(ddof=1)), ("value", "count")])
        variance = {point_key(r["policy"], r["epsilon"]): r["value_variance"] for r in spread.to_pylist()
                    if r["value_count"] > 1}
    return recommend(estimates, return_range=return_range, scale=scale, bench=bench, cell=cell, alpha=1 - confidence,
                     answered=diagnostics.get(HEADLINE, {}).get("log_share", float("nan")),
                     min_ess={name: d["ess"] for name, d in diagnostics.items() if "ess" in d},
                     return_variance=variance)


def recommended_row(reading: Recommendation, curves: dict, truth: pa.Table) -> dict | None:
    """The recommended estimate graded like any estimator's row, its calibrated intervals' coverage
    and width, and its verdicts' share decided of the pairs the truth splits and their precision."""
    if not reading.values:
        return None
    labels, j = _point_keys(curves), curves["ground_truth"]
    values = np.array([reading.values[label] for label in labels])
    rank = spearman_with_interval(values, j)
    stderr = {point_key(r["policy"], r["epsilon"]): r["stderr"] for r in truth.to_pylist()}
    scores = verdict_scores(reading.verdicts, dict(zip(labels, j)), stderr)
    return {"estimator": RECOMMENDED, "rho": rank.rho, "rho_ci_low": rank.ci_low, "rho_ci_high": rank.ci_high,
            "rho_ci_degenerate": rank.degenerate, "rho_p": rank.p_value, "rho_seeds": [rank.rho],
            "rho_seed_mean": rank.rho, "rho_seed_sd": 0.0, **_errors(values, values, j),
            "coverage": float(np.mean([reading.low[p] <= v <= reading.high[p] for p, v in zip(labels, j)])),
            "width": float(np.median([reading.high[p] - reading.low[p] for p in labels]) / np.ptp(j))
            if np.ptp(j) > 0 else float("nan"),
            "decided": scores.decided, "precision": scores.precision, "n_seeds": 1}


def recommended_lines(curves: dict, pairs: str = "all") -> list[str]:
    """The report's section on the recommended estimate (``pairs``: which verdicts it lists, as
    ``Recommendation.lines``)."""
    reading = curves.get(RECOMMENDED)
    if not reading:
        return []
    said = reading["lines"] if pairs == "all" else Recommendation.from_record(reading).lines(pairs)
    return ["## Recommended", "", *said, ""]


def interval_coverage(estimates: pa.Table, estimator: str, truth: dict[Point, float]) -> dict[str, float]:
    """How often the estimator's intervals (every point and seed) hold the true value, and their
    median width over the range of the truth (NaN where the truth is flat)."""
    mine = estimates.filter(pc.equal(estimates["estimator"], estimator)).select(
        ["policy", "epsilon", "ci_low", "ci_high"]).to_pylist()
    mine = [r for r in mine if (r["policy"], r["epsilon"]) in truth]
    held = [r["ci_low"] <= truth[r["policy"], r["epsilon"]] <= r["ci_high"] for r in mine]
    spread = np.ptp(list(truth.values()))
    widths = [r["ci_high"] - r["ci_low"] for r in mine]
    return {"coverage": float(np.mean(held)),
            "width": float(np.median(widths) / spread) if spread > 0 else float("nan")}


def interval_methods(estimates: pa.Table, truth: dict[Point, float]) -> dict[str, dict[str, dict[str, float]]]:
    """estimator → interval method → its coverage and width (``interval_coverage``), for every
    estimator with ``@`` rows: ``bootstrap`` (its own rows) first, then each of theirs."""
    names = set(estimates["estimator"].to_pylist())
    methods: dict[str, list[str]] = defaultdict(list)
    for name in sorted(names):
        base, mark, method = name.partition(INTERVAL_MARK)
        if mark and base in names:
            methods[base].append(method)
    return {base: {method: interval_coverage(estimates, base if method == "bootstrap" else f"{base}{INTERVAL_MARK}{method}",
                                             truth) for method in ("bootstrap", *theirs)}
            for base, theirs in sorted(methods.items())}


def interval_method_lines(curves: dict) -> list[str]:
    """The report's table of coverage / width per estimator and interval method."""
    shown = curves.get("intervals") or {}
    if not shown:
        return []
    methods = list(dict.fromkeys(m for by_method in shown.values() for m in by_method))
    lines = ["## Interval methods", "", "Coverage / median width over the range of J of each estimator's 95 % "
             "intervals, by how the interval is made (ope/statistics/intervals.py); Ĵ is the same in every column.", "",
             "| estimator | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for name, by_method in shown.items():
        lines.append(f"| {name} | " + " | ".join(
            f"{_plain(by_method[m]['coverage'], '.2f')} / {_plain(by_method[m]['width'], '.3g')}" if m in by_method
            else "" for m in methods) + " |")
    return lines + [""]


def trust_diagnostics(estimates: pa.Table) -> dict[str, dict[str, float]]:
    """Per estimator that has them (ope/statistics/diagnostics.py): the mean share of imagined steps the log
    answered and the mean distance of the others from it, the smallest ESS and the largest
    top-trajectory weight share over its points and seeds."""
    present = [c for c in DIAGNOSTICS if c in estimates.column_names]
    by_estimator: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in estimates.select(["estimator", *present]).to_pylist():
        for column in present:
            if row[column] is not None:
                by_estimator[row["estimator"]][column].append(row[column])
    reduce = {"log_share": np.mean, "off_log_distance": np.nanmean, "ess": np.min, "top_weight_share": np.max}
    return {name: {column: float(reduce[column](values)) for column, values in columns.items()}
            for name, columns in sorted(by_estimator.items())}


def diagnostics_lines(curves: dict) -> list[str]:
    """The report's trust-diagnostics table and its verdicts."""
    shown = curves.get("diagnostics") or {}
    if not shown:
        return []
    lines = ["## Trust diagnostics", "",
             "| estimator | steps answered by the log | off-log pairs' distance | smallest ESS | largest top weight |",
             "|---|---|---|---|---|"]
    for name, d in shown.items():
        lines.append(f"| {name} | " + " | ".join(_plain(d.get(column, float("nan")), spec) for column, spec in
                                                 (("log_share", ".0%"), ("off_log_distance", ".2f"), ("ess", ".1f"),
                                                  ("top_weight_share", ".0%"))) + " |")
    return lines + [""] + [f"- {line}" for line in curves.get("verdicts", [])] + [""]


def _errors(order: Sequence[float], estimates: np.ndarray, truth: list[float]) -> dict[str, float]:
    """regret@1 (of the points ``order`` ranks first) and NMAE (of the ``estimates``); NaN when every
    policy has the same true value (nothing to normalise by)."""
    if np.ptp(truth) == 0:
        return {"regret_at_1": float("nan"), "nmae": float("nan")}
    return {"regret_at_1": regret_at_1(order, truth), "nmae": normalised_absolute_error(estimates, truth)}


def undefined_rho_reason(name: str, curves: dict) -> str:
    """Why an estimator's ρ is undefined (Spearman ρ needs both curves to vary)."""
    if np.ptp(curves["ground_truth"]) == 0:
        return "ground truth is the same at every point"
    if np.ptp(curves["estimators"][name]) == 0:
        return "Ĵ is the same at every point"
    return "undefined"


def signed(value: float) -> str:
    return "–" if value != value else f"{value:+.2f}"


def _plain(value: float, spec: str) -> str:
    return "–" if value != value else format(value, spec)


def _by_rho(rows: list[dict]) -> list[dict]:
    """Best ρ first, undefined ρ last."""
    return sorted(rows, key=lambda r: -np.nan_to_num(r["rho"], nan=-2))


def summary_lines(rows: list[dict], curves: dict) -> list[str]:
    """One line per estimator, best ρ first: ρ [95 % CI] and NMAE, or a dash and the reason
    where ρ is undefined; estimates only where the cell has no ground truth."""
    if curves["ground_truth"] is None:
        return [f"{name:<28} Ĵ = " + " ".join(f"{v:.3g}" for v in values) + "   (no ground truth)"
                for name, values in curves["estimators"].items()] + not_applicable_lines(curves) + trust_lines(curves)
    lines = []
    for r in _by_rho(rows):
        if r["rho"] != r["rho"]:
            lines.append(f"{r['estimator']:<28} ρ   –     ({undefined_rho_reason(r['estimator'], curves)})")
        else:
            lines.append(f"{r['estimator']:<28} ρ {r['rho']:+.2f} [{r['rho_ci_low']:+.2f}, {r['rho_ci_high']:+.2f}]"
                         f"   NMAE {_plain(r['nmae'], '.3g')}")
    return lines + not_applicable_lines(curves) + trust_lines(curves)


def trust_lines(curves: dict) -> list[str]:
    """The verdicts of the trust diagnostics (ope/statistics/diagnostics.py), a line each, for the terminal."""
    return [f"trust: {line}" for line in curves.get("verdicts", [])]


def not_applicable_lines(curves: dict) -> list[str]:
    """The estimators the logs could not feed (``curves["not_applicable"]``: name → reason),
    grouped by reason."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in curves.get("not_applicable", {}).items():
        by_reason.setdefault(reason, []).append(name)
    return [f"not applicable: {', '.join(names)} — {reason}" for reason, names in by_reason.items()]


def first_seed_rows(estimates: pa.Table) -> list[dict]:
    """Every estimator's rows of its first seed (the seed lists differ by estimator: ``--seed``
    shifts them all), sorted by estimator, π_e and ε."""
    rows = estimates.to_pylist()
    first: dict[str, int] = {}
    for r in rows:
        first[r["estimator"]] = min(first.get(r["estimator"], r["seed"]), r["seed"])
    return sorted((r for r in rows if r["seed"] == first[r["estimator"]]),
                  key=lambda r: (r["estimator"], r["policy"], r["epsilon"]))


def interval_lines(estimates: pa.Table, coverage: Mapping[str, float]) -> list[str]:
    """Ĵ [95 % interval] of every estimator at every (π_e, ε) point of its first seed, a line each;
    an interval whose bench ``coverage`` (estimator → share of points held) is under the floor is
    withheld and says why (ope/statistics/recommend.py's ``withheld``)."""
    lines = []
    for r in first_seed_rows(estimates):
        why = withheld(r["estimator"], coverage)
        interval = f"({why})" if why else f"[{r['ci_low']:.4g}, {r['ci_high']:.4g}]"
        lines.append(f"{r['estimator']:<26} {r['policy']:<20} ε={r['epsilon']:<5g} Ĵ = {r['value']:.4g}  {interval}")
    return lines


def _point_keys(curves: dict) -> list[str]:
    """Every point's full name, ``policy ε=…`` (ope/statistics/recommend.py's ``point_key``)."""
    return [point_key(p, e) for p, e in zip(curves["policy"], curves["epsilon"])]


def _point_labels(curves: dict) -> list[str]:
    if len(set(curves["policy"])) == 1:
        return [f"ε={e:g}" for e in curves["epsilon"]]
    return [f"{p} ε={e:g}" for p, e in zip(curves["policy"], curves["epsilon"])]


def markdown(cell: str, rows: list[dict], curves: dict) -> str:
    policies = ", ".join(dict.fromkeys(curves["policy"]))
    lines = [f"# {cell}: off-policy estimates of {policies}", ""]
    if curves["ground_truth"] is None:
        lines += ["No ground truth for this cell (its environment cannot be run here): estimates only.", ""]
    else:
        lines += ["| estimator | Spearman ρ [95 % CI] | p (permutation) | ρ per seed | regret@1 | NMAE | "
                  "coverage | width / range |", "|---|---|---|---|---|---|---|---|"]
        for r in _by_rho(rows):
            rho = (f"– ({undefined_rho_reason(r['estimator'], curves)})" if r["rho"] != r["rho"] else
                   f"{r['rho']:+.2f} [{signed(r['rho_ci_low'])}, {signed(r['rho_ci_high'])}]"
                   + (" †" if r["rho_ci_degenerate"] else ""))
            lines.append(f"| {r['estimator']} | {rho} | {_plain(r['rho_p'], '.3f')} | {signed(r['rho_seed_mean'])} ± "
                         f"{_plain(r['rho_seed_sd'], '.2f')} ({r['n_seeds']}) | {_plain(r['regret_at_1'], '.2f')} | "
                         f"{_plain(r['nmae'], '.3g')} | {_plain(r['coverage'], '.2f')} | {_plain(r['width'], '.2f')} |")
        lines += ["", "coverage: the share of the estimator's 95 % intervals (every point and seed) that hold the "
                      "true J; width: their median width over the range of J."]
        if any(r["rho_ci_degenerate"] for r in rows):
            lines += ["", f"† degenerate interval: every bootstrap resample of the {len(curves['ground_truth'])} "
                          "points ranks alike, so the interval is a point and says nothing about ρ's uncertainty "
                          "at this n; the permutation p-value does."]
        lines.append("")
    labels = _point_labels(curves)
    lines += [f"| Ĵ | {' | '.join(labels)} |", "|---|" + "---|" * len(labels)]
    if curves["ground_truth"] is not None:
        lines.append("| ground truth | " + " | ".join(f"{v:.3f}" for v in curves["ground_truth"]) + " |")
    lines += [f"| {name} | " + " | ".join(f"{v:.3g}" for v in values) + " |"
              for name, values in curves["estimators"].items()]
    extra = not_applicable_lines(curves)
    lines += [""] + [f"- {line}" for line in extra] if extra else []
    sections = [*recommended_lines(curves), *interval_method_lines(curves), *diagnostics_lines(curves),
                *comparison_lines(curves)]
    if curves.get("answers"):
        epsilon = min(curves["epsilon"])
        sections += ["## What the log cannot tell", "", *(f"- {line}" for line in
                                                         cannot_tell_lines(curves["answers"], epsilon)), ""]
    return "\n".join(lines + ([""] + sections if sections else [])) + "\n"


def point_comparisons(rollouts: pa.Table, truth: pa.Table | None, *, n_resamples: int = 1000,
                      confidence: float = 0.95, printed: PrintedInterval = PrintedInterval()) -> dict:
    """ADWM's verdict on every pair of the cell's points (ranking.py's reading: the paired
    ``printed`` interval, and the identified bounds for the log alone),
    with, where ``truth`` is known, the share of distinguishable pairs decided and of decided
    pairs ordered as J orders them."""
    rows = [r for r in rollouts.to_pylist() if r["estimator"] == ADWM]
    if not rows:
        return {}
    label = {key: f"{key[0]} ε={key[1]:g}" for key in {(r["policy"], r["epsilon"]) for r in rows}}
    keys = ("policy", "epsilon")
    shown = {label[k]: c for k, c in sorted(printed.candidates(rows, keys).items())}
    bounded = {label[k]: c for k, c in sorted(candidates_from_rows(rows, keys).items())}
    compared = compare(shown, bounded, n_resamples=n_resamples, confidence=confidence)
    reading = printed.name  # the printed interval names its graded verdicts
    said = {reading: [c.verdict for c in compared], "log_alone": [c.log_alone for c in compared]}
    found = {"interval": reading, "pairs": [{"a": v.a, "b": v.b, "difference": v.difference, "low": v.low,
                                             "high": v.high, "better": v.better, "log_alone_low": w.low,
                                             "log_alone_high": w.high, "log_alone_better": w.better}
                                            for v, w in zip(said[reading], said["log_alone"])]}
    if truth is not None:
        points = {label[(r["policy"], r["epsilon"])]: r for r in truth.to_pylist()
                  if (r["policy"], r["epsilon"]) in label}
        for name, found_verdicts in said.items():
            scores = verdict_scores(found_verdicts, {k: r["mean_return"] for k, r in points.items()},
                                    {k: r["stderr"] for k, r in points.items()})
            found[name] = {"decided": scores.decided, "precision": scores.precision,
                           "distinguishable": scores.distinguishable, "pairs": scores.pairs}
    return found


def comparison_lines(curves: dict) -> list[str]:
    """The points' verdicts as a markdown section (``curves["comparisons"]``)."""
    found = curves.get("comparisons") or {}
    if not found.get("pairs"):
        return []
    lines = ["## Instrument: ADWM's own verdicts on pairs of points", "",
             "Not the product's verdict: the recommended estimate's, above, is the one it stands behind. These are "
             f"ADWM's alone, from the paired {found.get('interval', 'bootstrap')} interval on the difference (common "
             "random numbers), and what the log alone identifies whatever the steps it never answered do; they can "
             "disagree with it.",
             "", "| pair | Ĵ difference [95 %] | verdict | the log alone |", "|---|---|---|---|"]
    for p in found["pairs"]:
        lines.append(f"| {p['a']} vs {p['b']} | {p['difference']:+.3g} [{p['low']:+.3g}, {p['high']:+.3g}] | "
                     f"{(p['better'] + ' better') if p['better'] else CANNOT_TELL} | "
                     f"{(p['log_alone_better'] + ' better') if p['log_alone_better'] else CANNOT_TELL} "
                     f"[{p['log_alone_low']:+.3g}, {p['log_alone_high']:+.3g}] |")
    for graded, title in ((printed_verdicts(found), "verdicts"), (found.get("log_alone"), "the log alone")):
        if graded:
            lines.append(f"\n{title}: {verdict_grades(graded)}.")
    return lines + [""]


def printed_verdicts(comparisons: Mapping) -> Mapping[str, float] | None:
    """The grades of the verdicts the report printed (``point_comparisons``: under the bootstrap,
    or under the interval the cell chose); None where ungraded."""
    return comparisons.get(comparisons.get("interval", "bootstrap"))


def verdict_grades(graded: Mapping[str, float]) -> str:
    """How a cell's verdicts fared against its ground truth, in words (``point_comparisons``)."""
    if not graded["distinguishable"]:
        return f"the ground truth tells none of the {graded['pairs']} pairs apart"
    said = f"{graded['decided']:.2f} of the {graded['distinguishable']} pairs the ground truth tells apart decided"
    precision = graded["precision"]
    return said + ("; no pair decided" if precision != precision else f"; {precision:.2f} of decided pairs right")


def cannot_tell_lines(answers: Mapping[str, Mapping], epsilon: float, top: int = 5) -> list[str]:
    """What the log cannot tell about each agent at ``epsilon``: the share of its imagined steps
    each source answered (answers.SOURCES), the actions it took that the log never took there
    (by share of steps), and what would make a verdict decisive."""
    lines = []
    for policy, summary in answers.items():
        at = summary["by_epsilon"].get(f"{epsilon:g}")
        if at is None:
            continue
        shares = ", ".join(f"{source} {at['shares'][source]:.0%}" for source in SOURCES if at["shares"][source])
        lines.append(f"{policy} at ε={epsilon:g}: {at['steps']} imagined steps answered by {shares}")
        unseen = "; ".join(f"{u['action']!r} {u['share']:.0%}" for u in at["unseen_actions"][:top])
        if unseen:
            lines.append(f"  never logged where taken: {unseen}")
    if any(summary["by_epsilon"].get(f"{epsilon:g}", {}).get("unseen_actions") for summary in answers.values()):
        lines.append("to decide what these logs cannot: logs in which the agents take those actions, or a few live "
                     "episodes of each agent (`adwm calibrate`)")
    return lines


def topped_up_lines(topped: Sequence, confidence: float = 0.95) -> list[str]:
    """ADWM topped up by live episodes (calibration.ToppedUp), a line per point, then the verdicts
    on the agents at the lowest ε recomputed from them."""
    k = sorted({t.topped.k for t in topped})
    lines = [f"ADWM + {'/'.join(map(str, k))} live episodes per point (PPI++, paired by start state; "
             "the live episodes alone beside it): an instrument, not the product's verdict (the recommended "
             "estimate with the same live episodes, above, is)",
             f"{'agent':<24} {'ε':>5} {'ADWM':>9}  {'live alone':<26} {'ADWM+live':<26} {'λ':>5} matched"]
    for t in topped:
        note = ("  (every live episode returned the same: no width to trust; play more)" if t.live.high == t.live.low
                else "" if t.narrower else "  (not narrower than the live episodes alone)")
        lines.append(f"{t.point[0]:<24} {t.point[1]:>5g} {t.adwm:>9.4g}  "
                     f"{f'{t.live.value:.4g} [{t.live.low:.4g}, {t.live.high:.4g}]':<26} "
                     f"{f'{t.topped.value:.4g} [{t.topped.low:.4g}, {t.topped.high:.4g}]':<26} "
                     f"{t.topped.power:>5.2f} {t.topped.matched:.0%}{note}")
    lowest = min(t.point[1] for t in topped)
    agents = [t for t in topped if t.point[1] == lowest]
    if len(agents) > 1:
        lines.append(f"verdicts with the live episodes, at ε={lowest:g}:")
        lines += [f"  {v.line(undecided='cannot tell, even with the live episodes')}"
                  for v in topped_up_verdicts(agents, confidence=confidence)]
    return lines


def axis_limits(return_range: tuple[float, float]) -> tuple[float, float]:
    """The plot's y-range: ``return_range`` widened by the slack a recommended estimate is allowed
    (``RANGE_SLACK`` of its width on each side)."""
    low, high = return_range
    slack = RANGE_SLACK * (high - low)
    return low - slack, high + slack


def plotted_series(curves: dict, return_range: tuple[float, float]) -> tuple[dict[str, np.ndarray], list[str]]:
    """The faded series the plot draws (every estimator on the return scale but the recommended
    estimate's source, drawn as the recommended estimate) and those it names below the axes
    instead: a value off :func:`axis_limits`, or not finite."""
    low, high = axis_limits(return_range)
    source = (curves.get(RECOMMENDED) or {}).get("source")
    others = {name: np.asarray(values, float) for name, values in curves["estimators"].items()
              if on_the_return_scale(name) and name != source}
    outside = sorted(name for name, v in others.items() if not (np.all(np.isfinite(v)) and
                                                                np.all((v >= low) & (v <= high))))
    return {name: v for name, v in others.items() if name not in outside}, outside


def plot(curves: dict, path, title: str, return_range: tuple[float, float]) -> None:
    """Ĵ over ε in the return's own units, one panel per π_e: the ground truth, the recommended
    estimate with its calibrated band, and every other estimator on the return scale faded, each
    in a colour of its own; one with a value outside ``return_range`` (``plotted_series``) is left
    off the axes and named below them."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    low, high = return_range
    others, outside = plotted_series(curves, return_range)
    shown = list(others)
    colours = pyplot.get_cmap("tab20")(np.linspace(0, 1, max(len(shown), 1), endpoint=False))
    reading = curves.get(RECOMMENDED) or {}
    labels = _point_keys(curves)
    policies = list(dict.fromkeys(curves["policy"]))
    figure, panels = pyplot.subplots(1, len(policies), figsize=(7 * len(policies), 4.8), sharey=True, squeeze=False)
    for panel, policy in zip(panels[0], policies):
        at = [i for i, p in enumerate(curves["policy"]) if p == policy]
        x = [curves["epsilon"][i] for i in at]
        for name, colour in zip(shown, colours):
            panel.plot(x, others[name][at], color=colour, alpha=0.35, linewidth=1, marker=".", label=name)
        if reading.get("values"):
            value = [reading["values"][labels[i]] for i in at]
            panel.fill_between(x, [reading["low"][labels[i]] for i in at], [reading["high"][labels[i]] for i in at],
                               color="tab:red", alpha=0.18, label=f"{RECOMMENDED}: calibrated interval")
            panel.plot(x, value, color="tab:red", linewidth=2.5, marker="o", label=f"{RECOMMENDED} ({reading['source']})")
        if curves["ground_truth"] is not None:
            panel.plot(x, [curves["ground_truth"][i] for i in at], color="k", linewidth=3, label="ground truth J")
        panel.set(xlabel="ε", title=policy if len(policies) > 1 else title, ylim=axis_limits(return_range))
    panels[0][0].set_ylabel("Ĵ (return)")
    panels[0][-1].legend(fontsize=7, ncol=2)
    if len(policies) > 1:
        figure.suptitle(title)
    if outside:
        figure.text(0.01, 0.01, f"off the axes (a value outside the return range [{low:g}, {high:g}]): "
                    + ", ".join(outside), fontsize=7)
    figure.tight_layout(rect=(0, 0.04 if outside else 0, 1, 1))
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


def read_reasons(paths: Sequence[str]) -> dict[str, str]:
    """Estimator → why the logs could not feed it, over the π_e of the cell (the baselines'
    ``not_applicable`` files)."""
    reasons: dict[str, str] = {}
    for path in paths:
        with fsspec.open(path, "r") as f:
            reasons.update(json.load(f))
    return reasons


def write_report(cell: str, estimates: pa.Table, truth: pa.Table | None, reasons: Mapping[str, str],
                 outputs: Mapping[str, str], keep: Callable[[str], None], *, rollouts: pa.Table | None = None,
                 answers: Mapping[str, Mapping] | None = None, confidence: float = 0.95,
                 n_resamples: int = 1000, return_range: tuple[float, float] = (-1.0, 1.0),
                 scale: float | None = None, bench: BenchCalibration | None = None) -> tuple[list[dict], dict]:
    """The cell's report files at ``outputs`` (role → path for each of report, results, curves and
    plot; on any fsspec root), every file but the results handed to ``keep``; the rows and curves. Without
    ``truth`` (a cell that cannot be run) the report is ungraded. ``rollouts`` (ADWM's, every π_e)
    give the points' verdicts, ``answers`` (π_e → the ADWM stage's answers) what the log cannot tell;
    the recommended estimate reads the cell's ``return_range``, the ``scale`` its errors are
    measured in (stages/report.py) and the ``bench`` (default: the one this package ships)."""
    rows, curves = main_results(truth, estimates)
    reading = recommended_reading(cell, curves, rollouts, return_range, scale, bench or BenchCalibration.shipped(),
                                  confidence)
    curves[RECOMMENDED] = reading.record()
    graded = recommended_row(reading, curves, truth) if truth is not None else None
    rows += [graded] if graded else []
    curves["not_applicable"] = dict(reasons)
    curves["answers"] = dict(answers or {})
    if rollouts is not None:
        curves["comparisons"] = point_comparisons(rollouts, truth, n_resamples=n_resamples, confidence=confidence,
                                                  printed=PrintedInterval.of(curves["answers"].values()))
    with tempfile.TemporaryDirectory() as scratch:
        local = {role: os.path.join(scratch, os.path.basename(path)) for role, path in outputs.items()}
        for role, content in (("report", markdown(cell, rows, curves)), ("results", json.dumps(rows, indent=2)),
                              ("curves", json.dumps(curves, indent=2))):
            with open(local[role], "w") as f:
                f.write(content)
        plot(curves, local["plot"], f"{cell}: Ĵ over ε" + (" against ground truth" if truth is not None else ""),
             return_range)
        for role, path in local.items():
            fs, target = fsspec.core.url_to_fs(outputs[role])
            fs.put_file(path, target)
            if role != "results":
                keep(path)
    return rows, curves


def report_metrics(rows: list[dict], curves: dict) -> dict[str, float]:
    """The report's numbers as tracked metrics: each row's grades, each estimator's trust
    diagnostics and each interval method's coverage and width."""
    metrics: dict[str, float] = {}
    for row in rows:
        name = row["estimator"].replace(":", "_")
        metrics.update({f"{name}.{k}": float(v) for k, v in row.items() if k not in ("estimator", "rho_seeds")})
    for estimator, diagnostics in curves["diagnostics"].items():
        metrics.update({f"{estimator.replace(':', '_')}.{k}": v for k, v in diagnostics.items()})
    comparisons = curves.get("comparisons") or {}
    for name in (comparisons.get("interval"), "log_alone"):  # the verdicts graded on ground truth (point_comparisons)
        if name in comparisons:
            metrics.update({f"{ADWM}_verdicts_{name}.{k}": float(v) for k, v in comparisons[name].items()})
    for estimator, by_method in curves.get("intervals", {}).items():
        metrics.update({f"{estimator.replace(':', '_')}.{k}_{method}": float(v)
                        for method, graded in by_method.items() for k, v in graded.items()})
    reading = curves.get(RECOMMENDED) or {}
    for label, value in reading.get("values", {}).items():  # the headline: Ĵ and its calibrated interval per point
        name = re.sub(r"[^A-Za-z0-9_.\-/ ]", "_", label.replace(" ε=", ".eps"))
        metrics.update({f"{RECOMMENDED}.{name}": value, f"{RECOMMENDED}.{name}.low": reading["low"][label],
                        f"{RECOMMENDED}.{name}.high": reading["high"][label]})
    return metrics
