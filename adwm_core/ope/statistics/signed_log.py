"""Numbers kept as (log|x|, sign) so that importance-weighted sums never overflow or underflow.

Cumulative log-ratios of hundreds of nats are common with LLM policies (app:baselines);
exp() of them is inf or 0 in float64, which turns estimates into NaN or into ties.
Sums go through ``scipy.special.logsumexp`` with signs; ``order_key`` maps a signed log
to a finite float with the same order, for ranking.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

FLOAT_MAX = np.finfo(np.float64).max
LOG_FLOAT_MAX = float(np.log(FLOAT_MAX))


@dataclass(frozen=True)
class SignedLog:
    log_abs: float  # log|x|, −inf for x = 0
    sign: int  # −1, 0 or 1

    @classmethod
    def of(cls, x: float) -> "SignedLog":
        return cls(float(np.log(abs(x))) if x != 0 else -np.inf, int(np.sign(x)))

    @property
    def value(self) -> float:
        """x in float64, saturated at ±float max (``log_abs`` stays exact)."""
        return self.sign * float(np.exp(min(self.log_abs, LOG_FLOAT_MAX)))

    @property
    def order_key(self) -> float:
        """A finite float increasing with x: ±(1 + log|x|) for |x| ≥ 1, ±1/(1 − log|x|) below."""
        if self.sign == 0:
            return 0.0
        magnitude = 1.0 + self.log_abs if self.log_abs >= 0 else 1.0 / (1.0 - self.log_abs)
        return self.sign * magnitude


def signed_sum(log_terms: np.ndarray, signs: np.ndarray) -> SignedLog:
    """Σ sign_i · exp(log_terms_i) as a SignedLog (terms with sign 0 or log −inf drop out)."""
    log_terms, signs = np.ravel(log_terms).astype(np.float64), np.ravel(signs).astype(np.float64)
    keep = (signs != 0) & np.isfinite(log_terms)
    if not keep.any():
        return SignedLog(-np.inf, 0)
    log_abs, sign = logsumexp(log_terms[keep], b=signs[keep], return_sign=True)
    return SignedLog(float(log_abs), int(sign)) if sign != 0 else SignedLog(-np.inf, 0)


def log_abs_and_sign(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Elementwise (log|x|, sign(x)) of an ordinary float array, without warnings at 0."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log(np.abs(x)), np.sign(x)
