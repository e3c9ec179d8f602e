"""The likelihood continuation guidance of ADWM's imagined transitions (Eq. final_score;
docs/method.md, 'Guided transition')."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from ..model.world_model import on_latent_manifold
from ..policies.prompts import History
from ..policies.soft_prompt import SoftPromptPolicy

if TYPE_CHECKING:
    from .adwm import ImaginedRollouts


class LookaheadLikelihood:
    """J(ẑ_{t+1}) = Σ_{u=t+1}^{t+h} log π_e(â_u | h̃_u) along one greedy look-ahead from ẑ_{t+1}
    (Eq. app_cont_approx): at each u, π_e reads ẑ_u through ψ and acts greedily (â_u, mapped to
    the admissible list of the behaviour observation nearest to ẑ_u); the world model moves on
    to ẑ_{u+1} by deterministic DDIM from z_K = 0 given (h̄_u, â_u). Differentiable in ẑ_{t+1}
    through ψ, the LLM and the world model; the greedy choices themselves are not."""

    def __init__(self, imagination: ImaginedRollouts, policy: SoftPromptPolicy, histories: list[History],
                 actions: list[str], past: torch.Tensor, previous: torch.Tensor, action_ids: torch.Tensor) -> None:
        self.imagination, self.policy = imagination, policy
        self.histories = [replace(h, steps=h.steps + ((h.observation, a),)) for h, a in zip(histories, actions)]
        self.past, self.previous, self.action_ids = past, previous, action_ids

    def __call__(self, z_hat: torch.Tensor, rows: slice) -> torch.Tensor:
        imagination, model = self.imagination, self.imagination.model
        bank, c = imagination.bank, imagination.config
        histories = self.histories[rows]
        latents, previous, ids = self.past[rows], self.previous[rows], self.action_ids[rows]
        total = z_hat.new_zeros(len(z_hat))
        for u in range(c.lookahead):
            latents = torch.cat([latents, z_hat[:, None]], 1)
            previous = torch.cat([previous, ids[:, None]], 1)
            nearest = bank.nearest(z_hat.detach())
            admissible = [bank.admissible[i] for i in nearest]
            now = [replace(h, observation="", admissible=listed) for h, listed in zip(histories, admissible)]
            with torch.no_grad():
                greedy = [d.action for d in self.policy.act(now, latents.detach())]
            total = total + self.policy.logprob(now, latents, greedy).to(total.device)
            if u + 1 == c.lookahead:
                return total
            ids = imagination.action_ids(greedy)
            hbar = model.history(latents, previous)[:, -1]
            conditions = model.conditions(ids, [bank.texts[i] for i in nearest])
            z_hat = imagination.diffusion.denoise_deterministic(imagination.eps_model(hbar, conditions),
                                                                torch.zeros_like(z_hat), c.lookahead_denoise,
                                                                project=on_latent_manifold)
            histories = [replace(h, steps=h.steps + (("", a),)) for h, a in zip(now, greedy)]
        return total
