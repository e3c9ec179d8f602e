"""The behaviour log as imagination reads it: its distinct observations encoded once, where
episodes start, the success bank and the logged transitions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...data.behaviour_log import BehaviourLog
from ...model.observation_latents import ObservationLatents
from ...model.world_model import WorldModel
from .logged import LoggedTransitions


@dataclass
class StateBank:
    """The behaviour observations imagination reads from, and the transitions logged between
    them, encoded once."""

    texts: list[str]
    task_descriptions: list[str]
    admissible: list[tuple[str, ...] | None]
    latents: torch.Tensor  # (U, d_z)
    starts: np.ndarray  # bank rows of the episodes' first observations, one per episode
    success: torch.Tensor  # (S, d_z) latents of the last observations of successful episodes
    transitions: LoggedTransitions

    @classmethod
    def from_log(cls, log: BehaviourLog, model: WorldModel, observed: ObservationLatents | None = None) -> "StateBank":
        """The bank of ``log`` read through ``model``, from the log's latents ``observed`` where
        already encoded (encoded_log.py)."""
        observed = observed or ObservationLatents(log, model)
        first = {}  # each distinct observation's first row
        for row in log.steps.select(["t", "observation", "task_description", "admissible"]).to_pylist():
            first.setdefault(row["observation"], row)
        texts = observed.texts[: observed.observations]
        last = log.last_steps()
        finals = np.asarray(log.column("next_observation"), object)[last][np.asarray(log.column("success"))[last]]
        return cls(texts, [first[text]["task_description"] for text in texts],
                   [None if first[text]["admissible"] is None else tuple(first[text]["admissible"]) for text in texts],
                   observed.latents[: observed.observations],
                   np.asarray(observed.rows([o for o, t in zip(log.column("observation"), log.column("t")) if t == 0])),
                   observed.of(list(dict.fromkeys(finals))), LoggedTransitions.from_log(log, observed))

    def nearest(self, z: torch.Tensor) -> np.ndarray:
        """Bank rows of the observations nearest to each latent (cosine)."""
        sim = torch.nn.functional.normalize(z, dim=-1) @ torch.nn.functional.normalize(self.latents, dim=-1).T
        return sim.argmax(-1).numpy()
