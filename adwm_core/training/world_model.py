"""World-model training on behaviour trajectories (Alg. wm-train, app:wm-train).

Per epoch every training episode is drawn once — successful ones ``success_upsample``
(5) times — in shuffled batches of 64; each draw is a window of L transitions at a
uniform start. AdamW (0.9, 0.999; fused), weight decay 1e-4, peak lr 3e-4 annealed by cosine
to 10 % over the rounds, gradient-norm clip 1.0, bf16 autocast on CUDA. After each
round the held-out episodes are scored and the best checkpoint so far is kept
(safetensors + JSON config, see model/world_model.py). The optimiser sees only the rows of the
hash-token table that the training texts reach (``ReachableTokenRows``).

Two presets (``TrainConfig.preset``); a field set explicitly overrides its preset:

- ``paper``: the paper's recipe — ε-prediction, action ids, outcome heads on z_{t+1},
  windows of 8, a budget of 50 epochs (a round = an epoch; a few hundred optimiser steps
  on a local cell), and selection on the heads read on the *encoded true* next latent;
- ``default`` (beyond the paper): z_0-prediction, actions read as text, outcome heads on
  (e(a_t), h̄_t), windows of whole episodes (up to 32 steps), a budget of 50 000 drawn
  transitions (50 evaluation rounds; training time follows the transitions drawn, not the
  number of optimiser steps, so long-episode cells cost what short ones do; 250 000 gave the
  development cells the same ρ at five times the time, docs/notebook.md), and selection on what
  imagination reads — the outcome heads and the denoised next latent, each relative to a
  trivial predictor (``selection_key``).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from ..data.actions import MAX_ACTIONS, UNKNOWN, ActionVocabulary
from ..data.behaviour_log import BehaviourLog
from ..data.io import atomic_open, check_output
from ..data.windows import EpisodeArrays, episode_arrays, reward_scale, sample_windows
from ..model.windows import Tokenised, encoded_windows
from ..model.world_model import WorldModel, WorldModelConfig, member_path, on_latent_manifold
from ..settings import TrainConfig
from .losses import world_model_losses

HISTORY_FILE = "history.json"
EpochCallback = Callable[[int, dict[str, float]], None]


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


class ReachableTokenRows(nn.Module):
    """The rows of f_θ's hash-token table (32,768 × 128) that the training texts can reach, as a
    parameter of their own, looked up through a map from hash id to row.

    Training reads only these rows, so it is the same optimisation as on the whole table, but the
    backward pass and AdamW touch |U| rows (a few hundred on a local cell) instead of 32,768: on
    local-simonsays the dense table cost half of every step (zero-filled gradients, AdamW over
    4.2 M numbers). The one difference: AdamW's decoupled weight decay no longer shrinks the rows
    no training text holds, by a factor (1 − lr·λ)^steps ≈ 1 − 6·10⁻⁵ that nothing reads in
    training. ``detached()`` writes the rows back into the table and puts the table in place, for
    saving; a hash id outside the training texts is an error while the rows are in place."""

    def __init__(self, table: nn.Embedding, ids: torch.Tensor) -> None:
        super().__init__()
        ids = torch.unique(torch.cat([ids.flatten(), torch.tensor([table.padding_idx])]).to(table.weight.device))
        self.rows = nn.Parameter(table.weight.detach()[ids].clone())
        lookup = torch.full((table.num_embeddings,), -1, dtype=torch.long, device=ids.device)
        lookup[ids] = torch.arange(len(ids), device=ids.device)
        self.register_buffer("lookup", lookup, persistent=False)
        self.padding_row = int(lookup[table.padding_idx])
        self.table, self.ids = [table], ids  # in a list: not a submodule, so not trained twice

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(self.lookup[ids], self.rows, padding_idx=self.padding_row)

    def restore(self, encoder: nn.Module) -> None:
        """Write the trained rows back into the table and put the table in place of the rows."""
        table = self.table[0]
        with torch.no_grad():
            table.weight[self.ids] = self.rows
        encoder.tokens = table

    @contextmanager
    def detached(self, encoder: nn.Module) -> Iterator[None]:
        """``encoder.tokens`` is the full table, holding the trained rows, inside the block."""
        self.restore(encoder)
        try:
            yield
        finally:
            encoder.tokens = self


def reachable_token_ids(model: WorldModel, tokens: Tokenised) -> torch.Tensor:
    """Hash ids of every observation text and, for text actions, every vocabulary action."""
    ids = [tokens.ids.flatten()]
    if model.config.action_input == "text" and model.config.actions.actions:
        ids.append(model.action_tokenizer(list(model.config.actions.actions))[0].flatten())
    return torch.cat(ids)


def split_indices(n: int, fraction: float, seed: int, minimum: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) of ``range(n)``; held-out gets max(minimum, round(fraction·n)) items and
    training at least ``minimum``."""
    n_heldout = max(minimum, round(fraction * n))
    if n - n_heldout < minimum:
        raise ValueError(f"{n} items cannot be split into training and held-out parts of at least {minimum} each; "
                         "collect more behaviour data")
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[n_heldout:]), np.sort(order[:n_heldout])


def bootstrap_episodes(train: np.ndarray, seed: int, member: int) -> np.ndarray:
    """The training episodes of ensemble member ``member``: ``train`` for member 0, else
    len(train) draws from it with replacement (seeded by (seed, member))."""
    if member == 0:
        return train
    return np.sort(np.random.default_rng((seed, member)).choice(train, len(train)))


@torch.no_grad()
def heldout_metrics(model: WorldModel, tokens: Tokenised, data: EpisodeArrays, episodes: np.ndarray,
                    window: int, constants: dict[str, float]) -> dict[str, float]:
    """One-step fidelity on every held-out transition (real history, logged action), each beside
    a trivial predictor:

    - ``reward_mse`` / ``done_bce``: the outcome heads as imagination reads them (on the
      denoised next latent ẑ_{t+1}, or on e(a_t)), beside the training mean and done rate;
    - ``done_error``: termination misread at P(done) ≥ 0.5, as imagination stops a rollout,
      beside the majority class;
    - ``reward_mse_true`` / ``done_bce_true``: the heads on the *encoded true* next latent (the
      paper's selection; the same as above for heads that read the action);
    - ``latent_mse``: ‖ẑ_{t+1} − z_{t+1}‖² (mean square over coordinates), ẑ_{t+1} by
      deterministic DDIM from z_K = 0 on 5 levels given (h̄_t, a_t), beside copying z_t.
    """
    model.eval()
    parts: dict[str, list[torch.Tensor]] = {name: [] for name in
                                            ("reward", "reward_true", "target", "done_p", "done_p_true", "done",
                                             "latent", "latent_copy")}
    for batch, z, h, conditions in encoded_windows(model, tokens, data, episodes, window):
        m = batch.valid
        z_now, z_next, h_t, a_t, on = z[:, :-1][m], z[:, 1:][m], h[m], conditions[m], batch.reward_mask[m]
        z_hat = model.diffusion.denoise_deterministic(lambda z_k, k: model.eps(z_k, k, h_t, a_t),
                                                      torch.zeros_like(z_next), 5, project=on_latent_manifold)
        parts["reward"].append(model.predicted_reward(z_hat, h_t, a_t)[on])
        parts["reward_true"].append(model.predicted_reward(z_next, h_t, a_t)[on])
        parts["target"].append(batch.reward_targets[m][on])
        parts["done_p"].append(model.done_probability(z_hat, h_t, a_t))
        parts["done_p_true"].append(model.done_probability(z_next, h_t, a_t))
        parts["done"].append(batch.done[m].float())
        parts["latent"].append(((z_hat - z_next) ** 2).mean(-1))
        parts["latent_copy"].append(((z_now - z_next) ** 2).mean(-1))
    model.train()
    x = {name: torch.cat(values).float().cpu() for name, values in parts.items()}
    base = torch.tensor(constants["done_rate"]).expand_as(x["done"])

    def bce(p: torch.Tensor) -> float:
        return float(nn.functional.binary_cross_entropy(p.clamp(1e-6, 1 - 1e-6), x["done"]))

    return {
        "heldout_reward_mse": float(((x["reward"] - x["target"]) ** 2).mean()),
        "heldout_reward_mse_true": float(((x["reward_true"] - x["target"]) ** 2).mean()),
        "heldout_reward_mse_constant": float(((constants["reward_mean"] - x["target"]) ** 2).mean()),
        "heldout_done_bce": bce(x["done_p"]),
        "heldout_done_bce_true": bce(x["done_p_true"]),
        "heldout_done_bce_constant": bce(base),
        "heldout_done_error": float(((x["done_p"] >= 0.5).float() != x["done"]).float().mean()),
        "heldout_done_error_constant": float(min(x["done"].mean(), 1 - x["done"].mean())),
        "heldout_latent_mse": float(x["latent"].mean()),
        "heldout_latent_mse_copy": float(x["latent_copy"].mean()),
    }


def train_ensemble(
    trajectories: pa.Table,
    out_dir: str,
    config: TrainConfig = TrainConfig(),
    *,
    on_epoch: Callable[[int, int, dict[str, float]], None] | None = None,
) -> list[TrainResult]:
    """The ``config.members`` world models of a cell: member 0 at ``out_dir``, member k at
    ``member_path(out_dir, k)`` (``train_world_model(member=k)``). ``on_epoch(member, round,
    metrics)`` follows every held-out evaluation of every member."""
    return [train_world_model(trajectories, member_path(out_dir, member), config, member=member,
                              on_epoch=None if on_epoch is None else functools.partial(on_epoch, member))
            for member in range(config.members)]


def train_world_model(
    trajectories: pa.Table,
    out_dir: str,
    config: TrainConfig = TrainConfig(),
    *,
    member: int = 0,
    on_epoch: EpochCallback | None = None,
    overwrite: bool = False,
) -> TrainResult:
    """Train a world model on behaviour ``trajectories``; the best checkpoint goes to ``out_dir``.
    ``on_epoch(round, metrics)`` follows every held-out evaluation (``config.rounds`` in all).
    ``member`` k > 0 of an ensemble trains on a bootstrap resample of the training episodes
    (seeded by (seed, k)) from seed + k, and is selected on the same held-out episodes."""
    check_output(out_dir, overwrite=overwrite, hint="pass overwrite=True to retrain, or choose another folder")
    behaviour = BehaviourLog(trajectories)
    device = resolve_device(config.device)
    with deterministic_kernels(device):
        return _train(behaviour, out_dir, config, device, member, on_epoch)


@contextmanager
def deterministic_kernels(device: torch.device) -> Iterator[None]:
    """Torch's deterministic kernels inside the block, on CPU. With two threads some default CPU
    kernels accumulate in an order that varies run to run, so one seed gave another file each time
    (local-alfworld's world model: equal losses to round 1, apart from round 2 on), and a world model
    trained again could not be checked against the digests the bench's store keeps. The deterministic
    kernels gave the same file twice there, in the same time (2026-12-06)."""
    if device.type != "cpu":
        yield
        return
    enabled, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def _train(behaviour: BehaviourLog, out_dir: str, config: TrainConfig, device: torch.device, member: int,
           on_epoch: EpochCallback | None) -> TrainResult:
    """``train_world_model``'s training, on ``device``."""
    seed = config.seed + member
    torch.manual_seed(seed)
    actions = behaviour.column("action")
    if config.react_actions:
        vocabulary = ActionVocabulary.for_react()
    else:  # text actions need no table, so every logged action keeps its own id
        vocabulary = ActionVocabulary.from_actions(actions, cap=None if config.action_input == "text" else MAX_ACTIONS)
    scale = reward_scale(behaviour, config.reward_target)
    data = episode_arrays(behaviour, vocabulary, scale)
    train, heldout = split_indices(len(data.lengths), config.heldout_fraction, config.seed)
    train = bootstrap_episodes(train, config.seed, member)
    window = min(config.window, int(data.lengths.max()))

    unknown_trained = bool((data.actions[train] == UNKNOWN).any())
    model = WorldModel(WorldModelConfig.from_training(config, vocabulary, scale, unknown_trained))
    model = model.to(device).train()
    tokens = Tokenised(model, data.texts)
    encoder = model.observation_encoder
    encoder.tokens = reachable = ReachableTokenRows(encoder.tokens, reachable_token_ids(model, tokens))
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.999), weight_decay=config.weight_decay,
                                  fused=True)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, config.rounds, config.lr * config.final_lr_fraction)
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    constants = _constants(data, train)
    draws = np.concatenate([train] + [train[data.success[train]]] * (config.success_upsample - 1))
    total_steps = optimiser_steps(config, data, draws, window)
    batches = _batches(draws, config.batch_size, rng)

    history: list[dict[str, float]] = []
    best_round, best_key = -1, (math.inf, math.inf)
    training_started = time.perf_counter()
    for round_ in range(config.rounds):
        started, sums, n_transitions = time.perf_counter(), {}, 0
        n_batches = (round_ + 1) * total_steps // config.rounds - round_ * total_steps // config.rounds
        for chunk in itertools.islice(batches, n_batches):
            batch = tokens.batch(sample_windows(data, chunk, window, rng), device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                terms = world_model_losses(model, batch, model.diffusion, weights=config.weights,
                                           p_uncond=config.p_uncond, generator=generator)
            optimiser.zero_grad(set_to_none=True)
            terms["total"].backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimiser.step()
            for name, value in terms.items():
                sums[name] = sums.get(name, 0.0) + float(value.detach())
            n_transitions += int(batch.valid.sum())
        metrics = {f"train_{name}": total / max(n_batches, 1) for name, total in sums.items()}
        metrics["lr"] = optimiser.param_groups[0]["lr"]
        metrics["optimiser_steps"] = (round_ + 1) * total_steps // config.rounds
        schedule.step()
        metrics["transitions_per_s"] = n_transitions / (time.perf_counter() - started)
        metrics.update(heldout_metrics(model, tokens, data, heldout, window, constants))
        metrics["seconds"] = time.perf_counter() - training_started  # training and evaluation so far
        history.append(metrics)
        key = selection_key(metrics, config.selection)
        if key < best_key:
            best_round, best_key = round_, key
            with reachable.detached(encoder):
                model.save(out_dir)
        with atomic_open(f"{out_dir.rstrip('/')}/{HISTORY_FILE}", "w") as f:  # progress survives an interruption
            json.dump({"config": config.model_dump(mode="json"), "best_epoch": best_round, "complete": round_ == config.rounds - 1,
                       "epochs": history}, f, indent=2)
        if on_epoch is not None:
            on_epoch(round_, metrics)
    if best_round < 0:
        raise RuntimeError(f"no round of world-model training gave finite held-out metrics (last: {history[-1]}); "
                           "the training diverged: lower TrainConfig.lr or check the behaviour data")
    return TrainResult(out_dir, best_round, history)


def optimiser_steps(config: TrainConfig, data: EpisodeArrays, draws: np.ndarray, window: int) -> int:
    """The budget in optimiser steps: ``steps``; ``epochs`` × batches per epoch; or ``transitions``
    over the expected transitions of a batch (``batch_size`` draws, each min(length, window)),
    at least one step per evaluation round."""
    if config.steps is not None:
        return config.steps
    if config.epochs is not None:
        return config.epochs * math.ceil(len(draws) / config.batch_size)
    per_batch = config.batch_size * float(np.minimum(data.lengths[draws], window).mean())
    return max(config.rounds, math.ceil(config.transitions / per_batch))


def _batches(draws: np.ndarray, batch_size: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Batches of episode draws, epoch after epoch: every draw once per epoch, in shuffled order."""
    while True:
        yield from np.array_split(rng.permutation(draws), math.ceil(len(draws) / batch_size))


def selection_key(metrics: dict[str, float], selection: str = "heads_on_true") -> tuple[float, float]:
    """The lowest key is kept. ``heads_on_true`` (the paper's): (held-out reward MSE, done BCE) of
    the heads on the encoded true next latent; ties (e.g. all 0) go to termination. Where no
    held-out transition is reward-supervised (terminal-only rewards and held-out episodes all
    cut at the horizon) the MSE is NaN at every epoch and termination alone decides; a NaN BCE
    (diverged) never wins. ``fidelity``: the sum of reward MSE, termination error (at the 0.5
    threshold imagination stops at; the BCE would also punish confidence, and overfits first) and
    next-latent MSE as imagination reads them, each divided by its trivial predictor's
    (``heldout_metrics``)."""
    if selection == "fidelity":
        ratios = [metrics[f"heldout_{name}"] / max(metrics[f"heldout_{name}_{base}"], 1e-6)
                  for name, base in (("reward_mse", "constant"), ("done_error", "constant"), ("latent_mse", "copy"))]
        total = sum(0.0 if math.isnan(r) and i == 0 else r for i, r in enumerate(ratios))
        return (math.inf if math.isnan(total) else total, 0.0)
    mse, bce = metrics["heldout_reward_mse_true"], metrics["heldout_done_bce_true"]
    return (0.0 if math.isnan(mse) else mse, math.inf if math.isnan(bce) else bce)


def _constants(data: EpisodeArrays, train: np.ndarray) -> dict[str, float]:
    valid = np.arange(data.done.shape[1])[None, :] < data.lengths[train][:, None]
    return {
        "reward_mean": float(data.reward_targets[train][data.reward_mask[train]].mean()),
        "done_rate": float(data.done[train][valid].mean()),
    }
