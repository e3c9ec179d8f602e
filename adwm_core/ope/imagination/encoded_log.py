"""The behaviour log as one world-model member reads it: built once per member and shared by
everything in the ADWM stage that reads the log through that member — the state bank (what π_e
reads, the logged and carried transitions, kNN-WM's nearest transitions) and the logged steps
the hand-over's Q̂ is fitted on.

The log is encoded once (``model.observation_latents``): the bank's latents, the logged
successors' and the z_0…z_T of FQE's steps are the same tensors, so Q̂ is queried at exactly
the latents it was fitted on.
"""

from __future__ import annotations

from functools import cached_property

import pyarrow as pa

from ...data.behaviour_log import BehaviourLog
from ...model.observation_latents import ObservationLatents
from ...model.world_model import WorldModel
from ..classical.logged_steps import LoggedSteps, logged_steps
from .state_bank import StateBank


class EncodedLog:
    """``log`` read through world-model member ``model``."""

    def __init__(self, log: BehaviourLog, model: WorldModel) -> None:
        self.log, self.model = log, model

    @cached_property
    def latents(self) -> ObservationLatents:
        """z of every distinct observation text of the log, encoded once."""
        return ObservationLatents(self.log, self.model)

    @cached_property
    def bank(self) -> StateBank:
        """Where episodes start, the success bank and the logged transitions (state_bank.py)."""
        return StateBank.from_log(self.log, self.model, self.latents)

    def steps(self, scores: pa.Table, *, scores_name: str, action_reading: str) -> LoggedSteps:
        """The logged steps on the episode grid with π_e's candidates from ``scores`` (a log-prob
        or greedy-action table): what FQE's Q̂ is fitted on (classical/logged_steps.py)."""
        return logged_steps(self.log, scores, self.model, scores_name=scores_name, action_reading=action_reading,
                            observed=self.latents)
