"""Continuation guidance for the reverse process (Eq. final_score, Alg. ope-rollout).

The sampler steps with ε̂ − g_k (``GaussianDiffusion.sample``), g_k = α η_k ∇_ẑ Σ_i J(ẑ_i) for
an objective J of the denoised estimate ẑ = (z_k − √(1−ᾱ_k) ε̂)/√ᾱ_k (Eq. app_denoised), the
gradient taken with respect to ẑ as in Eq. (app_cont_grad). The weight η_k grows as the
reverse process nears k = 0, where ẑ becomes reliable. Two objectives: the π_e likelihood
along a look-ahead (Eq. final_score; ope/imagination/diffusion_transition.py builds it, it needs ψ and the LLM) and the
cosine similarity to a success bank (Alg. ope-rollout).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from .process import GaussianDiffusion, Guidance

Objective = Callable[[torch.Tensor, slice], torch.Tensor]  # (ẑ of rows, the rows) → J per row


def eta_schedule(n_steps: int, eta_max: float, last: int | None = None) -> np.ndarray:
    """η_k = η_max · (1 − k/K) for the 0-based step k (k = K−1 is the noisiest): η_max/K at the
    first reverse step, η_max at the last; with ``last``, 0 before the final ``last`` steps."""
    eta = eta_max * (1.0 - np.arange(n_steps) / n_steps)
    if last is not None:
        eta[last:] = 0.0
    return eta


def nearest_cosine(z: torch.Tensor, bank: torch.Tensor) -> torch.Tensor:
    """max_b cos(z_i, b) over the rows b of ``bank``: ``(N, d)``, ``(B, d)`` → ``(N,)``."""
    return (nn.functional.normalize(z, dim=-1) @ nn.functional.normalize(bank, dim=-1).T).max(-1).values


def gradient_guidance(diffusion: GaussianDiffusion, objective: Objective, alpha: float, eta: np.ndarray,
                      chunk: int | None = None) -> Guidance:
    """g_k = α η_k ∇_ẑ Σ_i J(ẑ_i), ε̂ held fixed; rows are independent, so the gradient is taken
    ``chunk`` rows at a time (bounded memory for an LLM objective). No work where η_k = 0."""

    def guidance(z_k: torch.Tensor, k: int, eps: torch.Tensor) -> torch.Tensor:
        if eta[k] == 0.0:
            return torch.zeros_like(z_k)
        ks = torch.full((len(z_k),), k, dtype=torch.long, device=z_k.device)
        z0 = diffusion.predict_z0(z_k, ks, eps).detach()
        grad = torch.empty_like(z0)
        step = chunk or len(z0)
        with torch.enable_grad():
            for lo in range(0, len(z0), step):
                rows = slice(lo, lo + step)
                part = z0[rows].clone().requires_grad_(True)
                (grad[rows],) = torch.autograd.grad(objective(part, rows).sum(), part)
        return alpha * float(eta[k]) * grad

    return guidance


def success_bank_guidance(diffusion: GaussianDiffusion, bank: torch.Tensor, alpha: float,
                          eta: np.ndarray) -> Guidance:
    """g_k = α η_k ∇_ẑ max_b cos(ẑ, b): pulls the denoised estimate towards the nearest latent of
    the success bank (Alg. ope-rollout)."""
    return gradient_guidance(diffusion, lambda z, rows: nearest_cosine(z, bank), alpha, eta)
