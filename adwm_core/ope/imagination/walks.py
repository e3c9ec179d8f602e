"""Teacher-forced walks: real episodes asked of a transition step by step, as imagination asks it
(rollouts.py), each answer kept beside the environment's.

Every real step (o_t, a_t) of an episode is asked of the transition: π_e read the behaviour
observation nearest to z_t = f_θ(o_t), its earlier turns are the real ones. The answer — what
answered (answers.SOURCES), r̂_t and whether the episode ends — is kept beside the
environment's r_t, done_t and return-to-go G_t = Σ_{u≥t} γ^{u−t} r_u (:class:`WalkedStep`).

The *walked value* of an episode follows its real steps and adds the answers,

    Ĵ_tf = Σ_{t ≤ τ} γ^t r̂_t,   τ the first step whose answer ends the episode (else its last real step);

under the hand-over to Q̂ a ``value`` answer is r̂_τ = Q̂_ε(z_τ, a_τ), and it ends the walk. A
source in ``oracle`` is answered by the environment instead: (r_t, done_t), or G_t where the
source hands over a value; with every source an oracle the walk returns G_0.

Two readers: where ADWM's error sits, on π_e's ground-truth episodes
(instruments/source_errors.py), and the default's off-log answers graded inside the log
(held_out.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from ...data.windows import returns_to_go
from ...model.world_model import WorldModel
from ...policies.prompts import History
from ..answers import VALUE
from .state_bank import StateBank
from .transitions import Query, Transition


@dataclass(frozen=True)
class WalkedStep:
    """One real step of a ground-truth episode, the transition's answer beside the environment's."""

    policy: str
    epsilon: float
    episode: int
    t: int
    source: str  # what answered (transitions.SOURCES)
    reward: float  # r̂_t (a value Q̂_ε(z_t, a_t) where the transition hands over)
    done: bool  # the answer ends the episode
    true_reward: float  # r_t
    true_done: bool  # the environment ended the episode at t
    return_to_go: float  # G_t


def walk_ground_truth(transition: Transition, bank: StateBank, model: WorldModel, ground_truth: pa.Table, *,
                      gamma: float = 1.0, noise_levels: int = 0, policy: object = None,
                      seed: int = 0) -> list[WalkedStep]:
    """Every step of every ground-truth episode (rows ``source == "ground_truth"`` of a
    trajectories table) asked of ``transition``, all episodes' step t in one batch; ``noise_levels``
    and ``policy`` as the rollouts give them to a diffusion transition."""
    gt = ground_truth.filter(pc.equal(ground_truth["source"], "ground_truth"))
    if gt.num_rows == 0:
        raise ValueError("the ground-truth table holds no rows with source 'ground_truth': pass the ground-truth "
                         "stage's episodes file")
    return walk_episodes(transition, bank, model, gt, gamma=gamma, noise_levels=noise_levels, policy=policy,
                         seed=seed)


def walk_episodes(transition: Transition, bank: StateBank, model: WorldModel, episodes_table: pa.Table, *,
                  gamma: float = 1.0, noise_levels: int = 0, policy: object = None,
                  seed: int = 0) -> list[WalkedStep]:
    """Every step of every episode of ``episodes_table`` (trajectories rows: policy, epsilon,
    episode, t, task_description, observation, action, reward, done) asked of ``transition`` as
    :func:`walk_ground_truth` asks it."""
    gt = episodes_table.sort_by([("policy", "ascending"), ("epsilon", "ascending"), ("episode", "ascending"), ("t", "ascending")])
    episodes: dict[tuple, list[dict]] = defaultdict(list)
    for row in gt.select(["policy", "epsilon", "episode", "t", "task_description", "observation", "action", "reward",
                          "done"]).to_pylist():
        episodes[(row["policy"], row["epsilon"], row["episode"])].append(row)
    keys = list(episodes)
    texts = list(dict.fromkeys(row["observation"] for rows in episodes.values() for row in rows))
    with torch.no_grad():
        encoded = model.encode_texts(texts).cpu()
    latent_of = {text: i for i, text in enumerate(texts)}
    horizon, d = max(map(len, episodes.values())), encoded.shape[1]
    z = torch.zeros(len(keys), horizon, d)
    for i, key in enumerate(keys):
        z[i, : len(episodes[key])] = encoded[[latent_of[row["observation"]] for row in episodes[key]]]
    to_go = {key: returns_to_go(np.array([row["reward"] for row in rows], float), gamma)
             for key, rows in episodes.items()}
    turns: list[list[tuple[str, str]]] = [[] for _ in keys]
    generator, walked = torch.Generator().manual_seed(seed), []
    for t in range(horizon):
        alive = np.array([i for i, key in enumerate(keys) if len(episodes[key]) > t])
        rows = [episodes[keys[i]][t] for i in alive]
        read = bank.nearest(z[alive, t])
        histories = [History(row["task_description"], tuple(turns[i]), bank.texts[r], bank.admissible[r])
                     for i, row, r in zip(alive, rows, read)]
        noise = torch.randn((noise_levels + 1, len(alive), d), generator=generator)
        epsilons = np.array([row["epsilon"] for row in rows], float)
        outcome = transition(Query(policy, histories, [row["action"] for row in rows], read, z[alive, : t + 1], noise,
                                   epsilons, {}))
        for j, (i, row) in enumerate(zip(alive, rows)):
            walked.append(WalkedStep(row["policy"], row["epsilon"], row["episode"], t, str(outcome.source[j]),
                                     float(outcome.reward[j]), bool(outcome.done[j]), float(row["reward"]),
                                     bool(row["done"]), float(to_go[keys[i]][t])))
            turns[i].append((bank.texts[read[j]], row["action"]))
    return walked


def walked_value(steps: Sequence[WalkedStep], gamma: float, *, oracle: frozenset[str] = frozenset()) -> float:
    """Ĵ of one episode's walk (its steps in order of t): the sources in ``oracle`` answered by
    the environment, a ``value`` answer (Q̂, the rest of the episode) by G_t."""
    total = 0.0
    for step in steps:
        discount = gamma ** step.t
        if step.source in oracle and step.source == VALUE:
            return total + discount * step.return_to_go
        told = (step.true_reward, step.true_done) if step.source in oracle else (step.reward, step.done)
        total += discount * told[0]
        if told[1]:
            break
    return total
