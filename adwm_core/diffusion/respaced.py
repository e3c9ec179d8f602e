"""Sampling over a subset of the K levels (respacing), with DDIM's η between deterministic and
ancestral: a few-level sampler for imagined transitions that leaves the trained process alone.

Over levels k_1 > … > k_S (evenly spaced from K − 1 to 0), from z_{k_1} = z_K:
  ẑ_0 = P((z_k − √(1−ᾱ_k) ε̂)/√ᾱ_k),  ε̂_0 = (z_k − √ᾱ_k ẑ_0)/√(1−ᾱ_k),
  σ² = η² (1−ᾱ_k')/(1−ᾱ_k) (1 − ᾱ_k/ᾱ_k'),
  z_k' = √ᾱ_k' ẑ_0 + √(1−ᾱ_k' − σ²) ε̂_0 + σ ξ,
and the last ẑ_0 is the sample. η = 0 is DDIM (Song et al. 2021, Eq. 12); η = 1 draws z_k' from
the forward posterior q(z_k' | z_k, ẑ_0) of the respaced chain, the K-level ancestral sampler of
``process.GaussianDiffusion.sample`` when S = K.
"""

from __future__ import annotations

import torch

from .process import EpsModel, GaussianDiffusion, Projection
from .schedule import respaced_levels


def sample_respaced(diffusion: GaussianDiffusion, eps_model: EpsModel, noise: torch.Tensor, n_levels: int,
                    eta: float, project: Projection | None = None) -> torch.Tensor:
    """ẑ_0 from z_K = ``noise[0]`` over ``n_levels`` levels; ``noise[i + 1]`` is ξ of the i-th step
    (``noise`` as for ``GaussianDiffusion.sample``, so callers share random numbers the same way)."""
    levels = respaced_levels(diffusion.n_steps, n_levels)
    alpha_bar = diffusion.alpha_bar.to(noise)
    z = z0 = noise[0]
    for i, (k, k_next) in enumerate(zip(levels, levels[1:] + [None])):
        ks = torch.full((z.shape[0],), k, dtype=torch.long, device=z.device)
        z0 = diffusion.predict_z0(z, ks, eps_model(z, ks))
        if project is not None:
            z0 = project(z0)
        if k_next is not None:
            a, a_next = alpha_bar[k], alpha_bar[k_next]
            eps = (z - a.sqrt() * z0) / (1.0 - a).sqrt()
            variance = eta ** 2 * (1.0 - a_next) / (1.0 - a) * (1.0 - a / a_next)
            z = (a_next.sqrt() * z0 + (1.0 - a_next - variance).clamp(min=0.0).sqrt() * eps
                 + variance.sqrt() * noise[i + 1])
    return z0
