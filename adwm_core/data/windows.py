"""Behaviour trajectories as padded per-episode arrays, and windows sampled from them (Alg. wm-train).

Episode i has T_i transitions t = 0…T_i−1 and observations o_0…o_{T_i} (o_{t+1} is the
``next_observation`` of step t). A window of length L starting at s holds observations
o_s…o_{s+L}, the actions before them (a_{s−1}, ∅ at s = 0) for the history encoder, and
per transition t = s…s+L−1: a_t, reward target, reward mask and done flag. Windows of
short episodes are padded and masked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .actions import NULL, ActionVocabulary
from .behaviour_log import BehaviourLog

if TYPE_CHECKING:
    import torch


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


@dataclass
class EpisodeArrays:
    texts: list[str]  # unique observation texts; ``observations`` index into it
    observations: np.ndarray  # (N, T+1) int, −1 = padding
    actions: np.ndarray  # (N, T) vocabulary ids, NULL = padding
    reward_targets: np.ndarray  # (N, T) float in [0, 1]
    reward_mask: np.ndarray  # (N, T) bool: transitions the reward head is supervised on
    done: np.ndarray  # (N, T) bool
    lengths: np.ndarray  # (N,) transitions per episode
    success: np.ndarray  # (N,) bool


@dataclass
class Windows:
    observations: np.ndarray  # (B, L+1) indices into texts, −1 = padding
    previous_actions: np.ndarray  # (B, L+1): a_{t−1} for each o_t
    actions: np.ndarray  # (B, L)
    reward_targets: np.ndarray  # (B, L)
    reward_mask: np.ndarray  # (B, L)
    done: np.ndarray  # (B, L)
    valid: np.ndarray  # (B, L) real transitions
    episode: np.ndarray  # (B,) row in EpisodeArrays

    def take(self, rows: np.ndarray) -> "Windows":
        return Windows(**{name: value[rows] for name, value in vars(self).items()})


def reward_scale(log: BehaviourLog, target: str = "step") -> RewardScale:
    """Normalisation of the reward targets of the behaviour ``log``: [min(0, min y), max y] → [0, 1];
    terminal-only when no non-terminal step is rewarded; binary when every target is 0 or 1.

    ``step`` (default): y_t = r_t, the reward Eq. (mc_estimator) sums along an imagined
    rollout. ``to_go``: y_t = Σ_{s≥t} r_s, the wording of app:wm-loss. Where only terminal
    steps are labelled the two coincide. On dense rewards the reward-to-go depends on how
    the behaviour policy goes on, which the model cannot see, and it overfits on the
    default local cell while step targets generalise (bench/results/world_model_training.md).
    """
    if target not in ("step", "to_go"):
        raise ValueError(f"reward target must be 'step' or 'to_go', not {target!r}")
    episodes = list(log.episodes(["reward", "done"]))
    raw = [_raw_targets(np.asarray(ep["reward"], float), target) for ep in episodes]
    done = [np.asarray(ep["done"], bool) for ep in episodes]
    rewards = np.concatenate([np.asarray(ep["reward"], float) for ep in episodes])
    terminal_only = bool(np.concatenate(done).any()) and not np.any(rewards[~np.concatenate(done)] != 0)
    supervised = np.concatenate([y[d] for y, d in zip(raw, done)] if terminal_only else raw)
    low = min(0.0, float(supervised.min()))
    high = max(float(supervised.max()), low + 1e-6)
    binary = bool(np.isin(supervised, [0.0, 1.0]).all())
    return RewardScale(low, high, target, terminal_only, binary)


def returns_to_go(rewards: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """G_t = r_t + γ G_{t+1} along the last axis (G = 0 past its end)."""
    to_go, running = np.zeros(rewards.shape), np.zeros(rewards.shape[:-1])
    for t in reversed(range(rewards.shape[-1])):
        running = rewards[..., t] + gamma * running
        to_go[..., t] = running
    return to_go


def _raw_targets(rewards: np.ndarray, target: str) -> np.ndarray:
    return returns_to_go(rewards) if target == "to_go" else rewards


def episode_arrays(log: BehaviourLog, vocabulary: ActionVocabulary, scale: RewardScale) -> EpisodeArrays:
    """The behaviour ``log`` as padded per-episode arrays, actions as ``vocabulary`` ids and rewards
    as targets of ``scale``."""
    episodes = list(log.episodes(["t", "observation", "next_observation", "action", "reward", "done", "success"]))
    n, horizon = len(episodes), int(log.lengths.max())
    text_ids: dict[str, int] = {}
    arrays = EpisodeArrays(
        texts=[],
        observations=np.full((n, horizon + 1), -1, np.int64),
        actions=np.full((n, horizon), NULL, np.int64),
        reward_targets=np.zeros((n, horizon), np.float32),
        reward_mask=np.zeros((n, horizon), bool),
        done=np.zeros((n, horizon), bool),
        lengths=np.array([len(ep["t"]) for ep in episodes]),
        success=np.array([bool(ep["success"][-1]) for ep in episodes]),
    )
    for i, ep in enumerate(episodes):
        steps = len(ep["t"])
        texts = ep["observation"] + [ep["next_observation"][-1]]
        arrays.observations[i, : steps + 1] = [text_ids.setdefault(text, len(text_ids)) for text in texts]
        arrays.actions[i, :steps] = vocabulary.ids(ep["action"])
        raw = _raw_targets(np.asarray(ep["reward"], float), scale.target)
        arrays.reward_targets[i, :steps] = np.clip((raw - scale.low) / (scale.high - scale.low), 0.0, 1.0)
        arrays.done[i, :steps] = ep["done"]
        arrays.reward_mask[i, :steps] = arrays.done[i, :steps] if scale.terminal_only else True
    arrays.texts = list(text_ids)
    return arrays


def sample_windows(data: EpisodeArrays, episodes: np.ndarray, length: int, rng: np.random.Generator) -> Windows:
    """One window of ``length`` transitions per entry of ``episodes``, its start uniform over the episode."""
    starts = rng.integers(0, np.maximum(data.lengths[episodes] - length, 0) + 1)
    return windows_at(data, episodes, starts, length)


def windows_at(data: EpisodeArrays, episodes: np.ndarray, starts: np.ndarray, length: int) -> Windows:
    obs_cols = starts[:, None] + np.arange(length + 1)
    step_cols = starts[:, None] + np.arange(length)
    valid = step_cols < data.lengths[episodes][:, None]

    def take(array: np.ndarray, cols: np.ndarray, fill) -> np.ndarray:
        inside = cols < array.shape[1]
        out = np.where(inside, array[episodes[:, None], np.minimum(cols, array.shape[1] - 1)], fill)
        return out

    observations = take(data.observations, obs_cols, -1)
    previous = take(data.actions, obs_cols - 1, NULL)
    previous[obs_cols == 0] = NULL
    return Windows(
        observations=observations,
        previous_actions=np.where(observations >= 0, previous, NULL),
        actions=np.where(valid, take(data.actions, step_cols, NULL), NULL),
        reward_targets=np.where(valid, take(data.reward_targets, step_cols, 0.0), 0.0).astype(np.float32),
        reward_mask=valid & take(data.reward_mask, step_cols, False),
        done=valid & take(data.done, step_cols, False),
        valid=valid,
        episode=episodes,
    )


def covering_windows(data: EpisodeArrays, episodes: np.ndarray, length: int) -> Windows:
    """Windows starting at 0, L, 2L, … of each episode: every transition exactly once (for evaluation)."""
    pairs = [(e, s) for e in episodes for s in range(0, max(int(data.lengths[e]), 1), length)]
    return windows_at(data, np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]), length)
