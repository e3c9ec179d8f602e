"""The cell report over several π_e (ranked together, as HotpotQA-cross) and without ground truth."""

import json

import numpy as np
import pyarrow as pa
import pytest

from adwm_core.ope.statistics.recommend import BenchCalibration, BenchCell, Recommendation
from adwm_core.report import (RECOMMENDED, RESULT_COLUMNS, main_results, markdown, plot, plotted_series,
                              recommended_reading, recommended_row, summary_lines)

EPSILONS = (0.0, 0.5, 1.0)
# two π_e: "dpo" better than "prm" at every ε, values falling with ε
TRUTH = {("dpo@p0", 0.0): 0.9, ("dpo@p0", 0.5): 0.6, ("dpo@p0", 1.0): 0.1,
         ("prm@p0", 0.0): 0.7, ("prm@p0", 0.5): 0.4, ("prm@p0", 1.0): 0.05}


def truth_table():
    return pa.table({"policy": [p for p, _ in TRUTH], "epsilon": [e for _, e in TRUTH],
                     "mean_return": list(TRUTH.values())})


def estimates_table():
    rows = []
    for seed in (0, 1):
        for (policy, eps), value in TRUTH.items():
            # "mirror" ranks the points exactly; "within" gets each π_e's ε order right but puts prm above dpo
            shift = 1.0 if policy == "prm@p0" else 0.0
            for name, estimate in (("mirror", value), ("within", value + shift)):
                rows.append({"estimator": name, "seed": seed, "policy": policy, "epsilon": eps, "value": estimate,
                             "ci_low": estimate - 0.05, "ci_high": estimate + 0.05})
    return pa.Table.from_pylist(rows)


def test_several_policies_are_ranked_together_over_all_points():
    rows, curves = main_results(truth_table(), estimates_table())
    by_name = {r["estimator"]: r for r in rows}
    assert len(curves["epsilon"]) == 6 and curves["policy"].count("dpo@p0") == 3
    assert by_name["mirror"]["rho"] == pytest.approx(1.0)
    assert list(by_name["mirror"]) == list(RESULT_COLUMNS)
    assert by_name["mirror"]["rho_seeds"] == pytest.approx([1.0, 1.0]) and by_name["mirror"]["rho_p"] == pytest.approx(2 / 720)
    # right within each policy, wrong across them: rank correlation over the 6 points below 1
    assert by_name["within"]["rho"] < 0.9
    assert by_name["within"]["regret_at_1"] == pytest.approx((0.9 - 0.7) / (0.9 - 0.05))  # picks prm, ε=0
    assert by_name["mirror"]["coverage"] == 1 and by_name["mirror"]["width"] == pytest.approx(0.1 / 0.85)
    assert by_name["within"]["coverage"] == pytest.approx(0.5)  # prm's points are 1 too high: outside ±0.05
    text = markdown("cross", rows, curves)
    assert "off-policy estimates of dpo@p0, prm@p0" in text
    assert "| Ĵ | dpo@p0 ε=0 | dpo@p0 ε=0.5 | dpo@p0 ε=1 | prm@p0 ε=0 | prm@p0 ε=0.5 | prm@p0 ε=1 |" in text


def test_without_ground_truth_the_report_has_estimates_only(tmp_path):
    rows, curves = main_results(None, estimates_table())
    assert rows == [] and curves["ground_truth"] is None
    assert np.allclose(curves["estimators"]["mirror"], [TRUTH[p] for p in sorted(TRUTH)])
    text = markdown("ungraded", rows, curves)
    assert "No ground truth" in text and "Spearman" not in text and "| mirror |" in text
    plot(curves, str(tmp_path / "plot.png"), "ungraded", (0.0, 1.0))
    assert (tmp_path / "plot.png").stat().st_size > 5_000


def test_the_report_shows_trust_diagnostics_and_their_verdicts():
    table = estimates_table()
    is_row = np.array([name == "within" for name in table["estimator"].to_pylist()])
    table = table.append_column("ess", pa.array(np.where(is_row, 1.2, np.nan), mask=~is_row))
    table = table.append_column("log_share", pa.array(np.where(is_row, np.nan, 0.25), mask=is_row))
    rows, curves = main_results(truth_table(), table)
    assert curves["diagnostics"] == {"mirror": {"log_share": 0.25}, "within": {"ess": pytest.approx(1.2)}}
    assert len(curves["verdicts"]) == 2
    text = markdown("trust", rows, curves)
    assert "## Trust diagnostics" in text and "| mirror | 25% | – | – | – |" in text
    assert "- within: ESS 1.2 at the worst point: the estimate is one trajectory" in text
    assert "- mirror: 75% of π_e's imagined steps were never logged: the value is a model's guess" in text
    assert "trust: within: ESS 1.2" in "\n".join(summary_lines(rows, curves))


def test_estimates_beyond_float64_rank_by_their_exact_values():
    """Importance-weighted estimates of 1e347 and 1e390 both saturate to the float maximum; their
    exact signed logs still rank them (and the seed mean stays exact)."""
    truth = sorted(TRUTH.items())
    logs = {point: 800.0 + 100 * value for point, value in truth}  # increasing with the truth, all beyond float64
    table = pa.Table.from_pylist([{"estimator": "IS", "seed": seed, "policy": p, "epsilon": e,
                                   "value": float(np.finfo(np.float64).max), "log_abs_value": logs[p, e], "sign": 1,
                                   "ci_low": 0.0, "ci_high": float(np.finfo(np.float64).max)}
                                  for seed in (0, 1) for (p, e), _ in truth])
    rows, curves = main_results(truth_table(), table)
    assert rows[0]["rho"] == pytest.approx(1.0) and rows[0]["regret_at_1"] == 0
    assert all(v > 1e308 for v in curves["estimators"]["IS"])  # the saturated floats, for the curves


def test_other_intervals_of_an_estimator_are_graded_beside_its_bootstrap_not_ranked_again():
    rows = estimates_table().to_pylist()
    rows += [{**r, "estimator": "mirror@t", "ci_low": r["value"] - 2.0, "ci_high": r["value"] + 2.0}
             for r in rows if r["estimator"] == "mirror"]
    table = pa.Table.from_pylist(rows)
    table = table.append_column("ess", pa.array([2.0 if "@" in r["estimator"] else None for r in rows]))
    ranked, curves = main_results(truth_table(), table)
    assert [r["estimator"] for r in ranked] == ["mirror", "within"] and "mirror@t" not in curves["estimators"]
    assert "mirror@t" not in curves["diagnostics"]  # the same Ĵ, not a second estimate to diagnose
    assert curves["intervals"] == {"mirror": {"bootstrap": {"coverage": 1.0, "width": pytest.approx(0.1 / 0.85)},
                                              "t": {"coverage": 1.0, "width": pytest.approx(4.0 / 0.85)}}}
    text = markdown("intervals", ranked, curves)
    assert "## Interval methods" in text and "| estimator | bootstrap | t |" in text
    assert "| mirror | 1.00 / 0.118 | 1.00 / 4.71 |" in text


def test_the_report_gives_a_verdict_on_every_pair_of_points_and_says_what_the_log_cannot_tell():
    """ADWM's rollouts of the six points, paired by seed and unit, each rollout known to ±0.2 (it
    left the log): the imagined returns order the points as the truth does, so every pair the
    truth tells apart is decided and right; the bounds decide only pairs further apart than they are wide."""
    from adwm_core.ranking import PrintedInterval
    from adwm_core.report import cannot_tell_lines, comparison_lines, point_comparisons, report_metrics

    shared = np.random.default_rng(0).normal(0, 0.2, (2, 24))
    rollouts = pa.Table.from_pylist([
        {"estimator": "ADWM", "policy": p, "epsilon": e, "member": 0, "seed": s, "unit": u,
         "value": j + shared[s, u], "low": j + shared[s, u] - 0.2, "high": j + shared[s, u] + 0.2, "steps": 4,
         "log_steps": 1}
        for (p, e), j in TRUTH.items() for s in (0, 1) for u in range(24)])
    truth = truth_table().append_column("stderr", pa.array([0.01] * len(TRUTH)))
    found = point_comparisons(rollouts, truth, n_resamples=300)
    assert len(found["pairs"]) == 15 and found["bootstrap"]["distinguishable"] == 15
    assert found["bootstrap"]["decided"] == 1.0 and found["bootstrap"]["precision"] == 1.0
    alone = found["log_alone"]
    far = sum(abs(TRUTH[a] - TRUTH[b]) > 0.4 for i, a in enumerate(TRUTH) for b in list(TRUTH)[i + 1:])
    assert 0 < far < 15
    assert alone["decided"] == pytest.approx(far / 15) and alone["precision"] == 1.0
    section = "\n".join(comparison_lines({"comparisons": found}))
    assert "dpo@p0 ε=0 vs prm@p0 ε=0" in section and "dpo@p0 ε=0 better" in section
    assert found["interval"] == "bootstrap" and "paired bootstrap interval" in section
    metrics = report_metrics([], {"diagnostics": {}, "comparisons": found})
    assert metrics["ADWM_verdicts_bootstrap.decided"] == 1.0 and len(metrics) == 8  # 4 grades × 2 readings
    calibrated = point_comparisons(rollouts, truth, n_resamples=300, printed=PrintedInterval("calibrated", (-0.05, 0.05)))
    assert calibrated["interval"] == "calibrated" and calibrated["calibrated"]["decided"] == 1.0
    assert "bootstrap" not in calibrated and "paired calibrated interval" in "\n".join(
        comparison_lines({"comparisons": calibrated}))
    assert report_metrics([], {"diagnostics": {}, "comparisons": calibrated})["ADWM_verdicts_calibrated.precision"] == 1
    draws = np.random.default_rng(1).normal(0, 1, 20)  # each refit's draw of the log moves every point alike
    answers = [{"policy": p, "refits": {"by_epsilon": {f"{e:g}": list(j + draws) for (q, e), j in TRUTH.items()
                                                       if q == p}}} for p in {p for p, _ in TRUTH}]
    refitted = point_comparisons(rollouts, truth, n_resamples=300, printed=PrintedInterval.of(answers))
    assert refitted["interval"] == "refits" and refitted["refits"]["decided"] == 1.0  # D_b is the truth's difference
    with pytest.raises(ValueError, match="no refits of"):
        point_comparisons(rollouts, truth, printed=PrintedInterval.of(answers[:1]))

    answers = {"dpo@p0": {"by_epsilon": {"0": {"steps": 40, "shares": {"log": 0.5, "carried": 0.25, "value": 0.25,
                                                                     "diffusion": 0.0, "nearest": 0.0},
                                           "unseen_actions": [{"action": "go north", "share": 0.3}]}}}}
    lines = cannot_tell_lines(answers, 0.0)
    assert lines[0] == "dpo@p0 at ε=0: 40 imagined steps answered by log 50%, carried 25%, value 25%"
    assert lines[1] == "  never logged where taken: 'go north' 30%" and "live episodes" in lines[2]


def test_a_top_up_line_says_when_the_live_episodes_leave_no_width_to_trust():
    from adwm_core.ope.statistics.calibration import Calibrated, ToppedUp
    from adwm_core.report import topped_up_lines

    same = Calibrated(-1.0, -1.0, -1.0, 0.0, 1.0, 0.0, 4)
    spread = Calibrated(0.2, -0.3, 0.7, 0.0, 1.0, 0.2, 4)
    narrower = Calibrated(0.25, 0.0, 0.5, 0.8, 1.0, 0.1, 4)
    lines = topped_up_lines([ToppedUp(("a@p0", 1.0), -0.9, same, same), ToppedUp(("a@p0", 0.0), 0.4, spread, narrower),
                             ToppedUp(("b@p0", 0.0), 0.1, spread, spread)])
    assert lines[0].startswith("ADWM + 4 live episodes per point")
    assert "no width to trust" in lines[2] and " 0.80 100%" in lines[3]  # λ and the share of starts matched
    assert "not narrower" not in lines[3] and "not narrower than the live episodes alone" in lines[4]
    assert lines[5] == "verdicts with the live episodes, at ε=0:" and "a@p0 ε=0 vs b@p0 ε=0" in lines[6]
    assert lines[6].endswith("→ cannot tell, even with the live episodes")  # not "from these logs": live ones read too


def test_the_report_recommends_the_estimator_the_bench_trusts_and_grades_its_calibrated_interval(tmp_path):
    """On a bench where "mirror" errs by 0.02 and "within" by 0.5, the report recommends "mirror"
    (the cell's own truth unread), its interval holds J at every point, its verdicts on the pairs
    the truth splits are right, and the plot names "within" (outside the return range) below its
    axes instead of drawing it."""
    rng = np.random.default_rng(0)
    labels = [f"{p} ε={e:g}" for p, e in sorted(TRUTH)]
    bench = BenchCalibration(tuple(BenchCell(f"c{i}", "env", 0.0, 1.0, 1.0, 0.9, truth, {
        "mirror": {k: v + rng.normal(0, 0.02) for k, v in truth.items()},
        "within": {k: v + rng.normal(0, 0.5) for k, v in truth.items()}})
        for i in range(8) for truth in [dict(zip(labels, rng.uniform(0, 1, len(labels))))]))
    truth = truth_table().append_column("stderr", pa.array([0.01] * len(TRUTH)))
    rows, curves = main_results(truth, estimates_table())
    reading = recommended_reading("cross", curves, None, (0.0, 1.0), None, bench, 0.95)
    assert reading.source == "mirror" and "within" in reading.excluded  # within's prm points exceed 1
    row = recommended_row(reading, curves, truth)
    assert row["estimator"] == RECOMMENDED and row["rho"] == pytest.approx(1.0) and row["coverage"] == 1.0
    assert row["precision"] == 1.0 and row["decided"] > 0
    curves[RECOMMENDED] = reading.record()
    written = json.dumps(curves[RECOMMENDED])
    assert json.dumps(Recommendation.from_record(json.loads(written)).record()) == written  # the API reads it back
    assert "## Recommended" in markdown("cross", rows + [row], curves)
    plot(curves, str(tmp_path / "plot.png"), "cross", (0.0, 1.0))
    assert (tmp_path / "plot.png").stat().st_size > 5_000
    shown, outside = plotted_series(curves, (0.0, 1.0))
    assert "within" in outside and "mirror" not in shown and "mirror" not in outside  # drawn as the recommended
    curves["estimators"]["near"] = [v + 0.04 if v > 0.5 else v for v in curves["estimators"]["mirror"]]
    assert "near" in plotted_series(curves, (0.0, 1.0))[0]  # an overshoot the recommendation allows stays drawn
