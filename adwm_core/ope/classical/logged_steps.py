"""What the COBS baselines read from behaviour trajectories, their log-probs and a trained
world model (app:baselines); the loop that runs them: meta.py.

What the estimators read:

- importance weights: log ρ_t = log π_e^ε(a_t|h_t) − log π_b(a_t|h_t) from the log-prob file;
- DM: the world model's reward head R_θ(z_{t+1}, h̄_t) along the logged steps, decoded to the
  environment's reward scale — only at terminal steps when the head was supervised there
  only, and only at t = 0 when it was trained on reward-to-go (its output is then a value);
- FQE, and the Q and V of DR/WDR: states are the world-model latents z_t = LN(f_θ(o_t)),
  actions the world model's action embeddings e(a) (⟨unk⟩ beyond its vocabulary), or the
  actions' pretrained sentence vectors (``FQEConfig.action_reading``). The
  target policy is what π_e^ε does in the environment (``PolicyAgent``): with probability
  1 − ε π_e's greedy action at s (written by log-prob extraction), with probability ε a
  uniformly drawn admissible action; π_e's greedy action alone where no admissible list
  was logged. One Q-network per ε level and seed (the per-ε correction). The last logged
  step of an episode is terminal for FQE whether the environment or the horizon ended
  it: ground truth is cut at the same horizon.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from ...data.actions import NULL, UNKNOWN
from ...data.behaviour_log import BehaviourLog
from ...data.windows import EpisodeArrays, episode_arrays, returns_to_go
from ...model.observation_latents import ObservationLatents
from ...model.windows import Tokenised, encoded_windows
from ...model.world_model import WorldModel
from ..statistics.intervals import percentile_bootstrap
from .fqe import FittedQEvaluation, Transitions
from .sentence_features import DIMENSION, sentence_vectors
from .settings import BaselineConfig

USES_Q = ("FQE", "DR", "WDR")


class StepGrid:
    """Places per-step values of logged episodes on an ``(N episodes, T steps)`` grid,
    episodes in ascending id (the order of ``data.windows.episode_arrays``)."""

    def __init__(self, episodes: np.ndarray, t: np.ndarray) -> None:
        self.episodes = np.unique(episodes)
        self.shape = (len(self.episodes), int(t.max()) + 1)
        self.mask = self.place(episodes, t, np.ones(len(t), bool), False)

    def place(self, episodes: np.ndarray, t: np.ndarray, values, fill) -> np.ndarray:
        values = np.asarray(values)
        grid = np.full(self.shape, fill, dtype=values.dtype)
        grid[np.searchsorted(self.episodes, episodes), t] = values
        return grid

    def covers(self, episodes: np.ndarray, t: np.ndarray) -> bool:
        """Whether (episodes, t) name every logged step exactly once and nothing else."""
        rows = np.searchsorted(self.episodes, episodes).clip(max=len(self.episodes) - 1)
        if not ((self.episodes[rows] == episodes) & (t >= 0) & (t < self.shape[1])).all():
            return False
        counts = np.zeros(self.shape, np.int64)
        np.add.at(counts, (rows, t), 1)
        return bool((counts == self.mask).all())


@dataclass
class LoggedSteps:
    """Everything the estimators need, on the step grid of the behaviour episodes."""

    grid: StepGrid
    rewards: np.ndarray  # (N, T) environment rewards
    behaviour_logp: np.ndarray | None  # (N, T); None where the logs do not say (see ``unknown_ratios``)
    eval_logp: dict[float, np.ndarray]  # ε → (N, T) log π_e^ε of the logged action (NaN: π_e cannot say)
    latents: np.ndarray  # (N, T+1, d_z) z_0 … z_T
    actions: np.ndarray  # (N, T) vocabulary ids of the logged actions
    predicted_rewards: np.ndarray  # (N, T) DM's R̂, 0 where the head is not read
    candidates: np.ndarray  # (N, T, K) π_e's greedy id, then the admissible ids; −1 = padding
    uniform: np.ndarray  # (N, T, K) share of each admissible id in the admissible list
    listed: np.ndarray  # (N, T) an admissible list was logged

    @cached_property
    def unknown_ratios(self) -> str | None:
        """Why the importance ratios π_e^ε/π_b cannot be formed, or None when they can."""
        if self.behaviour_logp is None:
            return ("the behaviour log-probs are unknown: some logged steps carry none (no `logprob` on their action "
                    "turns) and the behaviour pool names no model to re-score them")
        if any(np.isnan(logp[self.grid.mask]).any() for logp in self.eval_logp.values()):
            return "π_e's log-probs are unknown: its backend returns none (a chat endpoint)"
        return None

    def log_ratios(self, epsilon: float) -> np.ndarray | None:
        """log π_e^ε − log π_b on the grid (0 off it), None when :attr:`unknown_ratios` says why."""
        if self.unknown_ratios is not None:
            return None
        return np.where(self.grid.mask, self.eval_logp[epsilon] - self.behaviour_logp, 0.0)

    def candidate_probabilities(self, epsilon: float) -> np.ndarray:
        """π_e^ε over the candidates: (1 − ε)·1[greedy] + ε·uniform, or 1[greedy] without a list."""
        greedy = np.zeros_like(self.uniform)
        greedy[..., 0] = 1.0
        return np.where(self.listed[..., None], (1 - epsilon) * greedy + epsilon * self.uniform, greedy)


def logged_steps(log: BehaviourLog, scores: pa.Table, model: WorldModel, *, scores_name: str = "the log-probs",
                 action_reading: str = "vocabulary", observed: ObservationLatents | None = None) -> LoggedSteps:
    """Align the behaviour ``log`` and its log-probs (``scores``, called ``scores_name`` in
    errors, e.g. by its file); read the episodes with ``model`` at the log's latents
    ``observed`` (encoded here where not given); π_e's candidate actions numbered as
    :func:`action_reader` numbers them under ``action_reading``."""
    if int(log.lengths.max()) > model.config.max_steps:
        raise ValueError(f"episodes of {int(log.lengths.max())} steps exceed the world model's history length "
                         f"{model.config.max_steps}; cut the episodes or retrain with a longer one")
    table = log.steps
    episodes, t = table["episode"].to_numpy(), table["t"].to_numpy()
    grid = StepGrid(episodes, t)
    logged_behaviour = scores.filter(pc.equal(scores["policy"], "behavior")).num_rows > 0
    behaviour = _aligned(scores, "behavior", None, grid, scores_name) if logged_behaviour else None
    epsilons = sorted(set(scores.filter(pc.equal(scores["policy"], "eval"))["epsilon"].to_pylist()))
    if not epsilons:
        raise ValueError(f"{scores_name} holds no evaluation-policy rows; run log-prob extraction with π_e")
    evaluation = {eps: _aligned(scores, "eval", eps, grid, scores_name) for eps in epsilons}
    greedy = evaluation[epsilons[0]]["greedy_action"]
    if greedy.null_count:
        raise ValueError(f"{scores_name}: {greedy.null_count} evaluation rows lack π_e's greedy action; "
                         "rerun log-prob extraction (files written before the greedy_action column cannot serve FQE)")
    candidates, uniform, listed = _candidates(grid, episodes, t, table["admissible"].to_pylist(),
                                              evaluation[epsilons[0]], action_reader(model, action_reading))
    arrays = episode_arrays(log, model.config.actions, model.config.reward)
    latents, predicted = _encode(model, arrays, (observed or ObservationLatents(log, model)).of(arrays.texts))
    return LoggedSteps(
        grid=grid,
        rewards=grid.place(episodes, t, table["reward"].to_numpy(), 0.0),
        behaviour_logp=None if behaviour is None else _on_grid(grid, behaviour),
        eval_logp={eps: _on_grid(grid, rows) for eps, rows in evaluation.items()},
        latents=latents, actions=arrays.actions, predicted_rewards=predicted,
        candidates=candidates, uniform=uniform, listed=listed,
    )


def _aligned(scores: pa.Table, role: str, epsilon: float | None, grid: StepGrid, source: str) -> pa.Table:
    rows = scores.filter(pc.equal(scores["policy"], role))
    rows = rows.filter(pc.is_null(rows["epsilon"]) if epsilon is None else pc.equal(rows["epsilon"], epsilon))
    if not grid.covers(rows["episode"].to_numpy(), rows["t"].to_numpy()):
        what = "behaviour" if epsilon is None else f"ε = {epsilon} evaluation"
        raise ValueError(f"{source}: the {what} log-probs do not match the logged steps one to one "
                         f"({rows.num_rows} rows for {int(grid.mask.sum())} steps); extract the log-probs "
                         "from this trajectories file")
    return rows


def _on_grid(grid: StepGrid, rows: pa.Table) -> np.ndarray:
    return grid.place(rows["episode"].to_numpy(), rows["t"].to_numpy(), rows["logprob"].to_numpy(), 0.0)


def action_reader(model: WorldModel, reading: str) -> Callable[[Sequence[str]], np.ndarray]:
    """Action strings → the ids FQE's Q reads them by (FQEConfig.action_reading): the world
    model's vocabulary ids (⟨unk⟩ outside it), or under ``text`` and ``sentence`` the ids the world
    model reads by their words in imagination (one the vocabulary lacks numbered past it)."""
    if reading == "vocabulary":
        return lambda actions: np.asarray(model.config.actions.ids(actions), np.int64)
    if model.config.action_input != "text":
        raise ValueError(f"FQE's action_reading={reading!r} reads actions by their words, but this world model "
                         f"reads them as ids (action_input={model.config.action_input!r}): set "
                         "action_reading='vocabulary', or train the world model with action_input='text'")
    return lambda actions: model.action_ids(list(actions)).numpy()


def action_table(model: WorldModel, steps: LoggedSteps, reading: str = "vocabulary") -> np.ndarray:
    """e(a) of every id up to the largest candidate in ``steps`` (the vocabulary, which numbers the logged
    actions, at least): FQE's action features (``action_features``)."""
    size = max(len(model.config.actions), int(steps.candidates.max()) + 1)
    return action_features(model, np.arange(size), reading).numpy()


def action_features(model: WorldModel, ids: np.ndarray, reading: str) -> torch.Tensor:
    """The features Q reads for action ``ids`` numbered by ``action_reader`` under ``reading``: the world
    model's e(a), or under ``sentence`` the pretrained sentence vectors (sentence_features.py) of the ids'
    strings, zeros for ∅ and ⟨unk⟩."""
    ids = np.asarray(ids, np.int64)
    if reading != "sentence":
        # read with autograd on, as imagination reads them: under no_grad the transformer layers take their
        # inference fast path, whose float differences (~5e-7) move the Polyak FQE's ranking on local-alfworld
        return model.action_vectors(torch.as_tensor(ids, device=model.device)).detach().cpu()
    named = ids > UNKNOWN
    vectors = np.zeros((len(ids), DIMENSION), np.float32)
    vectors[named] = sentence_vectors([model._action_text(int(i)) for i in ids[named]])  # the world model's own table
    return torch.as_tensor(vectors)


def _candidates(grid: StepGrid, episodes: np.ndarray, t: np.ndarray, admissible: Sequence[list[str] | None],
                greedy_rows: pa.Table, ids: Callable[[Sequence[str]], np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step: [greedy id, distinct admissible ids…] (numbered by ``ids``) and each admissible
    id's share of the list."""
    greedy = grid.place(greedy_rows["episode"].to_numpy(), greedy_rows["t"].to_numpy(),
                        ids(greedy_rows["greedy_action"].to_pylist()), NULL)
    lists = [a or () for a in admissible]
    sizes = np.array([len(a) for a in lists])
    owner = np.repeat(np.arange(len(lists)), sizes)  # the step each listed action belongs to
    listed_ids = ids([a for lst in lists for a in lst])
    n_ids = int(max(listed_ids.max(initial=0), greedy.max(initial=0))) + 1
    keys, counts = np.unique(owner * n_ids + listed_ids, return_counts=True)
    step, distinct = keys // n_ids, keys % n_ids
    slot = np.arange(len(keys)) - np.searchsorted(step, step)  # rank of each distinct id within its step
    k = 1 + (int(slot.max()) + 1 if len(slot) else 0)
    candidates = np.full((*grid.shape, k), -1, np.int64)
    uniform = np.zeros((*grid.shape, k))
    candidates[..., 0] = np.where(grid.mask, greedy, -1)
    rows = np.searchsorted(grid.episodes, episodes)
    candidates[rows[step], t[step], 1 + slot] = distinct
    uniform[rows[step], t[step], 1 + slot] = counts / sizes[step]
    listed = grid.place(episodes, t, sizes > 0, False)
    return candidates, uniform, listed


@torch.no_grad()
def _encode(model: WorldModel, arrays: EpisodeArrays, known: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Latents z_0…z_T of every episode (``known``: z of each of ``arrays.texts``) and DM's
    predicted rewards R̂_t = R_θ(z_{t+1}, h̄_t)."""
    config = model.config
    z, predicted = [], []
    for batch, z_chunk, h, conditions in encoded_windows(model, Tokenised(model, arrays.texts), arrays,
                                                         np.arange(len(arrays.lengths)), arrays.actions.shape[1],
                                                         known=known):  # one window per episode
        reward = config.reward.decode(model.predicted_reward(z_chunk[:, 1:], h, conditions))
        z.append(z_chunk)
        predicted.append(torch.where(batch.reward_mask, reward, 0.0))
    predicted = torch.cat(predicted).double().numpy()
    if config.reward.target == "to_go":
        predicted[:, 1:] = 0.0
    return torch.cat(z).numpy(), predicted


def fitted_q(steps: LoggedSteps, model: WorldModel, epsilon: float, config: BaselineConfig, seed: int,
             episodes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Fit FQE for π_e^ε on the logged ``episodes`` (rows of the step grid, repeats allowed, as a
    bootstrap resample draws them; default all); return Q(s_t, a_t) and V(s_t) on their grid."""
    rows = np.arange(steps.grid.shape[0]) if episodes is None else np.asarray(episodes)
    fqe = fit_fqe(steps, model, epsilon, config, seed, rows)
    mask, candidates, states = steps.grid.mask[rows], steps.candidates[rows], steps.latents[rows, :-1]
    q, v = np.zeros(mask.shape), np.zeros(mask.shape)
    q[mask] = fqe.q_values(states[mask], steps.actions[rows][mask])
    v[mask] = fqe.state_values(states[mask], candidates[mask], steps.candidate_probabilities(epsilon)[rows][mask])
    return q, v


def fit_fqe(steps: LoggedSteps, model: WorldModel, epsilon: float, config: BaselineConfig, seed: int,
            episodes: np.ndarray | None = None, fitted_on: np.ndarray | None = None) -> FittedQEvaluation:
    """FQE's Q-network for π_e^ε fitted on the logged ``episodes`` (default all): states z_t, actions
    the world model's action embeddings; ``fitted_on`` (a boolean step grid) keeps only those steps'
    transitions as training tuples (their successors are still valued wherever they lead)."""
    rows = np.arange(steps.grid.shape[0]) if episodes is None else np.asarray(episodes)
    mask, candidates, latents = steps.grid.mask[rows], steps.candidates[rows], steps.latents[rows]
    n, horizon = mask.shape
    probabilities = steps.candidate_probabilities(epsilon)[rows]
    done = np.arange(horizon)[None, :] == mask.sum(1)[:, None] - 1
    fit = mask if fitted_on is None else mask & fitted_on[rows]
    k = candidates.shape[2]  # candidates of the step after (i, t), padded past the grid's end
    next_candidates = np.concatenate([candidates[:, 1:], np.full((n, 1, k), -1)], 1)
    next_probabilities = np.concatenate([probabilities[:, 1:], np.zeros((n, 1, k))], 1)
    next_probabilities[done] = 0.0
    states = latents[:, :-1]
    fqe = FittedQEvaluation(action_table(model, steps, config.fqe.action_reading), states.shape[-1], config.fqe,
                            gamma=config.gamma, seed=seed)
    rewards = np.where(mask, steps.rewards[rows], 0.0)
    fqe.fit(Transitions(
        states=states[fit], actions=steps.actions[rows][fit], rewards=rewards[fit],
        next_states=latents[:, 1:][fit], done=done[fit],
        next_candidates=next_candidates[fit], next_probabilities=next_probabilities[fit],
    ), target_range=returns_to_go_range(rewards, mask, config.gamma) if config.fqe.clip_targets else None)
    return fqe


def returns_to_go_range(rewards: np.ndarray, mask: np.ndarray, gamma: float) -> tuple[float, float]:
    """min and max over the logged steps of G_t = Σ_{u≥t} γ^{u−t} r_u (rewards 0 off the grid)."""
    to_go = returns_to_go(rewards, gamma)
    return float(to_go[mask].min()), float(to_go[mask].max())


def refitted_fqe_interval(steps: LoggedSteps, model: WorldModel, epsilon: float, config: BaselineConfig,
                          seed: int) -> tuple[float, float]:
    """FQE's percentile-bootstrap interval over trajectories with Q refitted on every resample
    (``config.fqe.refit_resamples`` of them): the fit's own error is inside it, which a bootstrap of
    one fitted Q leaves out (ope/statistics/intervals.py)."""
    def refits(resamples: np.ndarray) -> list[float]:
        return [float(fitted_q(steps, model, epsilon, config, seed + 1 + b, episodes)[1][:, 0].mean())
                for b, episodes in enumerate(resamples)]

    return percentile_bootstrap(refits, steps.grid.shape[0], n_resamples=config.fqe.refit_resamples,
                                confidence=config.confidence, seed=seed)
