"""Noise schedules as pure functions of the number of diffusion steps K.

Index convention: arrays have K entries; entry k (0-based) belongs to diffusion
step k+1 of the paper, so ``alpha_bar[0]`` is the least and ``alpha_bar[-1]``
the most noised level (ᾱ_K ≈ 0).
"""

from __future__ import annotations

import math

import numpy as np


def cosine_alpha_bar(n_steps: int, offset: float = 0.008, max_beta: float = 0.999) -> np.ndarray:
    """ᾱ_k = f(k)/f(0), f(u) = cos²(((u/K) + s)/(1 + s) · π/2) (Nichol & Dhariwal 2021),
    with every β_k = 1 − ᾱ_k/ᾱ_{k−1} capped at ``max_beta`` so the last steps stay finite."""
    if n_steps < 1:
        raise ValueError(f"need at least one diffusion step, got {n_steps}")
    u = np.arange(n_steps + 1, dtype=np.float64) / n_steps
    f = np.cos((u + offset) / (1 + offset) * math.pi / 2) ** 2
    betas = np.minimum(1.0 - f[1:] / f[:-1], max_beta)
    return np.cumprod(1.0 - betas)


SCHEDULES = {"cosine": cosine_alpha_bar}  # ᾱ by name, as a world model's config saves it


def betas_from_alpha_bar(alpha_bar: np.ndarray) -> np.ndarray:
    """β_k = 1 − ᾱ_k/ᾱ_{k−1}, with ᾱ_0 = 1."""
    previous = np.concatenate([[1.0], alpha_bar[:-1]])
    return 1.0 - alpha_bar / previous


def posterior_variance(alpha_bar: np.ndarray) -> np.ndarray:
    """β̃_k = β_k (1 − ᾱ_{k−1}) / (1 − ᾱ_k): the variance of q(z_{k−1} | z_k, z_0) (0 at the first step)."""
    previous = np.concatenate([[1.0], alpha_bar[:-1]])
    return betas_from_alpha_bar(alpha_bar) * (1.0 - previous) / (1.0 - alpha_bar)


def posterior_mean_coefficients(alpha_bar: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(c_0, c_k) with E[z_{k−1} | z_k, z_0] = c_0 z_0 + c_k z_k:
    c_0 = √ᾱ_{k−1} β_k/(1 − ᾱ_k), c_k = √(1 − β_k) (1 − ᾱ_{k−1})/(1 − ᾱ_k)."""
    previous = np.concatenate([[1.0], alpha_bar[:-1]])
    betas = betas_from_alpha_bar(alpha_bar)
    return np.sqrt(previous) * betas / (1.0 - alpha_bar), np.sqrt(1.0 - betas) * (1.0 - previous) / (1.0 - alpha_bar)


def respaced_levels(n_steps: int, n_levels: int) -> list[int]:
    """``n_levels`` distinct levels evenly spaced from ``n_steps − 1`` down to 0."""
    return [int(k) for k in np.unique(np.linspace(n_steps - 1, 0, max(n_levels, 1)).round().astype(int))[::-1]]
