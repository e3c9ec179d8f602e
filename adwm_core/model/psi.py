"""ψ adapter G_ψ: z ∈ R^{d_z} → n_soft = 8 soft tokens in π_e's input-embedding space (app:psi-train).

A 3-layer GELU MLP d_z → 256 → 256 → 8·d_llm, i.e.
(d_z+1)·256 + 257·256 + 257·8·d_llm parameters (0.609 M for d_z = 64, d_llm = 256, Table wm-arch).
"""

from __future__ import annotations

import torch
from torch import nn

from .checkpoint import load_checkpoint, save_checkpoint

N_SOFT = 8
WIDTH = 256
WEIGHTS_FILE = "adapter.safetensors"


class PsiAdapter(nn.Module):
    def __init__(self, d_llm: int, d_z: int = 64, n_soft: int = N_SOFT) -> None:
        super().__init__()
        self.d_llm, self.d_z, self.n_soft = d_llm, d_z, n_soft
        self.net = nn.Sequential(
            nn.Linear(d_z, WIDTH), nn.GELU(), nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.Linear(WIDTH, n_soft * d_llm)
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """``(N, d_z)`` → ``(N, n_soft, d_llm)`` soft tokens."""
        return self.net(z).unflatten(-1, (self.n_soft, self.d_llm))

    def save(self, path: str, extra: dict) -> None:
        """Weights and shape to the folder ``path`` (``extra``: what trained it, kept beside)."""
        save_checkpoint(path, WEIGHTS_FILE, self, {"d_llm": self.d_llm, "d_z": self.d_z, "n_soft": self.n_soft, **extra})

    @classmethod
    def load(cls, path: str, device: str | torch.device = "cpu") -> "PsiAdapter":
        meta, weights = load_checkpoint(path, WEIGHTS_FILE, "ψ-adapter")
        adapter = cls(meta["d_llm"], meta["d_z"], meta["n_soft"])
        adapter.load_state_dict(weights)
        return adapter.to(device).eval()
