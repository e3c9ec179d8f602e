"""The default's off-log answers graded inside the log: how far a rollout that leaves the log is
off, measured on logged episodes whose actions are held out (the interval ``calibrated``,
ope/statistics/bounds.py).

The distinct logged actions are split at random into F groups. For group f the log is read as
if it had never taken those actions:

- the state bank keeps every observation but drops the transitions of f's actions, so a logged
  step of f is answered as imagination answers an off-log pair: carried over by its signature
  (carry_over.py), else handed over to a value;
- that value is Q̂_f, FQE refitted without f's transitions for the behaviour's own play: the
  target at s_{t+1} is the logged next action (SARSA's y = r_t + γ Q̂(s_{t+1}, a_{t+1})), so
  the logged return-to-go is what Q̂_f should have said.

Every logged episode that took an action of f is walked through that transition, teacher
forced (walks.py), and is off by e = Ĵ_tf − G_0. Group f's mean error ē_f is one draw of what a
point whose rollouts leave the log on actions like f's is off by; the F draws are exchangeable
with it where π_e's unlogged actions are like a random group of the logged ones (an assumption:
π_e may choose its unlogged actions better than chance).

The error range is the conformal one over the groups: with the ē_f sorted,
[ē_(k), ē_(F+1−k)], k = max(1, ⌊(F + 1)·α/2⌋) (the extremes while F + 1 < 4/α), which holds a
new draw with probability ≥ 1 − 2k/(F + 1).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...data.actions import normal_action
from ...data.behaviour_log import BehaviourLog
from ...model.world_model import WorldModel
from ..classical.logged_steps import LoggedSteps, action_reader, fit_fqe
from ..classical.settings import BaselineConfig
from ..settings import AdwmConfig
from .diffusion_transition import adwm_transition
from .state_bank import StateBank
from .walks import walk_episodes, walked_value


@dataclass(frozen=True)
class HeldOutErrors:
    """Per group of held-out actions: the walked episodes' errors e = Ĵ_tf − G_0 and their mean."""

    groups: tuple[tuple[str, ...], ...]
    errors: tuple[tuple[float, ...], ...]  # per group, one per walked episode

    @property
    def group_means(self) -> np.ndarray:
        return np.array([np.mean(e) for e in self.errors if e])

    def error_range(self, confidence: float) -> tuple[float, float]:
        """[ē_(k), ē_(F+1−k)]: the conformal range of a new group's mean error (module docstring)."""
        return conformal_range(self.group_means, confidence)

    def to_json(self, confidence: float) -> dict:
        """The error range, the chance it holds a new group's mean (1 − 2k/(F + 1)) and every group's mean."""
        n = len(self.group_means)
        return {"error_range": list(self.error_range(confidence)),
                "holds_a_new_group": 1 - 2 * conformal_rank(n, confidence) / (n + 1),
                "group_means": self.group_means.tolist(), "walked_episodes": sum(map(len, self.errors))}


def conformal_rank(n: int, confidence: float) -> int:
    """k = max(1, ⌊(n + 1)(1 − confidence)/2⌋): the order statistic that bounds a new draw on each side."""
    if n < 2:
        raise ValueError(f"{n} error(s) walked: too few to size an error range (the log takes too few distinct "
                         "actions); choose another interval")
    return max(1, int(np.floor((n + 1) * (1 - confidence) / 2)))


def conformal_range(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """[v_(k), v_(n+1−k)] of ``values`` (:func:`conformal_rank`): holds a new exchangeable draw with
    probability ≥ 1 − 2k/(n + 1)."""
    ordered = np.sort(np.asarray(values, float))
    k = conformal_rank(len(ordered), confidence)
    return float(ordered[k - 1]), float(ordered[len(ordered) - k])


def held_out_errors(log: BehaviourLog, model: WorldModel, bank: StateBank, steps: LoggedSteps, config: AdwmConfig,
                    settings: BaselineConfig, *, groups: int = 20, seed: int = 0) -> HeldOutErrors:
    """The walked errors of every group of held-out actions (module docstring); ``steps`` is the
    log on FQE's step grid (``EncodedLog.steps``), read as the hand-over reads it."""
    if not config.hands_over_to_fqe:
        raise ValueError(f"off_log={config.off_log!r}: the calibrated interval grades the hand-over's answers; "
                         "choose an off_log that hands over to FQE, or another interval")
    actions = np.array([normal_action(a) for a in log.column("action")], object)
    distinct = sorted(set(actions))
    order = np.random.default_rng(seed).permutation(len(distinct))
    split = [frozenset(distinct[i] for i in part) for part in np.array_split(order, min(groups, len(distinct)))]
    grid = steps.grid
    episodes, t = log.steps["episode"].to_numpy(), log.steps["t"].to_numpy()
    logged_actions = grid.place(episodes, t, actions, "")
    behaviour = _own_play(steps, grid.place(episodes, t, action_reader(model, settings.fqe.action_reading)(
        list(actions)), -1))
    table = log.steps.set_column(log.steps.schema.get_field_index("epsilon"), "epsilon",
                                 pa.array(np.zeros(log.steps.num_rows)))
    found_groups, found_errors = [], []
    for held in split:
        fitted_on = ~np.isin(logged_actions, list(held))
        q = fit_fqe(behaviour, model, 0.0, settings, seed, fitted_on=fitted_on)
        kept = replace(bank, transitions=bank.transitions.without(held))
        took = np.unique(episodes[np.isin(actions, list(held))])
        walked = walk_episodes(adwm_transition(model, kept, config, {0.0: q}), kept, model,
                               table.filter(pc.is_in(table["episode"], pa.array(took))), gamma=config.gamma,
                               seed=seed)
        by_episode: dict[int, list] = defaultdict(list)
        for step in walked:  # in order of t
            by_episode[step.episode].append(step)
        found_groups.append(tuple(sorted(held)))
        found_errors.append(tuple(walked_value(walk, config.gamma) - walk[0].return_to_go
                                  for walk in by_episode.values()))
    return HeldOutErrors(tuple(found_groups), tuple(found_errors))


def _own_play(steps: LoggedSteps, logged_ids: np.ndarray) -> LoggedSteps:
    """``steps`` with the behaviour's own play as the policy FQE values: at every step the logged
    action alone (probability 1 at ε = 0)."""
    candidates = np.where(steps.grid.mask, logged_ids, -1)[..., None]
    return replace(steps, candidates=candidates, uniform=np.zeros(candidates.shape),
                   listed=np.zeros(steps.grid.shape, bool))
