"""Scripted agents for the runner: the engine's expert, ε-mixed with uniform random actions.

They need no model, so tests, benchmarks and the demo exercise real engines
with a policy whose quality is known to fall as ε grows.
"""

from __future__ import annotations

from collections.abc import Sequence

from .episodes import Decision, EpisodeState


class EpsilonGoldAgent:
    """At step t: with probability ε a uniformly random admissible action,
    else the t-th gold action (paper Eq. eps-mix with the expert as π).
    ε = 1 is the uniform random policy; past the end of the gold sequence the agent acts at random."""

    needs_gold = True

    def __init__(self, epsilon: float = 0.0) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.epsilon = epsilon
        self.needs_admissible = epsilon > 0.0

    def act(self, states: Sequence[EpisodeState]) -> list[Decision]:
        decisions = []
        for state in states:
            t = len(state.turns)
            explore = self.epsilon > 0.0 and state.rng.random() < self.epsilon
            if not explore and t < len(state.gold):
                decisions.append(Decision(state.gold[t]))
            elif state.admissible:
                decisions.append(Decision(state.admissible[int(state.rng.integers(len(state.admissible)))]))
            else:  # gold exhausted and nothing listed: repeat the last expert action
                decisions.append(Decision(state.gold[-1]))
        return decisions
