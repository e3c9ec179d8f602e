"""The world model read over windows of behaviour episodes (data/windows.py): a batch of
windows as tensors, each distinct observation tokenised once, and the latents z, histories h̄
and action conditions e(a_t | o_t) of its transitions — what training, its held-out metrics
and the baselines' FQE all read."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from ..data.windows import EpisodeArrays, Windows, covering_windows
from .world_model import WorldModel


@dataclass
class Batch:
    """Tensors of a batch of windows; ``ids``/``padding`` hold each distinct observation once."""

    ids: torch.Tensor  # (U, W) hash-token ids
    texts: torch.Tensor  # (U,) the row of each distinct observation among the tokenised texts
    padding: torch.Tensor  # (U, W)
    observations: torch.Tensor  # (B, L+1) rows of ids, −1 = padding
    previous_actions: torch.Tensor  # (B, L+1)
    actions: torch.Tensor  # (B, L)
    reward_targets: torch.Tensor  # (B, L)
    reward_mask: torch.Tensor  # (B, L)
    done: torch.Tensor  # (B, L)
    valid: torch.Tensor  # (B, L)
    episode: torch.Tensor  # (B,)


class Tokenised:
    """Hash-token ids of every distinct observation text, tokenised once."""

    def __init__(self, model: WorldModel, texts: list[str]) -> None:
        self.ids, self.padding = model.tokenizer(texts)

    def batch(self, windows: Windows, device: torch.device) -> Batch:
        rows, inverse = np.unique(windows.observations, return_inverse=True)
        inverse = inverse.reshape(windows.observations.shape)
        keep = rows >= 0
        index = np.where(windows.observations >= 0, inverse - (~keep).sum(), -1)
        ids, padding = self.ids[rows[keep]], self.padding[rows[keep]]
        width = max(1, int((~padding).sum(1).max()))

        def t(array, dtype=torch.long):
            return torch.as_tensor(np.asarray(array), dtype=dtype, device=device)

        return Batch(
            ids=ids[:, :width].to(device), texts=t(rows[keep]), padding=padding[:, :width].to(device), observations=t(index),
            previous_actions=t(windows.previous_actions), actions=t(windows.actions),
            reward_targets=t(windows.reward_targets, torch.float32), reward_mask=t(windows.reward_mask, torch.bool),
            done=t(windows.done, torch.bool), valid=t(windows.valid, torch.bool), episode=t(windows.episode),
        )


def latents(model: WorldModel, batch: Batch, known: torch.Tensor | None = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """z ``(B, L+1, d_z)`` (zeros at padding), h̄ ``(B, L, 128)`` and the conditions e(a_t | o_t)
    ``(B, L, d_a)`` (``WorldModel.conditions``) of the transitions of ``batch``; z read from
    ``known`` (the latents of every tokenised text, in their order) where given, else encoded."""
    if known is None:
        z_unique, states = model.encode_states(batch.ids, batch.padding)
    else:
        z_unique = known[batch.texts].to(batch.ids.device)
        states = model.observation_encoder.token_states(batch.ids, batch.padding) \
            if model.config.action_input == "text" else None
    present = batch.observations >= 0
    z = z_unique[batch.observations.clamp(min=0)] * present.unsqueeze(-1)
    h = model.history(z[:, :-1], batch.previous_actions[:, :-1])
    if model.config.action_input == "ids":
        return z, h, model.action_vectors(batch.actions)
    rows, actions = batch.observations[:, :-1].clamp(min=0).reshape(-1), batch.actions.reshape(-1)
    pairs, inverse = torch.unique(torch.stack([rows, actions]), dim=1, return_inverse=True)  # each (o, a) read once
    a = model.action_vectors(pairs[1], states[pairs[0]], batch.padding[pairs[0]], batch.ids[pairs[0]])[inverse]
    return z, h, a.reshape(*batch.actions.shape, -1)


def encoded_windows(model: WorldModel, tokens: Tokenised, data: EpisodeArrays, episodes: np.ndarray,
                    length: int, chunk: int = 256, known: torch.Tensor | None = None
                    ) -> Iterator[tuple[Batch, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(batch, z, h̄, e(a_t | o_t)) for the covering windows of ``episodes`` (every transition once, in
    episode order), ``chunk`` windows at a time; z read from ``known`` where given (``latents``)."""
    windows = covering_windows(data, episodes, length)
    for rows in np.array_split(np.arange(len(windows.episode)), math.ceil(len(windows.episode) / chunk)):
        batch = tokens.batch(windows.take(rows), model.device)
        yield (batch, *latents(model, batch, known))
