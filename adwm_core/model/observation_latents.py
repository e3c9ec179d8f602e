"""Every distinct observation text of a behaviour log encoded once by one world model,
z = LN(f_θ(o)) (``WorldModel.encode_texts``): what imagination's state bank, its logged
transitions and FQE's logged steps all read, so that a Q̂ fitted on the log is queried at
exactly the latents it was fitted on."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..data.behaviour_log import BehaviourLog
from .world_model import WorldModel


class ObservationLatents:
    """z of the log's observations (in the order the log first shows them), then of the
    successors it never shows as an observation (episodes' last observations)."""

    def __init__(self, log: BehaviourLog, model: WorldModel) -> None:
        observed = list(dict.fromkeys(log.column("observation")))
        known = set(observed)
        successors = [text for text in dict.fromkeys(log.column("next_observation")) if text not in known]
        with torch.no_grad():
            parts = [model.encode_texts(observed).cpu()]
            if successors:
                parts.append(model.encode_texts(successors).cpu())
        self.observations = len(observed)  # rows 0…observations−1 are the observations
        self.texts = observed + successors
        self.row = {text: i for i, text in enumerate(self.texts)}
        self.latents = torch.cat(parts)

    def rows(self, texts: Sequence[str]) -> list[int]:
        return [self.row[text] for text in texts]

    def of(self, texts: Sequence[str]) -> torch.Tensor:
        """z of each of ``texts`` (every one a text of the log)."""
        return self.latents[self.rows(texts)]
