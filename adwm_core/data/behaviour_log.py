"""The behaviour log as one episode view: every reader of the logged episodes — world-model
training (data/windows.py), the state bank and its logged successors (ope/imagination/state_bank.py,
ope/imagination/logged.py), the baselines (ope/classical/logged_steps.py) and the fidelity instruments — takes them from
a :class:`BehaviourLog` instead of filtering, sorting and checking the trajectories table itself.

Episode i holds steps t = 0…T_i−1 in order; step t's ``next_observation`` is o_{t+1}.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from .io import behaviour_rows


class BehaviourLog:
    """The steps of the behaviour pool (``source`` = behavior) of a trajectories table, sorted by
    (episode, t), each episode's steps checked to run 0…T−1."""

    def __init__(self, trajectories: pa.Table, source: str = "the trajectories") -> None:
        steps = behaviour_rows(trajectories).sort_by([("episode", "ascending"), ("t", "ascending")])
        if steps.num_rows == 0:
            raise ValueError(f"{source} holds no behaviour steps (source = 'behavior'); collect behaviour data "
                             "first — ground-truth rollouts are not a behaviour log")
        episode, t = steps["episode"].to_numpy(), steps["t"].to_numpy()
        starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
        self.bounds = np.r_[starts, len(episode)]  # episode i is rows bounds[i]:bounds[i+1]
        expected = np.arange(len(t)) - np.repeat(starts, np.diff(self.bounds))
        if (t != expected).any():
            bad = int(episode[np.flatnonzero(t != expected)[0]])
            shown = t[episode == bad].tolist()
            raise ValueError(f"{source}: episode {bad}: steps {shown} are not 0…{len(shown) - 1}; "
                             "the trajectories file is incomplete")
        self.steps = steps

    @property
    def lengths(self) -> np.ndarray:
        """(N,) steps per episode."""
        return np.diff(self.bounds)

    def column(self, name: str) -> list:
        """A column of every step, in (episode, t) order."""
        return self.steps[name].to_pylist()

    def episodes(self, columns: list[str]) -> Iterator[dict[str, list]]:
        """Each episode's ``columns``, its steps in order of t."""
        data = self.steps.select(columns).to_pydict()
        for a, b in zip(self.bounds[:-1], self.bounds[1:]):
            yield {name: values[a:b] for name, values in data.items()}

    def last_steps(self) -> np.ndarray:
        """Row of each episode's last step."""
        return self.bounds[1:] - 1
