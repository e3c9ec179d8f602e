"""A corridor of rooms with exactly computable values: the synthetic check of every estimator.

Task ``corridor``: the agent starts in room 0 of ``length`` rooms; ``go east`` moves one
room east, ``go west`` one room west (a wall stops it in room 0). Entering the last room
ends the episode with reward 1 and success; every other step gives 0. Observations are
fixed sentences per room, so the text determines the state. Variations only renumber
episodes (every one is the same corridor).

For a policy that goes east with probability p in every room, the probability of
reaching the exit within H steps is :func:`exit_probability` (dynamic programming), so
the value of an ε-mixed "always east" policy, p = 1 − ε/2, is known exactly.
"""

from __future__ import annotations

import numpy as np

from .base import SPLITS, Observation, StepResult, TextEnv, check_split

ACTIONS = ("go east", "go west")
TASK = "corridor"
VARIATIONS_PER_SPLIT = 100


def room_text(room: int, length: int) -> str:
    if room == length - 1:
        return "You step through the door at the east end. Daylight: you are out of the corridor."
    wall = "A blank wall closes the corridor to the west. " if room == 0 else ""
    return (f"You are in room {room + 1} of a corridor of {length} rooms. {wall}"
            f"The exit is {length - 1 - room} room(s) further east.")


def exit_probability(p_east: float, length: int, horizon: int) -> float:
    """P(reach room length−1 from room 0 within ``horizon`` steps) when each step goes east w.p. ``p_east``."""
    mass = np.zeros(length)
    mass[0] = 1.0
    reached = 0.0
    for _ in range(horizon):
        moved = np.zeros(length)
        moved[1:] += p_east * mass[:-1]
        moved[:-1] += (1 - p_east) * mass[1:]
        moved[0] += (1 - p_east) * mass[0]
        reached += moved[-1]
        moved[-1] = 0.0
        mass = moved
    return float(reached)


class ChainEnv(TextEnv):
    name = "chain"
    reward_range = return_range = (0.0, 1.0)  # 1 on entering the last room, which ends the episode

    def __init__(self, length: int = 4) -> None:
        if length < 2:
            raise ValueError(f"a corridor needs at least 2 rooms, got length={length}")
        self.length = length
        self._room: int | None = None

    def tasks(self) -> list[str]:
        return [TASK]

    def variations(self, task: str, split: str) -> list[int]:
        check_split(split)
        self._check_task(task)
        first = SPLITS.index(split) * VARIATIONS_PER_SPLIT
        return list(range(first, first + VARIATIONS_PER_SPLIT))

    def _check_task(self, task: str) -> None:
        if task != TASK:
            raise ValueError(f"unknown chain task {task!r}; the only task is {TASK!r}")

    def _observation(self) -> Observation:
        description = f"Walk east along the corridor of {self.length} rooms and leave it by the door at its end."
        return Observation(room_text(self._room, self.length), description, ACTIONS)

    def reset(self, task: str, variation: int, seed: int = 0) -> Observation:
        self._check_task(task)
        self._room = 0
        return self._observation()

    def step(self, action: str) -> StepResult:
        if self._room is None:
            raise RuntimeError("call reset() before step()")
        valid = action in ACTIONS
        if action == "go east":
            self._room += 1
        elif action == "go west":
            self._room = max(0, self._room - 1)
        out = self._room == self.length - 1
        return StepResult(self._observation(), float(out), out, float(out), out, valid)

    def gold_actions(self) -> list[str]:
        return ["go east"] * (self.length - 1)
