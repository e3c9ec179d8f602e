"""Candidates compared in one run: agents at one ε (``adwm evaluate`` with several agents,
``OffPolicyEvaluation.select_best``) or the points of a cell, with a verdict on every pair.

The candidates' imagined rollouts (the ADWM stage's ``rollouts`` table) share their units.
Rollout i of seed s starts from the same logged observation and draws the same ε flips and
exploratory actions for every agent and ε level (common random numbers,
ope/imagination/rollouts.py), and member k is the same world model. So the verdict on (a, b)
is read from the paired interval on Ĵ_a − Ĵ_b over every seed's rollouts (the bootstrap; under
``interval: calibrated`` with the shared off-log error the held-out actions size; under
``interval: refits`` from the refits' paired Ĵ_b; ope/statistics/bounds.py), not from two
independent intervals. Beside it, the identified
bounds on the same difference say whether the log alone decides the pair, whatever the steps
it never answered do. No P(best) is computed: an agent is called the best only where its
verdict beats every other agent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .ope.answers import ADWM
from .ope.statistics.bounds import Candidate, candidates_from_rows, interval, verdicts
from .ope.statistics.verdicts import CANNOT_TELL, Verdict, winner


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


@dataclass(frozen=True)
class PrintedInterval:
    """The interval ADWM printed, read back from its stages' ``answers``: the bootstrap of the
    imagined returns; ``calibrated``, with the shared off-log error the held-out actions size
    (``error_range``); or ``refits``, with each (agent, ε)'s Ĵ_b over resampled logs."""

    name: str = "bootstrap"
    error_range: tuple[float, float] | None = None
    refits: Mapping[tuple[str, float], tuple[float, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, answers: Iterable[Mapping]) -> PrintedInterval:
        """From the ADWM stages' ``answers``. Every agent's stage sizes the calibrated error range on
        the same log and world model, so the ranges agree up to the float noise of stages run on
        other workers or devices; their hull, the widest, is taken."""
        answers = list(answers)
        ranges = [a["held_out"]["error_range"] for a in answers if "held_out" in a]
        if ranges:
            return cls("calibrated", (min(low for low, _ in ranges), max(high for _, high in ranges)))
        refits = {(a["policy"], float(epsilon)): tuple(values) for a in answers if "refits" in a
                  for epsilon, values in a["refits"]["by_epsilon"].items()}
        return cls("refits", refits=refits) if refits else cls()

    def candidates(self, rows: Iterable[Mapping], key: str | Sequence[str]) -> dict:
        """The candidates of ``rows`` (the ``rollouts`` contract) grouped by ``key``, under this interval."""
        rows = list(rows)
        if self.error_range is not None:
            return candidates_from_rows(rows, key, error_range=self.error_range)
        found = candidates_from_rows(rows, key, bounded=False)
        if not self.refits:
            return found
        keys = (key,) if isinstance(key, str) else tuple(key)
        point = {row[keys[0]] if len(keys) == 1 else tuple(row[k] for k in keys): (row["policy"], float(row["epsilon"]))
                 for row in rows}
        missing = sorted({point[group] for group in found} - set(self.refits))
        if missing:
            raise ValueError(f"no refits of {missing}: every agent's ADWM stage refits under interval='refits'")
        return {group: Candidate.refitted(c.value, np.array(self.refits[point[group]]), c.units)
                for group, c in found.items()}


def rank_agents(rollouts: Iterable[Mapping], *, epsilon: float = 0.0, estimator: str = ADWM,
                confidence: float = 0.95, n_resamples: int = 1000, seed: int = 0,
                printed: PrintedInterval = PrintedInterval()) -> tuple[list[AgentRank], list[Comparison]]:
    """The agents of ``rollouts`` (rows of the ``rollouts`` contract) at ``epsilon``, best Ĵ first,
    and the comparison of every pair, each under the ``printed`` interval and the identified bounds."""
    rows = [r for r in rollouts if r["estimator"] == estimator and r["epsilon"] == epsilon]
    if not rows:
        raise ValueError(f"no {estimator} rollouts at ε={epsilon:g} to compare agents by")
    shown, bounded = printed.candidates(rows, "policy"), candidates_from_rows(rows, "policy")
    settings = dict(n_resamples=n_resamples, confidence=confidence, seed=seed)
    ranked = [AgentRank(name, candidate.estimate, *interval(shown[name], **settings),
                        *interval(candidate, **settings)) for name, candidate in bounded.items()]
    ranked.sort(key=lambda a: -a.value)
    order = [a.policy for a in ranked]
    return ranked, compare({n: shown[n] for n in order}, {n: bounded[n] for n in order}, **settings)


def compare(printed: Mapping[str, Candidate], bounded: Mapping[str, Candidate], *, n_resamples: int,
            confidence: float, seed: int = 0) -> list[Comparison]:
    """Every pair (in the mappings' order) compared twice: under the printed interval (``printed``),
    and by the identified bounds (``bounded``: the log alone)."""
    settings = dict(n_resamples=n_resamples, confidence=confidence, seed=seed)
    return [Comparison(v, alone) for v, alone in zip(verdicts(dict(printed), **settings),
                                                     verdicts(dict(bounded), **settings))]


def best_agent(ranked: Sequence[AgentRank], comparisons: Sequence[Comparison]) -> str | None:
    """The agent whose verdict beats every other agent; None where the logs cannot tell."""
    return winner((agent.policy for agent in ranked), [c.verdict for c in comparisons])


def ranking_lines(ranked: Sequence[AgentRank], comparisons: Sequence[Comparison], estimator: str,
                  epsilon: float, interval_name: str = "bootstrap", withheld: str | None = None) -> list[str]:
    """The ranking and the verdicts as the command line prints them; ``withheld`` (why the
    estimator's intervals are not to be printed) keeps the order and Ĵ, drops the intervals and verdicts."""
    if withheld:
        return [f"agents by {estimator} at ε={epsilon:g} (every seed's rollouts; {withheld}, and so are its "
                "verdicts: read the recommended estimate's)",
                *(f"{i}. {a.policy:<24} Ĵ = {a.value:.4g}  {{{a.bounds_low:.4g}, {a.bounds_high:.4g}}}"
                  for i, a in enumerate(ranked, start=1))]
    lines = [f"instrument, not the product's verdict (the recommended estimate's, above, is): agents by {estimator} "
             f"at ε={epsilon:g} (every seed's rollouts; [{interval_name} interval], {{bounds the log alone identifies}})"]
    lines += [f"{i}. {a.policy:<24} Ĵ = {a.value:.4g}  [{a.ci_low:.4g}, {a.ci_high:.4g}]  "
              f"{{{a.bounds_low:.4g}, {a.bounds_high:.4g}}}" for i, a in enumerate(ranked, start=1)]
    lines.append("verdicts (paired over common random numbers):")
    lines += [f"  {c.line()}" for c in comparisons]
    best = best_agent(ranked, comparisons)
    lines.append(f"best: {best}" if best else f"best: {CANNOT_TELL}")
    return lines
