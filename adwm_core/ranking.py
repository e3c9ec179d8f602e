"""Candidates compared in one run: agents at one ε (``adwm evaluate`` with several agents,
``OffPolicyEvaluation.select_best``) or the points of a cell, with a verdict on every pair.

The candidates' imagined rollouts (the ADWM stage's ``rollouts`` table) share their units.
Rollout i of seed s starts from the same logged observation and draws the same ε flips and
exploratory actions for every agent and ε level (common random numbers,
ope/imagination/rollouts.py), and member k is the same world model. So the verdict on (a, b)
is read from the paired interval on Ĵ_a − Ĵ_b over every seed's rollouts (the bootstrap, or
under ``interval: calibrated`` with the shared off-log error the held-out actions size;
ope/statistics/bounds.py), not from two independent intervals. Beside it, the identified
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


def _candidates(rollouts: Iterable[Mapping], epsilon: float, estimator: str,
                error_range: tuple[float, float] | None) -> tuple[dict, dict]:
    """The agents' candidates as printed (the bootstrap, or calibrated with ``error_range``) and
    under the identified bounds."""
    rows = [r for r in rollouts if r["estimator"] == estimator and r["epsilon"] == epsilon]
    if not rows:
        raise ValueError(f"no {estimator} rollouts at ε={epsilon:g} to compare agents by")
    return printed_candidates(rows, "policy", error_range), candidates_from_rows(rows, "policy")


def printed_candidates(rows: Iterable[Mapping], key: str | Sequence[str],
                       error_range: tuple[float, float] | None) -> dict:
    """The candidates of ``rows`` under the interval ADWM prints: calibrated with ``error_range``
    (the stage's ``answers``, ``interval: calibrated``), else the bootstrap of the imagined returns."""
    if error_range is not None:
        return candidates_from_rows(rows, key, error_range=error_range)
    return candidates_from_rows(rows, key, bounded=False)


def shared_error(answers: Iterable[Mapping]) -> tuple[float, float] | None:
    """The calibrated interval's off-log error range from the ADWM stages' ``answers``: every
    agent's stage sizes it on the same log and world model, so the ranges agree up to the float
    noise of stages run on other workers or devices; their hull, the widest, is taken. None where
    none was sized."""
    ranges = [a["held_out"]["error_range"] for a in answers if "held_out" in a]
    return (min(low for low, _ in ranges), max(high for _, high in ranges)) if ranges else None


def rank_agents(rollouts: Iterable[Mapping], *, epsilon: float = 0.0, estimator: str = ADWM,
                confidence: float = 0.95, n_resamples: int = 1000, seed: int = 0,
                error_range: tuple[float, float] | None = None) -> tuple[list[AgentRank], list[Comparison]]:
    """The agents of ``rollouts`` (rows of the ``rollouts`` contract) at ``epsilon``, best Ĵ first,
    and the comparison of every pair; ``error_range``: read calibrated (:func:`printed_candidates`)."""
    printed, bounded = _candidates(list(rollouts), epsilon, estimator, error_range)
    settings = dict(n_resamples=n_resamples, confidence=confidence, seed=seed)
    ranked = [AgentRank(name, candidate.estimate, *interval(printed[name], **settings),
                        *interval(candidate, **settings)) for name, candidate in bounded.items()]
    ranked.sort(key=lambda a: -a.value)
    order = [a.policy for a in ranked]
    return ranked, compare({n: printed[n] for n in order}, {n: bounded[n] for n in order}, **settings)


def compare(printed: Mapping[str, Candidate], bounded: Mapping[str, Candidate], *, n_resamples: int,
            confidence: float, seed: int = 0) -> list[Comparison]:
    """Every pair (in the mappings' order) compared twice: under the printed interval (``printed``),
    and by the identified bounds (``bounded``: the log alone)."""
    settings = dict(n_resamples=n_resamples, confidence=confidence, seed=seed)
    return [Comparison(v, alone) for v, alone in zip(verdicts(dict(printed), **settings),
                                                     verdicts(dict(bounded), **settings))]


def best_agent(ranked: Sequence[AgentRank], comparisons: Sequence[Comparison]) -> str | None:
    """The agent whose verdict beats every other agent; None where the logs cannot tell."""
    for agent in ranked:
        beaten = {c.verdict.b if c.verdict.a == agent.policy else c.verdict.a
                  for c in comparisons if c.verdict.better == agent.policy}
        if len(beaten) == len(ranked) - 1:
            return agent.policy
    return None


def ranking_lines(ranked: Sequence[AgentRank], comparisons: Sequence[Comparison], estimator: str,
                  epsilon: float, interval_name: str = "bootstrap") -> list[str]:
    """The ranking and the verdicts as the command line prints them."""
    lines = [f"agents by {estimator} at ε={epsilon:g} (every seed's rollouts; [{interval_name} interval], "
             "{bounds the log alone identifies})"]
    lines += [f"{i}. {a.policy:<24} Ĵ = {a.value:.4g}  [{a.ci_low:.4g}, {a.ci_high:.4g}]  "
              f"{{{a.bounds_low:.4g}, {a.bounds_high:.4g}}}" for i, a in enumerate(ranked, start=1)]
    lines.append("verdicts (paired over common random numbers):")
    lines += [f"  {c.line()}" for c in comparisons]
    best = best_agent(ranked, comparisons)
    lines.append(f"best: {best}" if best else "best: cannot tell from these logs")
    return lines
