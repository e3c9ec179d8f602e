"""What an episode is and what an agent answers, apart from how episodes are run.

An episode is addressed by :class:`EpisodeSpec`; an :class:`Agent` sees each
waiting episode as an :class:`EpisodeState` and answers a :class:`Decision`;
the environment's reply is a :class:`Turn`. The runner (``runner.py``) plays
episodes in worker processes; policies (``policies/``) and imagined rollouts
(``ope/imagination/rollouts.py``) answer with the same :class:`Decision`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from ..data import TRAJECTORIES, table_from_rows


@dataclass(frozen=True)
class EpisodeSpec:
    episode: int  # unique id within a run
    task: str
    variation: int
    seed: int = 0


@dataclass(frozen=True)
class Decision:
    action: str
    response: str | None = None  # raw text the action was parsed from; the action itself if None


@dataclass(frozen=True)
class Turn:
    t: int
    observation: str  # what the agent saw before acting
    next_observation: str  # what the environment answered (the world model's target)
    admissible: tuple[str, ...] | None
    response: str
    action: str
    action_valid: bool
    reward: float
    done: bool
    score: float
    success: bool


@dataclass
class EpisodeState:
    """What an agent sees of one running episode."""

    spec: EpisodeSpec
    task_description: str
    observation: str
    admissible: tuple[str, ...] | None  # None unless the agent or the runner asked for them
    turns: list[Turn]
    gold: list[str] | None
    rng: np.random.Generator


@dataclass
class Episode:
    spec: EpisodeSpec
    task_description: str
    turns: list[Turn]
    retries: int = 0

    @property
    def success(self) -> bool:
        return bool(self.turns) and self.turns[-1].success

    @property
    def total_reward(self) -> float:
        return float(sum(turn.reward for turn in self.turns))


class Agent(Protocol):
    needs_admissible: bool
    needs_gold: bool

    def act(self, states: Sequence[EpisodeState]) -> Sequence[Decision]: ...


def episodes_table(
    episodes: Sequence[Episode], *, cell: str, source: str, policy: str, epsilon: float | None
) -> pa.Table:
    """The trajectories-contract table of ``episodes``, one row per step."""
    rows = (
        {
            "cell": cell,
            "source": source,
            "policy": policy,
            "epsilon": epsilon,
            "seed": ep.spec.seed,
            "episode": ep.spec.episode,
            "task": ep.spec.task,
            "variation": ep.spec.variation,
            "t": turn.t,
            "task_description": ep.task_description,
            "observation": turn.observation,
            "next_observation": turn.next_observation,
            "response": turn.response,
            "action": turn.action,
            "action_valid": turn.action_valid,
            "admissible": list(turn.admissible) if turn.admissible is not None else None,
            "reward": turn.reward,
            "done": turn.done,
            "score": turn.score,
            "success": turn.success,
        }
        for ep in episodes
        for turn in ep.turns
    )
    return table_from_rows(rows, TRAJECTORIES)
