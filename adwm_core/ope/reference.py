"""A non-parametric reference world model, run through ADWM's rollouts: the next state is a
logged successor of the nearest logged (state, action).

Its states are behaviour observations (rows of the :class:`~adwm_core.ope.adwm.StateBank`,
latents by the trained world model's encoder f_θ, so π_e reads them exactly as it reads the
diffusion model's imagined states). Given the state s_t (the bank row imagination reads) and
π_e^ε's action a_t, each logged transition (o, a, r, o', done) is scored

    sim = cos(z_{s_t}, z_o) + match(a_t, a),   match = 1 for the same action text, else the
                                               Jaccard overlap of their words,

and one of the best-scoring transitions is drawn uniformly (the empirical successor
distribution where (s_t, a_t) was logged): z_{t+1} = f_θ(o'), r̂_t = r (the logged reward, on
the environment's scale) and the episode ends where the logged step ended it. No diffusion,
no guidance, no heads: beside ADWM it shows what the learned transition adds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import torch

from ..data import behaviour_rows
from ..data.actions import normal_action
from ..model.world_model import WorldModel
from ..policies.prompts import History
from .adwm import AdwmConfig, ImaginedRollouts, Policy, StateBank

ESTIMATOR = "kNN-WM"  # estimates rows are named f"{ESTIMATOR}:{value estimate}"


@dataclass
class LoggedTransitions:
    """The behaviour pool's transitions, indexed for nearest-(state, action) lookups."""

    observations: torch.Tensor  # (N,) bank row of each transition's observation
    actions: list[str]  # normalised action text
    words: list[frozenset[str]]
    next_latents: torch.Tensor  # (N, d_z) f_θ(o')
    rewards: np.ndarray  # (N,)
    done: np.ndarray  # (N,) the environment ended the episode
    _matches: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    @classmethod
    def from_trajectories(cls, table: pa.Table, model: WorldModel, bank: StateBank) -> "LoggedTransitions":
        rows = behaviour_rows(table).select(["observation", "action", "reward", "done", "next_observation"]).to_pylist()
        row_of = {text: i for i, text in enumerate(bank.texts)}
        successors = list(dict.fromkeys(r["next_observation"] for r in rows))
        with torch.no_grad():
            encoded = model.encode_texts(successors).cpu()
        successor_of = {text: i for i, text in enumerate(successors)}
        actions = [normal_action(r["action"]) for r in rows]
        return cls(
            observations=torch.tensor([row_of[r["observation"]] for r in rows]),
            actions=actions,
            words=[frozenset(a.split()) for a in actions],
            next_latents=encoded[[successor_of[r["next_observation"]] for r in rows]],
            rewards=np.array([r["reward"] for r in rows], float),
            done=np.array([r["done"] for r in rows], bool),
        )

    def action_match(self, action: str) -> torch.Tensor:
        """match(a, ·) over the transitions: 1 for the same text, else the Jaccard word overlap."""
        key = normal_action(action)
        if key not in self._matches:
            words = frozenset(key.split())
            self._matches[key] = torch.tensor([1.0 if a == key else len(words & w) / max(len(words | w), 1)
                                               for a, w in zip(self.actions, self.words)])
        return self._matches[key]


class ReferenceRollouts(ImaginedRollouts):
    """ADWM's rollouts (π_e^ε, the reading, common random numbers, value estimates) with the
    logged-successor transition in place of the diffusion world model's."""

    def __init__(self, model: WorldModel, bank: StateBank, transitions: LoggedTransitions,
                 config: AdwmConfig = AdwmConfig()) -> None:
        super().__init__(model, bank, replace(config, guidance="none"))  # no sampler, nothing to guide
        self.transitions = transitions
        self._units = torch.nn.functional.normalize(bank.latents, dim=-1)
        self._logged_units = self._units[transitions.observations]  # (N, d_z) of each transition's o

    def advance(self, policy: Policy, histories: list[History], actions: list[str], ids: torch.Tensor,
                read: np.ndarray, past: torch.Tensor, previous: torch.Tensor, noise: torch.Tensor,
                seconds: dict[str, float]) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        logged = self.transitions
        scores = (self._units[torch.as_tensor(read)] @ self._logged_units.T
                  + torch.stack([logged.action_match(a) for a in actions]))  # (B, N): sim of every transition
        # one uniform draw per rollout from its own diffusion noise: shared across ε levels
        draws = torch.special.ndtr(noise[0, :, 0]).numpy()
        chosen = np.empty(len(actions), np.int64)
        for j, score in enumerate(scores):
            best = torch.nonzero(score >= score.max() - 1e-6).flatten().numpy()
            chosen[j] = best[min(int(draws[j] * len(best)), len(best) - 1)]
        return logged.next_latents[chosen], logged.rewards[chosen], logged.done[chosen]
