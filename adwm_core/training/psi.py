"""ψ-adapter training (app:psi-train, Eq. psi-loss).

For a batch of B observations with latents z_i (frozen world-model encoder) and π_e's
token-mean input embeddings ē_i of their text, with Ḡ_i = mean_n G_ψ(z_i)_n and
s_ij = cos(Ḡ_i, ē_j):

    L_ψ = −(1/2B) Σ_i [log softmax_j(s_ij/τ)_i + log softmax_j(s_ji/τ)_i] + 0.1 · (1/B) Σ_i ‖Ḡ_i − ē_i‖²,

τ = 0.1; Adam lr 1e-4, batch 8, 20 epochs. Top-1 retrieval accuracy — the share of i
with argmax_j s_ij = i — is reported per epoch on training and held-out batches beside
the random baseline 1/B.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from ..data.io import behaviour_rows, check_output
from ..model.psi import PsiAdapter
from ..model.seeded import seeded_linears
from ..model.world_model import WorldModel
from ..settings import PsiConfig
from .world_model import EpochCallback, resolve_device, split_indices



@dataclass
class PsiResult:
    path: str
    history: list[dict[str, float]]

    @property
    def final(self) -> dict[str, float]:
        return self.history[-1]


def observation_texts(trajectories: pa.Table) -> list[str]:
    """Every distinct observation text of the behaviour rows, first appearance first."""
    behaviour = behaviour_rows(trajectories)
    texts = behaviour["observation"].to_pylist() + behaviour["next_observation"].to_pylist()
    return list(dict.fromkeys(texts))


def psi_loss(soft_mean: torch.Tensor, targets: torch.Tensor, temperature: float, mse_weight: float):
    """(L_ψ, L_InfoNCE, L_MSE, top-1 accuracy) of Eq. (psi-loss) for one batch."""
    sim = nn.functional.normalize(soft_mean, dim=-1) @ nn.functional.normalize(targets, dim=-1).T
    labels = torch.arange(len(sim), device=sim.device)
    info_nce = 0.5 * (nn.functional.cross_entropy(sim / temperature, labels)
                      + nn.functional.cross_entropy(sim.T / temperature, labels))
    mse = ((soft_mean - targets) ** 2).sum(-1).mean()
    top1 = (sim.argmax(1) == labels).float().mean()
    return info_nce + mse_weight * mse, info_nce, mse, top1


def train_psi_adapter(
    world_model: WorldModel,
    texts: Sequence[str],
    target_embeddings: np.ndarray,
    out_dir: str,
    config: PsiConfig = PsiConfig(),
    *,
    on_epoch: EpochCallback | None = None,
    overwrite: bool = False,
) -> PsiResult:
    """Fit G_ψ so that the soft-token mean of G_ψ(f_θ(o)) retrieves π_e's ē(o); saved to ``out_dir``."""
    check_output(out_dir, overwrite=overwrite, hint="pass overwrite=True to retrain, or choose another folder")
    targets_np = np.asarray(target_embeddings, np.float32)
    if targets_np.ndim != 2 or len(targets_np) != len(texts):
        raise ValueError(f"target embeddings must be (len(texts), d_llm) = ({len(texts)}, d); got {targets_np.shape}")
    train, heldout = split_indices(len(texts), config.heldout_fraction, config.seed, minimum=config.batch_size)
    device = resolve_device(config.device)
    with torch.no_grad():
        world_model = world_model.to(device).eval()
        z = world_model.encode_texts(list(texts))
    targets = torch.from_numpy(targets_np).to(device)
    adapter = PsiAdapter(targets.shape[1], z.shape[1])
    seeded_linears(adapter.net, config.seed)  # a flow trains ψ beside stages that draw torch's shared generator
    adapter = adapter.to(device)
    optimiser = torch.optim.Adam(adapter.parameters(), lr=config.lr)
    rng = np.random.default_rng(config.seed)
    history = []
    for epoch in range(config.epochs):
        sums = np.zeros(4)
        batches = _batches(rng.permutation(train), config.batch_size)
        for rows in batches:
            terms = psi_loss(adapter(z[rows]).mean(1), targets[rows], config.temperature, config.mse_weight)
            optimiser.zero_grad(set_to_none=True)
            terms[0].backward()
            optimiser.step()
            sums += [float(t.detach()) for t in terms]
        metrics = {name: float(v) for name, v in zip(("train_loss", "train_infonce", "train_mse", "train_top1"), sums / len(batches))}
        with torch.no_grad():
            held = [psi_loss(adapter(z[rows]).mean(1), targets[rows], config.temperature, config.mse_weight)
                    for rows in _batches(rng.permutation(heldout), config.batch_size)]
        metrics["heldout_top1"] = float(np.mean([float(t[3]) for t in held]))
        metrics["random_top1"] = 1.0 / config.batch_size
        history.append(metrics)
        if on_epoch is not None:
            on_epoch(epoch, metrics)
    adapter.save(out_dir, {"config": config.model_dump(mode="json"), "final": history[-1]})
    return PsiResult(out_dir, history)


def _batches(order: np.ndarray, size: int) -> list[np.ndarray]:
    """Full batches only, so the random top-1 baseline is exactly 1/B."""
    n = len(order) // size
    return [order[i * size:(i + 1) * size] for i in range(n)]
