"""World-model objective, Eq. (wm-loss) of app:wm-loss:

    L_WM = L_DSM + 0.1 L_IDM + 0.1 L_BC + 0.05 L_div + 10 L_r + 1 L_d.

- L_DSM = E[ω(k)(‖ε_θ(z_k,k,h̄_t,a_t) − ξ‖² + ‖ε_θ(z_k,k,h̄_t,∅) − ξ‖²)], ω(k) = 1 − ᾱ_k; the
  conditional branch also drops a_t to ∅ with p_uncond = 0.1 (classifier-free dropout).
  Squared errors are averaged over the d_z coordinates, so L_DSM ≈ 1 at initialisation
  (ε̂ = 0) and the paper's weights keep their relative size. The diffusion process owns the
  parametrisation (``GaussianDiffusion.denoising_loss``): a z_0-predicting network regresses
  z_{t+1} instead of ξ, with ω(k) = 1 at every level (≈ 1 at initialisation too: latents have
  unit mean square).
- L_IDM = CE(IDM(z_{t+1}, h̄_t), a_t); L_BC = CE(BC(z_t, h̄_t), a_t).
- L_div = (1/(B(B−1))) Σ_{i≠j} |z̄_iᵀ z̄_j|, z̄ = normalize(mean_t z) per window; pairs of windows
  of the same episode (success up-sampling repeats episodes) are left out.
- L_r: MSE between σ(R_θ(z_{t+1}, h̄_t)) and the target in [0, 1], or balanced BCE for 0/1 targets.
- L_d: balanced BCE of D_θ(z_{t+1}, h̄_t) against done_{t+1}. (Both heads read e(a_t) in place of
  z_{t+1} where ``WorldModelConfig.outcome_input`` is ``action``.)
Balanced BCE weighs positives by min(50, n_neg/n_pos) in the batch.

Collapse guard: the DSM target z_{t+1} is detached — a constant encoder would make the
noise trivially predictable, so the denoising loss must not be able to shape f_θ; the
encoder learns from IDM, BC, reward, termination and L_div (and through h̄ from the DSM
conditioning), with its scale fixed by the latent LayerNorm (model/world_model.py).
"""

from __future__ import annotations


import torch
from torch import nn

from ..data.actions import NULL
from ..diffusion.process import GaussianDiffusion
from ..model.windows import Batch, latents
from ..model.world_model import WorldModel
from ..settings import LossWeights

POSITIVE_WEIGHT_CAP = 50.0


def balanced_bce(logits: torch.Tensor, targets: torch.Tensor, cap: float = POSITIVE_WEIGHT_CAP) -> torch.Tensor:
    """BCE with positive-class weight min(cap, n_neg/n_pos) (1 when either class is absent: a
    batch of positives only must still pull its logits up)."""
    targets = targets.float()
    n_pos = targets.sum()
    n_neg = targets.numel() - n_pos
    weight = (n_neg / n_pos).clamp(max=cap) if n_pos > 0 and n_neg > 0 else targets.new_tensor(1.0)
    return nn.functional.binary_cross_entropy_with_logits(logits, targets, pos_weight=weight)


def diversity_loss(pooled: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Mean |cos| between pooled latents of windows from different ``groups``."""
    unit = nn.functional.normalize(pooled, dim=-1)
    cos = (unit @ unit.T).abs()
    others = groups[:, None] != groups[None, :]
    return cos[others].mean() if others.any() else cos.new_zeros(())


def world_model_losses(
    model: WorldModel,
    batch: Batch,
    diffusion: GaussianDiffusion,
    *,
    weights: LossWeights = LossWeights(),
    p_uncond: float = 0.1,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Every term of Eq. (wm-loss) and their weighted sum under ``total``."""
    z, h, conditions = latents(model, batch)
    m = batch.valid
    z_now, z_next, h_t, a_t, c_t = z[:, :-1][m], z[:, 1:][m], h[m], batch.actions[m], conditions[m]
    device = z.device

    k = diffusion.sample_steps(len(a_t), generator).to(device)
    noise = torch.randn(z_next.shape, generator=generator).to(device, z_next.dtype)
    z_k = diffusion.q_sample(z_next.detach(), k, noise)
    dropped = torch.rand(len(a_t), generator=generator).to(device) < p_uncond
    null = model.action_vectors(torch.full_like(a_t[:1], NULL))
    cond = model.denoiser(z_k, k, h_t, torch.where(dropped.unsqueeze(-1), null, c_t))
    uncond = model.denoiser(z_k, k, h_t, None)
    dsm = (diffusion.denoising_loss(cond, z_next.detach(), noise, k)
           + diffusion.denoising_loss(uncond, z_next.detach(), noise, k)).mean()

    present = (batch.observations >= 0).unsqueeze(-1).to(z.dtype)
    pooled = z.sum(1) / present.sum(1).clamp_min(1.0)  # latents() already zeroed the padding

    reward_on = batch.reward_mask[m]
    reward_logits = model.reward_logits(z_next, h_t, c_t)[reward_on]
    targets = batch.reward_targets[m][reward_on]
    if model.config.reward.binary:
        reward = balanced_bce(reward_logits, targets)
    else:
        reward = ((torch.sigmoid(reward_logits) - targets) ** 2).mean() if len(targets) else dsm.new_zeros(())

    terms = {
        "dsm": dsm,
        "idm": nn.functional.cross_entropy(model.idm_head(z_next, h_t), a_t),
        "bc": nn.functional.cross_entropy(model.bc_head(z_now, h_t), a_t),
        "div": diversity_loss(pooled, batch.episode),
        "reward": reward,
        "done": balanced_bce(model.done_logits(z_next, h_t, c_t), batch.done[m]),
    }
    terms["total"] = terms["dsm"] + sum(getattr(weights, name) * terms[name] for name in ("idm", "bc", "div", "reward", "done"))
    return terms
