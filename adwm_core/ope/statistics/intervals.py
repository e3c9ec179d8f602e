"""What every estimator reports the same way: the percentile bootstrap and the estimates row.

One bootstrap serves the classical estimators (resampling logged trajectories; their values
are :class:`SignedLog`, ordered by ``order_key``) and ADWM (resampling imagined rollouts):
Ĵ*_b = Ĵ(resample_b), b = 1..B, each resample n indices drawn with replacement; the interval
is the pair of order statistics ⌊(1−c)/2·(B−1)⌋ and ⌈(1+c)/2·(B−1)⌉ of the sorted Ĵ*_b. Spearman ρ
over a cell's points (ope/statistics/metrics.py) uses the same bootstrap, over points. An ensemble of K
world models (member k > 0 trained on a bootstrap resample of the log) adds the model's own
uncertainty: each replicate first draws a member k_b uniformly, then resamples its rollouts,
Ĵ*_b = mean of x_{k_b, i*} (``members_bootstrap``; for K = 1 the bootstrap over rollouts).

Beside it, for an estimate that is the mean of n per-trajectory contributions x_i
(ope/classical/estimators.py), three intervals by name as SCOPE-RL and Open Bandit Pipeline offer them,
at δ = 1 − c, with x̄ the mean, s² the unbiased variance and R = max x_i − min x_i the
observed range (a stand-in for the unknown bound of ρ·G):

- ``hoeffding``: x̄ ± R √(log(2/δ) / 2n) (Hoeffding 1963);
- ``bernstein``: x̄ ± [√(2 s² log(4/δ) / n) + 7 R log(4/δ) / 3(n − 1)] (empirical Bernstein,
  Maurer & Pontil 2009, Thm 4, both tails);
- ``t``: x̄ ± t_{n−1, 1−δ/2} s / √n (Student).

They are computed on x_i / max|x_i|, which lies in [−1, 1] whatever the ratios, and scaled
back in log space.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np
from scipy.special import stdtrit

from .signed_log import SignedLog

T = TypeVar("T")
CONCENTRATION = ("hoeffding", "bernstein", "t")  # intervals over per-trajectory contributions, beside the bootstrap


def percentile_bootstrap(statistic: Callable[[np.ndarray], Sequence[T]], n: int, *, n_resamples: int,
                         confidence: float, seed: int, key: Callable[[T], float] = float) -> tuple[T, T]:
    """(low, high) of the percentile-bootstrap interval over ``n`` units: ``statistic`` maps the
    (B, n) indices of all resamples to their values (batched where it can be; it may leave out
    resamples where the statistic is undefined, and the order statistics are then those of the
    rest), ``key`` orders them."""
    samples = sorted(statistic(np.random.default_rng(seed).integers(0, n, (n_resamples, n))), key=key)
    if not samples:
        raise ValueError("the statistic is undefined in every bootstrap resample")
    tail, last = (1 - confidence) / 2, len(samples) - 1
    return samples[int(np.floor(tail * last))], samples[int(np.ceil((1 - tail) * last))]


def members_bootstrap(x: np.ndarray, *, n_resamples: int, confidence: float, seed: int) -> tuple[float, float]:
    """(low, high) for the mean of rollout values ``x`` (K members × M rollouts): each replicate
    draws one member, then M of its rollouts with replacement."""
    members = np.random.default_rng((seed, 1)).integers(0, len(x), n_resamples)[:, None]
    return percentile_bootstrap(lambda rollouts: x[members, rollouts].mean(1), x.shape[1],
                                n_resamples=n_resamples, confidence=confidence, seed=seed)


def concentration_interval(log_abs: np.ndarray, signs: np.ndarray, method: str, *,
                           confidence: float) -> tuple[SignedLog, SignedLog]:
    """(low, high) of the ``method`` interval (``CONCENTRATION``) for the mean of x_i given as
    (log|x_i|, sign x_i); a single contribution, or all equal, gives the point itself."""
    if method not in CONCENTRATION:
        raise ValueError(f"unknown interval {method!r}: choose one of {', '.join(CONCENTRATION)}")
    signs = np.asarray(signs, np.float64)
    log_abs = np.where(signs == 0, -np.inf, np.asarray(log_abs, np.float64))
    n, scale = len(log_abs), float(np.max(log_abs))
    if not np.isfinite(scale):  # every x_i = 0
        return SignedLog(-np.inf, 0), SignedLog(-np.inf, 0)
    x = signs * np.exp(log_abs - scale)
    mean, delta = float(x.mean()), 1 - confidence
    spread, variance = float(np.ptp(x)), float(x.var(ddof=1)) if n > 1 else 0.0
    if n == 1 or spread == 0:
        half = 0.0
    elif method == "hoeffding":
        half = spread * np.sqrt(np.log(2 / delta) / (2 * n))
    elif method == "bernstein":
        half = np.sqrt(2 * variance * np.log(4 / delta) / n) + 7 * spread * np.log(4 / delta) / (3 * (n - 1))
    else:
        half = float(stdtrit(n - 1, 1 - delta / 2)) * np.sqrt(variance / n)  # Student's t quantile
    return _rescaled(mean - half, scale), _rescaled(mean + half, scale)


def _rescaled(y: float, log_scale: float) -> SignedLog:
    """y · e^log_scale as a signed log."""
    return SignedLog(float(np.log(abs(y)) + log_scale), int(np.sign(y))) if y != 0 else SignedLog(-np.inf, 0)


def estimates_row(*, cell: str, estimator: str, policy: str, epsilon: float, seed: int, value: SignedLog,
                  ci_low: SignedLog, ci_high: SignedLog, diagnostics: Mapping[str, float] | None = None) -> dict:
    """One row of the estimates contract: values saturated to float64, Ĵ exactly as (log|Ĵ|, sign),
    and the estimator's trust ``diagnostics`` (ope/statistics/diagnostics.py; the others null)."""
    return {"cell": cell, "estimator": estimator, "policy": policy, "epsilon": float(epsilon), "seed": seed,
            "value": value.value, "ci_low": ci_low.value, "ci_high": ci_high.value,
            "log_abs_value": value.log_abs, "sign": value.sign, **(diagnostics or {})}
