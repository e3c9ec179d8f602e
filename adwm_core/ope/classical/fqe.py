"""Fitted Q evaluation of an ε-mixed policy (Le et al., 2019; app:fqe-correction).

Q_φ: [s; e(a)] → 128 → 128 → 1 with SiLU, regressed on the Bellman target

    y = r_t + γ (1 − done_t) V_φ′(s_{t+1}),   V_φ′(s) = Σ_a π_e^ε(a|s) Q_φ′(s, a),

the expectation over the ε-mixed policy's candidate actions at s_{t+1} (not a greedy
max: the greedy target is wrong for ε > 0). φ′ follows φ by Polyak averaging
(φ′ ← 0.99 φ′ + 0.01 φ); Adam 3e-4, batch 64, 20 epochs. One FQE is fitted per ε level
(the paper's per-ε correction): each is evaluated only at its own V(s_0).

Beyond the paper (FQEConfig; off by default): φ′ copied from φ every few epochs instead
(fitted Q iteration: each round regresses on fixed targets, so n rounds give an n-step
value), y clipped to the range of the logged returns-to-go, and LayerNorm with decoupled
weight decay (Gallici et al. 2024), each against Q̂'s extrapolation to the actions the
log never took at s_{t+1}.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ...model.seeded import seeded_linears
from .settings import FQEConfig


@dataclass
class Transitions:
    """FQE training tuples; state features are e.g. world-model latents, or one-hot states."""

    states: np.ndarray  # (M, d_s)
    actions: np.ndarray  # (M,) ids into the action feature table
    rewards: np.ndarray  # (M,)
    next_states: np.ndarray  # (M, d_s)
    done: np.ndarray  # (M,) the episode ended at t+1 (no bootstrap)
    next_candidates: np.ndarray  # (M, K) action ids at s_{t+1}, −1 = padding
    next_probabilities: np.ndarray  # (M, K) π_e^ε over the candidates, 0 at padding

    def __post_init__(self) -> None:
        m = len(self.actions)
        if not all(len(x) == m for x in (self.states, self.rewards, self.next_states, self.done,
                                         self.next_candidates, self.next_probabilities)):
            raise ValueError("every field of Transitions needs one row per transition")
        totals = self.next_probabilities.sum(1)[~self.done]
        if len(totals) and not np.allclose(totals, 1.0, atol=1e-4):
            raise ValueError("next_probabilities must sum to 1 over the candidates of every non-terminal next state")


class FittedQEvaluation:
    def __init__(self, action_features: np.ndarray, d_state: int, config: FQEConfig = FQEConfig(), *,
                 gamma: float = 0.99, seed: int = 0) -> None:
        self.actions = torch.as_tensor(action_features, dtype=torch.float32)
        width = config.hidden
        norm = (lambda: nn.LayerNorm(width)) if config.layer_norm else nn.Identity
        self.q = seeded_linears(nn.Sequential(nn.Linear(d_state + self.actions.shape[1], width), norm(), nn.SiLU(),
                                            nn.Linear(width, width), norm(), nn.SiLU(), nn.Linear(width, 1)), seed)
        self.config, self.gamma, self.seed = config, gamma, seed

    def _q(self, net: nn.Module, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self._q_read(net, states, self.actions[actions.clamp(min=0)])

    @staticmethod
    def _q_read(net: nn.Module, states: torch.Tensor, action_features: torch.Tensor) -> torch.Tensor:
        return net(torch.cat([states, action_features], dim=-1)).squeeze(-1)

    def _v(self, net: nn.Module, states: torch.Tensor, candidates: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        k = candidates.shape[1]
        q = self._q(net, states.repeat_interleave(k, 0), candidates.reshape(-1)).reshape(-1, k)
        return (q * probs).sum(1)

    def fit(self, data: Transitions, target_range: tuple[float, float] | None = None) -> list[float]:
        """Train on ``data``, each target clipped to ``target_range`` where given; returns the
        mean Bellman loss per epoch."""
        t = {name: torch.as_tensor(np.asarray(getattr(data, name)), dtype=torch.float32)
             for name in ("states", "rewards", "next_states", "next_probabilities")}
        actions = torch.as_tensor(data.actions, dtype=torch.long)
        candidates = torch.as_tensor(data.next_candidates, dtype=torch.long)
        not_done = torch.as_tensor(~np.asarray(data.done), dtype=torch.float32)
        target_net = copy.deepcopy(self.q).requires_grad_(False)
        c = self.config
        optimiser = torch.optim.AdamW(self.q.parameters(), lr=c.lr, weight_decay=c.weight_decay)
        rng = np.random.default_rng(self.seed)
        losses = []
        for epoch in range(c.epochs):
            if c.target_every is not None and epoch % c.target_every == 0:
                target_net.load_state_dict(self.q.state_dict())  # a new round on fixed targets
            total = 0.0
            order = rng.permutation(len(actions))
            for rows in np.array_split(order, math.ceil(len(order) / c.batch_size)):
                with torch.no_grad():
                    v_next = self._v(target_net, t["next_states"][rows], candidates[rows], t["next_probabilities"][rows])
                    y = t["rewards"][rows] + self.gamma * not_done[rows] * v_next
                    if target_range is not None:
                        y = y.clamp(*target_range)
                loss = nn.functional.mse_loss(self._q(self.q, t["states"][rows], actions[rows]), y)
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                if c.target_every is None:
                    with torch.no_grad():
                        for p_target, p in zip(target_net.parameters(), self.q.parameters()):
                            p_target.mul_(c.polyak).add_(p, alpha=1 - c.polyak)
                total += float(loss.detach()) * len(rows)
            losses.append(total / len(order))
        return losses

    @torch.no_grad()
    def q_values(self, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        return self._q(self.q, torch.as_tensor(states, dtype=torch.float32), torch.as_tensor(actions)).numpy()

    @torch.no_grad()
    def q_values_read(self, states: np.ndarray, action_features: torch.Tensor) -> np.ndarray:
        """Q(s, a) of actions given by their features (rows aligned with ``states``), not table ids."""
        return self._q_read(self.q, torch.as_tensor(states, dtype=torch.float32), action_features.float()).numpy()

    @torch.no_grad()
    def state_values(self, states: np.ndarray, candidates: np.ndarray, probabilities: np.ndarray) -> np.ndarray:
        """V(s) = Σ_a π_e^ε(a|s) Q(s, a) over each state's candidates."""
        return self._v(self.q, torch.as_tensor(states, dtype=torch.float32), torch.as_tensor(candidates),
                       torch.as_tensor(probabilities, dtype=torch.float32)).numpy()
