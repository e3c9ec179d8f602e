"""What every estimator reports the same way: the percentile bootstrap and the estimates row.

One bootstrap serves the classical estimators (resampling logged trajectories; their values
are :class:`SignedLog`, ordered by ``order_key``) and ADWM (resampling imagined rollouts):
Ĵ*_b = Ĵ(resample_b), b = 1..B, each resample n indices drawn with replacement; the interval
is the pair of order statistics ⌊(1−c)/2·(B−1)⌋ and ⌈(1+c)/2·(B−1)⌉ of the sorted Ĵ*_b. Spearman ρ
over a cell's points (ope/metrics.py) uses the same bootstrap, over points.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from .signed_log import SignedLog

T = TypeVar("T")


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


def estimates_row(*, cell: str, estimator: str, policy: str, epsilon: float, seed: int, value: SignedLog,
                  ci_low: SignedLog, ci_high: SignedLog, diagnostics: Mapping[str, float] | None = None) -> dict:
    """One row of the estimates contract: values saturated to float64, Ĵ exactly as (log|Ĵ|, sign),
    and the estimator's trust ``diagnostics`` (ope/diagnostics.py; the others null)."""
    return {"cell": cell, "estimator": estimator, "policy": policy, "epsilon": float(epsilon), "seed": seed,
            "value": value.value, "ci_low": ci_low.value, "ci_high": ci_high.value,
            "log_abs_value": value.log_abs, "sign": value.sign, **(diagnostics or {})}
