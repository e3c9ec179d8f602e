"""Several agents scored in one run, ranked: each agent's Ĵ with its 95 % interval at one ε
(ε = 0: the agent itself), and the probability that it is the best of them.

The probability reads each agent's bootstrap interval as a normal law, Ĵ_a ~ N(Ĵ_a, s_a²) with
s_a = (ci_high − ci_low) / (2 · z_0.975), the agents independent (their imagined rollouts
are), and counts how often each one draws the highest value:

    P(a is best) ≈ (1/D) Σ_d 1[a = argmax_b x_b^(d)],   x_b^(d) ~ N(Ĵ_b, s_b²).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from scipy.stats import norm

from .ope.answers import RANKED_BY


@dataclass(frozen=True)
class AgentRank:
    policy: str
    value: float
    ci_low: float
    ci_high: float
    p_best: float


def rank_agents(estimates: pa.Table, *, estimator: str = RANKED_BY, epsilon: float = 0.0,
                seed: int | None = None, confidence: float = 0.95, draws: int = 20_000,
                rng_seed: int = 0) -> list[AgentRank]:
    """The agents of ``estimates`` (its ``policy`` column) by ``estimator``'s Ĵ at ``epsilon``
    (seed ``seed``; None: the estimator's first seed), best first, with P(best) as in the module
    docstring."""
    candidates = [r for r in estimates.to_pylist() if r["estimator"] == estimator and r["epsilon"] == epsilon]
    if seed is None and candidates:
        seed = min(r["seed"] for r in candidates)
    rows = [r for r in candidates if r["seed"] == seed]
    if not rows:
        known = sorted({(r["estimator"], r["epsilon"]) for r in estimates.to_pylist()})
        raise ValueError(f"no {estimator} estimate at ε={epsilon:g}{'' if seed is None else f', seed {seed}'} to "
                         f"rank agents by; the estimates hold (estimator, ε): {known}")
    values = np.array([r["value"] for r in rows])
    z = norm.ppf(0.5 + confidence / 2)
    scales = np.array([max(r["ci_high"] - r["ci_low"], 0.0) / (2 * z) for r in rows])
    sampled = np.random.default_rng(rng_seed).normal(values, scales, size=(draws, len(rows)))
    p_best = np.bincount(sampled.argmax(axis=1), minlength=len(rows)) / draws
    ranked = [AgentRank(r["policy"], r["value"], r["ci_low"], r["ci_high"], float(p))
              for r, p in zip(rows, p_best)]
    return sorted(ranked, key=lambda a: -a.value)


def ranking_lines(ranked: list[AgentRank], estimator: str, epsilon: float) -> list[str]:
    """The ranking as the command line prints it, a line per agent."""
    lines = [f"agents ranked by {estimator} at ε={epsilon:g} (P(best): normal reading of each bootstrap interval)"]
    lines += [f"{i}. {a.policy:<24} Ĵ = {a.value:.4g}  [{a.ci_low:.4g}, {a.ci_high:.4g}]  P(best) = {a.p_best:.2f}"
              for i, a in enumerate(ranked, start=1)]
    return lines
