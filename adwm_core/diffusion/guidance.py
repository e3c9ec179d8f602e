"""Continuation guidance for the reverse process (Eq. final_score, Alg. ope-rollout).

The sampler steps with ε̂ − g_k (``GaussianDiffusion.sample``). The weight η_k grows as the
reverse process nears k = 0, where the denoised estimate ẑ = (z_k − √(1−ᾱ_k) ε̂)/√ᾱ_k
(Eq. app_denoised) becomes reliable; the gradient is taken with respect to ẑ, as in
Eq. (app_cont_grad).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .process import GaussianDiffusion, Guidance


def eta_schedule(n_steps: int, eta_max: float) -> np.ndarray:
    """η_k = η_max · (1 − k/K) for the 0-based step k (k = K−1 is the noisiest): η_max/K at the
    first reverse step, η_max at the last."""
    return eta_max * (1.0 - np.arange(n_steps) / n_steps)


def nearest_cosine(z: torch.Tensor, bank: torch.Tensor) -> torch.Tensor:
    """max_b cos(z_i, b) over the rows b of ``bank``: ``(N, d)``, ``(B, d)`` → ``(N,)``."""
    return (nn.functional.normalize(z, dim=-1) @ nn.functional.normalize(bank, dim=-1).T).max(-1).values


def success_bank_guidance(diffusion: GaussianDiffusion, bank: torch.Tensor, alpha: float,
                          eta: np.ndarray) -> Guidance:
    """g_k = α η_k ∇_ẑ max_b cos(ẑ, b): pulls the denoised estimate towards the nearest latent of
    the success bank (Alg. ope-rollout), ε̂ held fixed."""

    def guidance(z_k: torch.Tensor, k: int, eps: torch.Tensor) -> torch.Tensor:
        if eta[k] == 0.0:
            return torch.zeros_like(z_k)
        ks = torch.full((len(z_k),), k, dtype=torch.long, device=z_k.device)
        with torch.enable_grad():
            z0 = diffusion.predict_z0(z_k, ks, eps).detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(nearest_cosine(z0, bank).sum(), z0)
        return alpha * float(eta[k]) * grad

    return guidance
