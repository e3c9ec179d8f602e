"""The ADWM estimator: π_e^ε acts in imagined rollouts of the world model (Sec. 4.2, Alg. ope-rollout).

Every rollout of every ε level advances in one batch. Rollout i starts from the first
observation of a behaviour episode drawn uniformly, z_0 = LN(f_θ(o_0)); at step t

1. π_e reads the imagined state z_t (``reading``): ``retrieval`` gives π_e the text of the
   behaviour-pool observation nearest to z_t in latent space (cosine), as ordinary text;
2. π_e^ε acts: with probability ε a uniformly drawn action of the *retrieved observation's
   admissible list* — the list the environment showed in the state the imagination is
   closest to, so exploring stays inside actions the world model has seen in such
   states — otherwise π_e's own greedy action on that history, mapped to the same list
   (exactly what ``PolicyAgent`` does in the environment);
3. z_{t+1} is sampled by the reverse diffusion process conditioned on (h̄_t, a_t) with
   classifier-free guidance ε̂ = (1+λ) ε_θ(·, a_t) − λ ε_θ(·, ∅) and, at every denoising
   step, continuation guidance g_k (``guidance``; ``success_bank``: diffusion/guidance.py);
4. the reward and termination heads read (z_{t+1}, h̄_t); the rollout stops at
   P(done) ≥ 0.5 or after H_max steps.

Value estimates per ε level, each with a percentile-bootstrap interval over rollouts:
``reward_sum`` = mean_i Σ_t γ^t r̂_t (Eq. mc_estimator; a head supervised on terminal steps
only is read at the terminating step only) and ``success_similarity`` = mean_i max_t
max_b cos(z_{t+1}, b) over the success bank (latents of the last observations of
successful behaviour episodes; Alg. ope-rollout). A seed fixes every random draw: start
observations, ε flips, exploratory actions and diffusion noise; rollout i of every ε level
shares them (common random numbers, as ground truth shares episode seeds across ε).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa
import torch
from scipy import stats

from ..collection import EPSILONS, ModelCache, PolicySpec, check_epsilons
from ..data import ESTIMATES, TRAJECTORIES, behaviour_rows, check_output, read_table, table_from_rows, write_table
from ..data.actions import NULL
from ..diffusion.guidance import eta_schedule, nearest_cosine, success_bank_guidance
from ..diffusion.process import GaussianDiffusion, classifier_free
from ..envs.runner import Decision
from ..model.world_model import WorldModel, on_latent_manifold
from ..policies.prompts import History

READINGS = ("retrieval",)
GUIDANCE = ("success_bank", "none")
VALUE_ESTIMATES = ("reward_sum", "success_similarity")


class Policy(Protocol):
    def act(self, histories: Sequence[History]) -> list[Decision]: ...


@dataclass(frozen=True)
class AdwmConfig:
    """Inference settings; defaults from app:ope-rollout."""

    reading: str = "retrieval"
    guidance: str = "success_bank"
    n_rollouts: int = 32
    horizon: int = 30  # H_max
    cfg_scale: float = 1.0  # λ, ω = 1 + λ
    alpha: float = 1.0
    eta_max: float = 0.5
    gamma: float = 1.0  # discount of reward_sum (1: on the scale of undiscounted returns)
    done_threshold: float = 0.5
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    n_bootstrap: int = 1000
    confidence: float = 0.95

    def __post_init__(self) -> None:
        bad = []
        if self.reading not in READINGS:
            bad.append(f"reading={self.reading!r} (choose from {READINGS})")
        if self.guidance not in GUIDANCE:
            bad.append(f"guidance={self.guidance!r} (choose from {GUIDANCE})")
        for name in ("n_rollouts", "horizon", "n_bootstrap"):
            if getattr(self, name) < 1:
                bad.append(f"{name}={getattr(self, name)} (must be ≥ 1)")
        for name in ("cfg_scale", "alpha", "eta_max"):
            if getattr(self, name) < 0:
                bad.append(f"{name}={getattr(self, name)} (must be ≥ 0)")
        if not 0 < self.gamma <= 1:
            bad.append(f"gamma={self.gamma} (must lie in (0, 1])")
        if not 0 < self.done_threshold < 1 or not 0 < self.confidence < 1:
            bad.append("done_threshold and confidence must lie in (0, 1)")
        if not self.seeds:
            bad.append("seeds=() (give at least one)")
        if bad:
            raise ValueError(f"ADWM config: {'; '.join(bad)}")


@dataclass
class StateBank:
    """The behaviour observations imagination reads from, encoded once."""

    texts: list[str]
    task_descriptions: list[str]
    admissible: list[tuple[str, ...] | None]
    latents: torch.Tensor  # (U, d_z)
    starts: np.ndarray  # bank rows of the episodes' first observations, one per episode
    success: torch.Tensor  # (S, d_z) latents of the last observations of successful episodes

    @classmethod
    def from_trajectories(cls, table: pa.Table, model: WorldModel) -> "StateBank":
        table = behaviour_rows(table)
        if table.num_rows == 0:
            raise ValueError("the trajectories hold no behaviour steps; ADWM reads the behaviour pool")
        rows = table.select(["episode", "t", "observation", "task_description", "admissible", "next_observation",
                             "done", "success"]).sort_by([("episode", "ascending"), ("t", "ascending")]).to_pylist()
        index: dict[str, int] = {}
        texts, tasks, admissible, starts = [], [], [], []
        for row in rows:
            if row["observation"] not in index:
                index[row["observation"]] = len(texts)
                texts.append(row["observation"])
                tasks.append(row["task_description"])
                admissible.append(None if row["admissible"] is None else tuple(row["admissible"]))
            if row["t"] == 0:
                starts.append(index[row["observation"]])
        finals = [r["next_observation"] for r, after in zip(rows, rows[1:] + [None])
                  if (after is None or after["episode"] != r["episode"]) and r["success"]]
        with torch.no_grad():
            latents, success = model.encode_texts(texts).cpu(), model.encode_texts(list(dict.fromkeys(finals))).cpu()
        return cls(texts, tasks, admissible, latents, np.asarray(starts), success)

    def nearest(self, z: torch.Tensor) -> np.ndarray:
        """Bank rows of the observations nearest to each latent (cosine)."""
        sim = torch.nn.functional.normalize(z, dim=-1) @ torch.nn.functional.normalize(self.latents, dim=-1).T
        return sim.argmax(-1).numpy()


@dataclass
class Rollouts:
    """Per-rollout outcomes of one seed, rollout r = e · n_rollouts + i at ε level e."""

    epsilons: np.ndarray  # (R,)
    reward_sum: np.ndarray  # (R,)
    success_similarity: np.ndarray  # (R,)
    lengths: np.ndarray  # (R,) imagined steps taken
    seconds: dict[str, float] = field(default_factory=dict)  # world_model, policy

    def values(self, name: str, epsilon: float) -> np.ndarray:
        return getattr(self, name)[self.epsilons == epsilon]


class ImaginedRollouts:
    """Batched guided rollouts of π_e^ε in a trained world model."""

    def __init__(self, model: WorldModel, bank: StateBank, config: AdwmConfig = AdwmConfig()) -> None:
        if model.config.reward.target != "step":
            raise ValueError("ADWM's reward_sum adds per-step rewards, but this world model predicts reward-to-go; "
                             "retrain it with TrainConfig(reward_target='step')")
        if config.guidance == "success_bank" and len(bank.success) == 0:
            raise ValueError("success-bank guidance needs successful behaviour episodes, and the pool has none; "
                             "collect more behaviour data or use guidance='none'")
        if config.horizon > model.config.max_steps:
            raise ValueError(f"horizon={config.horizon} exceeds the world model's history length "
                             f"{model.config.max_steps}")
        self.model, self.bank, self.config = model.eval(), bank, config
        self.diffusion = GaussianDiffusion(n_steps=model.config.n_denoise)
        self.guidance = None
        if config.guidance == "success_bank" and config.eta_max > 0 and config.alpha > 0:
            eta = eta_schedule(self.diffusion.n_steps, config.eta_max)
            self.guidance = success_bank_guidance(self.diffusion, bank.success, config.alpha, eta)

    @torch.no_grad()
    def run(self, policy: Policy, epsilons: Sequence[float], seed: int) -> Rollouts:
        c, model, bank = self.config, self.model, self.bank
        n, d = c.n_rollouts, model.config.d_z
        eps_of = np.repeat(np.asarray(epsilons, float), n)
        base = np.arange(len(eps_of)) % n  # the rollout index whose random numbers row r uses
        rng, generator = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
        starts = bank.starts[rng.integers(len(bank.starts), size=n)][base]
        z = torch.zeros(len(eps_of), c.horizon + 1, d)
        z[:, 0] = bank.latents[starts]
        previous = torch.full((len(eps_of), c.horizon + 1), NULL, dtype=torch.long)  # a_{t−1} beside z_t
        turns: list[list[tuple[str, str]]] = [[] for _ in eps_of]
        reward_sum = np.zeros(len(eps_of))
        similarity = np.full(len(eps_of), -np.inf if len(bank.success) else np.nan)  # NaN: no success bank
        lengths, alive = np.zeros(len(eps_of), np.int64), np.ones(len(eps_of), bool)
        seconds = {"world_model": 0.0, "policy": 0.0}
        scale = model.config.reward
        for t in range(c.horizon):
            flips, picks = rng.random(n), rng.random(n)  # drawn every step for every rollout index
            noise = torch.randn((self.diffusion.n_steps + 1, n, d), generator=generator)
            rows = np.flatnonzero(alive)
            if len(rows) == 0:
                break
            started = time.perf_counter()
            read = bank.nearest(z[rows, t])
            seconds["world_model"] += time.perf_counter() - started
            started = time.perf_counter()
            actions = self._act(policy, rows, read, turns, flips[base[rows]] < eps_of[rows], picks[base[rows]])
            seconds["policy"] += time.perf_counter() - started
            started = time.perf_counter()
            ids = torch.as_tensor(model.config.actions.ids(actions))
            h = model.history(z[rows, : t + 1], previous[rows, : t + 1])[:, -1]
            z_next = self._transition(h, ids, noise[:, base[rows]])
            reward = scale.decode(model.predicted_reward(z_next, h)).numpy()
            done = model.done_probability(z_next, h).numpy() >= c.done_threshold
            seconds["world_model"] += time.perf_counter() - started
            z[rows, t + 1], previous[rows, t + 1] = z_next, ids
            counted = done if scale.terminal_only else np.ones(len(rows), bool)
            reward_sum[rows] += np.where(counted, c.gamma ** t * reward, 0.0)
            if len(bank.success):
                similarity[rows] = np.maximum(similarity[rows], nearest_cosine(z_next, bank.success).numpy())
            for r, i, a in zip(rows, read, actions):
                turns[r].append((bank.texts[i], a))
            lengths[rows] += 1
            alive[rows[done]] = False
        return Rollouts(eps_of, reward_sum, similarity, lengths, seconds)

    def _act(self, policy: Policy, rows: np.ndarray, read: np.ndarray, turns, explore: np.ndarray,
             picks: np.ndarray) -> list[str]:
        """π_e^ε's actions on the retrieved observations (ε-exploration from their admissible lists)."""
        bank = self.bank
        actions: list[str | None] = [None] * len(rows)
        ask = []
        for j, i in enumerate(read):
            listed = bank.admissible[i]
            if explore[j] and listed:
                actions[j] = listed[int(picks[j] * len(listed))]
            else:
                ask.append(j)
        histories = [History(bank.task_descriptions[read[j]], tuple(turns[rows[j]]), bank.texts[read[j]],
                             bank.admissible[read[j]]) for j in ask]
        for j, decision in zip(ask, policy.act(histories) if ask else []):
            actions[j] = decision.action
        return actions

    def _transition(self, h: torch.Tensor, actions: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """z_{t+1} ~ the guided reverse process given (h̄_t, a_t)."""
        c, model = self.config, self.model
        h2, a2 = torch.cat([h, h]), torch.cat([actions, torch.full_like(actions, NULL)])

        def eps_model(z_k: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            if c.cfg_scale == 0:
                return model.eps(z_k, k, h, actions)
            both = model.eps(torch.cat([z_k, z_k]), torch.cat([k, k]), h2, a2)
            cond, uncond = both.chunk(2)
            return classifier_free(cond, uncond, c.cfg_scale)

        return self.diffusion.sample(eps_model, tuple(noise.shape[1:]), guidance=self.guidance, noise=noise,
                                     project=on_latent_manifold)


def value_rows(rollouts: Rollouts, *, cell: str, policy: str, seed: int, config: AdwmConfig) -> list[dict]:
    """One estimates row per value estimate and ε level: the mean over rollouts and its
    percentile-bootstrap interval (scipy.stats.bootstrap)."""
    rows = []
    for name in VALUE_ESTIMATES:
        if name == "success_similarity" and np.isnan(rollouts.success_similarity).any():
            continue  # no successful behaviour episode, no success bank
        for epsilon in np.unique(rollouts.epsilons):
            x = rollouts.values(name, epsilon)
            low, high = _interval(x, config, seed)
            value = float(x.mean())
            rows.append({
                "cell": cell, "estimator": f"ADWM:{name}", "policy": policy, "epsilon": float(epsilon), "seed": seed,
                "value": value, "ci_low": low, "ci_high": high,
                "log_abs_value": float(np.log(abs(value))) if value else -np.inf, "sign": int(np.sign(value)),
            })
    return rows


def _interval(x: np.ndarray, config: AdwmConfig, seed: int) -> tuple[float, float]:
    if np.ptp(x) == 0:  # every rollout agrees: the interval is the point
        return float(x[0]), float(x[0])
    result = stats.bootstrap((x,), np.mean, n_resamples=config.n_bootstrap, confidence_level=config.confidence,
                             method="percentile", random_state=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def evaluate_policy(
    world_model: str | WorldModel,
    trajectories: str,
    policy: Policy,
    *,
    cell: str,
    label: str,
    epsilons: Sequence[float],
    config: AdwmConfig = AdwmConfig(),
) -> tuple[pa.Table, list[Rollouts]]:
    """Score one policy (anything with ``act(histories)``) against an already trained world
    model: the estimates table (every value estimate × ε × seed) and each seed's rollouts."""
    check_epsilons(epsilons)
    model = world_model if isinstance(world_model, WorldModel) else WorldModel.load(world_model)
    imagination = ImaginedRollouts(model, StateBank.from_trajectories(read_table(trajectories, TRAJECTORIES), model),
                                   config)
    runs = [imagination.run(policy, epsilons, seed) for seed in config.seeds]
    rows = [row for seed, run in zip(config.seeds, runs)
            for row in value_rows(run, cell=cell, policy=label, seed=seed, config=config)]
    return table_from_rows(rows, ESTIMATES), runs


def run_adwm(
    trajectories: str,
    world_model: str,
    policy: PolicySpec,
    env_name: str,
    out: str,
    *,
    cell: str,
    epsilons: Sequence[float] = EPSILONS,
    config: AdwmConfig = AdwmConfig(),
    overwrite: bool = False,
) -> pa.Table:
    """The ADWM stage: π_e (an LLM policy spec) over the ε family → estimates Parquet at ``out``."""
    check_output(out, overwrite=overwrite)
    check_epsilons(epsilons)
    model = WorldModel.load(world_model)  # a missing checkpoint fails before the LLM loads
    llm = ModelCache().policy(policy, env_name)
    table, _ = evaluate_policy(model, trajectories, llm, cell=cell, label=policy.name, epsilons=epsilons,
                               config=config)
    return write_table(table, out, ESTIMATES, overwrite=overwrite)
