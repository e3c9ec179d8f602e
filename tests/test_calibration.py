"""ADWM calibrated by a few live episodes (adwm_core/ope/statistics/calibration.py)."""

import json
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from adwm_core.cli import main
from adwm_core.ope.statistics.calibration import (linear_calibration, paired_difference, per_start_means,
                                                  prediction_powered, top_up, topped_up_verdicts)


def synthetic_point(rng, k: int, n: int, bias: float, noise: float):
    """Starts with values v(s); live G = v(s) + noise; imagined x = v(s) + bias + small noise."""
    values = {f"s{i}": float(v) for i, v in enumerate(rng.normal(0, 2, 20))}
    live_starts = list(rng.choice(list(values), k))
    imagined_starts = list(rng.choice(list(values), n))
    live = [values[s] + rng.normal(0, noise) for s in live_starts]
    imagined = [values[s] + bias + rng.normal(0, 0.1) for s in imagined_starts]
    return live_starts, live, imagined_starts, imagined, float(np.mean(list(values.values())))


def test_power_zero_is_the_student_interval_of_the_live_mean():
    rng = np.random.default_rng(0)
    live_starts, live, starts, imagined, _ = synthetic_point(rng, 8, 200, bias=1.0, noise=1.0)
    c = prediction_powered(live_starts, live, starts, imagined, power=0.0)
    low, high = stats.t.interval(0.95, 7, loc=np.mean(live), scale=stats.sem(live))
    assert c.value == pytest.approx(np.mean(live))
    assert (c.low, c.high) == pytest.approx((low, high))


def test_tuned_power_removes_the_model_bias_and_narrows_the_live_interval():
    """A predictor that tracks the live return up to a constant bias: PPI++ leans on it (λ near
    1), its interval is narrower than the live mean's and still holds the truth ~95 % of the time,
    while the biased imagined mean alone is off by the bias."""
    rng = np.random.default_rng(1)
    held, narrower, powers = [], [], []
    for _ in range(300):
        live_starts, live, starts, imagined, truth = synthetic_point(rng, 10, 400, bias=1.5, noise=0.3)
        tuned = prediction_powered(live_starts, live, starts, imagined)
        alone = prediction_powered(live_starts, live, starts, imagined, power=0.0)
        held.append(tuned.low <= truth <= tuned.high)
        narrower.append(tuned.high - tuned.low < alone.high - alone.low)
        powers.append(tuned.power)
    assert np.mean(powers) > 0.8
    assert np.mean(narrower) > 0.9
    assert np.mean(held) > 0.85
    assert abs(np.mean(imagined) - truth) > 1.0  # the last draw: ADWM alone carries the bias


def test_live_starts_ADWM_never_imagined_from_fall_back_to_its_mean():
    means = per_start_means(["a", "a", "b"], [1.0, 3.0, 5.0])
    assert means == {"a": 2.0, "b": 5.0}
    c = prediction_powered(["a", "z"], [2.0, 4.0], ["a", "a", "b"], [1.0, 3.0, 5.0], power=1.0)
    # θ̂ = x̄ + mean(G − m) with m(z) = x̄ = 3: 3 + ((2 − 2) + (4 − 3)) / 2
    assert c.value == pytest.approx(3.5)
    assert c.matched == pytest.approx(0.5)


def test_a_top_up_puts_each_point_beside_its_live_episodes_and_decides_pairs_the_live_mean_alone_cannot():
    """Two agents 0.5 apart, each with 6 live episodes (noise 0.2) and 3000 imagined rollouts, ADWM
    biased by +1 but tracking each start: topped up, both intervals shrink below the live ones and the pair is decided the
    right way; the live episodes alone (λ = 0) would straddle 0. A point ADWM never imagined is named."""
    rng = np.random.default_rng(4)
    values = {f"s{i}": float(v) for i, v in enumerate(rng.normal(0, 3, 30))}
    imagined, live = {}, {}
    for agent, shift in (("a", 0.5), ("b", 0.0)):
        starts = list(rng.choice(list(values), 3000))
        imagined[agent, 0.0] = [(s, values[s] + shift + 1.0) for s in starts]
        live[agent, 0.0] = [(s, values[s] + shift + rng.normal(0, 0.2)) for s in rng.choice(list(values), 6)]
    topped = top_up(imagined, live)
    assert [t.point for t in topped] == [("a", 0.0), ("b", 0.0)] and all(t.narrower for t in topped)
    assert all(t.topped.k == 6 and t.topped.power > 0.8 for t in topped)
    (verdict,) = topped_up_verdicts(topped)
    assert verdict.better == "a ε=0" and verdict.low < 0.5 < verdict.high
    assert topped[0].live.low < topped[1].live.high  # the live means' own intervals overlap
    with pytest.raises(ValueError, match="live episodes of c at ε=0, but ADWM imagined"):
        top_up(imagined, {**live, ("c", 0.0): live["a", 0.0]})


def test_live_episodes_paired_by_start_decide_what_the_same_episodes_read_apart_cannot():
    """Two points played on the same 8 starts, whose returns share the start's value (spread 3)
    and differ by 0.4: paired, the difference's interval is narrow and holds 0.4; read apart, each
    point's live interval is about as wide as the values' spread and the pair is undecided."""
    rng = np.random.default_rng(5)
    starts = [f"s{i}" for i in range(8)]
    value = {s: float(rng.normal(0, 3)) for s in starts}
    imagined = [(s, value[s]) for s in starts for _ in range(5)]
    a = [(s, value[s] + 0.4 + float(rng.normal(0, 0.05))) for s in starts]
    b = [(s, value[s] + float(rng.normal(0, 0.05))) for s in starts]
    paired = paired_difference(a, b, imagined, imagined)
    assert paired.k == 8 and paired.matched == 1.0 and paired.low < 0.4 < paired.high and paired.high - paired.low < 0.3
    topped = top_up({("a", 0.0): imagined, ("b", 0.0): imagined}, {("a", 0.0): a, ("b", 0.0): b})
    (verdict,) = topped_up_verdicts(topped)
    assert verdict.better == "a ε=0" and (verdict.low, verdict.high) == (paired.low, paired.high)
    apart = topped_up_verdicts([replace(t, episodes=()) for t in topped])[0]  # no shared starts: read apart
    assert apart.better is None and apart.high - apart.low > 10 * (paired.high - paired.low)
    assert paired_difference(a[:1], b, imagined, imagined) is None  # one pair: no interval
    alike = top_up({("a", 0.0): imagined, ("b", 0.0): imagined},
                   {("a", 0.0): [(s, 1.0) for s in starts[:2]], ("b", 0.0): [(s, 0.0) for s in starts[:2]]})
    (said,) = topped_up_verdicts(alike)  # two pairs, both differing by exactly 1: no width to trust
    assert said.better is None and "cannot tell" in said.line()


def test_ppi_refuses_too_few_episodes_or_mismatched_starts():
    with pytest.raises(ValueError, match="at least 2 live episodes"):
        prediction_powered(["a"], [1.0], ["a", "b"], [1.0, 2.0])
    with pytest.raises(ValueError, match="one start per"):
        prediction_powered(["a"], [1.0, 2.0], ["a", "b"], [1.0, 2.0])


def test_linear_map_recovers_an_affine_relation_and_keeps_the_ranking():
    adwm = np.array([0.1, 0.3, 0.2, 0.6, 0.5])
    live = 2.0 + 3.0 * adwm
    fits = linear_calibration(adwm, live, pointwise=False)
    assert [f.value for f in fits] == pytest.approx(live.tolist())
    assert fits[0].power == pytest.approx(3.0)
    assert all(f.high - f.low == pytest.approx(0, abs=1e-9) for f in fits)  # an exact line leaves no residual
    noisy = live + np.array([0.05, -0.05, 0.02, 0.0, -0.02])
    line, point = linear_calibration(adwm, noisy, pointwise=False), linear_calibration(adwm, noisy)
    assert stats.spearmanr([f.value for f in line], adwm).statistic == pytest.approx(1.0)
    assert all(p.high - p.low > q.high - q.low > 0 for p, q in zip(point, line))


def test_linear_map_refuses_too_few_points_or_a_flat_estimate():
    with pytest.raises(ValueError, match="at least 3 points"):
        linear_calibration([0.1, 0.2], [1.0, 2.0])
    with pytest.raises(ValueError, match="same value"):
        linear_calibration([0.5, 0.5, 0.5], [1.0, 2.0, 3.0])


def _episode(policy: str, start: str, rewards: list[float], **extra) -> dict:
    turns = [{"from": "human", "value": start}]
    for i, r in enumerate(rewards):
        turns += [{"from": "gpt", "value": f"go {i}", "reward": r}, {"from": "human", "value": f"room {i}"}]
    return {"policy": policy, "task_description": "walk", "conversations": turns[:-1], "reward": sum(rewards),
            "success": False, **extra}


def _write(path, episodes) -> str:
    path.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    return str(path)


def test_adwm_calibrate_prints_ppi_for_each_agent_and_the_line_over_three(tmp_path, capsys):
    rng = np.random.default_rng(3)
    imagined, live = [], []
    for a, agent in enumerate(("agent-a", "agent-b", "agent-c")):
        for i in range(40):
            start = f"start {i % 4}"
            imagined.append(_episode(agent, start, [0.5 * a + 0.1 * (i % 4), 0.0], imagined=True, epsilon=0.0,
                                     seed=0, member=0))
        for i in range(6):
            live.append(_episode(agent, f"start {i % 4}", [float(a + rng.normal(0, 0.3)), 0.0]))
    imagined_path, live_path = _write(tmp_path / "imagined.jsonl", imagined), _write(tmp_path / "live.jsonl", live)
    assert main(["calibrate", imagined_path, live_path]) == 0
    out = capsys.readouterr().out
    expected = prediction_powered([e["conversations"][0]["value"] for e in live[:6]], [e["reward"] for e in live[:6]],
                                  [e["conversations"][0]["value"] for e in imagined[:40]],
                                  [e["reward"] for e in imagined[:40]])
    line = next(row for row in out.splitlines() if row.startswith("agent-a"))
    assert f"{expected.value:.3f} [{expected.low:.3f}, {expected.high:.3f}]" in line
    assert "mapped onto the live means by a line" in out and out.count("agent-c") == 2


def test_adwm_calibrate_names_an_agent_the_imagined_file_lacks(tmp_path, capsys):
    imagined = _write(tmp_path / "imagined.jsonl", [_episode("agent-a", "s", [1.0], imagined=True, epsilon=0.0)] * 3)
    live = _write(tmp_path / "live.jsonl", [_episode("agent-z", "s", [1.0])] * 3)
    assert main(["calibrate", imagined, live]) == 2
    assert "agent-z" in capsys.readouterr().err
    assert main(["calibrate", live, live]) == 2  # live episodes are no imagined ones
    assert "not an imagined episode" in capsys.readouterr().err


def test_adwm_calibrate_names_the_line_of_a_malformed_imagined_episode(tmp_path, capsys):
    good = json.dumps(_episode("agent-a", "s", [1.0], imagined=True, epsilon=0.0))
    live = _write(tmp_path / "live.jsonl", [_episode("agent-a", "s", [1.0])] * 3)
    unrewarded = {k: v for k, v in json.loads(good).items() if k != "reward"}
    for name, text, says in (("broken.jsonl", f"{good}\n{{bad json\n", "line 2: not JSON"),
                             ("unrewarded.jsonl", f"{good}\n{json.dumps(unrewarded)}\n", "line 2: an imagined episode "
                                                                                         "needs 'policy', a numeric 'reward'"),
                             ("empty.jsonl", "\n", "holds no imagined episode")):
        (tmp_path / name).write_text(text)
        assert main(["calibrate", str(tmp_path / name), live]) == 2
        assert says in capsys.readouterr().err, name


def test_tuned_power_minimises_the_variance_it_states():
    """λ = Cov(G, m) / (Var m + (k/N) Var x), the exact minimiser of Var(G − λm)/k + λ² Var(x)/N
    (not the (1 + k/N) Var m approximation, which differs where Var x ≠ Var m): no λ on a grid
    over [0, 1] gives a smaller standard error."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        live_starts, live, starts, imagined, _ = synthetic_point(rng, 8, 30, bias=0.5, noise=rng.uniform(0.2, 3.0))
        tuned = prediction_powered(live_starts, live, starts, imagined)
        grid = [prediction_powered(live_starts, live, starts, imagined, power=p).se for p in np.linspace(0, 1, 101)]
        assert tuned.se <= min(grid) + 1e-12
