"""What the log identifies of an imagined return, the interval that carries it, and a verdict
on a pair of candidates from an interval on their difference.

**Identified bounds** (partial identification; Manski 1990). An imagined rollout i is answered
by the log (answers.LOG: a logged successor of the very pair) up to its first step t_i that
something else answered (carried, value, diffusion, nearest). From there on the log says
nothing about what the environment does. With every step's reward in [r_lo, r_hi], the
rollout's horizon H, and, where the environment's rules bound a whole return, that return in
[R_lo, R_hi] (γ = 1):

    L_i = G_i + Σ_{u=t_i}^{H−1} γ^u r_lo,   U_i = G_i + Σ_{u=t_i}^{H−1} γ^u r_hi,
    then L_i ← max(L_i, R_lo) and U_i ← min(U_i, R_hi),

with G_i = Σ_{u<t_i} γ^u r_u, the identified part. Where the rollout never left the log,
L_i = U_i = its return. Whatever the unseen steps do, the return lies in [L_i, U_i].

**Interval over rollouts.** L and U are (K members × N units) arrays. A unit is one rollout
index of one seed: it draws its start, ε flips and exploratory actions the same way for every
candidate, point and agent alike (common random numbers, imagination/rollouts.py). Each
bootstrap replicate b draws a member k_b and N units u*, and the interval is

    [q_{(1−c)/2}(mean L_{k_b, u*}), q_{(1+c)/2}(mean U_{k_b, u*})].

With L = U = the imagined return this is ADWM's bootstrap interval (intervals.members_bootstrap).

**Calibrated** (a shared error; ope/imagination/held_out.py sizes it inside the log). Every
rollout that left the log is off by one error e common to all of a cell's candidates, within
the range [e_lo, e_hi] the log's held-out actions give: J = mean(x) − e·mean(l), l_i = 1 where
rollout i left the log. Each replicate b gives [m_b − max(e_lo·λ_b, e_hi·λ_b),
m_b − min(e_lo·λ_b, e_hi·λ_b)] with m_b, λ_b the replicate's means of x and l, and the interval
is the outer quantiles as above. On a paired difference l is l_p − l_q: the error cancels where
both candidates left the log alike, and only the difference in how often they left it is
uncertain.

**Refits** (the log resampled; ope/imagination/refits.py). B refits of the default over
bootstrap draws of the log's episodes give Ĵ_b; the interval is their order statistics
[Ĵ_(⌊(1−c)/2·(B−1)⌋), Ĵ_(⌈(1+c)/2·(B−1)⌉)], and a paired difference reads D_b = Ĵ_b(p) − Ĵ_b(q)
(every candidate's refit b reads the same draw of the log).

**Paired difference** of candidates p and q, over the same units and members: D_L = L_p − U_q
and D_U = U_p − L_q, under the same interval, read as a verdict by verdicts.py: ADWM's and the
log alone's, instruments beside the recommended estimate's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from ..answers import LOG
from .verdicts import Verdict

@dataclass(frozen=True)
class ReturnRange:
    """What a return can be: each step's reward in ``reward``, a whole episode's return in
    ``episode`` where something bounds it, and who says so (``source``)."""

    reward: tuple[float, float]
    episode: tuple[float, float] | None = None
    source: str = "environment"

    @classmethod
    def declared(cls, env_name: str) -> ReturnRange:
        """The ranges the environment's rules declare (``TextEnv.reward_range``, ``return_range``)."""
        from ...envs.registry import env_factory

        env = env_factory(env_name)
        return cls(tuple(getattr(env, "reward_range", (-1.0, 1.0))), getattr(env, "return_range", None),
                   f"environment {env_name}")

    @classmethod
    def of_log(cls, rewards: np.ndarray, returns: np.ndarray) -> ReturnRange:
        """The ranges the behaviour log spans: its step rewards and episode returns (an assumption,
        not a rule: an action the log never took may pay what no logged one did)."""
        return cls((float(np.min(rewards)), float(np.max(rewards))),
                   (float(np.min(returns)), float(np.max(returns))), "the behaviour log")


PROTOCOL = ReturnRange((-1.0, 1.0), None, "the protocol's step range (envs/base.py)")


def rollout_bounds(rewards: Sequence[float], sources: Sequence[str], *, horizon: int, gamma: float,
                   returns: ReturnRange) -> tuple[float, float, float]:
    """(imagined return, L, U) of one rollout from its steps' rewards and what answered each, in order."""
    discounts = gamma ** np.arange(max(horizon, len(rewards)))
    left = next((t for t, source in enumerate(sources) if source != LOG), len(sources))
    known = float(np.dot(discounts[:left], rewards[:left]))
    value = float(np.dot(discounts[: len(rewards)], rewards))
    if left == len(sources):
        return value, value, value
    return (value, *identified_bounds(known, left, horizon=horizon, gamma=gamma, returns=returns))


def identified_bounds(known: float, left: int, *, horizon: int, gamma: float,
                      returns: ReturnRange) -> tuple[float, float]:
    """(L, U) of a rollout whose first ``left`` steps the log answered, worth ``known`` (G_i),
    and whose step ``left`` it did not."""
    rest = float((gamma ** np.arange(left, max(horizon, left + 1))).sum())
    low, high = known + rest * returns.reward[0], known + rest * returns.reward[1]
    if returns.episode is not None and gamma == 1:
        low, high = max(low, returns.episode[0]), min(high, returns.episode[1])
    return low, high


@dataclass(frozen=True)
class Candidate:
    """One point's (or agent's) rollouts: the imagined returns and their bounds, each K × N."""

    value: np.ndarray
    low: np.ndarray
    high: np.ndarray
    units: tuple = ()  # (member, seed, unit) of each column where known: a paired difference needs the same
    left: np.ndarray | None = None  # l: 1 where the rollout left the log (calibrated; a difference's l_p − l_q)
    shared_error: tuple[float, float] | None = None  # [e_lo, e_hi] of the calibrated interval
    refits: np.ndarray | None = None  # (B,) Ĵ_b of the refits over resampled logs (a difference's D_b)

    @classmethod
    def calibrated(cls, value: np.ndarray, left: np.ndarray, error_range: tuple[float, float],
                   units: tuple = ()) -> Candidate:
        """Rollouts under the calibrated interval: each one that left the log (``left``) off by one
        shared error within ``error_range`` (module docstring)."""
        return cls(value, value, value, units, np.asarray(left, np.float64), tuple(error_range))

    @classmethod
    def refitted(cls, value: np.ndarray, refits: np.ndarray, units: tuple = ()) -> Candidate:
        """Rollouts under the refits interval: its ends are the refits' Ĵ_b (module docstring)."""
        return cls(value, value, value, units, refits=np.asarray(refits, np.float64))

    @property
    def estimate(self) -> float:
        return float(self.value.mean())

    def without_bounds(self) -> Candidate:
        """The same rollouts with L = U = the imagined return (the bootstrap interval)."""
        return Candidate(self.value, self.value, self.value, self.units)

    def minus(self, other: Candidate) -> Candidate:
        """The paired difference: D = x_p − x_q, D_L = L_p − U_q, D_U = U_p − L_q (calibrated: l_p − l_q)."""
        if self.value.shape != other.value.shape or (self.units and other.units and self.units != other.units):
            raise ValueError(f"candidates over different rollouts ({self.value.shape} vs {other.value.shape}): a "
                             "paired difference needs the same members, seeds and rollouts")
        if self.shared_error != other.shared_error:
            raise ValueError(f"candidates under different error ranges ({self.shared_error} vs {other.shared_error}):"
                             " a paired difference needs one reading of the log")
        if (self.refits is None) != (other.refits is None):
            raise ValueError("a refitted candidate against one that is not: a paired difference needs one reading")
        if self.refits is not None:
            return Candidate.refitted(self.value - other.value, self.refits - other.refits, self.units)
        if self.shared_error is not None:
            return Candidate.calibrated(self.value - other.value, self.left - other.left, self.shared_error,
                                        self.units)
        return Candidate(self.value - other.value, self.low - other.high, self.high - other.low, self.units)


def interval(candidate: Candidate, *, n_resamples: int, confidence: float, seed: int) -> tuple[float, float]:
    """(low, high): the bootstrap over members and units of mean L and mean U (or, calibrated, of the
    shared error's ends; module docstring), drawn as ``members_bootstrap`` draws (the same
    replicates, the same order statistics); refitted, the same order statistics of the refits' Ĵ_b."""
    tail = (1 - confidence) / 2
    if candidate.refits is not None:
        ordered, last = np.sort(candidate.refits), len(candidate.refits) - 1
        return float(ordered[int(np.floor(tail * last))]), float(ordered[int(np.ceil((1 - tail) * last))])
    k, n = candidate.value.shape
    units = np.random.default_rng(seed).integers(0, n, (n_resamples, n))
    members = np.random.default_rng((seed, 1)).integers(0, k, n_resamples)[:, None]
    if candidate.shared_error is None:
        lows = np.sort(candidate.low[members, units].mean(1))
        highs = np.sort(candidate.high[members, units].mean(1))
    else:
        means, left = candidate.value[members, units].mean(1), candidate.left[members, units].mean(1)
        shifts = np.outer(left, candidate.shared_error)  # e·λ_b at either end of the error range
        lows, highs = np.sort(means - shifts.max(1)), np.sort(means - shifts.min(1))
    last = n_resamples - 1
    return float(lows[int(np.floor(tail * last))]), float(highs[int(np.ceil((1 - tail) * last))])


def verdicts(candidates: Mapping[str, Candidate], *, n_resamples: int, confidence: float,
             seed: int) -> list[Verdict]:
    """A verdict on every pair of ``candidates`` (by name, in the mapping's order)."""
    found = []
    for a, b in combinations(candidates, 2):
        difference = candidates[a].minus(candidates[b])
        low, high = interval(difference, n_resamples=n_resamples, confidence=confidence, seed=seed)
        found.append(Verdict(a, b, difference.estimate, low, high))
    return found


def candidates_from_rows(rows: Iterable[Mapping], key: str | Sequence[str], *, bounded: bool = True,
                         error_range: tuple[float, float] | None = None) -> dict:
    """Candidates from per-rollout rows (the ADWM stage's ``rollouts`` table: estimator, member,
    seed, unit, value, low, high, steps, log_steps, …) grouped by ``key`` (a column or several):
    K × N arrays, N the units (seed, unit) in order. ``bounded=False``: L = U = the imagined
    return; ``error_range``: the calibrated reading, a rollout having left the log where
    ``log_steps < steps``."""
    keys = (key,) if isinstance(key, str) else tuple(key)
    cells: dict = defaultdict(dict)
    for row in rows:
        group = row[keys[0]] if len(keys) == 1 else tuple(row[k] for k in keys)
        cells[group][(row["member"], row["seed"], row["unit"])] = (
            row["value"], row["low"], row["high"], float(row["log_steps"] < row["steps"]) if error_range else 0.0)
    found = {}
    for group, by_unit in cells.items():
        members = sorted({m for m, _, _ in by_unit})
        units = sorted({(s, u) for _, s, u in by_unit})
        if len(by_unit) != len(members) * len(units):
            raise ValueError(f"{group}: rollouts missing for some member and unit (every member imagines every seed)")
        x = np.array([[by_unit[(m, s, u)] for s, u in units] for m in members], np.float64)
        named = (tuple(members), tuple(units))
        if error_range is not None:
            found[group] = Candidate.calibrated(x[..., 0], x[..., 3], error_range, named)
            continue
        candidate = Candidate(x[..., 0], x[..., 1], x[..., 2], named)
        found[group] = candidate if bounded else candidate.without_bounds()
    return found
