"""How well an estimator's values Ĵ rank and match the ground truth J across a policy family
(paper Table main_results and tab:perseed).

- Spearman ρ and Kendall τ (scipy.stats; ties get average ranks / τ-b);
- percentile-bootstrap CI95 of ρ from 2000 resamples of the (Ĵ, J) points (ope/statistics/intervals.py;
  resamples in which either side is constant, ρ undefined, are dropped and counted) and the
  exact permutation p-value of ρ (all n! pairings for n ≤ 10);
- per-seed ρ (one ρ per seed's Ĵ curve) and avg-Ĵ ρ (ρ of the seed-averaged Ĵ);
- regret@k: (max J − E[max J over the k policies Ĵ ranks highest]) / (J_max − J_min); ties
  at the k-th place are broken uniformly at random, in expectation (regret@1: max J − the mean
  J of the policies tied first);
- normalised absolute error: mean |Ĵ − J| / (J_max − J_min).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats
from scipy.special import comb

from .intervals import percentile_bootstrap


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
    ci_low: float  # percentile bootstrap over the points (ope/statistics/intervals.py)
    ci_high: float
    p_value: float  # exact permutation test of H0: Ĵ and J unrelated, two-sided (``permutation_p_value``)
    n_resamples: int  # bootstrap resamples in which ρ was defined

    @property
    def degenerate(self) -> bool:
        """Every defined resample ranked alike (a perfect or near-perfect ranking of a few points):
        the interval is a point and says nothing about ρ's uncertainty."""
        return self.ci_low == self.ci_high


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis (ties share theirs, as in Spearman ρ)."""
    return stats.rankdata(values, axis=-1)


def _rank_pearson(rx: np.ndarray, ry: np.ndarray) -> np.ndarray:
    """Pearson r of rank vectors along the last axis = Spearman ρ; NaN where a side is constant."""
    dx, dy = rx - rx.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
    norm = np.sqrt((dx ** 2).sum(-1) * (dy ** 2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, (dx * dy).sum(-1) / norm, np.nan)


@lru_cache(maxsize=2)
def _orderings(n: int) -> np.ndarray:
    """Every ordering of ``range(n)``, (n!, n): each ordering of ``range(k)`` with k put at every place."""
    orders = np.zeros((1, 0), dtype=np.int8)
    for k in range(n):
        grown = np.empty((len(orders) * (k + 1), k + 1), dtype=np.int8)
        for place, block in enumerate(np.split(grown, k + 1)):
            block[:, :place], block[:, place], block[:, place + 1:] = orders[:, :place], k, orders[:, place:]
        orders = grown
    return orders


@lru_cache(maxsize=256)
def _null_distribution(rx: tuple[float, ...], ry: tuple[float, ...], n_resamples: float) -> np.ndarray:
    """ρ over every pairing of the rank multisets ``rx`` and ``ry`` (exact where n! ≤ ``n_resamples``).
    The null distribution does not depend on the observed pairing, so it is computed once per
    (tie pattern, truth ranks) and shared by every estimator of a cell. The exact one is
    ``scipy.stats.permutation_test``'s (pairings) value for value, in another order: the same
    statistic over the same n! orderings, laid out as arrays rather than enumerated as tuples."""
    x, y = np.asarray(rx), np.asarray(ry)
    if np.isinf(n_resamples) or n_resamples >= math.factorial(len(x)):
        return np.concatenate([_rank_pearson(x[rows], y) for rows in np.array_split(_orderings(len(x)), 16)])
    result = stats.permutation_test((x,), lambda values, axis: _rank_pearson(values, y), permutation_type="pairings",
                                    n_resamples=n_resamples, vectorized=True, batch=100_000, random_state=0)
    return result.null_distribution


def permutation_p_value(estimates: Sequence[float], truth: Sequence[float], *, exact_up_to: int = 10,
                        n_resamples: int = 100_000) -> float:
    """Two-sided p-value of Spearman ρ by the permutation test (``scipy.stats.permutation_test``,
    pairings): 2 · min(P₀(ρ* ≥ ρ), P₀(ρ* ≤ ρ)), at most 1, over all n! pairings for n ≤
    ``exact_up_to`` (a perfect ranking of 5 points: 2/120 ≈ 0.017), else over ``n_resamples``
    random ones. NaN where ρ is undefined."""
    x, y = _pair(estimates, truth)
    rho = float(_rank_pearson(_ranks(x), _ranks(y)))
    if rho != rho:
        return float("nan")
    exact = len(x) <= exact_up_to
    null = _null_distribution(tuple(np.sort(_ranks(x))), tuple(_ranks(y)), np.inf if exact else float(n_resamples))
    tolerance = 1e-12 * max(1.0, abs(rho))  # ρ* equal to ρ up to rounding counts as extreme, as in scipy
    greater, less = np.mean(null >= rho - tolerance), np.mean(null <= rho + tolerance)
    if not exact:  # a random sample of pairings: the observed one counts among them (Phipson & Smyth 2010)
        greater, less = ((len(null) * p + 1) / (len(null) + 1) for p in (greater, less))
    return float(min(1.0, 2 * min(greater, less)))


def spearman_with_interval(estimates: Sequence[float], truth: Sequence[float], *, n_resamples: int = 2000,
                           confidence: float = 0.95, seed: int = 0) -> RankCorrelation:
    """ρ, its percentile-bootstrap interval over the (Ĵ, J) points (resamples where a side is
    constant, ρ undefined, are dropped and counted) and its permutation p-value."""
    x, y = _pair(estimates, truth)
    defined: list[int] = []

    def rhos(rows: np.ndarray) -> np.ndarray:
        values = _rank_pearson(_ranks(x[rows]), _ranks(y[rows]))
        defined.append(int((~np.isnan(values)).sum()))
        return values[~np.isnan(values)]

    rho, p_value = spearman(x, y), permutation_p_value(x, y)
    try:
        low, high = percentile_bootstrap(rhos, len(x), n_resamples=n_resamples, confidence=confidence, seed=seed)
    except ValueError:  # ρ undefined in every resample
        low = high = np.nan
    return RankCorrelation(rho, float(low), float(high), p_value, defined[0])


def per_seed_spearman(estimates_by_seed: Sequence[Sequence[float]], truth: Sequence[float]) -> tuple[list[float], float]:
    """(ρ of each seed's Ĵ curve, ρ of the seed-averaged Ĵ curve)."""
    curves = np.asarray(estimates_by_seed, dtype=np.float64)
    return [spearman(curve, truth) for curve in curves], spearman(curves.mean(0), truth)


def regret_at_k(estimates: Sequence[float], truth: Sequence[float], k: int) -> float:
    """regret@k (module docstring): how far the best of the top-k by Ĵ falls short of the best
    policy, over the truth's range. The top-k holds every policy whose Ĵ is above the k-th
    highest and r of the m tied at it, drawn at random: P(max over the r drawn ≤ the j-th
    smallest tied J) = C(j, r) / C(m, r)."""
    x, y = _pair(estimates, truth)
    if not 1 <= k <= len(x):
        raise ValueError(f"k = {k}: the top-k of {len(x)} policies needs 1 ≤ k ≤ {len(x)}")
    kth = np.sort(x)[::-1][k - 1]
    above, tied = y[x > kth], np.sort(y[x == kth])
    at_most = comb(np.arange(1, len(tied) + 1), k - len(above)) / comb(len(tied), k - len(above))
    best = np.maximum(tied, above.max()) if len(above) else tied  # the top-k's best J, by the drawn max
    best_in_top = float(np.dot(best, np.diff(at_most, prepend=0.0)))
    return float((y.max() - best_in_top) / _range(y))


def regret_at_1(estimates: Sequence[float], truth: Sequence[float]) -> float:
    return regret_at_k(estimates, truth, 1)


def normalised_absolute_error(estimates: Sequence[float], truth: Sequence[float]) -> float:
    x, y = _pair(estimates, truth)
    return float(np.mean(np.abs(x - y)) / _range(y))


@dataclass(frozen=True)
class VerdictScores:
    """How a cell's pairwise verdicts fare against the ground truth (ope/statistics/bounds.py):
    a pair is distinguishable when |J_p − J_q| > 2·√(se_p² + se_q²); ``decided`` is the share of
    distinguishable pairs given a verdict, ``precision`` the share of all decided pairs ordered
    as J orders them (NaN where no pair is distinguishable, or none decided)."""

    pairs: int
    distinguishable: int
    decided: float
    precision: float


def verdict_scores(verdicts: Sequence, truth: dict, stderr: dict) -> VerdictScores:
    """``verdicts`` (each with ``a``, ``b`` and ``better``: a name or None) graded by the true
    values ``truth`` and their standard errors ``stderr``, by candidate name."""
    apart = [v for v in verdicts
             if abs(truth[v.a] - truth[v.b]) > 2 * np.hypot(stderr[v.a], stderr[v.b])]
    decided = [v for v in verdicts if v.better is not None]
    right = [v for v in decided if truth[v.better] > truth[v.b if v.better == v.a else v.a]]
    return VerdictScores(len(verdicts), len(apart),
                         float(np.mean([v.better is not None for v in apart])) if apart else float("nan"),
                         len(right) / len(decided) if decided else float("nan"))
