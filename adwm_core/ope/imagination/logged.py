"""The behaviour log's transitions (o, a, r, o', done), indexed by (observation, action).

Imagination asks them what an action did where the log saw it: ADWM with
``AdwmConfig.logged_successors`` answers a logged (state, action) pair by one of its logged
successors — the empirical transition P̂(o' | o, a), unbiased where the pair was logged — and
asks the diffusion model only off the log; the kNN-WM reference (transitions.py) answers every
pair by the nearest logged one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import torch

from ...data.actions import normal_action
from ...data.behaviour_log import BehaviourLog
from ...model.observation_latents import ObservationLatents


@dataclass
class LoggedTransitions:
    """The behaviour pool's transitions; observations as rows of the state bank."""

    observations: torch.Tensor  # (N,) bank row of each transition's observation
    actions: list[str]  # normalised action text
    next_latents: torch.Tensor  # (N, d_z) f_θ(o')
    rewards: np.ndarray  # (N,) on the environment's scale
    done: np.ndarray  # (N,) the environment ended the episode
    steps: np.ndarray  # (N,) the step t of the episode the transition was logged at
    episodes: np.ndarray  # (N,) the behaviour episode it was logged in
    tasks: list[str]  # the task description of that episode
    pairs: dict[tuple[int, str], np.ndarray] = field(init=False, repr=False)  # (row, action) → its transitions
    _matches: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        grouped = defaultdict(list)
        for i, (row, action) in enumerate(zip(self.observations.tolist(), self.actions)):
            grouped[row, action].append(i)
        self.pairs = {key: np.asarray(rows) for key, rows in grouped.items()}

    @classmethod
    def from_log(cls, log: BehaviourLog, observed: ObservationLatents) -> "LoggedTransitions":
        """The transitions of ``log``, their observations as rows of the bank and their successors'
        latents read from ``observed``, the log's latents."""
        rows = log.steps.select(["episode", "t", "task_description", "observation", "action", "reward", "done",
                                 "next_observation"]).to_pylist()
        return cls(
            observations=torch.tensor(observed.rows([r["observation"] for r in rows]), dtype=torch.long),
            actions=[normal_action(r["action"]) for r in rows],
            next_latents=observed.of([r["next_observation"] for r in rows]),
            rewards=np.array([r["reward"] for r in rows], float),
            done=np.array([r["done"] for r in rows], bool),
            steps=np.array([r["t"] for r in rows], np.int64),
            episodes=np.array([r["episode"] for r in rows], np.int64),
            tasks=[r["task_description"] for r in rows],
        )

    def without(self, actions: frozenset[str]) -> "LoggedTransitions":
        """These transitions less every one of ``actions`` (normalised text): the log as if it had
        never taken them."""
        rows = np.flatnonzero([action not in actions for action in self.actions])
        return LoggedTransitions(self.observations[rows], [self.actions[i] for i in rows], self.next_latents[rows],
                                 self.rewards[rows], self.done[rows], self.steps[rows], self.episodes[rows],
                                 [self.tasks[i] for i in rows])

    def draw(self, rows: np.ndarray, actions: list[str], t: int, uniforms: np.ndarray) -> np.ndarray:
        """One logged transition of each (bank row, action) pair at step ``t``, drawn uniformly
        by ``uniforms`` (in [0, 1)) among those the log holds at that step — an observation need
        not tell how far the episode has gone, and whether it ends may hang on that — else among
        those at any step; −1 where the log never took that action there."""
        chosen = np.full(len(actions), -1, np.int64)
        for j, (row, action) in enumerate(zip(rows, actions)):
            logged = self.pairs.get((int(row), normal_action(action)))
            if logged is None:
                continue
            same_step = logged[self.steps[logged] == t]
            logged = same_step if len(same_step) else logged
            chosen[j] = logged[min(int(uniforms[j] * len(logged)), len(logged) - 1)]
        return chosen

    def action_match(self, action: str) -> torch.Tensor:
        """match(a, ·) over the transitions: 1 for the same text, else the Jaccard word overlap."""
        key = normal_action(action)
        if key not in self._matches:
            words = frozenset(key.split())

            def jaccard(other: str) -> float:
                theirs = set(other.split())
                return len(words & theirs) / max(len(words | theirs), 1)

            self._matches[key] = torch.tensor([1.0 if a == key else jaccard(a) for a in self.actions])
        return self._matches[key]
