"""Classical off-policy estimators on logged trajectories (COBS, Voloshin et al. 2019; app:baselines).

Notation: trajectory i of N, steps t < T_i, reward r_it, discount γ (0.99), per-step
log-ratio log ρ_it = log π_e^ε(a_it|s_it) − log π_b(a_it|s_it), cumulative ratio
ρ_i,0:t = Π_{k≤t} ρ_ik. After its end a trajectory is padded with r = 0, ρ = 1, Q = V = 0
(an absorbing state). Every weight is handled in log space (``signed_log``).

Each estimator is a small class with one method, ``terms``: signed-log terms, one row per
trajectory, whose sum is Ĵ. The base class sums them (``signed_estimate``), reads the
trajectories' own contributions x_i = N · Σ_row off them (Ĵ = mean_i x_i; for the
self-normalised estimators x_i uses the normaliser of the whole log, so the x_i are not
independent: their intervals are approximate, as in SCOPE-RL), and adds the intervals of
ope/statistics/intervals.py: the percentile bootstrap over trajectories, and Hoeffding, empirical
Bernstein and Student t over the x_i. Subclasses register themselves by ``name``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
from scipy.special import log_softmax, logsumexp

from ..statistics.intervals import concentration_interval, percentile_bootstrap
from ..statistics.signed_log import SignedLog, log_abs_and_sign, signed_sum

ESTIMATORS: dict[str, type["OffPolicyEstimator"]] = {}


@dataclass(frozen=True)
class LoggedTrajectories:
    """Padded ``(N, T)`` arrays of N behaviour trajectories, scored for one π_e^ε."""

    rewards: np.ndarray
    mask: np.ndarray  # steps that happened
    log_ratios: np.ndarray | None = None  # log π_e^ε − log π_b of the logged action; None: π_b or π_e unknown
    gamma: float = 0.99
    q: np.ndarray | None = None  # Q^{π_e^ε}(s_t, a_t), for DR / WDR
    v: np.ndarray | None = None  # V^{π_e^ε}(s_t), for DR / WDR
    predicted_rewards: np.ndarray | None = None  # R̂(s_t, a_t) of a reward model, for DM
    log_clip: float | None = None  # log λ: every cumulative ratio ρ_i,0:t clipped to min(ρ, λ) (OBP's λ); None: none

    def __post_init__(self) -> None:
        shape = np.shape(self.rewards)
        for name in ("mask", "log_ratios", "q", "v", "predicted_rewards"):
            array = getattr(self, name)
            if array is not None and np.shape(array) != shape:
                raise ValueError(f"{name} has shape {np.shape(array)}, rewards {shape}: one row per trajectory, "
                                 "one column per step")
        if len(shape) != 2 or shape[0] == 0:
            raise ValueError(f"logged trajectories must be (N ≥ 1, T) arrays; got shape {shape}")
        if self.log_ratios is not None and np.isnan(self.log_ratios[self.mask]).any():
            raise ValueError("log_ratios hold NaN at logged steps; recompute the log-probabilities")

    @property
    def n(self) -> int:
        return len(self.rewards)

    def clipped(self, clip: float) -> "LoggedTrajectories":
        """The same trajectories with every cumulative ratio clipped at λ = ``clip``."""
        return replace(self, log_clip=float(np.log(clip)))

    def take(self, rows: np.ndarray) -> "LoggedTrajectories":
        fields = ("rewards", "mask", "log_ratios", "q", "v", "predicted_rewards")
        return replace(self, **{f: getattr(self, f)[rows] for f in fields if getattr(self, f) is not None})

    def masked(self, array: np.ndarray) -> np.ndarray:
        return np.where(self.mask, array, 0.0)

    @property
    def log_discounts(self) -> np.ndarray:
        return np.arange(self.rewards.shape[1]) * np.log(self.gamma)

    @property
    def cumulative_log_ratios(self) -> np.ndarray:
        """log ρ_i,0:t, constant after the trajectory ends; at most ``log_clip``."""
        cumulative = np.cumsum(self.masked(self.log_ratios), axis=1)
        return cumulative if self.log_clip is None else np.minimum(cumulative, self.log_clip)

    @property
    def returns(self) -> np.ndarray:
        """G_i = Σ_t γ^t r_it."""
        return (self.masked(self.rewards) * np.exp(self.log_discounts)).sum(1)


@dataclass(frozen=True)
class Estimate:
    estimator: str
    value: SignedLog
    ci_low: SignedLog
    ci_high: SignedLog


class OffPolicyEstimator(ABC):
    name: ClassVar[str]
    needs: ClassVar[tuple[str, ...]] = ()  # optional fields of LoggedTrajectories it reads

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            ESTIMATORS[cls.name] = cls

    @abstractmethod
    def terms(self, data: LoggedTrajectories) -> tuple[np.ndarray, np.ndarray]:
        """(log|term|, sign), each ``(N, K)``: row i holds trajectory i's terms, Ĵ = their sum."""

    def signed_estimate(self, data: LoggedTrajectories) -> SignedLog:
        """Ĵ(π_e^ε) in signed-log form."""
        return signed_sum(*self.terms(data))

    def contributions(self, data: LoggedTrajectories) -> tuple[np.ndarray, np.ndarray]:
        """(log|x_i|, sign x_i) of the trajectories' contributions x_i = N · Σ_k term_ik (Ĵ = mean_i x_i)."""
        log_terms, signs = self.terms(data)
        kept = (signs != 0) & np.isfinite(log_terms)  # the terms signed_sum keeps
        with np.errstate(divide="ignore"):
            log_abs, sign = logsumexp(np.where(kept, log_terms, -np.inf), b=np.where(kept, signs, 1.0), axis=1,
                                      return_sign=True)
        empty = ~np.isfinite(log_abs) | (sign == 0)
        return np.where(empty, -np.inf, log_abs + np.log(data.n)), np.where(empty, 0, sign).astype(int)

    @classmethod
    def missing(cls, data: LoggedTrajectories) -> list[str]:
        """The optional fields this estimator reads that ``data`` lacks (empty: applicable)."""
        return [name for name in cls.needs if getattr(data, name) is None]

    def estimate(self, data: LoggedTrajectories, *, n_bootstrap: int = 1000, confidence: float = 0.95,
                 seed: int = 0) -> Estimate:
        """Ĵ and its percentile-bootstrap interval over trajectories (resampled with replacement)."""
        self._check(data)
        low, high = percentile_bootstrap(lambda resamples: [self.signed_estimate(data.take(rows)) for rows in resamples], data.n,
                                         n_resamples=n_bootstrap, confidence=confidence, seed=seed,
                                         key=lambda s: s.order_key)
        return Estimate(self.name, self.signed_estimate(data), low, high)

    def concentration_estimate(self, data: LoggedTrajectories, method: str, *, confidence: float = 0.95) -> Estimate:
        """Ĵ and the ``method`` interval (``CONCENTRATION``: hoeffding, bernstein, t) over the
        trajectories' contributions x_i; the estimate is named ``<name>@<method>``."""
        self._check(data)
        low, high = concentration_interval(*self.contributions(data), method, confidence=confidence)
        return Estimate(f"{self.name}@{method}", self.signed_estimate(data), low, high)

    def _check(self, data: LoggedTrajectories) -> None:
        missing = self.missing(data)
        if missing:
            raise ValueError(f"{self.name} needs {', '.join(missing)} in the logged trajectories")


def _per_trajectory(values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Terms value_i / N of plain floats, one column."""
    log_abs, sign = log_abs_and_sign(values)
    return (log_abs - np.log(n))[:, None], sign[:, None]


def _normalised_log_weights(data: LoggedTrajectories) -> np.ndarray:
    """log w_it = log ρ_i,0:t − log Σ_j ρ_j,0:t (weights summing to 1 over trajectories at each t)."""
    return log_softmax(data.cumulative_log_ratios, axis=0)


class DirectMethod(OffPolicyEstimator):
    """DM: Ĵ = (1/N) Σ_i Σ_t γ^t R̂(s_it, a_it) along the logged trajectories (app:baselines).

    It never reads π_e: the same value for every evaluation policy, by construction."""

    name = "DM"
    needs = ("predicted_rewards",)

    def terms(self, data):
        return _per_trajectory((data.masked(data.predicted_rewards) * np.exp(data.log_discounts)).sum(1), data.n)


class FittedQ(OffPolicyEstimator):
    """FQE: Ĵ = (1/N) Σ_i V_{π_e^ε}(s_i0), V from the Q-network fitted for this ε (ope/classical/fqe.py)."""

    name = "FQE"
    needs = ("v",)

    def terms(self, data):
        return _per_trajectory(data.v[:, 0], data.n)


class ImportanceSampling(OffPolicyEstimator):
    """IS: Ĵ = (1/N) Σ_i ρ_i,0:T G_i (Precup et al., 2000)."""

    name = "IS"

    needs = ("log_ratios",)

    def terms(self, data):
        log_g, sign = log_abs_and_sign(data.returns)
        return (data.cumulative_log_ratios[:, -1] + log_g - np.log(data.n))[:, None], sign[:, None]


class PerDecisionImportanceSampling(OffPolicyEstimator):
    """PDIS: Ĵ = (1/N) Σ_i Σ_t γ^t ρ_i,0:t r_it (Precup et al., 2000)."""

    name = "PDIS"

    needs = ("log_ratios",)

    def terms(self, data):
        log_r, sign = log_abs_and_sign(data.masked(data.rewards))
        return data.cumulative_log_ratios + data.log_discounts + log_r - np.log(data.n), sign


class WeightedImportanceSampling(OffPolicyEstimator):
    """WIS: Ĵ = Σ_i ρ_i,0:T G_i / Σ_i ρ_i,0:T — biased, consistent, bounded by the returns."""

    name = "WIS"

    needs = ("log_ratios",)

    def terms(self, data):
        log_g, sign = log_abs_and_sign(data.returns)
        return (log_softmax(data.cumulative_log_ratios[:, -1]) + log_g)[:, None], sign[:, None]


class WeightedPerDecisionImportanceSampling(OffPolicyEstimator):
    """WPDIS: Ĵ = Σ_t γ^t Σ_i w_it r_it, w_it = ρ_i,0:t / Σ_j ρ_j,0:t."""

    name = "WPDIS"

    needs = ("log_ratios",)

    def terms(self, data):
        log_r, sign = log_abs_and_sign(data.masked(data.rewards))
        return _normalised_log_weights(data) + data.log_discounts + log_r, sign


class DoublyRobust(OffPolicyEstimator):
    """DR, COBS step form: Ĵ = Σ_i Σ_t γ^t [w_it (r_it − Q(s_it, a_it)) + w_i,t−1 V(s_it)],
    w_it = ρ_i,0:t / N and w_i,−1 = 1/N (Jiang & Li, 2016; Thomas & Brunskill, 2016)."""

    name = "DR"
    needs = ("log_ratios", "q", "v")

    def log_weights(self, data: LoggedTrajectories) -> np.ndarray:
        return data.cumulative_log_ratios - np.log(data.n)

    def terms(self, data):
        log_w = self.log_weights(data)
        log_w_before = np.concatenate([np.full((data.n, 1), -np.log(data.n)), log_w[:, :-1]], axis=1)
        log_td, td_sign = log_abs_and_sign(data.masked(data.rewards - data.q))
        log_v, v_sign = log_abs_and_sign(data.masked(data.v))
        return (np.concatenate([log_w + log_td, log_w_before + log_v], axis=1) + np.tile(data.log_discounts, 2),
                np.concatenate([td_sign, v_sign], axis=1))


class WeightedDoublyRobust(DoublyRobust):
    """WDR: DR with self-normalised weights w_it = ρ_i,0:t / Σ_j ρ_j,0:t, w_i,−1 = 1/N (Thomas & Brunskill, 2016)."""

    name = "WDR"

    def log_weights(self, data):
        return _normalised_log_weights(data)
