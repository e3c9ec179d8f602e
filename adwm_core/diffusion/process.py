"""The Gaussian diffusion process over latents, independent of any network.

The sampler takes the noise prediction as a function ``eps(z_k, k) -> ε̂``; nothing is
clipped (latents are not images in [−1, 1]). The process owns the network's
parametrisation (``prediction``): what a network's raw output means, the denoising loss
it is trained with, and its conversion to ε̂:

- ``eps`` (the paper): the network predicts ξ; loss ω(k)‖out − ξ‖², ω(k) = 1 − ᾱ_k;
- ``z0``: the network regresses the clean latent; loss ‖out − z_0‖² at every level alike, and
  ε̂ = (z_k − √ᾱ_k ẑ_0)/√(1−ᾱ_k) feeds the same sampler. At the noisiest levels z_k carries
  almost nothing and ẑ_0 must come from the conditioning, where ε-prediction's weight
  ᾱ_k on ẑ_0's error vanishes.

- forward noising (paper Sec. ddpm): z_k = √ᾱ_k z_0 + √(1−ᾱ_k) ξ;
- denoised estimate, Eq. (app_denoised): ẑ_0 = (z_k − √(1−ᾱ_k) ε̂) / √ᾱ_k;
- DDPM reverse step: z_{k−1} = (z_k − β_k/√(1−ᾱ_k) ε̂)/√(1−β_k) + σ_k ξ, σ_k² = β̃_k;
  equivalently the posterior mean c_0 ẑ_0 + c_k z_k. With ``project``, the step uses
  c_0 P(ẑ_0) + c_k z_k: the denoised estimate is projected onto the data's own manifold
  before the step (for the world model: LayerNorm, where every encoder output lies).
  Unprojected, the first steps of a cosine schedule divide by √(1−β_K) ≈ 0.03, and a
  small error of ε̂ at the noisiest level blows the sample up;
- classifier-free guidance, Eq. (dsm_loss) / Alg. ope-rollout: ε̂ = (1+λ) ε(c) − λ ε(∅);
- deterministic DDIM (η = 0) on a few strided levels from z_K = 0: the mode-seeking, noise-free
  transition the continuation look-ahead rolls the world model forward with;
- additive guidance as in Alg. ope-rollout: the step uses ε̂ − g_k, i.e. the score
  −ε̂/√(1−ᾱ_k) is shifted by g_k/√(1−ᾱ_k).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .schedule import (betas_from_alpha_bar, cosine_alpha_bar, posterior_mean_coefficients, posterior_variance,
                       respaced_levels)

Projection = Callable[[torch.Tensor], torch.Tensor]
EpsModel = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Guidance = Callable[[torch.Tensor, int, torch.Tensor], torch.Tensor]  # (z_k, k, ε̂) → g_k
PREDICTIONS = ("eps", "z0")  # what the network outputs: the noise ξ or the clean latent z_0


def classifier_free(eps_cond: torch.Tensor, eps_uncond: torch.Tensor, scale: float) -> torch.Tensor:
    """ε̂ = (1+λ)·ε(z,k,h,a) − λ·ε(z,k,h,∅); λ = 0 is the conditional model alone."""
    return (1.0 + scale) * eps_cond - scale * eps_uncond


class GaussianDiffusion:
    """K-step DDPM with schedule ``alpha_bar`` (default: cosine, K = 50 as in app:ope-rollout)
    for a network that outputs ``prediction`` (``PREDICTIONS``)."""

    def __init__(self, alpha_bar: np.ndarray | None = None, n_steps: int = 50, prediction: str = "eps") -> None:
        alpha_bar = cosine_alpha_bar(n_steps) if alpha_bar is None else np.asarray(alpha_bar, dtype=np.float64)
        if np.any(np.diff(alpha_bar) >= 0) or not (0 < alpha_bar[-1] < alpha_bar[0] <= 1):
            raise ValueError("alpha_bar must decrease strictly within (0, 1]")
        if prediction not in PREDICTIONS:
            raise ValueError(f"diffusion: prediction={prediction!r}; choose from {PREDICTIONS}")
        self.prediction = prediction
        self.n_steps = len(alpha_bar)
        self.alpha_bar = torch.from_numpy(alpha_bar)
        self.betas = torch.from_numpy(betas_from_alpha_bar(alpha_bar))
        self.sigmas = torch.from_numpy(np.sqrt(posterior_variance(alpha_bar)))
        self.mean_z0, self.mean_zk = (torch.from_numpy(c) for c in posterior_mean_coefficients(alpha_bar))

    def _at(self, values: torch.Tensor, k: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """values[k] shaped to broadcast over a batch ``like``."""
        out = values.to(like.device)[k].to(like.dtype)
        return out.reshape(-1, *([1] * (like.dim() - 1)))

    def sample_steps(self, batch: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Diffusion steps drawn uniformly (0-based)."""
        return torch.randint(0, self.n_steps, (batch,), generator=generator)

    def q_sample(self, z0: torch.Tensor, k: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """z_k = √ᾱ_k z_0 + √(1−ᾱ_k) ξ."""
        a = self._at(self.alpha_bar, k, z0)
        return a.sqrt() * z0 + (1.0 - a).sqrt() * noise

    def predict_z0(self, z_k: torch.Tensor, k: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        """ẑ_0 = (z_k − √(1−ᾱ_k) ε̂)/√ᾱ_k, Eq. (app_denoised)."""
        a = self._at(self.alpha_bar, k, z_k)
        return (z_k - (1.0 - a).sqrt() * eps) / a.sqrt()

    def eps_from_z0(self, z_k: torch.Tensor, k: torch.Tensor, z0: torch.Tensor) -> torch.Tensor:
        """ε̂ = (z_k − √ᾱ_k ẑ_0)/√(1−ᾱ_k): the noise a z_0-predicting model implies."""
        a = self._at(self.alpha_bar, k, z_k)
        return (z_k - a.sqrt() * z0) / (1.0 - a).sqrt()

    def to_eps(self, z_k: torch.Tensor, k: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """ε̂ from the network's raw ``output`` at (z_k, k) under this process's ``prediction``."""
        return self.eps_from_z0(z_k, k, output) if self.prediction == "z0" else output

    def denoising_loss(self, output: torch.Tensor, z0: torch.Tensor, noise: torch.Tensor,
                       k: torch.Tensor) -> torch.Tensor:
        """Per-sample ω(k)·mean_d (output − target)², target ξ (``eps``) or z_0 (``z0``), for a
        network that saw z_k = q_sample(z0, k, noise)."""
        if self.prediction == "z0":
            return ((output - z0) ** 2).mean(-1)
        return (1.0 - self._at(self.alpha_bar, k, output[..., 0])) * ((output - noise) ** 2).mean(-1)

    def step(self, z_k: torch.Tensor, k: int, eps: torch.Tensor, noise: torch.Tensor | None = None,
             project: Projection | None = None) -> torch.Tensor:
        """One reverse step z_k → z_{k−1} given ε̂ (and optionally a projection of ẑ_0);
        the last step (k = 0) adds no noise."""
        ks = torch.full((z_k.shape[0],), k, dtype=torch.long, device=z_k.device)
        if project is None:
            beta, a = self._at(self.betas, ks, z_k), self._at(self.alpha_bar, ks, z_k)
            mean = (z_k - beta / (1.0 - a).sqrt() * eps) / (1.0 - beta).sqrt()
        else:
            z0 = project(self.predict_z0(z_k, ks, eps))
            mean = self._at(self.mean_z0, ks, z_k) * z0 + self._at(self.mean_zk, ks, z_k) * z_k
        if k == 0 or noise is None:
            return mean
        return mean + self._at(self.sigmas, ks, z_k) * noise

    def sample(
        self,
        eps_model: EpsModel,
        shape: tuple[int, ...],
        *,
        guidance: Guidance | None = None,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
        project: Projection | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """Ancestral sampling from z_K ~ N(0, I); ``guidance(z_k, k, ε̂)`` returns g_k, used as ε̂ − g_k.

        ``noise`` (``(K + 1, *shape)``: z_K, then the noise of each reverse step) replaces the
        draws from ``generator``, so callers can share random numbers between batches."""
        if noise is None:
            noise = torch.randn((self.n_steps + 1, *shape), generator=generator, dtype=dtype)
        elif noise.shape != (self.n_steps + 1, *shape):
            raise ValueError(f"noise must have shape {(self.n_steps + 1, *shape)}, got {tuple(noise.shape)}")
        z = noise[0]
        for i, k in enumerate(reversed(range(self.n_steps))):
            eps = eps_model(z, torch.full((shape[0],), k, dtype=torch.long, device=z.device))
            if guidance is not None:
                eps = eps - guidance(z, k, eps)
            z = self.step(z, k, eps, noise[i + 1], project)
        return z

    def denoise_deterministic(self, eps_model: EpsModel, z: torch.Tensor, n_steps: int,
                              project: Projection | None = None) -> torch.Tensor:
        """DDIM with η = 0 from ``z`` at the noisiest level over ``n_steps`` evenly spaced levels:
        ẑ_0 = P((z_k − √(1−ᾱ_k) ε̂)/√ᾱ_k), z_k' = √ᾱ_k' ẑ_0 + √(1−ᾱ_k') ε̂ at the next level k';
        returns the last ẑ_0. Differentiable in ``z`` and in whatever ``eps_model`` closes over."""
        levels = respaced_levels(self.n_steps, n_steps)
        z0 = z
        for i, k in enumerate(levels):
            ks = torch.full((z.shape[0],), k, dtype=torch.long, device=z.device)
            eps = eps_model(z, ks)
            z0 = self.predict_z0(z, ks, eps)
            if project is not None:
                z0 = project(z0)
            if i + 1 < len(levels):
                a = self._at(self.alpha_bar, torch.full_like(ks, levels[i + 1]), z)
                z = a.sqrt() * z0 + (1.0 - a).sqrt() * eps
        return z0
