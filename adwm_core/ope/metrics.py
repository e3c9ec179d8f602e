"""How well an estimator's values Ĵ rank and match the ground truth J across a policy family
(paper Table main_results and tab:perseed).

- Spearman ρ and Kendall τ (scipy.stats; ties get average ranks / τ-b);
- bootstrap CI95 and p-value of ρ from 2000 resamples of the (Ĵ, J) pairs; resamples in
  which either side is constant (ρ undefined) are dropped and counted;
- per-seed ρ (one ρ per seed's Ĵ curve) and avg-Ĵ ρ (ρ of the seed-averaged Ĵ);
- regret@1: (max J − mean J over the policies Ĵ ranks first) / (J_max − J_min); ties at
  the top are broken uniformly at random, in expectation;
- normalised absolute error: mean |Ĵ − J| / (J_max − J_min).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


def _pair(estimates: Sequence[float], truth: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(estimates, dtype=np.float64), np.asarray(truth, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError(f"need two equal-length 1-D sequences of at least 2 values; got shapes {x.shape}, {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("estimates and ground truth must be finite (rank signed-log estimates by their order_key)")
    return x, y


def _range(truth: np.ndarray) -> float:
    spread = float(truth.max() - truth.min())
    if spread == 0:
        raise ValueError("the ground truth is the same for every policy: normalised errors are undefined")
    return spread


def spearman(estimates: Sequence[float], truth: Sequence[float]) -> float:
    """Spearman ρ; NaN when either side is constant (no ranking to compare)."""
    x, y = _pair(estimates, truth)
    return float(stats.spearmanr(x, y).statistic) if np.ptp(x) > 0 and np.ptp(y) > 0 else float("nan")


def kendall(estimates: Sequence[float], truth: Sequence[float]) -> float:
    x, y = _pair(estimates, truth)
    return float(stats.kendalltau(x, y).statistic)


@dataclass(frozen=True)
class RankCorrelation:
    rho: float
    ci_low: float
    ci_high: float
    p_value: float  # bootstrap, two-sided: 2·min(P*(ρ ≤ 0), P*(ρ ≥ 0)), at most 1
    p_value_t: float  # scipy's t-approximation for H0: ρ = 0
    n_resamples: int  # resamples in which ρ was defined


def spearman_bootstrap(estimates: Sequence[float], truth: Sequence[float], *, n_resamples: int = 2000,
                       confidence: float = 0.95, seed: int = 0) -> RankCorrelation:
    x, y = _pair(estimates, truth)
    rng = np.random.default_rng(seed)
    rhos = []
    for _ in range(n_resamples):
        rows = rng.integers(0, len(x), len(x))
        if np.ptp(x[rows]) > 0 and np.ptp(y[rows]) > 0:
            rhos.append(stats.spearmanr(x[rows], y[rows]).statistic)
    rhos = np.asarray(rhos)
    result = stats.spearmanr(x, y)
    if len(rhos) == 0:
        return RankCorrelation(float(result.statistic), np.nan, np.nan, np.nan, float(result.pvalue), 0)
    tail = (1 - confidence) / 2
    p = min(1.0, 2 * min(np.mean(rhos <= 0), np.mean(rhos >= 0)))
    return RankCorrelation(float(result.statistic), float(np.quantile(rhos, tail)), float(np.quantile(rhos, 1 - tail)),
                           float(p), float(result.pvalue), len(rhos))


def per_seed_spearman(estimates_by_seed: Sequence[Sequence[float]], truth: Sequence[float]) -> tuple[list[float], float]:
    """(ρ of each seed's Ĵ curve, ρ of the seed-averaged Ĵ curve)."""
    curves = np.asarray(estimates_by_seed, dtype=np.float64)
    return [spearman(curve, truth) for curve in curves], spearman(curves.mean(0), truth)


def regret_at_1(estimates: Sequence[float], truth: Sequence[float]) -> float:
    x, y = _pair(estimates, truth)
    top = x == x.max()
    return float((y.max() - y[top].mean()) / _range(y))


def normalised_absolute_error(estimates: Sequence[float], truth: Sequence[float]) -> float:
    x, y = _pair(estimates, truth)
    return float(np.mean(np.abs(x - y)) / _range(y))
