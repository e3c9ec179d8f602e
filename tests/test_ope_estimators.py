import copy
import math

import numpy as np
import pytest
from scipy import stats

from adwm_core.ope.statistics.diagnostics import verdicts, weight_diagnostics
from adwm_core.ope.classical.estimators import ESTIMATORS, LoggedTrajectories
from adwm_core.ope.statistics.intervals import CONCENTRATION, concentration_interval, members_bootstrap, percentile_bootstrap
from adwm_core.ope.statistics.metrics import (
    kendall,
    normalised_absolute_error,
    per_seed_spearman,
    regret_at_1,
    spearman,
    spearman_with_interval,
    permutation_p_value,
)
from adwm_core.ope.statistics.signed_log import SignedLog

GAMMA = 0.99


class TabularMDP:
    """S states + an absorbing terminal state, 2 actions, start state 0; exact values by a linear solve."""

    def __init__(self, seed: int, n_states: int = 4, deterministic: bool = False) -> None:
        rng = np.random.default_rng(seed)
        self.n = n_states
        if deterministic:  # a chain: action 0 steps on, action 1 jumps two ahead; past the last state → terminal
            self.P = np.zeros((n_states, 2, n_states + 1))
            for s in range(n_states):
                for a in range(2):
                    self.P[s, a, min(s + 1 + a, n_states)] = 1.0
        else:
            self.P = rng.dirichlet(np.r_[np.ones(n_states), 3.0], size=(n_states, 2))
        self.R = rng.uniform(-1, 1, size=(n_states, 2))

    def policy(self, seed: int) -> np.ndarray:
        return np.random.default_rng(seed).dirichlet(np.ones(2), size=self.n)

    def values(self, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact (V, Q) of ``pi``: V = (I − γ P_π)⁻¹ r_π, Q = R + γ P V."""
        p_pi = np.einsum("sa,sat->st", pi, self.P[:, :, : self.n])
        v = np.linalg.solve(np.eye(self.n) - GAMMA * p_pi, (pi * self.R).sum(1))
        return v, self.R + GAMMA * self.P[:, :, : self.n] @ v

    def simulate(self, pi_b, pi_e, n: int, rng, max_steps: int = 200) -> tuple[LoggedTrajectories, np.ndarray, np.ndarray]:
        """N trajectories of π_b from state 0; returns them and the visited (states, actions)."""
        state, alive = np.zeros(n, int), np.ones(n, bool)
        cols = {k: [] for k in ("r", "m", "lr", "s", "a")}
        for _ in range(max_steps):
            if not alive.any():
                break
            s = np.minimum(state, self.n - 1)
            a = (rng.random(n) > pi_b[s, 0]).astype(int)
            cols["r"].append(np.where(alive, self.R[s, a], 0.0))
            cols["m"].append(alive.copy())
            cols["lr"].append(np.where(alive, np.log(pi_e[s, a]) - np.log(pi_b[s, a]), 0.0))
            cols["s"].append(s)
            cols["a"].append(a)
            u = rng.random(n)[:, None]
            nxt = (u > np.cumsum(self.P[s, a], axis=1)).sum(1)
            state = np.where(alive, nxt, self.n)
            alive &= state < self.n
        arr = {k: np.stack(v, axis=1) for k, v in cols.items()}
        return LoggedTrajectories(arr["r"], arr["m"], arr["lr"], GAMMA), arr["s"], arr["a"]


def with_values(data: LoggedTrajectories, states, actions, v, q) -> LoggedTrajectories:
    from dataclasses import replace

    return replace(data, q=np.where(data.mask, q[states, actions], 0.0), v=np.where(data.mask, v[states], 0.0))


def value(name: str, data: LoggedTrajectories) -> float:
    return ESTIMATORS[name]().signed_estimate(data).value


def test_is_and_pdis_are_unbiased_within_their_standard_error():
    mdp = TabularMDP(0)
    pi_b, pi_e = mdp.policy(1), mdp.policy(2)
    truth = mdp.values(pi_e)[0][0]
    rng = np.random.default_rng(3)
    runs = {"IS": [], "PDIS": []}
    for _ in range(400):
        data = mdp.simulate(pi_b, pi_e, 20, rng)[0]
        for name in runs:
            runs[name].append(value(name, data))
    for name, values in runs.items():
        values = np.asarray(values)
        se = values.std(ddof=1) / np.sqrt(len(values))
        assert abs(values.mean() - truth) < 3.5 * se, (name, values.mean(), truth, se)
    # and they are not trivially right: behaviour policy's own value differs
    assert abs(mdp.values(pi_b)[0][0] - truth) > 0.05


def test_weighted_estimators_are_consistent():
    mdp = TabularMDP(4)
    pi_b = mdp.policy(5)
    pi_e = 0.5 * pi_b + 0.5 * mdp.policy(6)
    v, q = mdp.values(pi_e)
    rng = np.random.default_rng(7)
    errors = {}
    for n in (100, 50000):
        data, s, a = mdp.simulate(pi_b, pi_e, n, rng)
        rough = with_values(data, s, a, 0.5 * v, 0.5 * q)  # a wrong model: WDR must still converge
        errors[n] = {name: abs(value(name, rough) - v[0]) for name in ("WIS", "WPDIS", "WDR")}
    for name, err in errors[50000].items():
        assert err < 0.03, (name, err)
    assert sum(errors[50000].values()) < sum(errors[100].values())


def test_dr_and_wdr_are_exact_with_the_true_q_on_deterministic_dynamics():
    mdp = TabularMDP(8, deterministic=True)
    pi_b, pi_e = mdp.policy(9), mdp.policy(10)
    v, q = mdp.values(pi_e)
    for n in (1, 3, 50):
        data, s, a = mdp.simulate(pi_b, pi_e, n, np.random.default_rng(n))
        exact = with_values(data, s, a, v, q)
        assert value("DR", exact) == pytest.approx(v[0], abs=1e-9)
        assert value("WDR", exact) == pytest.approx(v[0], abs=1e-9)
    assert value("IS", data) != pytest.approx(v[0], abs=1e-3)  # the logged data alone do not give it


def test_dm_never_reads_the_evaluation_policy():
    mdp = TabularMDP(11)
    data, s, a = mdp.simulate(mdp.policy(12), mdp.policy(13), 50, np.random.default_rng(0))
    from dataclasses import replace

    model = replace(data, predicted_rewards=np.where(data.mask, mdp.R[s, a] + 0.1, 0.0))
    other = replace(model, log_ratios=-model.log_ratios)
    assert value("DM", model) == value("DM", other) != value("DM", replace(model, predicted_rewards=data.rewards))
    with pytest.raises(ValueError, match="DM needs predicted_rewards"):
        ESTIMATORS["DM"]().estimate(data)


def test_extreme_log_ratios_stay_finite_exact_and_ordered():
    rewards = np.array([[0.0, 1.0], [0.0, 0.5], [1.0, 0.0]])
    mask = np.ones((3, 2), bool)
    data = LoggedTrajectories(rewards, mask, np.array([[1000.0, 1000], [995, 995], [-1000, -1000]]))
    # WIS: weights e^2000, e^1990, e^−2000 on returns γ, γ/2, 1
    wis = (GAMMA + 0.5 * GAMMA * np.exp(-10)) / (1 + np.exp(-10))
    for name in ("WIS", "WPDIS"):
        assert value(name, data) == pytest.approx(wis, rel=1e-12)
    is_ = ESTIMATORS["IS"]().signed_estimate(data)
    assert is_.sign == 1 and is_.log_abs == pytest.approx(2000 + np.log(GAMMA * (1 + 0.5 * np.exp(-10))) - np.log(3))
    assert np.isfinite(is_.value) and np.isfinite(is_.order_key)
    # two policies whose IS values underflow float64 still rank correctly, no tie
    low = [ESTIMATORS["IS"]().signed_estimate(LoggedTrajectories(rewards, mask, np.full((3, 2), -lr)))
           for lr in (400.0, 450.0)]
    assert low[0].value == low[1].value == 0.0 and low[0].order_key > low[1].order_key > 0
    huge_q = LoggedTrajectories(rewards, mask, np.full((3, 2), 800.0), q=np.ones((3, 2)), v=np.ones((3, 2)))
    for name in ESTIMATORS:
        if name != "DM":
            result = ESTIMATORS[name]().estimate(huge_q, n_bootstrap=50)
            for s in (result.value, result.ci_low, result.ci_high):
                assert not np.isnan(s.log_abs) and np.isfinite(s.value) and np.isfinite(s.order_key), name


def test_signed_log_order_key_is_monotone():
    xs = [-1e300, -5.0, -1.0, -1e-200, 0.0, 1e-300, 1e-200, 0.5, 1.0, 3.0, 1e300]
    keys = [SignedLog.of(x).order_key for x in xs]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert SignedLog(5000.0, -1).order_key < SignedLog(4000.0, -1).order_key < SignedLog(-5000.0, 1).order_key


def test_bootstrap_interval_brackets_the_estimate_and_bad_input_is_named():
    mdp = TabularMDP(14)
    data = mdp.simulate(mdp.policy(15), mdp.policy(16), 200, np.random.default_rng(1))[0]
    for name in ("IS", "WIS", "PDIS"):
        est = ESTIMATORS[name]().estimate(data, n_bootstrap=300, seed=2)
        assert est.ci_low.order_key <= est.value.order_key <= est.ci_high.order_key
        assert est.ci_low.value < est.ci_high.value
    with pytest.raises(ValueError, match="log_ratios has shape"):
        LoggedTrajectories(np.zeros((2, 3)), np.ones((2, 3), bool), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="NaN"):
        LoggedTrajectories(np.zeros((1, 1)), np.ones((1, 1), bool), np.full((1, 1), np.nan))
    assert set(ESTIMATORS) >= {"DM", "IS", "PDIS", "WIS", "WPDIS", "DR", "WDR"}


def test_rank_metrics_match_scipy_and_hand_computation():
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.normal(size=7), rng.normal(size=7)
        x[3] = x[1]  # a tie
        assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)
        assert kendall(x, y) == pytest.approx(stats.kendalltau(x, y).statistic)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / np.sqrt(4.5 * 5))
    assert kendall([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(5 / np.sqrt(30))  # τ-b, one tie
    assert regret_at_1([0.1, 0.9, 0.9], [1.0, 0.5, 0.0]) == pytest.approx(0.75)  # tie at the top: mean of 0.5, 0
    assert regret_at_1([3, 1, 2], [10, 0, 5]) == 0.0
    assert normalised_absolute_error([0.1, 0.9, 0.9], [1.0, 0.5, 0.0]) == pytest.approx((0.9 + 0.4 + 0.9) / 3)
    seeds, avg = per_seed_spearman([[1, 2, 3], [3, 2, 1]], [1, 2, 3])
    assert seeds == pytest.approx([1.0, -1.0]) and np.isnan(avg)  # the average curve is flat
    with pytest.raises(ValueError, match="same for every policy"):
        regret_at_1([1, 2], [0.5, 0.5])
    with pytest.raises(ValueError, match="finite"):
        spearman([np.inf, 1], [1, 2])


def test_rho_gets_an_exact_permutation_p_value_and_a_bootstrap_interval_marked_degenerate_when_it_is_a_point():
    perfect = spearman_with_interval([1, 2, 3, 4, 5], [0.1, 0.2, 0.3, 0.4, 0.5])
    assert perfect.rho == pytest.approx(1) and perfect.p_value == pytest.approx(2 / 120)  # one pairing of 5! as extreme, both tails
    assert [perfect.ci_low, perfect.ci_high] == [1, 1] and perfect.degenerate
    assert permutation_p_value([5, 4, 3, 2, 1], [1, 2, 3, 4, 5]) == pytest.approx(2 / 120)
    assert permutation_p_value(range(10), range(10)) == pytest.approx(2 / math.factorial(10))  # still exact at n = 10
    paper = spearman_with_interval([1, 2, 3, 5, 4], [1, 2, 3, 4, 5])  # ρ 0.90: 5 of 120 pairings reach it
    assert paper.rho == pytest.approx(0.9) and paper.p_value == pytest.approx(2 * 5 / 120)
    assert paper.n_resamples < 2000 and paper.ci_low < 0.9 <= paper.ci_high and not paper.degenerate
    noise = spearman_with_interval(np.random.default_rng(1).normal(size=12), np.arange(12))  # sampled pairings
    assert 0.05 < noise.p_value <= 1 and noise.ci_low < 0 < noise.ci_high
    ties = permutation_p_value([1, 1, 2, 2], [1, 2, 3, 4])  # average ranks: 4 of 24 pairings give ρ ≥ 0.894
    assert ties == pytest.approx(2 * 4 / 24)
    flat = spearman_with_interval([1, 1, 1], [1, 2, 3])
    assert np.isnan(flat.rho) and np.isnan(flat.p_value) and np.isnan(flat.ci_low)
    assert spearman_with_interval([1, 3, 2], [1, 2, 3], seed=4) == spearman_with_interval([1, 3, 2], [1, 2, 3], seed=4)


@pytest.mark.parametrize("estimates, truth", [([3, 1, 4, 1, 5, 9, 2], [2, 7, 1, 8, 2, 8, 1]),  # ties on both sides
                                              ([0.5, 0.1, 0.9, 0.3, 0.7, 0.2], [1, 2, 3, 4, 5, 6])])
def test_the_exact_null_of_rho_is_scipys_value_for_value(estimates, truth):
    """The p-value's exact null (every pairing, laid out as arrays) holds the very floats that
    scipy.stats.permutation_test enumerates, so the p-values of the bench read as before."""
    from adwm_core.ope.statistics.metrics import _null_distribution, _rank_pearson

    rx, ry = np.sort(stats.rankdata(estimates)), stats.rankdata(truth)
    ours = _null_distribution(tuple(rx), tuple(ry), np.inf)
    scipys = stats.permutation_test((rx,), lambda x, axis: _rank_pearson(x, ry), permutation_type="pairings",
                                    n_resamples=np.inf, vectorized=True).null_distribution
    assert len(ours) == math.factorial(len(rx)) and np.array_equal(np.sort(ours), np.sort(scipys))


@pytest.mark.parametrize("stabilised", [{}, {"target_every": 1},
                                        {"layer_norm": True, "weight_decay": 1e-3, "clip_targets": True}])
def test_fqe_with_one_hot_features_converges_to_the_exact_q_of_an_eps_mixed_policy(stabilised):
    from adwm_core.ope.classical.fqe import FittedQEvaluation, Transitions
    from adwm_core.ope.classical.settings import FQEConfig
    from adwm_core.ope.classical.logged_steps import returns_to_go_range

    mdp = TabularMDP(17)
    pi_b, greedy = mdp.policy(18), mdp.policy(19)
    eps = 0.5
    pi_e = (1 - eps) * greedy + eps * 0.5  # ε-mixed over the two admissible actions
    v, q = mdp.values(pi_e)
    data, s, a = mdp.simulate(pi_b, pi_e, 3000, np.random.default_rng(20))
    m = data.mask
    nxt_state = np.concatenate([s[:, 1:], np.zeros((len(s), 1), int)], axis=1)[m]
    done = ~np.concatenate([m[:, 1:], np.zeros((len(m), 1), bool)], axis=1)[m]
    eye = np.eye(mdp.n)
    transitions = Transitions(
        states=eye[s[m]], actions=a[m], rewards=data.rewards[m], next_states=eye[nxt_state], done=done,
        next_candidates=np.tile([0, 1], (m.sum(), 1)), next_probabilities=np.where(done[:, None], 0.0, pi_e[nxt_state]),
    )
    fqe = FittedQEvaluation(np.eye(2), mdp.n, FQEConfig(epochs=50, **stabilised), seed=0)  # converged by then
    bounds = returns_to_go_range(np.where(m, data.rewards, 0.0), m, GAMMA)
    losses = fqe.fit(transitions, bounds if stabilised.get("clip_targets") else None)
    assert len(losses) == 50 and all(np.isfinite(losses))  # the Bellman loss tracks moving targets: no trend to test
    # tabular FQE converges to the exact Q of the data's empirical MDP (certainty equivalence)
    empirical = copy.copy(mdp)
    counts = np.zeros_like(mdp.P)
    np.add.at(counts, (s[m], a[m], np.where(done, mdp.n, nxt_state)), 1.0)
    empirical.P = counts / counts.sum(-1, keepdims=True)
    v_hat, q_hat = empirical.values(pi_e)
    states, actions = np.repeat(eye, 2, axis=0), np.tile([0, 1], mdp.n)
    fitted = fqe.q_values(states, actions)
    np.testing.assert_allclose(fitted, q_hat.reshape(-1), atol=0.05)  # values span −1.8 … 0.05
    np.testing.assert_allclose(fitted, q.reshape(-1), atol=0.1)  # and, with this much data, the true Q
    v0 = fqe.state_values(eye[:1], np.array([[0, 1]]), pi_e[:1])[0]
    assert v0 == pytest.approx(v_hat[0], abs=0.02)
    # the greedy target would be wrong here: V under max_a Q differs from the ε-mixed V
    assert abs(q[0].max() - v[0]) > 0.05


def test_fqe_starts_from_its_seed_whatever_another_thread_draws_meanwhile():
    """Q_φ's initial weights are those torch.manual_seed(seed) gave nn.Linear, from a generator of
    their own: a thread that reseeds and draws from torch's global generator the whole time (as
    the ADWM stage's FQE fit does beside the baselines stage in a cell's flow) changes none of them."""
    import threading

    import torch
    from torch import nn

    from adwm_core.ope.classical.fqe import FittedQEvaluation

    features = np.eye(4)
    torch.manual_seed(3)
    by_global_seed = nn.Sequential(nn.Linear(8, 128), nn.Identity(), nn.SiLU(), nn.Linear(128, 128), nn.Identity(),
                                   nn.SiLU(), nn.Linear(128, 1)).state_dict()
    alone = FittedQEvaluation(features, 4, seed=3).q.state_dict()
    assert all(torch.equal(alone[k], by_global_seed[k]) for k in by_global_seed)
    stop = threading.Event()

    def meddle():
        while not stop.is_set():
            torch.manual_seed(7)
            torch.randn(64)

    thread = threading.Thread(target=meddle)
    thread.start()
    try:
        beside = [FittedQEvaluation(features, 4, seed=3).q.state_dict() for _ in range(20)]
    finally:
        stop.set()
        thread.join()
    assert all(torch.equal(state[k], alone[k]) for state in beside for k in alone)
    assert not torch.equal(FittedQEvaluation(features, 4, seed=4).q.state_dict()["0.weight"], alone["0.weight"])


def test_the_range_of_logged_returns_to_go_bounds_every_step_of_every_episode():
    from adwm_core.ope.classical.logged_steps import returns_to_go_range

    rewards = np.array([[1.0, -2.0, 3.0], [0.5, 9.0, 0.0]])  # the 9 lies past the second episode's end
    mask = np.array([[True, True, True], [True, False, False]])
    assert returns_to_go_range(np.where(mask, rewards, 0.0), mask, 1.0) == (0.5, 3.0)  # G: 2, 1, 3 and 0.5
    assert returns_to_go_range(np.where(mask, rewards, 0.0), mask, 0.5) == (-0.5, 3.0)  # G: 0.75, −0.5, 3 and 0.5


def test_importance_weights_say_how_many_trajectories_carry_the_estimate():
    even = weight_diagnostics(np.full(240, -3.0))
    assert even["ess"] == pytest.approx(240) and even["top_weight_share"] == pytest.approx(1 / 240)
    lopsided = weight_diagnostics(np.r_[800.0, np.zeros(239)])  # one ratio of e^800: beyond float64, exact in logs
    assert lopsided["ess"] == pytest.approx(1) and lopsided["top_weight_share"] == pytest.approx(1)
    rows = [{"estimator": name, "ess": 1.0} for name in ("IS", "WIS")] + [{"estimator": "FQE", "ess": None}]
    assert verdicts(rows) == ["IS, WIS: ESS 1.0 at the worst point: the estimate is one trajectory"]
    assert verdicts([{"estimator": "IS", "ess": 60.0}]) == []


def test_every_estimator_is_the_mean_of_its_trajectories_contributions():
    mdp = TabularMDP(17)
    data, s, a = mdp.simulate(mdp.policy(18), mdp.policy(19), 40, np.random.default_rng(4))
    v, q = mdp.values(mdp.policy(19))
    from dataclasses import replace

    full = replace(with_values(data, s, a, 0.7 * v, 0.7 * q), predicted_rewards=np.where(data.mask, mdp.R[s, a], 0.0))
    for name, estimator in ESTIMATORS.items():
        log_abs, sign = estimator().contributions(full)
        assert log_abs.shape == sign.shape == (full.n,)
        assert np.mean(sign * np.exp(log_abs)) == pytest.approx(value(name, full), rel=1e-9, abs=1e-12), name


def test_concentration_intervals_follow_their_formulas():
    x = np.random.default_rng(5).uniform(-1.0, 3.0, 60)
    n, delta, spread = len(x), 0.05, np.ptp(x)
    log_abs, sign = np.log(np.abs(x)), np.sign(x)
    t_low, t_high = stats.t.interval(0.95, n - 1, loc=x.mean(), scale=x.std(ddof=1) / np.sqrt(n))
    expected = {"t": (x.mean() - t_low),
                "hoeffding": spread * np.sqrt(np.log(2 / delta) / (2 * n)),
                "bernstein": np.sqrt(2 * x.var(ddof=1) * np.log(4 / delta) / n)
                + 7 * spread * np.log(4 / delta) / (3 * (n - 1))}
    for method, half in expected.items():
        low, high = concentration_interval(log_abs, sign, method, confidence=0.95)
        assert low.value == pytest.approx(x.mean() - half, rel=1e-9) and high.value == pytest.approx(x.mean() + half, rel=1e-9)
    assert expected["t"] < expected["hoeffding"]
    with pytest.raises(ValueError, match="unknown interval 'wald'"):
        concentration_interval(log_abs, sign, "wald", confidence=0.95)


def test_concentration_intervals_hold_beyond_float64_and_cover_a_bounded_mean():
    # weights e^2000, e^1990, e^−2000: the interval is exact in log space and brackets Ĵ
    data = LoggedTrajectories(np.array([[0.0, 1.0], [0.0, 0.5], [1.0, 0.0]]), np.ones((3, 2), bool),
                              np.array([[1000.0, 1000], [995, 995], [-1000, -1000]]))
    for method in CONCENTRATION:
        est = ESTIMATORS["IS"]().concentration_estimate(data, method)
        assert est.estimator == f"IS@{method}"
        assert est.ci_low.order_key < est.value.order_key < est.ci_high.order_key
        assert np.isfinite(est.ci_high.log_abs) and est.ci_high.log_abs > 1990
    # Bernoulli(0.3) means of 40 draws: Hoeffding and Bernstein are conservative, t is close to nominal
    rng = np.random.default_rng(6)
    held = {method: 0 for method in CONCENTRATION}
    for _ in range(400):
        x = (rng.random(40) < 0.3).astype(float)
        for method in CONCENTRATION:
            low, high = concentration_interval(np.log(np.where(x > 0, x, 1.0)), x, method, confidence=0.95)
            held[method] += low.value <= 0.3 <= high.value
    assert held["hoeffding"] / 400 >= 0.95 and held["bernstein"] / 400 >= 0.95
    assert 0.88 <= held["t"] / 400 <= 0.99


def test_clipping_caps_every_cumulative_ratio_at_lambda():
    mdp = TabularMDP(20)
    data = mdp.simulate(mdp.policy(21), mdp.policy(22), 60, np.random.default_rng(8))[0]
    weights = np.exp(data.cumulative_log_ratios[:, -1])
    assert weights.max() > 1.5  # the clip below bites
    clipped = data.clipped(1.5)
    assert np.exp(clipped.cumulative_log_ratios).max() == pytest.approx(1.5)
    assert value("IS", clipped) == pytest.approx((np.minimum(weights, 1.5) * data.returns).mean(), rel=1e-12)
    assert value("IS", data.clipped(weights.max() * 2)) == pytest.approx(value("IS", data), rel=1e-12)


def test_the_members_bootstrap_is_the_rollout_bootstrap_for_one_member_and_spans_members_that_disagree():
    x = np.random.default_rng(0).normal(size=(1, 40))
    settings = {"n_resamples": 500, "confidence": 0.95, "seed": 3}
    assert members_bootstrap(x, **settings) == percentile_bootstrap(lambda r: x[0][r].mean(1), 40, **settings)
    low, high = members_bootstrap(np.concatenate([x, x + 10]), **settings)
    assert low < x.mean() and high > x.mean() + 10
    assert members_bootstrap(np.concatenate([x, x]), **settings) == members_bootstrap(x, **settings)
