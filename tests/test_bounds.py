"""The identified bounds of an imagined return, the interval over members and rollouts that
carries them, and the verdict on a pair from the paired interval on its difference
(adwm_core/ope/statistics/bounds.py)."""

import numpy as np
import pytest

from adwm_core.ope.statistics.bounds import (Candidate, ReturnRange, candidates_from_rows, identified_bounds,
                                             interval, rollout_bounds, verdicts)
from adwm_core.ope.statistics.intervals import members_bootstrap
from adwm_core.ope.statistics.metrics import verdict_scores

SPARSE = ReturnRange((0.0, 1.0), (0.0, 1.0))  # ALFWorld's, WebShop's: one reward in [0, 1], at the end


def test_a_rollout_is_known_while_the_log_answers_it_and_bounded_by_the_declared_ranges_after():
    assert rollout_bounds([0.0, 0.0, 1.0], ["log"] * 3, horizon=5, gamma=1.0, returns=SPARSE) == (1.0, 1.0, 1.0)
    # left the log at its second step: the rest may pay anything the rules allow
    assert rollout_bounds([0.0, 0.3, 0.0], ["log", "carried", "value"], horizon=5, gamma=1.0,
                          returns=SPARSE) == (0.3, 0.0, 1.0)
    twx = ReturnRange((-2.0, 2.0), (-1.0, 1.0))  # steps are changes of a score in [-1, 1]
    value, low, high = rollout_bounds([0.2, -1.8], ["log", "carried"], horizon=4, gamma=1.0, returns=twx)
    assert (low, high) == (-1.0, 1.0) and value == pytest.approx(-1.6)
    steps_only = ReturnRange((-1.0, 1.0))  # no rule on the whole return: the remaining steps bound it
    assert identified_bounds(0.5, 2, horizon=5, gamma=1.0, returns=steps_only) == (-2.5, 3.5)
    low, high = identified_bounds(0.0, 1, horizon=3, gamma=0.5, returns=steps_only)
    assert (low, high) == (pytest.approx(-0.75), pytest.approx(0.75))  # γ + γ² of each sign


def test_declared_ranges_come_from_the_environment_and_the_logs_ranges_from_the_log():
    assert ReturnRange.declared("chain").reward == (0.0, 1.0) and ReturnRange.declared("chain").episode == (0.0, 1.0)
    assert ReturnRange.declared("textworld-express").episode == (-1.0, 1.0)
    assert ReturnRange.declared("textworld").episode is None  # its rules bound the steps only
    log = ReturnRange.of_log(np.array([0.0, 0.2, -1.0]), np.array([-0.8, 0.4]))
    assert log.reward == (-1.0, 0.2) and log.episode == (-0.8, 0.4) and "log" in log.source


def test_without_bounds_the_interval_is_the_bootstrap_adwm_has_always_printed():
    x = np.random.default_rng(0).normal(size=(3, 50))
    ours = interval(Candidate(x, x, x), n_resamples=400, confidence=0.9, seed=7)
    assert ours == tuple(members_bootstrap(x, n_resamples=400, confidence=0.9, seed=7))
    low, high = interval(Candidate(x, x - 1, x + 1), n_resamples=400, confidence=0.9, seed=7)
    assert low == pytest.approx(ours[0] - 1) and high == pytest.approx(ours[1] + 1)


def test_the_paired_difference_is_narrower_than_two_independent_intervals_under_common_random_numbers():
    """Two agents whose rollouts share their start (a large common part per unit) and differ by 0.3:
    the paired interval on the difference parts them; the two agents' own intervals overlap."""
    shared = np.random.default_rng(1).normal(0, 2, (1, 64))
    a, b = Candidate(shared + 0.3, shared + 0.3, shared + 0.3), Candidate(shared, shared, shared)
    settings = dict(n_resamples=1000, confidence=0.95, seed=0)
    (a_low, a_high), (b_low, b_high) = interval(a, **settings), interval(b, **settings)
    (verdict,) = verdicts({"a": a, "b": b}, **settings)
    independent = (a_low - b_high, a_high - b_low)
    assert verdict.high - verdict.low < 0.05 * (independent[1] - independent[0])
    assert independent[0] < 0 < independent[1] and verdict.better == "a"
    with pytest.raises(ValueError, match="different rollouts"):
        a.minus(Candidate(shared[:, :10], shared[:, :10], shared[:, :10]))


def test_a_verdict_is_cannot_tell_where_the_bounds_overlap():
    """The same two agents, each rollout known only up to ±1 (it left the log): the bounds of the
    difference straddle 0, so the log alone cannot tell, while the imagined returns do."""
    shared = np.random.default_rng(1).normal(0, 2, (1, 64))
    a = Candidate(shared + 0.3, shared - 0.7, shared + 1.3)
    b = Candidate(shared, shared - 1, shared + 1)
    settings = dict(n_resamples=500, confidence=0.95, seed=0)
    (alone,) = verdicts({"a": a, "b": b}, **settings)
    assert alone.low < 0 < alone.high and alone.better is None and "cannot tell from these logs" in alone.line()
    (imagined,) = verdicts({"a": a.without_bounds(), "b": b.without_bounds()}, **settings)
    assert imagined.better == "a" and "a better" in imagined.line()


def test_verdicts_are_graded_on_the_pairs_the_truth_tells_apart():
    class Said:
        def __init__(self, a, b, better):
            self.a, self.b, self.better = a, b, better

    truth, stderr = {"p": 1.0, "q": 0.0, "r": 0.05}, {"p": 0.01, "q": 0.01, "r": 0.01}
    scores = verdict_scores([Said("p", "q", "p"), Said("p", "r", None), Said("q", "r", "q")], truth, stderr)
    assert scores.pairs == 3 and scores.distinguishable == 3
    assert scores.decided == pytest.approx(2 / 3) and scores.precision == 0.5  # q over r is the wrong order


def test_rollout_rows_become_candidates_and_a_missing_unit_is_refused():
    rows = [{"policy": "a", "epsilon": 0.0, "member": m, "seed": s, "unit": u, "value": float(u), "low": u - 1.0,
             "high": u + 1.0} for m in range(2) for s in (0, 1) for u in range(3)]
    (found,) = candidates_from_rows(rows, "policy").values()
    assert found.value.shape == (2, 6) and (found.high - found.low == 2).all()
    assert (candidates_from_rows(rows, "policy", bounded=False)["a"].low == found.value).all()
    with pytest.raises(ValueError, match="rollouts missing"):
        candidates_from_rows(rows[:-1], "policy")


def test_a_shared_off_log_error_widens_the_level_and_cancels_where_two_points_left_the_log_alike():
    """Calibrated: every rollout that left the log is off by one error e ∈ [e_lo, e_hi]. A level
    shifts by e × the share that left; a paired difference only by e × the difference of the
    shares, so two points that left the log alike keep the plain paired interval."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(1.0, 0.3, (1, 60)), rng.normal(0.5, 0.3, (1, 60))
    everywhere, half = np.ones((1, 60)), (np.arange(60) % 2 == 0)[None].astype(float)
    settings = dict(n_resamples=500, confidence=0.95, seed=3)
    plain = interval(Candidate(x, x, x), **settings)
    level = interval(Candidate.calibrated(x, everywhere, (-0.2, 0.4)), **settings)
    assert level == (pytest.approx(plain[0] - 0.4), pytest.approx(plain[1] + 0.2))
    alike = Candidate.calibrated(x, everywhere, (-0.2, 0.4)).minus(Candidate.calibrated(y, everywhere, (-0.2, 0.4)))
    assert interval(alike, **settings) == pytest.approx(interval(Candidate(x - y, x - y, x - y), **settings))
    apart = Candidate.calibrated(x, everywhere, (-0.2, 0.4)).minus(Candidate.calibrated(y, half, (-0.2, 0.4)))
    low, high = interval(apart, **settings)
    assert low == pytest.approx(interval(Candidate(x - y, x - y, x - y), **settings)[0] - 0.4 * 0.5, abs=0.05)
    assert high - low > interval(alike, **settings)[1] - interval(alike, **settings)[0] + 0.25
    with pytest.raises(ValueError, match="different error ranges"):
        Candidate.calibrated(x, everywhere, (-0.2, 0.4)).minus(Candidate.calibrated(y, everywhere, (0.0, 0.1)))
    rows = [{"policy": "a", "member": 0, "seed": 0, "unit": u, "value": float(x[0, u]), "low": 0.0, "high": 2.0,
             "steps": 4, "log_steps": 4 if u % 2 else 1} for u in range(60)]
    (found,) = candidates_from_rows(rows, "policy", error_range=(-0.2, 0.4)).values()
    assert found.shared_error == (-0.2, 0.4) and found.left.mean() == 0.5 and (found.low == found.value).all()


def test_refits_give_their_order_statistics_and_a_pair_is_read_refit_by_refit():
    """Under the refits interval a candidate's ends are the refits' Ĵ_b at the order statistics
    (with B = 20 at 95 %: the smallest and the largest), and a pair's verdict reads
    D_b = Ĵ_b(p) − Ĵ_b(q): two levels that overlap are told apart where every refit orders them
    alike (each refit reads one draw of the log for both)."""
    rng = np.random.default_rng(0)
    draws = rng.normal(0, 1, 20)  # what each refit's draw of the log shifts both candidates by
    value = rng.normal(0, 1, (1, 30))
    better, worse = Candidate.refitted(value + 0.3, draws + 0.3), Candidate.refitted(value, draws)
    settings = dict(n_resamples=1, confidence=0.95, seed=0)
    assert interval(worse, **settings) == (draws.min(), draws.max())
    assert interval(better, **settings)[0] < interval(worse, **settings)[1]  # the levels overlap
    (verdict,) = verdicts({"better": better, "worse": worse}, **settings)
    assert verdict.better == "better" and verdict.low == pytest.approx(0.3) == verdict.high
    crossing = Candidate.refitted(value, draws + np.where(np.arange(20) % 2, 1.0, -1.0))
    (undecided,) = verdicts({"better": better, "crossing": crossing}, **settings)
    assert undecided.better is None  # refits disagree on the order: cannot tell
    with pytest.raises(ValueError, match="one reading"):
        worse.minus(Candidate(value, value, value))


def test_refits_read_back_from_the_stages_answers_match_every_epsilon_exactly():
    """An agent's refits go to its ADWM stage's answers and come back as the printed interval's, at
    any ε (a third is written with every digit, not six), and a point without refits is named."""
    from adwm_core.ope.imagination.refits import Refits
    from adwm_core.ranking import PrintedInterval

    epsilon = 1 / 3
    refits = Refits((0.0, epsilon), np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]))
    printed = PrintedInterval.of([{"policy": "a", "refits": refits.to_json()}])
    rows = [{"estimator": "ADWM", "policy": "a", "epsilon": e, "member": 0, "seed": 0, "unit": u, "value": 1.0,
             "low": 1.0, "high": 1.0, "steps": 2, "log_steps": 2} for e in (0.0, epsilon) for u in range(4)]
    found = printed.candidates(rows, ("policy", "epsilon"))
    assert printed.name == "refits" and found["a", epsilon].refits.tolist() == [1.0, 3.0, 5.0]
    with pytest.raises(ValueError, match="no refits of"):
        printed.candidates([{**r, "policy": "b"} for r in rows], "policy")
