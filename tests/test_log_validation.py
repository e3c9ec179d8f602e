import math
import os

import pyarrow.compute as pc
import pytest
import yaml

from adwm_core import pipeline
from adwm_core.data import TRAJECTORIES, read_table
from adwm_core.paths import artifact_path
from bench.common import cell_config
from adwm_core.ope.statistics.recommend import BenchCalibration
from bench.studies.log_validation import choose, choose_by_order, group_values, markdown, order_score, study
from conftest import tiny_cell


def test_the_choice_takes_the_smallest_finite_score_the_bench_ranks_and_breaks_ties_by_its_rho():
    scores = {"A": 0.10, "B": 0.10, "C": 0.05, "D": math.inf, "E": 0.01}
    rho = {"A": 0.2, "B": 0.6, "C": 0.1, "D": 0.9}  # E: the bench does not rank it
    assert choose(scores, rho) == "C"
    assert choose({k: scores[k] for k in "ABD"}, rho) == "B"
    assert choose({"D": math.inf, "E": 0.01}, rho) is None


def test_the_order_score_counts_the_split_pairs_of_held_out_groups_an_estimator_orders_as_their_truth():
    """Scored on what the product is graded on: A orders all three split pairs right though its
    level is off by 0.5; B is near every J but swaps two groups; a pair J ties is left out."""
    folds = {"g1": {"truth": 0.1, "estimates": {"A": 0.6, "B": 0.12}},
             "g2": {"truth": 0.2, "estimates": {"A": 0.7, "B": 0.30}},
             "g3": {"truth": 0.3, "estimates": {"A": 0.8, "B": 0.25}},
             "g4": {"truth": 0.3, "estimates": {"A": 0.9, "B": 0.31}}}
    assert order_score(folds, "A") == 1.0 and order_score(folds, "B") == pytest.approx(4 / 5)
    assert math.isnan(order_score({k: folds[k] for k in ("g3", "g4")}, "A"))  # their truths tie
    level = {"A": 0.5, "B": 0.03}
    assert choose(level, {"A": 0.5, "B": 0.5}) == "B"
    assert choose_by_order({"A": 1.0, "B": 0.8}, level, {"A": 0.5, "B": 0.5}) == "A"
    assert choose_by_order({"A": 0.8, "B": 0.8}, level, {"A": 0.9, "B": 0.1}) == "B"  # tie: the smaller level score
    assert choose_by_order({"A": 1.0, "B": 0.8}, level, {"B": 0.1}) == "B"  # the bench does not rank A
    assert choose_by_order({"A": math.nan}, level, {"A": 0.5}) is None


def test_each_behaviour_group_is_held_out_as_pi_e_at_epsilon_0_and_no_ground_truth_runs(tiny_policies, tmp_path):
    config = yaml.safe_load(open(tiny_cell(tmp_path / "cell.yaml", tiny_policies)))
    config["name"] = "tiny-folds"
    (tmp_path / "folds.yaml").write_text(yaml.safe_dump(config))
    path = str(tmp_path / "folds.yaml")
    cell = cell_config(path)
    saved = []
    result = study([path], BenchCalibration.shipped(), save=saved.append)
    scored = result["cells"][path]
    assert saved == [result]  # written after each cell, so a run of hours can be read before it ends

    log = read_table(pipeline.run_all(cell, ("behaviour",)).file("trajectories"), TRAJECTORIES)
    truths = group_values(log)
    assert sorted(truths) == ["early@p0", "late@p0"] == sorted(scored["folds"])
    for group, fold in scored["folds"].items():
        episodes = log.filter(pc.equal(log["policy"], group)).group_by("episode").aggregate([("reward", "sum")])
        assert fold["truth"] == pytest.approx(sum(episodes["reward_sum"].to_pylist()) / episodes.num_rows)
    assert math.isfinite(scored["scores"]["ADWM:reward_sum"]) and scored["scale"] > 0
    assert scored["scores"]["ADWM:reward_sum"] == pytest.approx(
        sum(abs(f["estimates"]["ADWM:reward_sum"] - f["truth"]) for f in scored["folds"].values()) / 2 / scored["scale"])
    # each fold's log is the cell's less its group, and the cell's ground truth never ran
    folds = [os.path.join(root, name) for root, _, names in os.walk(os.environ["ADWM_HOME"]) for name in names
             if root.split(os.sep)[-3:-1] == ["folds", "tiny-folds"]]
    assert sorted(os.path.basename(f) for f in folds) == ["early@p0.parquet", "late@p0.parquet"]
    for fold_file in folds:
        held_out = os.path.basename(fold_file).removesuffix(".parquet")
        assert set(read_table(fold_file, TRAJECTORIES)["policy"].to_pylist()) == set(truths) - {held_out}
    assert not os.path.exists(artifact_path("cells", "tiny-folds", "ground-truth"))
    # the bench holds no such cell: chosen by the folds, graded nowhere, and the rule gives no verdict
    assert scored["chosen"] in scored["scores"] and result["graded"] == {}
    assert set(scored["order"]) == set(scored["scores"]) and scored["chosen_by_order"] in (*scored["scores"], None)
    table = markdown(result)
    assert f"| {path} | 2 | {scored['chosen']} |" in table and "keep the default** — no verdict: 0 counted" in table


def test_the_fold_scores_agreement_with_the_cells_rho_is_read_over_the_estimators():
    """A diagnostic read after the choice: +1 where the fold score orders the estimators as their ρ
    on the cell's points does, −1 where it orders them backwards, NaN under three estimators."""
    from adwm_core.ope.statistics.recommend import BenchCell
    from bench.studies.log_validation import score_agreement

    truth = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4}
    estimates = {"right": dict(truth), "half": {"a": 0.1, "b": 0.3, "c": 0.2, "d": 0.4},
                 "wrong": {"a": 0.4, "b": 0.3, "c": 0.2, "d": 0.1}}  # ρ +1, +0.8, −1
    cell = BenchCell("c", "env", 0.0, 1.0, 1.0, 1.0, truth, estimates)
    agreeing = {"scores": {"right": 0.01, "half": 0.05, "wrong": 0.4},
                "order": {"right": 1.0, "half": 0.8, "wrong": 0.0}}
    assert score_agreement(agreeing, cell) == pytest.approx({"level": 1.0, "order": 1.0})
    backwards = {"scores": {"right": 0.4, "half": 0.05, "wrong": 0.01},
                 "order": {"right": 0.0, "half": 0.5, "wrong": 1.0}}
    assert score_agreement(backwards, cell) == pytest.approx({"level": -1.0, "order": -1.0})
    two = {"scores": {"right": 0.1, "wrong": 0.2, "absent": 0.0}, "order": {"right": 1.0, "wrong": math.inf}}
    assert all(math.isnan(v) for v in score_agreement(two, cell).values())


def test_a_resumed_study_keeps_the_saved_cells_and_folds_none_of_them_again():
    """``--resume``: a cell the saved run holds is taken as scored there (no cell of that name
    exists here, so folding it would fail), graded again by today's code and saved."""
    kept = {"no-such-cell": {"scale": 1.0, "folds": {}, "scores": {"WIS": 0.1}, "order": {"WIS": 1.0},
                             "chosen": "WIS", "chosen_by_order": "WIS", "commit": "abc1234"}}
    saved = []
    result = study(["no-such-cell"], BenchCalibration.shipped(), save=saved.append, kept=kept)
    assert result["cells"] == kept and saved == [result] and result["graded"] == {}
    with pytest.raises(FileNotFoundError, match="no cell named 'no-such-cell'"):  # not kept: folded, and it fails
        study(["no-such-cell"], BenchCalibration.shipped())
