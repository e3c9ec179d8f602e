"""ADWM calibrated by a few live episodes of π_e: prediction-powered inference with power tuning
(PPI++, Angelopoulos, Duchi & Zrnic 2023), the world model as the predictor.

With k live episodes j of π_e^ε (return G_j, first observation s_j) and ADWM's N imagined
rollouts of the same π_e^ε (return x_r from start s_r), m(s) is ADWM's mean imagined return of
the rollouts started at s (x̄, the mean of every rollout, where none did), and

    θ̂_λ = λ x̄ + (1/k) Σ_j (G_j − λ m(s_j)),
    Var θ̂_λ ≈ Var(G − λ m)/k + λ² Var(x)/N,
    λ = clip(Cov(G, m) / (Var(m) + (k/N) Var(x)), 0, 1)   (the minimiser of that variance),

with the interval θ̂_λ ± t_{k−1, (1+c)/2} √Var (Student's t: k is small). λ = 0 is the live mean
alone, λ = 1 classical PPI: the rectifier (1/k) Σ (G_j − m(s_j)) removes ADWM's bias at the live
episodes' starts, and where m tracks G the interval is narrower than the live mean's.

``top_up`` does this for every point with live episodes (``adwm evaluate --live K`` or
``--live-logs``), beside the live mean alone. ``topped_up_verdicts`` compares two points by the
same estimator on the differences of their live episodes paired by start (``paired_difference``:
the ground truth plays every point on the same instances and seeds), or, where they share no
starts, by θ̂_a − θ̂_b ± t_{k−1} √(se_a² + se_b²).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import stats

from .verdicts import Verdict

Point = tuple[str, float]  # (policy, ε)


@dataclass(frozen=True)
class Calibrated:
    """A calibrated value with its interval."""

    value: float
    low: float
    high: float
    power: float  # PPI: λ; the linear map: its slope b
    matched: float = 1.0  # PPI: the share of live episodes whose start ADWM imagined from
    se: float = float("nan")  # PPI: √Var θ̂_λ
    k: int = 0  # PPI: live episodes


def read_imagined(path: str) -> dict[Point, list[tuple[str, float]]]:
    """(policy, ε) → [(start observation, imagined return)] of every rollout in an imagined-episodes
    JSONL (the ADWM stage's samples.jsonl, ``adwm evaluate --log-samples``), every seed and member."""
    points = defaultdict(list)
    with fsspec.open(path, "r") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                episode = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}, line {number}: not JSON ({error}); one imagined episode per line, "
                                 "as `adwm evaluate --log-samples` writes them") from None
            if not isinstance(episode, dict) or not episode.get("imagined") or "epsilon" not in episode:
                raise ValueError(f"{path}, line {number}: not an imagined episode (no 'imagined' flag or 'epsilon'); "
                                 "pass the file `adwm evaluate --log-samples` wrote")
            try:
                points[(episode["policy"], float(episode["epsilon"]))].append(
                    (episode["conversations"][0]["value"], float(episode["reward"])))
            except (KeyError, IndexError, TypeError, ValueError) as error:
                raise ValueError(f"{path}, line {number}: an imagined episode needs 'policy', a numeric 'reward' "
                                 f"and 'conversations' opening with the start observation ({error!r})") from None
    if not points:
        raise ValueError(f"{path} holds no imagined episode: pass the file `adwm evaluate --log-samples` wrote")
    return dict(points)


def live_by_point(steps: pa.Table, epsilon: float | None = None) -> dict[Point, list[tuple[str, float]]]:
    """(policy, ε) → [(first observation, return)] per episode of a steps table (the trajectories
    contract: policy, episode, t, observation, reward, and epsilon and seed where they tell
    episodes apart), in episode order; ``epsilon`` for steps that carry none (imported logs)."""
    if epsilon is not None:
        steps = steps.drop_columns([c for c in ("epsilon",) if c in steps.column_names])
        steps = steps.append_column("epsilon", pa.array([float(epsilon)] * steps.num_rows, pa.float64()))
    episode = [c for c in ("policy", "epsilon", "seed", "episode") if c in steps.column_names]
    returns = steps.group_by(episode).aggregate([("reward", "sum")])
    firsts = steps.filter(pc.equal(steps["t"], 0)).select([*episode, "observation"])
    joined = returns.join(firsts, episode).sort_by([(c, "ascending") for c in episode])
    points = defaultdict(list)
    for row in joined.select(["policy", "epsilon", "observation", "reward_sum"]).to_pylist():
        points[(row["policy"], float(row["epsilon"]))].append((row["observation"], float(row["reward_sum"])))
    return dict(points)


def per_start_means(starts: Sequence[str], returns: Sequence[float]) -> dict[str, float]:
    """m(s): the mean imagined return of the rollouts started at each first observation s."""
    by_start = defaultdict(list)
    for start, value in zip(starts, returns):
        by_start[start].append(float(value))
    return {start: float(np.mean(values)) for start, values in by_start.items()}


def prediction_powered(live_starts: Sequence[str], live_returns: Sequence[float], imagined_starts: Sequence[str],
                       imagined_returns: Sequence[float], *, confidence: float = 0.95,
                       power: float | None = None) -> Calibrated:
    """θ̂_λ and its interval from k ≥ 2 live episodes and N ≥ 2 imagined rollouts (formula in the
    module docstring); ``power`` fixes λ (None: the variance-minimising one)."""
    g, x = np.asarray(live_returns, float), np.asarray(imagined_returns, float)
    k, n = len(g), len(x)
    if k < 2 or n < 2:
        raise ValueError(f"PPI needs at least 2 live episodes and 2 imagined rollouts, got {k} and {n}")
    if len(live_starts) != k or len(imagined_starts) != n:
        raise ValueError("one start per live episode and per imagined rollout")
    means, mean = per_start_means(imagined_starts, x), float(x.mean())
    m = np.asarray([means.get(s, mean) for s in live_starts])
    return _powered(g, m, mean, x.var(ddof=1) / n, confidence=confidence, power=power,
                    matched=float(np.mean([s in means for s in live_starts])))


def _powered(g: np.ndarray, m: np.ndarray, mean: float, mean_variance: float, *, confidence: float,
             power: float | None, matched: float) -> Calibrated:
    """θ̂_λ = λ x̄ + mean(g − λ m) from live values g, the predictor m at their starts, the imagined
    mean x̄ and Var x̄ (``mean_variance``), with its Student interval."""
    k = len(g)
    if power is None:
        # d/dλ [Var(g − λm)/k + λ² Var x̄] = 0  ⇒  λ = Cov(g, m) / (Var m + k Var x̄), Var x̄ = Var(x)/n
        denominator = m.var(ddof=1) + k * mean_variance
        power = 0.0 if denominator == 0 else float(np.clip(np.cov(g, m)[0, 1] / denominator, 0, 1))
    value = power * mean + float(np.mean(g - power * m))
    se = float(np.sqrt(np.var(g - power * m, ddof=1) / k + power ** 2 * mean_variance))
    half = float(stats.t.ppf((1 + confidence) / 2, k - 1) * se)
    return Calibrated(value, value - half, value + half, power, matched, se, k)


def paired_difference(live_a: Sequence[tuple[str, float]], live_b: Sequence[tuple[str, float]],
                      imagined_a: Sequence[tuple[str, float]], imagined_b: Sequence[tuple[str, float]], *,
                      confidence: float = 0.95) -> Calibrated | None:
    """PPI++ on J_a − J_b where the two points' live episodes share starts: the j-th episode of a
    at start s is paired with the j-th of b there, d_j = G_a,j − G_b,j, the predictor
    m_a(s) − m_b(s) and the imagined mean x̄_a − x̄_b (Var: the two rollout sets' own, added).
    ``matched``: the share of a's live episodes paired. None where fewer than 2 pairs."""
    at_b = defaultdict(list)
    for start, g in live_b:
        at_b[start].append(g)
    taken, pairs = defaultdict(int), []
    for start, g in live_a:
        if taken[start] < len(at_b[start]):
            pairs.append((start, g - at_b[start][taken[start]]))
            taken[start] += 1
    if len(pairs) < 2:
        return None
    xa, xb = (np.asarray([x for _, x in rollouts], float) for rollouts in (imagined_a, imagined_b))
    ma, mb = per_start_means(*zip(*imagined_a)), per_start_means(*zip(*imagined_b))
    d = np.asarray([difference for _, difference in pairs])
    m = np.asarray([ma.get(s, xa.mean()) - mb.get(s, xb.mean()) for s, _ in pairs])
    return _powered(d, m, float(xa.mean() - xb.mean()), xa.var(ddof=1) / len(xa) + xb.var(ddof=1) / len(xb),
                    confidence=confidence, power=None, matched=len(pairs) / len(live_a))


@dataclass(frozen=True)
class ToppedUp:
    """One point's ADWM estimate topped up by k live episodes: ADWM's imagined mean, the live
    episodes' mean alone (λ = 0) and the prediction-powered value (PPI++)."""

    point: Point
    adwm: float
    live: Calibrated
    topped: Calibrated
    episodes: tuple[tuple[str, float], ...] = ()  # (start, return) of the live episodes
    rollouts: tuple[tuple[str, float], ...] = ()  # (start, return) of ADWM's rollouts

    @property
    def narrower(self) -> bool:
        """Whether the live episodes and ADWM together say more than the same live episodes alone."""
        return self.topped.high - self.topped.low < self.live.high - self.live.low


def top_up(imagined: dict[Point, list[tuple[str, float]]], live: dict[Point, list[tuple[str, float]]], *,
           confidence: float = 0.95) -> list[ToppedUp]:
    """Every point with live episodes, topped up (``prediction_powered``, paired by start state);
    each needs ADWM's rollouts of the same point and at least 2 live episodes."""
    found = []
    for point in sorted(live):
        if point not in imagined:
            raise ValueError(f"live episodes of {point[0]} at ε={point[1]:g}, but ADWM imagined "
                             f"{sorted(imagined)}: label each live episode with its agent and ε")
        starts, returns = zip(*live[point])
        x_starts, x = zip(*imagined[point])
        found.append(ToppedUp(point, float(np.mean(x)),
                              prediction_powered(starts, returns, x_starts, x, confidence=confidence, power=0.0),
                              prediction_powered(starts, returns, x_starts, x, confidence=confidence),
                              tuple(live[point]), tuple(imagined[point])))
    return found


def topped_up_verdicts(topped: Sequence[ToppedUp], *, confidence: float = 0.95) -> list[Verdict]:
    """A verdict on every pair of ``topped`` (bounds.Verdict): from ``paired_difference`` where their
    live episodes share at least 2 starts, else from θ̂_a − θ̂_b ± t_{k−1} √(se_a² + se_b²), k the
    fewer live episodes of the two (the points read apart). Where every live difference is alike the
    interval has no width to trust, and the verdict is "cannot tell" (an interval of ±∞)."""
    found = []
    for a, b in combinations(topped, 2):
        paired = paired_difference(a.episodes, b.episodes, a.rollouts, b.rollouts, confidence=confidence)
        if paired is not None:
            difference, low, high = paired.value, paired.low, paired.high
        else:
            difference = a.topped.value - b.topped.value
            half = float(stats.t.ppf((1 + confidence) / 2, min(a.topped.k, b.topped.k) - 1)
                         * np.hypot(a.topped.se, b.topped.se))
            low, high = difference - half, difference + half
        if high == low:  # every live difference alike: no width to trust, so no verdict
            low, high = -np.inf, np.inf
        found.append(Verdict(f"{a.point[0]} ε={a.point[1]:g}", f"{b.point[0]} ε={b.point[1]:g}", difference, low, high))
    return found


def linear_calibration(adwm: Sequence[float], live_means: Sequence[float], *, confidence: float = 0.95,
                       pointwise: bool = True) -> list[Calibrated]:
    """ADWM's estimates of P points of one π_e (its ε levels) mapped onto the live scale:
    J_p ≈ a + b Ĵ_p by least squares on the points' live means ȳ_p (k episodes each), then
    θ̂_p = a + b Ĵ_p ± t_{P−2, (1+c)/2} s √(π + 1/P + (Ĵ_p − mean Ĵ)² / Σ (Ĵ_q − mean Ĵ)²), s² the
    residual variance (live noise and misfit together); ``pointwise`` (π = 1): the prediction
    interval, which holds a point's own departure from the line, else (π = 0) the interval of
    the line itself. Keeps ADWM's ranking where b > 0 and borrows strength across points; needs
    P ≥ 3 points with distinct Ĵ."""
    x, y = np.asarray(adwm, float), np.asarray(live_means, float)
    p = len(x)
    if p < 3 or len(y) != p:
        raise ValueError(f"a linear calibration needs at least 3 points with one live mean each, got {p} and {len(y)}")
    centred = x - x.mean()
    if not centred.any():
        raise ValueError("ADWM gives every point the same value: nothing to map onto the live scale")
    fit = stats.linregress(x, y)
    value = fit.intercept + fit.slope * x
    s = np.sqrt(np.sum((y - value) ** 2) / (p - 2))
    half = stats.t.ppf((1 + confidence) / 2, p - 2) * s * np.sqrt(pointwise + 1 / p + centred ** 2 / np.sum(centred ** 2))
    return [Calibrated(float(v), float(v - h), float(v + h), float(fit.slope)) for v, h in zip(value, half)]
