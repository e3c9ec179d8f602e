"""Prediction heads of the world model over (z, h̄) (app:wm-arch, Table wm-arch).

The paper gives the heads' depth and inputs but not their hidden widths; the widths
below are the ones that reproduce Table wm-arch at d_z = 64, d_h = 128, |A| = 256:

- reward R_θ(z_{t+1}, h̄_t): 192 → 256 → 256 → 1, SiLU, a logit (σ gives [0, 1]) — 0.115 M;
- termination D_θ(z_{t+1}, h̄_t): 192 → 256 → 1, SiLU, a BCE logit — 0.050 M;
- inverse dynamics IDM(z_{t+1}, h̄_t) → a_t: 192 → 97 → |A|, ReLU — 0.044 M;
- behaviour cloning BC(z_t, h̄_t) → a_t: 192 → 378 → |A|, ReLU — 0.170 M.

h̄_t summarises (z_{≤t}, a_{<t}), so the IDM must read z_{t+1} to recover a_t.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

IDM_WIDTH = 97
BC_WIDTH = 378


class MLPHead(nn.Module):
    """Linear layers ``widths[0] → … → widths[-1]`` with ``activation`` between them, on [z, h̄]."""

    def __init__(self, widths: Sequence[int], activation: type[nn.Module] = nn.SiLU) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
            layers += [nn.Linear(n_in, n_out)] + ([activation()] if i < len(widths) - 2 else [])
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        out = self.net(torch.cat([z, h], dim=-1))
        return out.squeeze(-1) if out.shape[-1] == 1 else out


def reward_head(d_z: int = 64, d_h: int = 128) -> MLPHead:
    return MLPHead([d_z + d_h, 256, 256, 1])


def termination_head(d_z: int = 64, d_h: int = 128) -> MLPHead:
    return MLPHead([d_z + d_h, 256, 1])


def inverse_dynamics_head(n_actions: int, d_z: int = 64, d_h: int = 128) -> MLPHead:
    return MLPHead([d_z + d_h, IDM_WIDTH, n_actions], nn.ReLU)


def behaviour_cloning_head(n_actions: int, d_z: int = 64, d_h: int = 128) -> MLPHead:
    return MLPHead([d_z + d_h, BC_WIDTH, n_actions], nn.ReLU)
