"""π_e's decisions memoised on its prompt within a stage (issue 39's first saving).

π_e acts greedily, so its decision is a function of the history it reads: the task, the earlier
(observation, action) turns, the current observation and its admissible list. Under the text
readings imagination shows π_e only texts of the behaviour log, and rollouts of every ε level,
seed and world-model member share their random numbers, so many rollouts present the same
history — every rollout's first step, and each ε level's until its first exploratory step. Each
distinct history is asked once; the hit rate is what the stage saved. (The soft-token reading
conditions on latents too, and is not memoised.)
"""

from __future__ import annotations

from collections.abc import Sequence

from ...envs.episodes import Decision
from ...policies.prompts import History
from .transitions import Policy


class MemoisedPolicy:
    """``act(histories)`` of ``policy``, each distinct history asked once; other attributes are the policy's."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.memo: dict[History, Decision] = {}
        self.asked = 0  # histories asked of this object

    def act(self, histories: Sequence[History]) -> list[Decision]:
        new = list(dict.fromkeys(h for h in histories if h not in self.memo))
        if new:
            self.memo.update(zip(new, self.policy.act(new)))
        self.asked += len(histories)
        return [self.memo[h] for h in histories]

    @property
    def hit_rate(self) -> float:
        """The share of asked histories answered without calling π_e."""
        return 1 - len(self.memo) / self.asked if self.asked else 0.0

    def __getattr__(self, name: str):
        return getattr(self.policy, name)
