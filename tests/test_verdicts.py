"""One verdict per pair, made and worded in one place (ope/statistics/verdicts.py): every method's
verdicts are its ``Verdict``, a pair reads the same in the recommended estimate, the API and the
instruments, and no other module decides which candidate is better."""

import ast
from pathlib import Path

import numpy as np

from adwm_core.ope.statistics import verdicts
from adwm_core.ope.statistics.bounds import Candidate
from adwm_core.ope.statistics.bounds import verdicts as paired_verdicts
from adwm_core.ope.statistics.calibration import Calibrated, ToppedUp, topped_up_verdicts
from adwm_core.ope.statistics.recommend import BenchCalibration, live_only, recommend, with_live
from adwm_core.ope.statistics.verdicts import CANNOT_TELL, Verdict, unpaired, winner
from test_recommend import synthetic_cell

PACKAGE = Path(verdicts.__file__).parents[2]


def test_a_verdict_reads_the_side_of_zero_its_interval_lies_on_and_says_what_would_decide_it():
    assert Verdict("a", "b", 0.3, 0.1, 0.5).better == "a" and Verdict("a", "b", -0.3, -0.5, -0.1).better == "b"
    undecided = Verdict("a", "b", 0.1, -0.1, 0.3, live_episodes=12)
    assert undecided.better is None
    assert undecided.line() == (f"a vs b: Ĵ difference +0.1 [-0.1, +0.3] → {CANNOT_TELL}; about 12 live episodes "
                                "per point would likely decide it")
    assert Verdict("a", "b", 0.3, 0.1, 0.5).line().endswith("→ a better")
    assert "more than 10,000" in Verdict("a", "b", 0.0, -1, 1, live_episodes=50_000).line()
    assert Verdict("a", "b", 0.1, -0.1, 0.3).row() == {"a": "a", "b": "b", "difference": 0.1, "lower": -0.1,
                                                       "upper": 0.3, "better": None, "live_episodes": None}


def test_the_best_candidate_is_the_one_whose_verdicts_beat_every_other():
    said = unpaired({"x": (0.9, 0.8, 1.0), "y": (0.5, 0.4, 0.6), "z": (0.45, 0.3, 0.7)})
    assert winner(["x", "y", "z"], said) == "x"
    assert winner(["y", "z"], [v for v in said if "x" not in (v.a, v.b)]) is None  # y and z overlap


def test_every_method_builds_its_verdicts_from_the_one_module():
    """The recommended estimate (offline, with live episodes, the live episodes alone), ADWM's
    paired interval, two intervals read apart and the live top-up all give ``verdicts.Verdict``."""
    rng = np.random.default_rng(0)
    bench = BenchCalibration(tuple(synthetic_cell(rng, f"c{i}", {"A": 0.05}) for i in range(12)))
    reading = recommend({"A": {"p": 0.8, "q": 0.2, "r": 0.5}}, bench=bench, return_range=(0, 1), answered=0.8)
    live = {"p": [0.7, 0.9, 0.8], "q": [0.1, 0.3, 0.2], "r": [0.4, 0.6, 0.5]}
    value = rng.normal(size=(2, 30))
    candidates = {"p": Candidate(value + 1, value + 1, value + 1), "q": Candidate(value, value, value)}
    spread = Calibrated(0.2, -0.3, 0.7, 0.0, 1.0, 0.2, 4)
    topped = [ToppedUp(("a@p0", 0.0), 0.4, spread, spread), ToppedUp(("b@p0", 0.0), 0.1, spread, spread)]
    found = [*reading.verdicts, *with_live(reading, live, bench).verdicts, *live_only(reading, live).verdicts,
             *paired_verdicts(candidates, n_resamples=200, confidence=0.95, seed=0),
             *unpaired({"p": (1, 0, 2), "q": (0, -1, 1)}), *topped_up_verdicts(topped)]
    assert len(found) == 3 + 3 + 3 + 1 + 1 + 1 and all(type(v) is Verdict for v in found)


def test_no_module_but_verdicts_decides_which_candidate_is_better():
    """Outside ope/statistics/verdicts.py no class of the package defines ``better`` or ``line`` on
    an interval of a difference: a pair cannot be worded two ways."""
    defining = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
                fields = {item.target.id for item in node.body
                          if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
                if "better" in names or ({"low", "high", "difference"} <= fields):
                    defining.append(f"{path.relative_to(PACKAGE.parent)}:{node.name}")
    assert defining == ["adwm_core/ope/statistics/verdicts.py:Verdict"]
