"""World-model training on behaviour trajectories (Alg. wm-train, app:wm-train).

Per epoch every training episode is drawn once — successful ones ``success_upsample``
(5) times — in shuffled batches of 64; each draw is a window of L transitions at a
uniform start. AdamW (0.9, 0.999), weight decay 1e-4, peak lr 3e-4 annealed by cosine
to 10 % over the epochs, gradient-norm clip 1.0, bf16 autocast on CUDA. After each
epoch the held-out episodes are scored; the checkpoint with the lowest held-out
reward MSE is kept (ties, e.g. rewards every epoch predicts exactly, broken by the
termination BCE) (safetensors + JSON config, see model/world_model.py).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from ..data.actions import UNKNOWN, ActionVocabulary
from ..data.io import atomic_open, behaviour_rows, check_output
from ..data.windows import EpisodeArrays, Windows, covering_windows, episode_arrays, reward_scale, sample_windows
from ..diffusion.process import GaussianDiffusion
from ..model.world_model import WorldModel, WorldModelConfig
from .losses import Batch, LossWeights, latents, world_model_losses

HISTORY_FILE = "history.json"
EpochCallback = Callable[[int, dict[str, float]], None]


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 50
    batch_size: int = 64
    window: int = 8
    lr: float = 3e-4
    final_lr_fraction: float = 0.1
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    success_upsample: int = 5
    heldout_fraction: float = 0.1
    p_uncond: float = 0.1
    weights: LossWeights = field(default_factory=LossWeights)
    reward_target: str = "step"  # see data/windows.py: reward_scale
    react_actions: bool = False  # key actions by ReAct type (CellConfig: where the env declares them)
    seed: int = 0
    device: str = "auto"

    def __post_init__(self) -> None:
        positive = {"epochs": self.epochs, "batch_size": self.batch_size, "window": self.window, "lr": self.lr,
                    "success_upsample": self.success_upsample}
        bad = [f"{name}={value}" for name, value in positive.items() if value <= 0]
        if not 0 < self.heldout_fraction < 1:
            bad.append(f"heldout_fraction={self.heldout_fraction} (must lie in (0, 1))")
        if bad:
            raise ValueError(f"world-model training config: {', '.join(bad)}; these must be positive")


@dataclass
class TrainResult:
    path: str
    best_epoch: int
    history: list[dict[str, float]]

    @property
    def best(self) -> dict[str, float]:
        return self.history[self.best_epoch]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} asked for, but this machine has no CUDA GPU; use device='cpu' or 'auto'")
    return torch.device(name)


class Tokenised:
    """Hash-token ids of every distinct observation text, tokenised once."""

    def __init__(self, model: WorldModel, texts: list[str]) -> None:
        self.ids, self.padding = model.tokenizer(texts)

    def batch(self, windows: Windows, device: torch.device) -> Batch:
        rows, inverse = np.unique(windows.observations, return_inverse=True)
        inverse = inverse.reshape(windows.observations.shape)
        keep = rows >= 0
        index = np.where(windows.observations >= 0, inverse - (~keep).sum(), -1)
        ids, padding = self.ids[rows[keep]], self.padding[rows[keep]]
        width = max(1, int((~padding).sum(1).max()))

        def t(array, dtype=torch.long):
            return torch.as_tensor(np.asarray(array), dtype=dtype, device=device)

        return Batch(
            ids=ids[:, :width].to(device), padding=padding[:, :width].to(device), observations=t(index),
            previous_actions=t(windows.previous_actions), actions=t(windows.actions),
            reward_targets=t(windows.reward_targets, torch.float32), reward_mask=t(windows.reward_mask, torch.bool),
            done=t(windows.done, torch.bool), valid=t(windows.valid, torch.bool), episode=t(windows.episode),
        )


def split_indices(n: int, fraction: float, seed: int, minimum: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) of ``range(n)``; held-out gets max(minimum, round(fraction·n)) items and
    training at least ``minimum``."""
    n_heldout = max(minimum, round(fraction * n))
    if n - n_heldout < minimum:
        raise ValueError(f"{n} items cannot be split into training and held-out parts of at least {minimum} each; "
                         "collect more behaviour data")
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[n_heldout:]), np.sort(order[:n_heldout])


def encoded_windows(model: WorldModel, tokens: Tokenised, data: EpisodeArrays, episodes: np.ndarray,
                    length: int, chunk: int = 256) -> Iterator[tuple[Batch, torch.Tensor, torch.Tensor]]:
    """(batch, z, h̄) for the covering windows of ``episodes`` (every transition once, in
    episode order), ``chunk`` windows at a time."""
    windows = covering_windows(data, episodes, length)
    for rows in np.array_split(np.arange(len(windows.episode)), math.ceil(len(windows.episode) / chunk)):
        batch = tokens.batch(windows.take(rows), model.device)
        yield (batch, *latents(model, batch))


@torch.no_grad()
def heldout_metrics(model: WorldModel, tokens: Tokenised, data: EpisodeArrays, episodes: np.ndarray,
                    window: int, constants: dict[str, float]) -> dict[str, float]:
    """Reward MSE and termination BCE over every held-out transition, beside the constant
    predictors' (training-set mean reward target and done rate)."""
    model.eval()
    rewards, targets, done_p, done = [], [], [], []
    for batch, z, h in encoded_windows(model, tokens, data, episodes, window):
        m = batch.valid
        z_next, h_t, on = z[:, 1:][m], h[m], batch.reward_mask[m]
        rewards.append(model.predicted_reward(z_next, h_t)[on])
        targets.append(batch.reward_targets[m][on])
        done_p.append(model.done_probability(z_next, h_t))
        done.append(batch.done[m].float())
    model.train()
    reward, target = torch.cat(rewards).float().cpu(), torch.cat(targets).cpu()
    p, d = torch.cat(done_p).float().cpu().clamp(1e-6, 1 - 1e-6), torch.cat(done).cpu()
    base = torch.tensor(constants["done_rate"]).clamp(1e-6, 1 - 1e-6).expand_as(d)
    bce = nn.functional.binary_cross_entropy
    return {
        "heldout_reward_mse": float(((reward - target) ** 2).mean()),
        "heldout_reward_mse_constant": float(((constants["reward_mean"] - target) ** 2).mean()),
        "heldout_done_bce": float(bce(p, d)),
        "heldout_done_bce_constant": float(bce(base, d)),
    }


def train_world_model(
    trajectories: pa.Table,
    out_dir: str,
    config: TrainConfig = TrainConfig(),
    *,
    on_epoch: EpochCallback | None = None,
    overwrite: bool = False,
) -> TrainResult:
    """Train a world model on behaviour ``trajectories``; the best checkpoint goes to ``out_dir``."""
    check_output(out_dir, overwrite=overwrite, hint="pass overwrite=True to retrain, or choose another folder")
    behaviour = behaviour_rows(trajectories)
    if behaviour.num_rows == 0:
        raise ValueError("the trajectories table holds no behaviour rows (source == 'behavior'); "
                         "run behaviour collection first")
    device = resolve_device(config.device)
    torch.manual_seed(config.seed)
    actions = behaviour["action"].to_pylist()
    vocabulary = ActionVocabulary.for_react() if config.react_actions else ActionVocabulary.from_actions(actions)
    scale = reward_scale(behaviour, config.reward_target)
    data = episode_arrays(behaviour, vocabulary, scale)
    train, heldout = split_indices(len(data.lengths), config.heldout_fraction, config.seed)

    unknown_trained = bool((data.actions[train] == UNKNOWN).any())
    model = WorldModel(WorldModelConfig(actions=vocabulary, reward=scale, unknown_trained=unknown_trained))
    model = model.to(device).train()
    tokens = Tokenised(model, data.texts)
    diffusion = GaussianDiffusion(n_steps=model.config.n_denoise)
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.999), weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, config.epochs, config.lr * config.final_lr_fraction)
    rng = np.random.default_rng(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    constants = _constants(data, train)
    draws = np.concatenate([train] + [train[data.success[train]]] * (config.success_upsample - 1))

    history: list[dict[str, float]] = []
    best_epoch, best_key = -1, (math.inf, math.inf)
    for epoch in range(config.epochs):
        started, sums, n_batches, n_transitions = time.perf_counter(), {}, 0, 0
        for chunk in np.array_split(rng.permutation(draws), math.ceil(len(draws) / config.batch_size)):
            batch = tokens.batch(sample_windows(data, chunk, config.window, rng), device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                terms = world_model_losses(model, batch, diffusion, weights=config.weights,
                                           p_uncond=config.p_uncond, generator=generator)
            optimiser.zero_grad(set_to_none=True)
            terms["total"].backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimiser.step()
            for name, value in terms.items():
                sums[name] = sums.get(name, 0.0) + float(value.detach())
            n_batches += 1
            n_transitions += int(batch.valid.sum())
        metrics = {f"train_{name}": total / n_batches for name, total in sums.items()}
        metrics["lr"] = optimiser.param_groups[0]["lr"]
        schedule.step()
        metrics["transitions_per_s"] = n_transitions / (time.perf_counter() - started)
        metrics.update(heldout_metrics(model, tokens, data, heldout, config.window, constants))
        history.append(metrics)
        key = selection_key(metrics)
        if key < best_key:
            best_epoch, best_key = epoch, key
            model.save(out_dir)
        with atomic_open(f"{out_dir.rstrip('/')}/{HISTORY_FILE}", "w") as f:  # progress survives an interruption
            json.dump({"config": asdict(config), "best_epoch": best_epoch, "complete": epoch == config.epochs - 1,
                       "epochs": history}, f, indent=2)
        if on_epoch is not None:
            on_epoch(epoch, metrics)
    if best_epoch < 0:
        raise RuntimeError(f"no epoch of world-model training gave finite held-out metrics (last: {history[-1]}); "
                           "the training diverged: lower TrainConfig.lr or check the behaviour data")
    return TrainResult(out_dir, best_epoch, history)


def selection_key(metrics: dict[str, float]) -> tuple[float, float]:
    """The checkpoint with the lowest (held-out reward MSE, done BCE) is kept; ties (e.g. all 0)
    go to termination. Where no held-out transition is reward-supervised (terminal-only rewards
    and held-out episodes all cut at the horizon) the MSE is NaN at every epoch and termination
    alone decides; a NaN BCE (diverged) never wins."""
    mse, bce = metrics["heldout_reward_mse"], metrics["heldout_done_bce"]
    return (0.0 if math.isnan(mse) else mse, math.inf if math.isnan(bce) else bce)


def _constants(data: EpisodeArrays, train: np.ndarray) -> dict[str, float]:
    valid = np.arange(data.done.shape[1])[None, :] < data.lengths[train][:, None]
    return {
        "reward_mean": float(data.reward_targets[train][data.reward_mask[train]].mean()),
        "done_rate": float(data.done[train][valid].mean()),
    }
