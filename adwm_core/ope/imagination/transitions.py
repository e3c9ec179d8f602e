"""What answers π_e's action in an imagined rollout: the ``Transition`` protocol and the
transitions that need no trained network.

One imagined step of the alive rollouts is a :class:`Query` (what π_e read and did, the latents
so far, the rollout's noise) and its answer an :class:`Outcome` (z_{t+1}, r̂_t on the
environment's scale, whether the episode ends, and what answered: ``answers.SOURCES``). The rollout loop
(rollouts.py) is the same for every estimator row; two rows differ only in their transition:

- :class:`LoggedSuccessors` — where the behaviour log took a_t in the observation π_e reads, one
  of those logged transitions, drawn uniformly (the empirical P̂(o' | o, a), ope/imagination/logged.py);
  elsewhere the transition it wraps answers;
- :class:`NearestLogged` — the logged transition of the most similar (state, action), the
  kNN-WM reference;
- ``DiffusionTransition`` (diffusion_transition.py) — the guided reverse process of the world model and its heads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from ...envs.episodes import Decision
from ...policies.prompts import History
from ..answers import CARRIED, LOG, NEAREST, SOURCES
from .logged import LoggedTransitions
from .state_bank import StateBank


class Policy(Protocol):
    def act(self, histories: Sequence[History]) -> list[Decision]: ...


@dataclass
class Query:
    """One imagined step of B alive rollouts at step t."""

    policy: object  # π_e (the likelihood guidance differentiates through it)
    histories: list[History]  # what π_e read, its own earlier turns included
    actions: list[str]  # a_t
    read: np.ndarray  # (B,) the bank row π_e read
    past: torch.Tensor  # (B, t+1, d_z) z_0..z_t
    noise: torch.Tensor  # (K+1, B, d_z) the rollouts' diffusion noise (common across ε levels)
    epsilons: np.ndarray | None = None  # (B,) the ε level of each rollout
    seconds: dict[str, float] = field(default_factory=dict)  # time spent, by part

    @property
    def t(self) -> int:
        return self.past.shape[1] - 1

    def uniforms(self) -> np.ndarray:
        """One uniform draw in [0, 1) per rollout, Φ of its first diffusion noise: shared across
        ε levels, as every draw of the rollouts is."""
        return torch.special.ndtr(self.noise[0, :, 0]).numpy()

    def subset(self, rows: np.ndarray) -> "Query":
        return Query(self.policy, [self.histories[j] for j in rows], [self.actions[j] for j in rows],
                     self.read[rows], self.past[rows], self.noise[:, rows],
                     None if self.epsilons is None else self.epsilons[rows], self.seconds)


@dataclass
class Outcome:
    """The answer to a :class:`Query`, per rollout."""

    z_next: torch.Tensor  # (B, d_z)
    reward: np.ndarray  # (B,) r̂_t on the environment's scale
    done: np.ndarray  # (B,) bool
    source: np.ndarray  # (B,) one of answers.SOURCES: what answered

    @classmethod
    def empty(cls, size: int, d_z: int) -> "Outcome":
        """Rows to :meth:`fill`, each answered by nobody yet (``source`` None)."""
        return cls(torch.empty(size, d_z), np.zeros(size), np.zeros(size, bool), np.full(size, None, object))

    @classmethod
    def answered_by(cls, source: str, z_next: torch.Tensor, reward: np.ndarray, done: np.ndarray) -> "Outcome":
        """Every row answered by ``source`` (one of ``answers.SOURCES``)."""
        if source not in SOURCES:
            raise ValueError(f"unknown source {source!r}: one of {SOURCES}")
        return cls(z_next, reward, done, np.full(len(reward), source, object))

    @property
    def logged(self) -> np.ndarray:
        """(B,) bool: a logged transition of the very (state, action) answered."""
        return self.source == LOG

    def fill(self, rows: np.ndarray, other: "Outcome") -> None:
        self.z_next[rows], self.reward[rows] = other.z_next, other.reward
        self.done[rows], self.source[rows] = other.done, other.source


class Transition(Protocol):
    def __call__(self, query: Query) -> Outcome: ...


class LoggedSuccessors:
    """The log's own successors where it took a_t in the observation π_e reads; ``off_log``
    answers the rest."""

    def __init__(self, bank: StateBank, off_log: Transition) -> None:
        self.bank, self.off_log = bank, off_log

    def __call__(self, query: Query) -> Outcome:
        logged = self.bank.transitions
        chosen = logged.draw(query.read, query.actions, query.t, query.uniforms())
        return answered_from_log(logged, chosen, query, self.off_log, same_pair=True)


def answered_from_log(logged: LoggedTransitions, chosen: np.ndarray, query: Query, fallback: Transition, *,
                      same_pair: bool) -> Outcome:
    """Rollout j gets logged transition ``chosen[j]``'s (o', r, done) where ``chosen[j] ≥ 0``, its
    source ``log`` when it is a transition of the very pair (``same_pair``), else ``carried``;
    ``fallback`` answers the rest."""
    found = chosen >= 0
    outcome = Outcome.empty(len(chosen), logged.next_latents.shape[1])
    outcome.fill(np.flatnonzero(found), Outcome.answered_by(LOG if same_pair else CARRIED,
                                                            logged.next_latents[chosen[found]],
                                                            logged.rewards[chosen[found]], logged.done[chosen[found]]))
    missing = np.flatnonzero(~found)
    if len(missing):
        outcome.fill(missing, fallback(query.subset(missing)))
    return outcome


class NearestLogged:
    """The kNN-WM reference: every logged transition (o, a, r, o', done) is scored

        sim = cos(z_{s_t}, z_o) + match(a_t, a),   match = 1 for the same action text, else the
                                                   Jaccard overlap of their words,

    and one of the best-scoring transitions is drawn uniformly: z_{t+1} = f_θ(o'), r̂_t = r and
    the episode ends where the logged step ended it. No diffusion, no guidance, no heads."""

    def __init__(self, bank: StateBank) -> None:
        self.bank = bank
        self._units = torch.nn.functional.normalize(bank.latents, dim=-1)
        self._logged_units = self._units[bank.transitions.observations]  # (N, d_z) of each transition's o

    def scores(self, rows: Sequence[int], actions: Sequence[str]) -> torch.Tensor:
        """(B, N) sim of each (bank row, action) pair with every logged transition."""
        logged = self.bank.transitions
        return (self._units[torch.as_tensor(rows)] @ self._logged_units.T
                + torch.stack([logged.action_match(a) for a in actions]))

    def __call__(self, query: Query) -> Outcome:
        logged = self.bank.transitions
        scores = self.scores(query.read, query.actions)
        draws = query.uniforms()
        chosen = np.empty(len(query.actions), np.int64)
        for j, score in enumerate(scores):
            best = torch.nonzero(score >= score.max() - 1e-6).flatten().numpy()
            chosen[j] = best[min(int(draws[j] * len(best)), len(best) - 1)]
        return Outcome.answered_by(NEAREST, logged.next_latents[chosen], logged.rewards[chosen], logged.done[chosen])


def off_log_distance(bank: StateBank, observations: Sequence[int], actions: Sequence[str]) -> float:
    """How far imagined (bank row, action) pairs are from the log: the mean over pairs of
    1 − ½ max over logged transitions of kNN-WM's score (``NearestLogged.scores``), in [0, 1]
    (0: the pair itself, 1: nothing alike); NaN for no pairs. A trust diagnostic of the
    estimates (ope/statistics/diagnostics.py)."""
    counts = Counter(zip(map(int, observations), actions))
    if not counts:
        return float("nan")
    rows, chosen = zip(*counts)
    distance = 1 - NearestLogged(bank).scores(rows, chosen).max(1).values.numpy() / 2
    return float(np.average(distance, weights=list(counts.values())))
