"""Where ADWM's error sits, by what answered: π_e^ε's ground-truth episodes walked through a
transition, teacher forced (bench/studies/source_errors.py runs it on a cell).

Every real step (o_t, a_t) of a ground-truth episode is asked of the transition as imagination
asks it (rollouts.py): π_e read the behaviour observation nearest to z_t = f_θ(o_t), its earlier
turns are the real ones. The answer — what answered (transitions.SOURCES), r̂_t and whether the
episode ends — is kept beside the environment's r_t, done_t and return-to-go
G_t = Σ_{u≥t} γ^{u−t} r_u (:class:`WalkedStep`).

The *teacher-forced estimate* of an episode follows its real steps and adds the answers,

    Ĵ_tf = Σ_{t ≤ τ} γ^t r̂_t,   τ the first step whose answer ends the episode (else its last real step);

under the hand-over to Q̂ (``AdwmConfig.hands_over_to_fqe``) a ``model`` answer is
r̂_τ = Q̂_ε(z_τ, a_τ), and it ends the walk. A source's *oracle walk* answers that source's steps
with the environment's own — (r_t, done_t), or G_t where the source hands over a value — and
leaves the other steps to the transition; with every source an oracle the walk returns G_0. Per
(π_e, ε) point, then:

- ADWM's Ĵ against mean Ĵ_tf: what imagination's own states and π_e's closed loop cost;
- mean Ĵ_tf against a source's oracle walk: what that source's answers cost.
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
from ..answers import SOURCES, VALUE
from ..imagination.state_bank import StateBank
from ..imagination.transitions import Query, Transition
from ..statistics.metrics import normalised_absolute_error, spearman


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
    gt = gt.sort_by([("policy", "ascending"), ("epsilon", "ascending"), ("episode", "ascending"), ("t", "ascending")])
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


def source_points(steps: Sequence[WalkedStep], gamma: float) -> list[dict]:
    """Per (π_e, ε) point: J (mean G_0), the teacher-forced Ĵ (``walked``), each source's oracle
    walk (``oracle_<source>``), the share of π_e's real steps each source answered
    (``<source>_share``), and per source the mean error of its answers, r̂_t − r_t
    (``<source>_reward_error``; Q̂ − G_t for ``value``, ``value_value_error``)."""
    by_episode: dict[tuple, list[WalkedStep]] = defaultdict(list)
    for step in steps:
        by_episode[(step.policy, step.epsilon, step.episode)].append(step)
    by_point: dict[tuple, list[list[WalkedStep]]] = defaultdict(list)
    for (policy, epsilon, _), episode in by_episode.items():
        by_point[(policy, epsilon)].append(sorted(episode, key=lambda s: s.t))
    points = []
    for (policy, epsilon), episodes in sorted(by_point.items()):
        flat = [s for episode in episodes for s in episode]
        point = {"policy": policy, "epsilon": epsilon, "episodes": len(episodes),
                 "truth": float(np.mean([episode[0].return_to_go for episode in episodes])),
                 "walked": float(np.mean([walked_value(e, gamma) for e in episodes]))}
        for source in SOURCES:
            answered = [s for s in flat if s.source == source]
            point[f"{source}_share"] = len(answered) / len(flat)
            point[f"oracle_{source}"] = float(np.mean([walked_value(e, gamma, oracle=frozenset({source}))
                                                        for e in episodes]))
            if source == VALUE:
                point[f"{source}_value_error"] = _mean([s.reward - s.return_to_go for s in answered])
            else:
                point[f"{source}_reward_error"] = _mean([s.reward - s.true_reward for s in answered])
        points.append(point)
    return points


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def source_summary(points: Sequence[dict], estimates: dict[tuple[str, float], float] | None = None) -> dict:
    """Over a cell's points: Spearman ρ and NMAE (against J) of the teacher-forced walk, of each
    source's oracle walk and — ``estimates``, (π_e, ε) → Ĵ — of ADWM's own; each source's share of
    π_e's real steps and the mean error of its answers."""
    truth = [p["truth"] for p in points]
    rows = {"walked": [p["walked"] for p in points],
            **{f"oracle_{source}": [p[f"oracle_{source}"] for p in points] for source in SOURCES}}
    if estimates is not None:
        rows = {"imagined": [estimates[(p["policy"], p["epsilon"])] for p in points], **rows}
    spread = np.ptp(truth) > 0
    summary = {name: {"rho": spearman(values, truth),
                      "nmae": normalised_absolute_error(values, truth) if spread else float("nan")}
               for name, values in rows.items()}
    for source in SOURCES:
        summary[f"{source}_share"] = float(np.mean([p[f"{source}_share"] for p in points]))
        for kind in ("reward_error", "value_error"):
            errors = [p[f"{source}_{kind}"] for p in points if f"{source}_{kind}" in p]
            if errors:
                summary[f"{source}_{kind}"] = _mean([e for e in errors if np.isfinite(e)])
    return summary
