"""The latent diffusion world model: encoders, score network and heads in one module,
saved as safetensors weights + a JSON config that is all the inference code needs.

Latent scale: f_θ's output goes through a parameter-free LayerNorm, so every latent
has zero mean and unit mean square over its d_z coordinates — the scale of the
unit-variance noise ξ the diffusion adds. It fixes the scale, not the spread across
observations; collapse of the latter is guarded in training (training/losses.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from ..data.actions import MAX_ACTIONS, NULL, UNKNOWN, ActionVocabulary
from ..data.hash_tokenizer import HashTokenizer
from .checkpoint import load_checkpoint, save_checkpoint
from .encoders import WIDTH as HISTORY_WIDTH
from .encoders import ActionEmbedding, HistoryEncoder, ObservationEncoder
from .heads import behaviour_cloning_head, inverse_dynamics_head, reward_head, termination_head
from .score_net import ScoreNetwork

WEIGHTS_FILE = "model.safetensors"


def on_latent_manifold(z: torch.Tensor) -> torch.Tensor:
    """LayerNorm without parameters: zero mean and unit mean square over the last axis —
    where every latent z = LN(f_θ(o)) lies."""
    return nn.functional.layer_norm(z, z.shape[-1:])


@dataclass(frozen=True)
class RewardScale:
    """The reward head predicts y ∈ [0, 1]; the environment's scale is low + (high − low)·y.

    ``target``: ``step`` (r_t, Eq. mc_estimator) or ``to_go`` (Σ_{s≥t} r_s, app:wm-loss);
    ``terminal_only``: supervised on terminal steps only; ``binary``: balanced BCE instead of MSE.
    """

    low: float = 0.0
    high: float = 1.0
    target: str = "step"
    terminal_only: bool = False
    binary: bool = False

    def decode(self, y: torch.Tensor) -> torch.Tensor:
        return self.low + (self.high - self.low) * y


@dataclass(frozen=True)
class WorldModelConfig:
    actions: ActionVocabulary
    reward: RewardScale = field(default_factory=RewardScale)
    d_z: int = 64
    d_a: int = 32
    vocab_size: int = 32768
    max_tokens: int = 128
    max_steps: int = 64
    n_denoise: int = 50
    unknown_trained: bool = False  # some training action was ⟨unk⟩, so its embedding was fitted

    def to_json(self) -> dict:
        data = asdict(self)
        data["actions"] = self.actions.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict) -> "WorldModelConfig":
        data = dict(data)
        actions = ActionVocabulary.from_json(data.pop("actions"))
        # saved before 2026-11-23: ⟨unk⟩ was trained where the vocabulary reached its cap or keys ReAct types
        data.setdefault("unknown_trained", actions.react or len(actions) >= MAX_ACTIONS)
        return cls(actions=actions, reward=RewardScale(**data.pop("reward")), **data)


class WorldModel(nn.Module):
    def __init__(self, config: WorldModelConfig) -> None:
        super().__init__()
        self.config = config
        c, n_actions = config, len(config.actions)
        self.tokenizer = HashTokenizer(c.vocab_size, c.max_tokens)
        self.observation_encoder = ObservationEncoder(c.d_z, c.vocab_size, c.max_tokens)
        self.action_embedding = ActionEmbedding(n_actions, c.d_a)
        self.history_encoder = HistoryEncoder(c.d_z, c.d_a, c.max_steps)
        self.score_net = ScoreNetwork(c.d_z, HISTORY_WIDTH, c.d_a)
        self.reward_head = reward_head(c.d_z, HISTORY_WIDTH)
        self.termination_head = termination_head(c.d_z, HISTORY_WIDTH)
        self.idm_head = inverse_dynamics_head(n_actions, c.d_z, HISTORY_WIDTH)
        self.bc_head = behaviour_cloning_head(n_actions, c.d_z, HISTORY_WIDTH)

    @property
    def device(self) -> torch.device:
        return self.action_embedding.weight.device

    def encode(self, ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        """Token ids → latents z = LN(f_θ(o)) ∈ R^{d_z} (unit mean square)."""
        return on_latent_manifold(self.observation_encoder(ids, padding))

    def encode_texts(self, texts: list[str], chunk: int = 256) -> torch.Tensor:
        """Latents of ``texts``, encoded ``chunk`` at a time (each chunk padded to its longest text)."""
        parts = []
        for lo in range(0, len(texts), chunk):
            ids, padding = self.tokenizer(list(texts[lo : lo + chunk]))
            parts.append(self.encode(ids.to(self.device), padding.to(self.device)))
        return torch.cat(parts) if parts else torch.zeros(0, self.config.d_z, device=self.device)

    def history(self, z: torch.Tensor, previous_actions: torch.Tensor) -> torch.Tensor:
        """h̄_t = HistEnc((z_0, ∅), (z_1, a_0), …, (z_t, a_{t−1})): ``(B, T, d_z)``, ``(B, T)`` → ``(B, T, 128)``."""
        return self.history_encoder(z, self.action_embedding(previous_actions))

    def action_ids(self, actions: Sequence[str], unknown_as_null: bool = True) -> torch.Tensor:
        """The ids imagination conditions on. An action outside the vocabulary is ⟨unk⟩; where no
        training action was ⟨unk⟩ its embedding is untrained noise, and with ``unknown_as_null``
        the action reads as ∅ instead: the unconditional branch, the next state averaged over the
        pool's actions, which classifier-free dropout trained (p_uncond, app:wm-loss)."""
        ids = torch.as_tensor(self.config.actions.ids(actions), dtype=torch.long)
        if unknown_as_null and not self.config.unknown_trained:
            ids[ids == UNKNOWN] = NULL
        return ids

    def eps(self, z_k: torch.Tensor, k: torch.Tensor, h: torch.Tensor, actions: torch.Tensor | None) -> torch.Tensor:
        """ε_θ(z_k, k, h̄, a); ``actions=None`` is the unconditional branch ε_θ(z_k, k, h̄, ∅)."""
        if actions is None:
            actions = torch.full(z_k.shape[:1], NULL, dtype=torch.long, device=z_k.device)
        return self.score_net(z_k, k, h, self.action_embedding(actions))

    def predicted_reward(self, z_next: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """σ(R_θ(z_{t+1}, h̄_t)) ∈ [0, 1]; ``config.reward.decode`` maps it to the environment's scale."""
        return torch.sigmoid(self.reward_head(z_next, h))

    def done_probability(self, z_next: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.termination_head(z_next, h))

    def save(self, path: str) -> None:
        """``path/config.json`` + ``path/model.safetensors`` (any fsspec URL)."""
        save_checkpoint(path, WEIGHTS_FILE, self, self.config.to_json())

    @classmethod
    def load(cls, path: str, device: str | torch.device = "cpu") -> "WorldModel":
        config, weights = load_checkpoint(path, WEIGHTS_FILE, "world-model")
        model = cls(WorldModelConfig.from_json(config))
        model.load_state_dict(weights)
        return model.to(device).eval()
