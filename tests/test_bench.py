"""The bench's rules (bench/adoption.py, bench/ledger.py): which cells count, when a candidate is
adopted, and when a test batch stops being a test."""

import numpy as np
import pytest

from bench.adoption import MIN_CELLS, CellFigures, decide, split_pairs

GROUPS = ("textworld", "textworld-express", "hotpotqa", "webshop")


def bench(deltas_rho, deltas_nmae=None, deltas_coverage=None, split=5, groups=GROUPS):
    """Cells whose candidate differs from the default by the given deltas, one cell a delta."""
    n = len(deltas_rho)
    deltas_nmae = deltas_nmae if deltas_nmae is not None else [0.0] * n
    deltas_coverage = deltas_coverage if deltas_coverage is not None else [0.0] * n
    cells = {}
    for i, (d_rho, d_nmae, d_coverage) in enumerate(zip(deltas_rho, deltas_nmae, deltas_coverage)):
        default = {"rho": 0.5, "nmae": 0.5, "coverage": 0.5}
        candidate = {"rho": 0.5 + d_rho, "nmae": 0.5 + d_nmae, "coverage": 0.5 + d_coverage}
        cells[f"cell-{i}"] = CellFigures(groups[i % len(groups)], split, default, candidate)
    return cells


def test_a_pair_is_split_when_its_difference_clears_its_own_noise():
    points = [{"mean_return": 0.0, "stderr": 0.1}, {"mean_return": 0.3, "stderr": 0.1},
              {"mean_return": 0.2, "stderr": 0.0}]
    # 0 vs 0.3: 0.3 > 1.96·0.141 = 0.277, split; 0 vs 0.2: 0.2 > 0.196, split; 0.3 vs 0.2: 0.1 < 0.196
    assert split_pairs(points) == 2
    assert split_pairs([{"mean_return": 1.0, "stderr": 0.0}] * 3) == 0


def test_a_candidate_better_on_ranking_everywhere_is_adopted():
    verdict = decide(bench([0.1, 0.2, 0.1, 0.15] * 3))
    assert verdict.adopt, verdict.reasons
    assert len(verdict.counted) == 12 and verdict.means["rho"][1] > 0


def test_a_noisy_gain_whose_interval_reaches_zero_is_not_adopted():
    verdict = decide(bench([0.6, -0.5, 0.4, -0.3, 0.5, -0.4, 0.3, -0.2, 0.4, -0.3, 0.2, -0.1]))
    assert verdict.means["rho"][0] > 0 and verdict.means["rho"][1] <= 0
    assert not verdict.adopt and verdict.reasons[0].startswith("not better")


def test_a_gain_carried_by_some_environments_and_lost_in_two_is_not_adopted():
    # textworld and textworld-express gain a lot; hotpotqa and webshop lose a little
    verdict = decide(bench([0.5, 0.5, -0.05, -0.05] * 3))
    assert verdict.means["rho"][1] > 0
    assert not verdict.adopt and any(r.startswith("not broad") for r in verdict.reasons)
    assert sorted(g for g, d in verdict.groups.items() if d["rho"] < 0) == ["hotpotqa", "webshop"]
    assert decide(bench([0.5, 0.5, 0.1, -0.05] * 3)).adopt  # one losing group is allowed


def test_a_level_gain_at_no_cost_in_ranking_is_adopted_and_one_at_a_cost_is_not():
    level = [-0.1, -0.2, -0.1, -0.15] * 3
    assert decide(bench([0.0] * 12, deltas_nmae=level)).adopt
    costly = decide(bench([-0.2, 0.0, -0.1, 0.0] * 3, deltas_nmae=level))
    assert not costly.adopt and costly.reasons[0].startswith("not better")


def test_a_level_that_ran_away_is_rejected_and_printed_in_powers_of_ten():
    # importance sampling on a long horizon can put an estimate 1e78 away; the reason stays one short line
    verdict = decide(bench([-0.3] * 12, deltas_nmae=[1e78] + [0.1] * 11))
    assert not verdict.adopt
    assert "mean ΔNMAE +8.33e+76" in verdict.reasons[0] and len(verdict.reasons[0]) < 120


def test_a_gain_that_costs_coverage_is_not_adopted():
    verdict = decide(bench([0.1, 0.2, 0.1, 0.15] * 3, deltas_coverage=[-0.1] * 12))
    assert not verdict.adopt and any(r.startswith("coverage harmed") for r in verdict.reasons)


def test_cells_whose_truth_splits_too_few_pairs_or_lack_a_side_do_not_count():
    cells = bench([0.1, 0.2, 0.1, 0.15] * 3)
    cells["flat"] = CellFigures("webshop", 2, {"rho": 0, "nmae": 0, "coverage": 0}, {"rho": 1, "nmae": 0, "coverage": 0})
    cells["unrun"] = CellFigures("webshop", 9, {"rho": 0, "nmae": 0, "coverage": 0}, None)
    cells["undefined"] = CellFigures("webshop", 9, {"rho": np.nan, "nmae": 0, "coverage": 0},
                                     {"rho": 1, "nmae": 0, "coverage": 0})
    verdict = decide(cells)
    assert not {"flat", "unrun", "undefined"} & set(verdict.counted) and len(verdict.counted) == 12
    too_few = decide(bench([0.3] * (MIN_CELLS - 1)))
    assert not too_few.adopt and too_few.reasons[0].startswith("no verdict")


@pytest.mark.parametrize("split", [0, 2])
def test_a_bench_of_noise_cells_gives_no_verdict(split):
    assert decide(bench([0.5] * 12, split=split)).reasons[0].startswith("no verdict")


def reading(default: str, rho: float) -> dict:
    """A ledger line as `python -m bench.ledger read` appends it, for a batch of two cells."""
    grades = {"rho": rho, "nmae": 0.2, "coverage": 0.9, "decided": 0.5, "precision": 1.0}
    return {"batch": "third", "date": "2026-11-29 10:00", "commit": "abc1234", "headline": "ADWM:reward_sum",
            "cells": ["test-b3-a", "test-b3-b"], "default": default, "stage_keys": {},
            "figures": {"test-b3-a": {"split_pairs": 6, "estimators": {"ADWM:reward_sum": grades}},
                        "test-b3-b": {"split_pairs": 1, "estimators": {"ADWM:reward_sum": grades}}}}


def test_a_batch_read_a_second_time_under_another_default_is_marked_seen(tmp_path):
    from bench.ledger import append, batch_table, default_digest, standing

    ledger = tmp_path / "ledger.jsonl"
    assert standing("third", ledger) == "unread" and "unread" in batch_table("third", ledger)[0]
    append(reading(default_digest({"test-b3-a": {"report": "k1"}}), 0.8), ledger)
    assert standing("third", ledger) == "test"
    title, _, header, _, first, second, means, _ = batch_table("third", ledger)
    assert "test: read once" in title and "SEEN" not in title
    assert first.startswith("| test-b3-a | 6 | +0.80 / 0.2 / 0.90 / 0.50 / 1.00")
    assert "1 cells splitting" in means  # test-b3-b's truth splits one pair: out of the mean
    assert means.endswith("| | +0.80 [+0.80, +0.80] / 0.2 / 0.90 / 0.50 / 1.00 |")  # every figure's mean
    append(reading(default_digest({"test-b3-a": {"report": "k1"}}), 0.8), ledger)  # the same default again
    assert standing("third", ledger) == "test"
    append(reading(default_digest({"test-b3-a": {"report": "k2"}}), 0.3), ledger)  # another default
    assert standing("third", ledger) == "seen"
    title = batch_table("third", ledger)[0]
    assert "SEEN: read 3 times under 2 defaults" in title
    assert batch_table("third", ledger)[4].startswith("| test-b3-a | 6 | +0.30")  # the latest reading is shown
    assert standing("another", ledger) == "unread"


def test_a_batchs_headline_is_committed_before_its_reading_and_its_cells_apart_leave_the_means(tmp_path, monkeypatch):
    """``bench.ledger declare``: the headline row and the cells reported apart, once, before any
    reading; a reading without it is refused before any stage runs; the table opens on the declared
    headline and keeps a cell apart out of the means."""
    import bench.ledger as ledger_module
    from bench.ledger import append, batch_table, declare, default_digest, protocol, read_batch

    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setattr(ledger_module, "batch_cells", lambda batch: ["test-b3-a", "test-b3-b"])
    with pytest.raises(SystemExit, match="no protocol in the ledger.*bench.ledger declare third --headline"):
        read_batch("third", ledger=ledger)
    with pytest.raises(SystemExit, match="not admitted cells"):
        declare("third", "recommended", ["test-b3-z"], "-", ledger)
    declared = declare("third", "recommended", ["test-b3-a"], "the product opens on it", ledger)
    assert protocol("third", ledger) == declared and declared["kind"] == "protocol"
    with pytest.raises(SystemExit, match="already has a protocol"):
        declare("third", "ADWM:reward_sum", [], "-", ledger)
    entry = reading(default_digest({"test-b3-a": {"report": "k1"}}), 0.8)
    entry.update(headline="recommended", apart=["test-b3-a"])
    entry["figures"]["test-b3-a"]["estimators"]["recommended"] = dict(entry["figures"]["test-b3-a"]["estimators"]["ADWM:reward_sum"])
    append(entry, ledger)
    title, _, header, _, first, _, means, _ = batch_table("third", ledger)
    assert "headline `recommended`" in title and "reported apart from the means: test-b3-a" in title
    assert header.startswith("| cell | truth-split pairs | recommended | ADWM:reward_sum |")
    assert first.startswith("| test-b3-a (apart) | 6 |") and "(0 cells splitting" in means


def test_a_batchs_recommended_table_shows_half_widths_and_live_only_and_keeps_cells_apart_out_of_its_means(tmp_path):
    from bench.ledger import append, default_digest, recommended_table

    ledger = tmp_path / "ledger.jsonl"
    entry = reading(default_digest({"test-b3-a": {"report": "k1"}}), 0.8)
    assert recommended_table("third", ledger) == []  # unread
    entry.update(headline="recommended", apart=["test-b3-a"])
    entry["figures"]["test-b3-c"] = {"split_pairs": 5, "estimators": {}}
    for cell, rho, half in (("test-b3-a", -0.9, 0.9), ("test-b3-b", 0.1, 0.7), ("test-b3-c", 0.6, 0.2)):
        entry["figures"][cell]["recommended"] = {"rho": rho, "nmae": 0.3, "coverage": 1.0, "half_width": half,
                                                 "decided": 0.4, "precision": 1.0,
                                                 "agents": "cannot tell (truth: not split)"}
        entry["figures"][cell]["estimators"].update({
            "recommended+live8": {"coverage": 0.93, "half_width": half / 4, "decided": 0.7, "precision": 0.95},
            "live8 alone": {"coverage": 0.95, "half_width": 0.1, "decided": 0.5, "precision": 1.0}})
    append(entry, ledger)
    lines = recommended_table("third", ledger)
    header, a, b, c, means = lines[2], lines[4], lines[5], lines[6], lines[7]
    assert "half-width" in header and "live8 alone coverage" in header and header.endswith("agents at ε = 0 |")
    assert a.startswith("| test-b3-a (apart) | 6 | -0.90 | 0.30 | 1.00 | 0.90 |")
    assert b.startswith("| test-b3-b (not counted) | 1 | +0.10")
    assert c == ("| test-b3-c | 5 | +0.60 | 0.30 | 1.00 | 0.20 | 0.40 | 1.00 | 0.93 | 0.05 | 0.70 | 0.95 | "
                 "0.95 | 0.10 | 0.50 | 1.00 | cannot tell (truth: not split) |")
    assert means.startswith("| **mean** (1 cells) | | +0.60 | 0.30 | 1.00 | 0.20 |")  # test-b3-c alone


def test_a_batchs_rows_that_carry_only_verdicts_get_a_table_of_their_own(tmp_path):
    """A reading holds rows with verdicts alone (a classical estimator's under a named bound, no ρ):
    the estimators' table leaves them out, and a table of their own shows decided / precision per
    cell and over the counted cells (the third batch's first rendering failed on them)."""
    from bench.ledger import append, batch_table, default_digest, verdict_only_table

    ledger = tmp_path / "ledger.jsonl"
    entry = reading(default_digest({"test-b3-a": {"report": "k1"}}), 0.8)
    entry["figures"]["test-b3-a"]["estimators"]["FQE@t"] = {"decided": 0.5, "precision": 0.8}
    entry["figures"]["test-b3-b"]["estimators"]["FQE@t"] = {"decided": 0.0, "precision": float("nan")}
    append(entry, ledger)
    header = batch_table("third", ledger)[2]
    assert header == "| cell | truth-split pairs | ADWM:reward_sum |"
    lines = verdict_only_table("third", ledger)
    assert lines[2] == "| verdicts | test-b3-a | test-b3-b | **mean** |"
    assert lines[4] == "| FQE@t | 0.50 / 0.80 | 0.00 / – | 0.50 / 0.80 |"  # test-b3-b splits one pair: not counted
    assert verdict_only_table("another", ledger) == []


def test_heldout_batches_rewrites_only_the_test_tables_from_the_ledger(tmp_path):
    """After a reading, `heldout --batches` puts the batch's table, recommended rows first, where the
    unread line stood, and keeps every development row and the machine line as they were."""
    from bench.ledger import append, default_digest
    from bench.tables.heldout import BATCH_SHOWN, write_batch_tables

    page, ledger = tmp_path / "heldout.md", tmp_path / "ledger.jsonl"
    development = "# The held-out measuring stick\n\n| local-x | 9 | +0.50 |\n\n"
    page.write_text(development + "**Test batch `third`: unread.**\n\nMachine: `{\"cpus\": 2}`\n")
    append(reading(default_digest({"test-b3-a": {"report": "k1"}}), 0.8), ledger)
    write_batch_tables(page, ledger)
    text = page.read_text()
    assert text.startswith(development) and text.endswith("Machine: `{\"cpus\": 2}`\n") and "unread" not in text
    header = next(line for line in text.splitlines() if line.startswith("| cell | truth-split pairs"))
    assert header.split(" | ")[2:4] == list(BATCH_SHOWN[:2]) == ["recommended", "recommended+live8"]
    assert "| test-b3-a | 6 | – | – | – | +0.80 / 0.2 / 0.90 / 0.50 / 1.00 |" in text  # ADWM's row, the others unread


def test_preparing_a_test_batch_builds_its_world_model_and_truth_and_no_estimator_stage():
    from adwm_core import pipeline
    from bench.common import cell_config
    from bench.common import batch_cells
    from bench.store import upstream_stages

    cells = batch_cells("third")
    assert cells, "the third batch has admitted cells (bench/results/admission.json)"
    for cell in cells:
        config = cell_config(cell)
        stages = upstream_stages(config)
        assert {"behaviour", "world-model", "ground-truth"} <= set(stages)
        assert not {"adwm", "baselines", "report"} & set(stages)
        # with the upstream built, the reading's plan holds nothing but the estimator stages
        planned = {step.name for step in pipeline.plan(config)}
        assert planned - set(stages) == {"adwm", "baselines", "report"}


def test_a_cells_report_curves_become_its_bench_record_on_the_return_scale():
    """bench/calibrate.py: the points, J, the declared return range (TextWorld-Express: [−1, 1]),
    its width as the scale, and ADWM's answered share of a report's curves; neither the
    recommended row nor a cosine."""
    from bench.calibrate import bench_cell

    curves = {"policy": ["tiny@p0", "tiny@p0"], "epsilon": [0.0, 1.0], "ground_truth": [0.8, 0.1],
              "estimators": {"ADWM:reward_sum": [0.7, 0.2], "ADWM:success_similarity": [0.9, 0.8], "FQE": [0.5, 0.4],
                             "recommended": [0.7, 0.2]},
              "diagnostics": {"ADWM:reward_sum": {"log_share": 0.4}}}
    cell = bench_cell("local-simonsays", curves, logged=False)
    assert (cell.group, cell.low, cell.high, cell.scale, cell.answered) == ("textworld-express", -1.0, 1.0, 2.0, 0.4)
    assert cell.truth == {"tiny@p0 ε=0": 0.8, "tiny@p0 ε=1": 0.1}
    assert set(cell.estimates) == {"ADWM:reward_sum", "FQE"} and cell.estimates["FQE"]["tiny@p0 ε=1"] == 0.4
    assert bench_cell("local-simonsays", {**curves, "ground_truth": None}) is None
    assert bench_cell("local-textworld", curves, logged=False) is None  # no declared range, no log: no scale


def test_the_scale_is_the_logged_returns_span_on_every_environment():
    """One kind of unit for every cell (issue 87): TextWorld-Express declares [−1, 1], and its scale
    is still the span of the logged episodes' returns; the declared width only where no log is at
    hand or its returns do not spread."""
    import pyarrow as pa

    from adwm_core.stages.report import return_range_and_scale
    from bench.common import cell_config

    config = cell_config("local-simonsays")
    steps = pa.table({"policy": ["a"] * 3, "episode": [0, 1, 1], "reward": [-1.0, 0.25, 0.25]})
    assert return_range_and_scale(config, steps) == ((-1.0, 1.0), 1.5)
    assert return_range_and_scale(config, None) == ((-1.0, 1.0), 2.0)
    assert return_range_and_scale(config, steps.slice(0, 1)) == ((-1.0, 1.0), 2.0)


def test_where_the_environment_declares_no_return_range_the_scale_is_the_logged_returns_span():
    """TextWorld pays ±1 a step and declares no episode range: the range is the horizon times the
    step range, the scale the span of the logged episodes' returns (no truth read)."""
    import pyarrow as pa

    from adwm_core.stages.report import return_range_and_scale
    from bench.common import cell_config

    config = cell_config("local-textworld")
    steps = pa.table({"policy": ["a"] * 5, "episode": [0, 0, 1, 1, 2], "reward": [1.0, 1.0, -1.0, 0.0, 0.5]})
    (low, high), scale = return_range_and_scale(config, steps)
    assert (low, high) == (-config.env.max_steps, config.env.max_steps) and scale == 3.0  # returns 2, −1, 0.5
    assert return_range_and_scale(config, None)[1] is None
    assert return_range_and_scale(config, steps.slice(0, 2).set_column(2, "reward", pa.array([0.0, 0.0])))[1] is None


def test_the_loop_judges_another_headline_from_the_same_run_and_logs_its_verdict(tmp_path, monkeypatch):
    """``bench.loop --headline recommended``: both rows of one default run compared cell by cell
    under the rule, the verdict written beside its figures and appended to adoptions.md. The cells'
    rows are given (running 19 real cells takes hours: the loop's own runner is what is replaced)."""
    import bench.loop as loop

    figures = bench([0.3, 0.2, 0.25, 0.35] * 3)
    rows = {name: {"group": f.group, "split_pairs": f.split_pairs,
                   "estimators": {loop.HEADLINE: dict(f.default), "recommended": dict(f.candidate)}}
            for name, f in figures.items()}
    monkeypatch.setattr(loop, "run_bench", lambda sources: ({c: rows[c] for c in sources}, 1.0))
    monkeypatch.setattr(loop, "RESULTS", tmp_path)
    report = loop.headline_run(list(rows), "recommended")
    assert report["verdict"]["adopt"] and len(report["verdict"]["counted"]) == len(rows)
    written = (tmp_path / "loop" / "headline-recommended.md").read_text()
    assert "ADOPT" in written and "| cell-0 | textworld | +0.30 |" in written
    assert "`headline=recommended (default ADWM:reward_sum)` — ADOPT" in (tmp_path / "adoptions.md").read_text()
    few = {c: rows[c] for c in list(rows)[:MIN_CELLS - 1]}
    assert not loop.headline_run(list(few), "recommended")["verdict"]["adopt"]  # too few cells: the default stays


def test_a_stopped_loop_keeps_the_rows_of_the_cells_it_finished(tmp_path, monkeypatch):
    """The loop rewrites bench.{json,md} after every cell: stopped during the second of two cells
    (a build of hours is often stopped), the first cell's row is on disk and says so. The cells'
    rows are given (the loop's per-cell runner is what is replaced)."""
    import json

    import bench.loop as loop

    figures = bench([0.3])
    finished = {"group": figures["cell-0"].group, "split_pairs": 5, "seconds": 1.0,
                "estimators": {loop.HEADLINE: dict(figures["cell-0"].default)}}

    def run_cell(source):
        if source == "cell-1":
            raise KeyboardInterrupt
        return finished

    monkeypatch.setattr(loop, "run_cell", run_cell)
    monkeypatch.setattr(loop, "RESULTS", tmp_path)
    with pytest.raises(KeyboardInterrupt):
        loop.default_run(["cell-0", "cell-1"], whole=False)
    assert list(json.loads((tmp_path / "bench.json").read_text())["rows"]) == ["cell-0"]
    assert "1 cells (so far: 1 of the run's 2)" in (tmp_path / "bench.md").read_text()


def test_a_headline_no_cell_has_a_row_of_is_refused_with_the_rows_there_are(tmp_path, monkeypatch):
    import bench.loop as loop

    rows = {"cell-0": {"group": "g", "split_pairs": 5, "estimators": {loop.HEADLINE: {"rho": 0.5}}}}
    monkeypatch.setattr(loop, "run_bench", lambda sources: (rows, 1.0))
    monkeypatch.setattr(loop, "RESULTS", tmp_path)
    with pytest.raises(SystemExit, match=f"--headline recomended: no cell has a row of that name; the rows are {loop.HEADLINE}"):
        loop.headline_run(["cell-0"], "recomended")
    assert not (tmp_path / "adoptions.md").exists()  # nothing logged for a name that was never measured


def test_the_heldout_table_counts_each_cell_s_split_pairs_and_leaves_noise_out_of_the_mean():
    """heldout.md's development table (issue 72): each cell with its count of truth-split pairs; a
    cell whose truth splits fewer than 3 is marked and kept, and its ρ stays out of the mean."""
    from bench.tables.heldout import SHOWN, _cell_table

    today = {"commit": "abc", "date": "2026-11-29", "current": True}
    row = lambda rho: {e: {"rho": rho, "nmae": 0.1, "coverage": 0.9} for e in SHOWN}  # noqa: E731
    results = {"clear-a": row(1.0), "clear-b": row(0.5), "flat": row(-1.0), "unbuilt": None}
    lines = _cell_table("Development", results, dict.fromkeys(("clear-a", "clear-b", "flat"), today),
                        {"clear-a": 10, "clear-b": 3, "flat": 2, "unbuilt": None})
    by_cell = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ")}
    assert " | 10 | " in by_cell["clear-a"] and " | 3 | " in by_cell["clear-b"]
    assert "flat (not counted)" in by_cell and " | 2 | " in by_cell["flat (not counted)"]
    assert "not measured" in by_cell["unbuilt"]
    mean = by_cell["**mean ρ [CI95 over cells]** (2 counted cells)"]
    assert mean.split(" | ")[3].startswith("+0.75")


def test_the_calibration_is_rewritten_only_when_the_bench_s_errors_change(tmp_path, monkeypatch):
    """The shipped calibration keys every report: the same records under a new commit label keep
    the file (and the reports computed on it); changed records replace it."""
    import bench.calibrate as calibrate
    from adwm_core.ope.statistics.recommend import BenchCalibration, BenchCell

    monkeypatch.setattr(calibrate, "SHIPPED", str(tmp_path / "bench_calibration.json"))
    cell = BenchCell("c", "env", 0.0, 1.0, 1.0, float("nan"), {"p": 0.5, "q": 0.2}, {"A": {"p": 0.4, "q": 0.3}})
    assert calibrate.save_calibration((cell,), "abc")
    assert not calibrate.save_calibration((cell,), "def+changes")
    assert BenchCalibration.load(calibrate.SHIPPED).commit == "abc"
    moved = BenchCell("c", "env", 0.0, 1.0, 1.0, float("nan"), {"p": 0.5, "q": 0.2}, {"A": {"p": 0.45, "q": 0.3}})
    assert calibrate.save_calibration((moved,), "def") and BenchCalibration.load(calibrate.SHIPPED).commit == "def"
    (tmp_path / "bench_calibration.json").write_text('{"rows": []}')  # not a calibration: replaced, not a crash
    assert calibrate.save_calibration((moved,), "ghi") and BenchCalibration.load(calibrate.SHIPPED).commit == "ghi"
    assert [p.name for p in tmp_path.iterdir()] == ["bench_calibration.json"]  # nothing partial left


def test_a_clean_clone_keeps_the_files_its_loop_changed_or_added_and_nothing_else(tmp_path):
    """``bench.costs.clean_clone --keep`` copies back what the loops wrote in the clone: a changed
    tracked file and a new one, never an untouched file."""
    import subprocess

    from bench.costs.clean_clone import changed_files

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "results").mkdir()
    for name in ("results/bench.json", "results/untouched.md", "README.md"):
        (tmp_path / name).write_text("committed\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    (tmp_path / "results" / "bench.json").write_text("measured\n")
    (tmp_path / "results" / "recommended.md").write_text("new\n")
    assert sorted(changed_files(tmp_path)) == ["results/bench.json", "results/recommended.md"]


def test_the_verdicts_rule_adopts_more_decided_only_at_its_precision():
    """bench/ADOPTION_VERDICTS.md: deciding more on every cell at precision 0.95 is adopted; the
    same gain at precision 0.85, or with more cells under 0.80 than the default, is not; of two
    that pass, the one deciding more is."""
    from bench.studies.verdict_calibration import decide as decide_verdicts

    def rows(decided: float, precision: list[float]) -> dict:
        return {f"c{i}": {"decided": decided + 0.01 * i, "precision": p} for i, p in enumerate(precision)}

    default = rows(0.2, [0.95] * 12)
    candidates = {"more": rows(0.5, [0.95] * 12), "most": rows(0.6, [0.95] * 11 + [0.96]),
                  "loose": rows(0.7, [0.85] * 12), "uneven": rows(0.7, [1.0] * 10 + [0.7, 0.75])}
    adopted, reasons = decide_verdicts(default, candidates)
    assert adopted == "most", reasons
    assert reasons["loose"][0].startswith("✗") and reasons["uneven"][2].startswith("✗")
    assert decide_verdicts(default, {"same": default})[0] is None


def test_the_live_rule_adopts_only_a_top_up_no_worse_than_the_episodes_alone():
    """bench/ADOPTION_LIVE.md: a setting under the episodes alone in coverage is not adopted, nor one
    that gives up more than 0.03 of decided; one that passes is, the narrowest of several."""
    from bench.studies.live_settings import decide as decide_live

    def rows(coverage: float, half_width: float, decided: float) -> dict:
        alone = {"coverage": 0.94, "half_width": 0.12, "decided": 0.45, "precision": 0.99}
        live = {"coverage": coverage, "half_width": half_width, "decided": decided, "precision": 0.97}
        return {f"c{i}": {"live": live, "alone": alone} for i in range(12)}

    default = rows(0.92, 0.11, 0.68)
    candidates = {"under": rows(0.93, 0.10, 0.70), "timid": rows(0.95, 0.11, 0.60),
                  "wide": rows(0.95, 0.115, 0.67), "narrow": rows(0.95, 0.105, 0.66)}
    adopted, reasons = decide_live(default, candidates)
    assert adopted == "narrow", reasons
    assert reasons["under"][0].startswith("✗") and reasons["timid"][2].startswith("✗")


def test_a_reports_grades_are_kept_under_its_key_and_read_back_by_a_second_loop(tmp_path, monkeypatch):
    """A second `make loop` reads each finished cell's grades (the live top-ups draw for seconds a
    cell) from where the first kept them, named by the report's key and the grading code; a
    report at another key is graded anew."""
    from adwm_core.pipeline import Artifact
    from bench import calibrate

    monkeypatch.setenv("ADWM_HOME", str(tmp_path))
    report = Artifact(str(tmp_path / "cells" / "test-b3-a" / "report" / "0123456789abcdef"), "0123456789abcdef" * 4)
    kept = calibrate._graded_path(report)
    assert kept.startswith(str(tmp_path / "bench" / "cell-results" / "test-b3-a"))
    (tmp_path / "bench" / "cell-results" / "test-b3-a").mkdir(parents=True)
    with open(kept, "w") as f:
        f.write('{"ADWM": {"rho": 0.5}}')
    assert calibrate.cell_results(report, "test-b3-a") == {"ADWM": {"rho": 0.5}}  # the report's own files do not exist
    other = Artifact(report.path.replace("0123456789abcdef", "fedcba9876543210"), "fedcba9876543210" * 4)
    assert calibrate._graded_path(other) != kept
    with pytest.raises(KeyError, match="has no output"):  # graded anew: it reads the (missing) report
        calibrate.cell_results(other, "test-b3-a")
