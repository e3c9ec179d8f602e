"""Off-log hand-over to a value function (model-based value expansion; Feinberg et al. 2018):
the rollout is answered from the log while the log holds π_e's (state, action) pairs, and at
the first pair it never took the rollout ends with

    r̂_t = Q̂_ε(z_t, a_t),

FQE's value of π_e^ε from there on (ope/classical/fqe.py, fitted on the behaviour log per ε level), so
reward_sum = Σ_{u<t} γ^u r_u + γ^t Q̂_ε(z_t, a_t). No pessimism penalty: π_e's rewarded steps
are the off-log ones, and a penalty would rank the best ε lowest.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from ...model.world_model import WorldModel
from ..answers import VALUE
from ..classical.fqe import FittedQEvaluation
from ..classical.logged_steps import action_features, action_reader
from .transitions import Outcome, Query


class HandOverToValue:
    """Every pair it is asked about ends its rollout with FQE's Q̂ of the rollout's ε level, a_t
    read as that Q̂ was fitted to read it (``FQEConfig.action_reading``)."""

    def __init__(self, model: WorldModel, q_by_epsilon: Mapping[float, FittedQEvaluation]) -> None:
        self.model, self.q_by_epsilon = model, dict(q_by_epsilon)
        readings = {q.config.action_reading for q in self.q_by_epsilon.values()}
        if len(readings) > 1:
            raise ValueError(f"the hand-over's Q-networks read actions in different ways ({sorted(readings)})")
        reading = readings.pop() if readings else "vocabulary"
        self.action_ids, self.reading = action_reader(model, reading), reading

    def __call__(self, query: Query) -> Outcome:
        if query.epsilons is None:
            raise ValueError("the value hand-over needs each rollout's ε level (Query.epsilons)")
        missing = sorted(set(query.epsilons.tolist()) - set(self.q_by_epsilon))
        if missing:
            raise ValueError(f"no fitted Q for ε = {missing}; fitted for {sorted(self.q_by_epsilon)}")
        states = query.past[:, -1].numpy()
        ids = self.action_ids(query.actions)
        # ids past the fitted table: read as action_table reads them
        read = None if self.reading == "vocabulary" else action_features(self.model, ids, self.reading)
        value = np.zeros(len(ids))
        for epsilon, q in self.q_by_epsilon.items():
            rows = query.epsilons == epsilon
            if rows.any():
                value[rows] = (q.q_values(states[rows], ids[rows]) if read is None
                               else q.q_values_read(states[rows], read[torch.as_tensor(rows)]))
        return Outcome.answered_by(VALUE, query.past[:, -1].clone(), value, np.ones(len(value), bool))
