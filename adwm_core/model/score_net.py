"""Score network ε_θ(z_k, k, h̄_t, a_t) of the world model (app:wm-arch, Table wm-arch: 0.527 M).

A 3-layer FiLM-MLP of width 256. The diffusion step k enters through a sinusoidal
embedding of dimension 64 followed by a SiLU MLP 64 → 128 → 64; the condition
c = [emb(k), h̄_t, e(a_t)] (64 + 128 + 32) modulates each of the three hidden layers:

    x ← SiLU(LN(W x) · (1 + γ_ℓ(c)) + β_ℓ(c)),   ℓ = 1, 2, 3,

with parameter-free LayerNorm. The output projection 256 → d_z starts at zero, so an
untrained network predicts ε̂ = 0. Unconditional calls pass the ∅ action embedding.
"""

from __future__ import annotations

import math

import torch
from torch import nn

WIDTH = 256
TIME_DIM = 64
LAYERS = 3


def sinusoidal_embedding(k: torch.Tensor, dim: int = TIME_DIM, max_period: float = 10_000.0) -> torch.Tensor:
    """[cos(k ω_i), sin(k ω_i)], ω_i = max_period^(−i/(dim/2)), i < dim/2 (Vaswani et al., 2017)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=k.device, dtype=torch.float32) / half)
    angles = k.float().unsqueeze(-1) * freqs
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


class ScoreNetwork(nn.Module):
    def __init__(self, d_z: int = 64, d_h: int = 128, d_a: int = 32) -> None:
        super().__init__()
        self.time = nn.Sequential(nn.Linear(TIME_DIM, 2 * TIME_DIM), nn.SiLU(), nn.Linear(2 * TIME_DIM, TIME_DIM))
        widths = [d_z] + [WIDTH] * LAYERS
        self.layers = nn.ModuleList(nn.Linear(i, o) for i, o in zip(widths, widths[1:]))
        self.films = nn.ModuleList(nn.Linear(TIME_DIM + d_h + d_a, 2 * WIDTH) for _ in range(LAYERS))
        self.out = nn.Linear(WIDTH, d_z)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, z_k: torch.Tensor, k: torch.Tensor, h: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """``(N, d_z)`` noised latents, ``(N,)`` steps, ``(N, d_h)`` histories, ``(N, d_a)`` action
        embeddings → ``(N, d_z)`` predicted noise."""
        c = torch.cat([self.time(sinusoidal_embedding(k).to(z_k.dtype)), h, a], dim=-1)
        x = z_k
        for layer, film in zip(self.layers, self.films):
            gamma, beta = film(c).chunk(2, dim=-1)
            x = layer(x)
            x = nn.functional.silu(nn.functional.layer_norm(x, x.shape[-1:]) * (1 + gamma) + beta)
        return self.out(x)
