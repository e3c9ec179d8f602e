"""A non-parametric reference world model, run through ADWM's rollouts: the next state is a
logged successor of the nearest logged (state, action).

Its states are behaviour observations (rows of the :class:`~adwm_core.ope.adwm.StateBank`,
latents by the trained world model's encoder f_θ, so π_e reads them exactly as it reads the
diffusion model's imagined states). Where the log took π_e^ε's action a_t in the state s_t (the
bank row imagination reads), one of those transitions answers, as in ADWM with
``logged_successors``; elsewhere each logged transition (o, a, r, o', done) is scored

    sim = cos(z_{s_t}, z_o) + match(a_t, a),   match = 1 for the same action text, else the
                                               Jaccard overlap of their words,

and one of the best-scoring transitions is drawn uniformly: z_{t+1} = f_θ(o'), r̂_t = r (the
logged reward, on the environment's scale) and the episode ends where the logged step ended it.
No diffusion, no guidance, no heads: beside ADWM it shows what the learned transition adds.
"""

from __future__ import annotations


import numpy as np
import torch

from ..model.world_model import WorldModel
from ..policies.prompts import History
from .adwm import ImaginedRollouts, Policy, uniforms
from ..settings import AdwmConfig
from .state_bank import StateBank

ESTIMATOR = "kNN-WM"  # estimates rows are named f"{ESTIMATOR}:{value estimate}"


class ReferenceRollouts(ImaginedRollouts):
    """ADWM's rollouts (π_e^ε, the reading, common random numbers, value estimates) with the
    nearest logged transition in place of the diffusion world model's off the log."""

    def __init__(self, model: WorldModel, bank: StateBank, config: AdwmConfig = AdwmConfig()) -> None:
        # no sampler, nothing to guide; the log answers where it can
        super().__init__(model, bank, config.replace(guidance="none", logged_successors=True))
        self._units = torch.nn.functional.normalize(bank.latents, dim=-1)
        self._logged_units = self._units[bank.transitions.observations]  # (N, d_z) of each transition's o

    def off_log(self, policy: Policy, histories: list[History], actions: list[str], ids: torch.Tensor,
                read: np.ndarray, past: torch.Tensor, previous: torch.Tensor, noise: torch.Tensor,
                seconds: dict[str, float]) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        logged = self.bank.transitions
        scores = (self._units[torch.as_tensor(read)] @ self._logged_units.T
                  + torch.stack([logged.action_match(a) for a in actions]))  # (B, N): sim of every transition
        draws = uniforms(noise)
        chosen = np.empty(len(actions), np.int64)
        for j, score in enumerate(scores):
            best = torch.nonzero(score >= score.max() - 1e-6).flatten().numpy()
            chosen[j] = best[min(int(draws[j] * len(best)), len(best) - 1)]
        return logged.next_latents[chosen], logged.rewards[chosen], logged.done[chosen]
