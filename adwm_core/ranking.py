"""Candidates compared in one run: agents at one ε (``adwm evaluate`` with several agents,
``OffPolicyEvaluation.select_best``) or the points of a cell, with a verdict on every pair.

The candidates' imagined rollouts (the ADWM stage's ``rollouts`` table) share their units.
Rollout i of seed s starts from the same logged observation and draws the same ε flips and
exploratory actions for every agent and ε level (common random numbers,
ope/imagination/rollouts.py), and member k is the same world model. So the verdict on (a, b)
is read from the paired bootstrap interval on Ĵ_a − Ĵ_b over every seed's rollouts
(ope/statistics/bounds.py), not from two independent intervals. Beside it, the identified
bounds on the same difference say whether the log alone decides the pair, whatever the steps
it never answered do. No P(best) is computed: an agent is called the best only where its
verdict beats every other agent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .ope.answers import ADWM
from .ope.statistics.bounds import CANNOT_TELL, Candidate, Verdict, candidates_from_rows, interval, verdicts


@dataclass(frozen=True)
class AgentRank:
    """An agent's Ĵ over every seed's rollouts, its interval and its identified bounds."""

    policy: str
    value: float
    ci_low: float
    ci_high: float
    bounds_low: float
    bounds_high: float


@dataclass(frozen=True)
class Comparison:
    """A pair's verdict from the paired bootstrap, and from the identified bounds (the log alone)."""

    verdict: Verdict
    log_alone: Verdict

    def line(self) -> str:
        alone = self.log_alone.better
        return (f"{self.verdict.line()}; the log alone: "
                f"{f'{alone} better' if alone else CANNOT_TELL} [{self.log_alone.low:+.4g}, {self.log_alone.high:+.4g}]")


def _candidates(rollouts: Iterable[Mapping], epsilon: float, estimator: str) -> dict:
    rows = [r for r in rollouts if r["estimator"] == estimator and r["epsilon"] == epsilon]
    if not rows:
        raise ValueError(f"no {estimator} rollouts at ε={epsilon:g} to compare agents by")
    return candidates_from_rows(rows, "policy")


def rank_agents(rollouts: Iterable[Mapping], *, epsilon: float = 0.0, estimator: str = ADWM,
                confidence: float = 0.95, n_resamples: int = 1000,
                seed: int = 0) -> tuple[list[AgentRank], list[Comparison]]:
    """The agents of ``rollouts`` (rows of the ``rollouts`` contract) at ``epsilon``, best Ĵ first,
    and the comparison of every pair."""
    rows = list(rollouts)
    bounded = _candidates(rows, epsilon, estimator)
    plain = {name: candidate.without_bounds() for name, candidate in bounded.items()}
    ranked = []
    for name, candidate in bounded.items():
        low, high = interval(plain[name], n_resamples=n_resamples, confidence=confidence, seed=seed)
        b_low, b_high = interval(candidate, n_resamples=n_resamples, confidence=confidence, seed=seed)
        ranked.append(AgentRank(name, candidate.estimate, low, high, b_low, b_high))
    ranked.sort(key=lambda a: -a.value)
    return ranked, compare({a.policy: bounded[a.policy] for a in ranked}, n_resamples=n_resamples,
                           confidence=confidence, seed=seed)


def compare(bounded: Mapping[str, Candidate], *, n_resamples: int, confidence: float,
            seed: int = 0) -> list[Comparison]:
    """Every pair of ``bounded`` (in the mapping's order) compared twice: by the paired bootstrap
    of the imagined returns, and by the identified bounds (the log alone)."""
    settings = dict(n_resamples=n_resamples, confidence=confidence, seed=seed)
    pairs = zip(verdicts({n: c.without_bounds() for n, c in bounded.items()}, **settings),
                verdicts(dict(bounded), **settings))
    return [Comparison(v, alone) for v, alone in pairs]


def best_agent(ranked: Sequence[AgentRank], comparisons: Sequence[Comparison]) -> str | None:
    """The agent whose verdict beats every other agent; None where the logs cannot tell."""
    for agent in ranked:
        beaten = {c.verdict.b if c.verdict.a == agent.policy else c.verdict.a
                  for c in comparisons if c.verdict.better == agent.policy}
        if len(beaten) == len(ranked) - 1:
            return agent.policy
    return None


def ranking_lines(ranked: Sequence[AgentRank], comparisons: Sequence[Comparison], estimator: str,
                  epsilon: float) -> list[str]:
    """The ranking and the verdicts as the command line prints them."""
    lines = [f"agents by {estimator} at ε={epsilon:g} (every seed's rollouts; [bootstrap interval], "
             "{bounds the log alone identifies})"]
    lines += [f"{i}. {a.policy:<24} Ĵ = {a.value:.4g}  [{a.ci_low:.4g}, {a.ci_high:.4g}]  "
              f"{{{a.bounds_low:.4g}, {a.bounds_high:.4g}}}" for i, a in enumerate(ranked, start=1)]
    lines.append("verdicts (paired over common random numbers):")
    lines += [f"  {c.line()}" for c in comparisons]
    best = best_agent(ranked, comparisons)
    lines.append(f"best: {best}" if best else "best: cannot tell from these logs")
    return lines
