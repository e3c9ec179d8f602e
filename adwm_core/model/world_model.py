"""The latent diffusion world model: encoders, score network and heads in one module,
saved as safetensors weights + a JSON config that is all the inference code needs.

Latent scale: f_θ's output goes through a parameter-free LayerNorm, so every latent
has zero mean and unit mean square over its d_z coordinates — the scale of the
unit-variance noise ξ the diffusion adds. It fixes the scale, not the spread across
observations; collapse of the latter is guarded in training (training/losses.py).

Three settings go beyond the paper (its recipe is each one's first value):

- ``prediction``: the score network outputs ε (the paper) or z_0; the diffusion process
  (diffusion/process.py) owns what that means — the loss and the conversion to ε̂ — and
  this module only builds the network;
- ``action_input``: e(a) from an id table (``ids``) or from the action's words (``text``,
  model/encoders.py), so an action the pool never played is still read by what it says;
- ``outcome_input``: the reward and termination heads read (z_{t+1}, h̄_t) (``next_latent``,
  the paper: in imagination z_{t+1} is a sample, and every sampling error becomes a wrong
  reward or stop) or (e(a_t), h̄_t) (``action``: the outcome of acting, no sample needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import get_args

import fsspec
import torch
from torch import nn

from ..data.actions import MAX_ACTIONS, NULL, UNKNOWN, ActionVocabulary
from ..data.hash_tokenizer import HashTokenizer
from ..data.windows import RewardScale
from ..diffusion.process import GaussianDiffusion
from ..diffusion.schedule import SCHEDULES
from ..settings import ActionInput, OutcomeInput, Prediction, TrainConfig, architecture_problems
from .checkpoint import load_checkpoint, save_checkpoint
from .encoders import WIDTH as HISTORY_WIDTH
from .encoders import ActionEmbedding, ActionTextEncoder, HistoryEncoder, ObservationEncoder
from .heads import behaviour_cloning_head, inverse_dynamics_head, reward_head, termination_head
from .score_net import ScoreNetwork

WEIGHTS_FILE = "model.safetensors"
MEMBERS_DIR = "members"  # an ensemble's members beyond the first, inside the first's folder
PREDICTIONS, ACTION_INPUTS, OUTCOME_INPUTS = get_args(Prediction), get_args(ActionInput), get_args(OutcomeInput)


def word_matches(action_ids: torch.Tensor, action_padding: torch.Tensor, observation_ids: torch.Tensor,
                 observation_padding: torch.Tensor) -> torch.Tensor:
    """``(A, L)``: whether each action token's hash id occurs among its observation's tokens
    (the exact-match feature of reading comprehension); padding never matches."""
    present = (action_ids[:, :, None] == observation_ids[:, None, :]) & ~observation_padding[:, None, :]
    return present.any(-1) & ~action_padding


def member_path(path: str, member: int) -> str:
    """Member ``member`` of a world-model ensemble: member 0 at ``path`` (the world model every
    stage reads), member k > 0 at ``path/members/k``."""
    return path if member == 0 else f"{path.rstrip('/')}/{MEMBERS_DIR}/{member}"


def member_paths(path: str) -> list[str]:
    """The folders of every member of the world model at ``path``, member 0 first."""
    fs, root = fsspec.core.url_to_fs(path)
    folder = f"{root.rstrip('/')}/{MEMBERS_DIR}"
    count = 1 + (len(fs.ls(folder, detail=False)) if fs.isdir(folder) else 0)
    return [member_path(path, member) for member in range(count)]


def on_latent_manifold(z: torch.Tensor) -> torch.Tensor:
    """LayerNorm without parameters: zero mean and unit mean square over the last axis —
    where every latent z = LN(f_θ(o)) lies."""
    return nn.functional.layer_norm(z, z.shape[-1:])


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
    schedule: str = "cosine"  # ᾱ_k (diffusion.schedule.SCHEDULES): saved with the model, which samples by it
    unknown_trained: bool = False  # some training action was ⟨unk⟩, so its embedding was fitted
    prediction: str = "eps"  # the score network's output: ε (the paper) or z_0
    action_input: str = "ids"  # e(a) from an id table (the paper) or from the action's text
    outcome_input: str = "next_latent"  # reward/termination heads on (z_{t+1}, h̄_t) (the paper) or (e(a_t), h̄_t)
    action_tokens: int = 16  # hash tokens of an action text
    word_match: bool = False  # text actions mark each of their words the observation also holds

    def __post_init__(self) -> None:
        for name, allowed in (("prediction", PREDICTIONS), ("action_input", ACTION_INPUTS),
                              ("outcome_input", OUTCOME_INPUTS), ("schedule", tuple(SCHEDULES))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"world model: {name}={getattr(self, name)!r}; choose from {allowed}")
        bad = architecture_problems(self.action_input, self.word_match, self.actions.react)
        if bad:
            raise ValueError(f"world model: {'; '.join(bad)}")

    @classmethod
    def from_training(cls, config: TrainConfig, actions: ActionVocabulary, reward: RewardScale,
                      unknown_trained: bool) -> "WorldModelConfig":
        """The architecture the training settings ``config`` call for, on the logged ``actions``."""
        return cls(actions=actions, reward=reward, unknown_trained=unknown_trained, prediction=config.prediction,
                   action_input=config.action_input, outcome_input=config.outcome_input,
                   word_match=config.word_match)

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
        self.diffusion = GaussianDiffusion(SCHEDULES[c.schedule](c.n_denoise), prediction=c.prediction)
        self.tokenizer = HashTokenizer(c.vocab_size, c.max_tokens)
        self.observation_encoder = ObservationEncoder(c.d_z, c.vocab_size, c.max_tokens)
        if c.action_input == "text":
            self.action_tokenizer = HashTokenizer(c.vocab_size, c.action_tokens)
            self.action_text = ActionTextEncoder(c.d_a, c.action_tokens, word_match=c.word_match)
            self._unseen: dict[str, int] = {}  # action texts met after training → ids past the vocabulary
            self._unseen_texts: list[str] = []
        else:
            self.action_embedding = ActionEmbedding(n_actions, c.d_a)
        self.history_encoder = HistoryEncoder(c.d_z, c.d_a, c.max_steps)
        self.score_net = ScoreNetwork(c.d_z, HISTORY_WIDTH, c.d_a)
        outcome_width = c.d_a if c.outcome_input == "action" else c.d_z
        self.reward_head = reward_head(outcome_width, HISTORY_WIDTH)
        self.termination_head = termination_head(outcome_width, HISTORY_WIDTH)
        self.idm_head = inverse_dynamics_head(n_actions, c.d_z, HISTORY_WIDTH)
        self.bc_head = behaviour_cloning_head(n_actions, c.d_z, HISTORY_WIDTH)

    @property
    def device(self) -> torch.device:
        return self.observation_encoder.positions.weight.device

    def encode(self, ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        """Token ids → latents z = LN(f_θ(o)) ∈ R^{d_z} (unit mean square)."""
        return on_latent_manifold(self.observation_encoder(ids, padding))

    def encode_states(self, ids: torch.Tensor, padding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(latents, token states ``(B, L, 128)``) from one pass of f_θ: the states are what a
        text action attends to."""
        states = self.observation_encoder.token_states(ids, padding)
        return on_latent_manifold(self.observation_encoder.pool(states, padding)), states

    def encode_texts(self, texts: list[str], chunk: int = 256) -> torch.Tensor:
        """Latents of ``texts``, encoded ``chunk`` at a time (each chunk padded to its longest text)."""
        parts = []
        for lo in range(0, len(texts), chunk):
            ids, padding = self.tokenizer(list(texts[lo : lo + chunk]))
            parts.append(self.encode(ids.to(self.device), padding.to(self.device)))
        return torch.cat(parts) if parts else torch.zeros(0, self.config.d_z, device=self.device)

    def history(self, z: torch.Tensor, previous_actions: torch.Tensor) -> torch.Tensor:
        """h̄_t = HistEnc((z_0, ∅), (z_1, a_0), …, (z_t, a_{t−1})): ``(B, T, d_z)``, ``(B, T)`` → ``(B, T, 128)``."""
        return self.history_encoder(z, self.action_vectors(previous_actions))

    def action_ids(self, actions: Sequence[str], unknown_as_null: bool = True) -> torch.Tensor:
        """The ids imagination conditions on. With text actions every string gets an id (one the
        vocabulary lacks is numbered past it and read by its words). With an id table, an action
        outside the vocabulary is ⟨unk⟩; where no training action was ⟨unk⟩ its embedding is
        untrained noise, and with ``unknown_as_null`` the action reads as ∅ instead: the
        unconditional branch, the next state averaged over the pool's actions, which
        classifier-free dropout trained (p_uncond, app:wm-loss)."""
        vocabulary = self.config.actions
        ids = torch.as_tensor(vocabulary.ids(actions), dtype=torch.long)
        if self.config.action_input == "text":
            for j in torch.nonzero(ids == UNKNOWN).flatten().tolist():
                key = vocabulary.key(actions[j])
                if key not in self._unseen:
                    self._unseen[key] = len(vocabulary) + len(self._unseen_texts)
                    self._unseen_texts.append(key)
                ids[j] = self._unseen[key]
        elif unknown_as_null and not self.config.unknown_trained:
            ids[ids == UNKNOWN] = NULL
        return ids

    def _action_text(self, action_id: int) -> str:
        n = len(self.config.actions)
        if action_id < n:
            return self.config.actions.actions[action_id - 2]
        return self._unseen_texts[action_id - n]

    def action_vectors(self, actions: torch.Tensor, states: torch.Tensor | None = None,
                       padding: torch.Tensor | None = None, observation_ids: torch.Tensor | None = None) -> torch.Tensor:
        """e(a) for action ids (∅ = NULL): a table row, or the action text read against the token
        ``states``/``padding`` (and hash-token ``observation_ids``, for ``word_match``) of the
        observation each is taken in (rows aligned with ``actions``, 1-D then), or against no
        observation (``states=None``, ids of any shape)."""
        if self.config.action_input == "ids":
            return self.action_embedding(actions)
        if states is None:  # one vector per distinct action
            unique, inverse = torch.unique(actions, return_inverse=True)
            return self._read_actions(unique, None, None)[inverse]
        return self._read_actions(actions, states, padding, observation_ids)

    def _read_actions(self, actions: torch.Tensor, states: torch.Tensor | None, padding: torch.Tensor | None,
                      observation_ids: torch.Tensor | None = None) -> torch.Tensor:
        out = self.action_text.null.expand(len(actions), -1)
        named = actions > UNKNOWN  # ∅ and ⟨unk⟩ (never produced for text actions) read as the null vector
        if not named.any():
            return out
        ids, action_padding = self.action_tokenizer([self._action_text(i) for i in actions[named].tolist()])
        ids, action_padding = ids.to(self.device), action_padding.to(self.device)
        matched = None
        if self.config.word_match:
            if states is not None and observation_ids is None:
                raise ValueError("this world model marks action words found in the observation (word_match): "
                                 "pass the observation's token ids")
            matched = (torch.zeros_like(ids, dtype=torch.bool) if states is None else
                       word_matches(ids, action_padding, observation_ids[named], padding[named]))
        read = self.action_text(self.observation_encoder.tokens(ids), action_padding,
                                None if states is None else states[named], None if padding is None else padding[named],
                                matched)
        # under CUDA's bf16 autocast the read vectors are bf16 and the ∅ vector a float32 parameter
        return out.masked_scatter(named.unsqueeze(-1), read.to(out.dtype)) if len(read) else out

    def conditions(self, actions: torch.Tensor, observations: Sequence[str] | None = None) -> torch.Tensor:
        """e(a_t | o_t) of each action id in the observation text beside it (``None``: without):
        what the score network and the outcome heads are conditioned on."""
        if self.config.action_input == "ids" or observations is None:
            return self.action_vectors(actions)
        ids, padding = self.tokenizer(list(observations))
        ids, padding = ids.to(self.device), padding.to(self.device)
        return self.action_vectors(actions.to(self.device), self.observation_encoder.token_states(ids, padding), padding,
                                   ids)

    def as_conditions(self, actions: torch.Tensor | None, n: int) -> torch.Tensor:
        """Conditions given as vectors pass through; ids (``None``: ∅) are read without an observation."""
        if actions is None:
            actions = torch.full((n,), NULL, dtype=torch.long, device=self.device)
        return actions if actions.is_floating_point() else self.action_vectors(actions)

    def action_features(self) -> torch.Tensor:
        """e(a) of every vocabulary id, ``(|A|, d_a)``: the action features of FQE and DR."""
        return self.action_vectors(torch.arange(len(self.config.actions), device=self.device))

    def denoiser(self, z_k: torch.Tensor, k: torch.Tensor, h: torch.Tensor, actions: torch.Tensor | None) -> torch.Tensor:
        """The score network's own output (ε̂ or ẑ_0, ``config.prediction``). ``actions``: ids,
        condition vectors (:meth:`conditions`), or ``None`` for ∅."""
        return self.score_net(z_k, k, h, self.as_conditions(actions, len(z_k)))

    def eps(self, z_k: torch.Tensor, k: torch.Tensor, h: torch.Tensor, actions: torch.Tensor | None) -> torch.Tensor:
        """ε_θ(z_k, k, h̄, a); ``actions=None`` is the unconditional branch ε_θ(z_k, k, h̄, ∅)."""
        return self.diffusion.to_eps(z_k, k, self.denoiser(z_k, k, h, actions))

    def _outcome(self, head: nn.Module, z_next: torch.Tensor | None, h: torch.Tensor,
                 actions: torch.Tensor | None) -> torch.Tensor:
        if self.config.outcome_input == "next_latent":
            return head(z_next, h)
        if actions is None:
            raise ValueError("this world model's outcome heads read the action (outcome_input='action'): pass it")
        return head(self.as_conditions(actions, len(h)), h)

    def reward_logits(self, z_next: torch.Tensor | None, h: torch.Tensor,
                      actions: torch.Tensor | None = None) -> torch.Tensor:
        """R_θ(z_{t+1}, h̄_t) or R_θ(e(a_t), h̄_t) by ``config.outcome_input``."""
        return self._outcome(self.reward_head, z_next, h, actions)

    def done_logits(self, z_next: torch.Tensor | None, h: torch.Tensor,
                    actions: torch.Tensor | None = None) -> torch.Tensor:
        """D_θ(z_{t+1}, h̄_t) or D_θ(e(a_t), h̄_t) by ``config.outcome_input``."""
        return self._outcome(self.termination_head, z_next, h, actions)

    def predicted_reward(self, z_next: torch.Tensor | None, h: torch.Tensor,
                         actions: torch.Tensor | None = None) -> torch.Tensor:
        """σ(R_θ) ∈ [0, 1]; ``config.reward.decode`` maps it to the environment's scale."""
        return torch.sigmoid(self.reward_logits(z_next, h, actions))

    def done_probability(self, z_next: torch.Tensor | None, h: torch.Tensor,
                         actions: torch.Tensor | None = None) -> torch.Tensor:
        return torch.sigmoid(self.done_logits(z_next, h, actions))

    def save(self, path: str) -> None:
        """``path/config.json`` + ``path/model.safetensors`` (any fsspec URL)."""
        save_checkpoint(path, WEIGHTS_FILE, self, self.config.to_json())

    @classmethod
    def load(cls, path: str, device: str | torch.device = "cpu") -> "WorldModel":
        config, weights = load_checkpoint(path, WEIGHTS_FILE, "world-model")
        model = cls(WorldModelConfig.from_json(config))
        model.load_state_dict(weights)
        return model.to(device).eval()

    @classmethod
    def load_ensemble(cls, path: str, device: str | torch.device = "cpu") -> list["WorldModel"]:
        """Every member of the world model at ``path``, member 0 (``path`` itself) first."""
        return [cls.load(member, device) for member in member_paths(path)]
