"""The behaviour log as imagination reads it: its distinct observations encoded once, where
episodes start, the success bank and the logged transitions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...data.behaviour_log import BehaviourLog
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
    def from_log(cls, log: BehaviourLog, model: WorldModel) -> "StateBank":
        rows = log.steps.select(["t", "observation", "task_description", "admissible"]).to_pylist()
        index: dict[str, int] = {}
        texts, tasks, admissible, starts = [], [], [], []
        for row in rows:
            if row["observation"] not in index:
                index[row["observation"]] = len(texts)
                texts.append(row["observation"])
                tasks.append(row["task_description"])
                admissible.append(None if row["admissible"] is None else tuple(row["admissible"]))
            if row["t"] == 0:
                starts.append(index[row["observation"]])
        last = log.last_steps()
        finals = np.asarray(log.column("next_observation"), object)[last][np.asarray(log.column("success"))[last]]
        with torch.no_grad():
            latents, success = model.encode_texts(texts).cpu(), model.encode_texts(list(dict.fromkeys(finals))).cpu()
        return cls(texts, tasks, admissible, latents, np.asarray(starts), success,
                   LoggedTransitions.from_log(log, model, index, latents))

    def nearest(self, z: torch.Tensor) -> np.ndarray:
        """Bank rows of the observations nearest to each latent (cosine)."""
        sim = torch.nn.functional.normalize(z, dim=-1) @ torch.nn.functional.normalize(self.latents, dim=-1).T
        return sim.argmax(-1).numpy()
