"""Instruments of world-model fidelity: does imagination track the environment it stands for?

Each reads a trained world model and logged data only (the counterfactual one also replays a
real environment), and reports every figure beside a trivial predictor that knows nothing of
the action, so "the world model is right" and "the data are easy" can be told apart.

- :func:`one_step_fidelity` — teacher forcing on logged transitions (real history h̄_t, logged
  a_t), ``n_samples`` next latents each, drawn by the sampler imagination uses (CFG λ):
  retrieval of the true next observation among the log's distinct observations (top-1 /
  top-5, cosine), *plausible* retrieval (an observation ever logged after that (o_t, a_t)),
  and the outcome as imagination reads it (reward MAE, sign accuracy, failure recall,
  termination accuracy and recall), with the heads on the *encoded true* next latent beside.
  Trivial predictors: copying z_t, the ∅ branch (the pool's average action), the most
  frequent next observation, the training-mean reward and the majority termination.
- :func:`counterfactual_outcomes` + :func:`counterfactual_fidelity` — the same transitions
  under *another* admissible action, whose real outcome comes from replaying the episode in
  the environment: does the world model see that a different action does something else?
- :func:`open_loop_replay` — each ground-truth episode's recorded actions fed to the world
  model from its real first observation; imagined against real return and length, per
  episode and per ε (MAE, Spearman ρ of the per-ε means). This bypasses π_e: if replay fails,
  the world model is at fault; if replay works and ADWM does not, π_e's reading is.
- :func:`environment_replay` — the same replay in the real environment, in an instance that
  shows the same first observation: the best any world model can do open loop.
- :func:`policy_agreement` — π_e's action on an imagined next state against its action on
  the real one, for the retrieval and soft-token readings, beside chance.
- :func:`logged_coverage` — the share of π_e^ε's live steps (and rewarded steps) whose
  (observation, action) the behaviour log holds: where the data, not the model, fall short.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from scipy import stats

from ...data import behaviour_rows
from ...data.actions import NULL, normal_action
from ...data.behaviour_log import BehaviourLog
from ...data.windows import EpisodeArrays, RewardScale, episode_arrays
from ...envs import make_env
from ...model.world_model import WorldModel
from ...policies.prompts import History
from ..imagination.diffusion_transition import DiffusionTransition
from ..imagination.state_bank import StateBank
from ..settings import AdwmConfig, Sampler

TOP_K = 5


def _sampler(model: WorldModel, table: pa.Table, cfg_scale: float, sampling: Sampler) -> DiffusionTransition:
    """The world model's unguided transition drawing by ``sampling`` (``AdwmConfig.sampler``: the
    K-level reverse process, the instruments' default, or ADWM's default few-level respaced sampler)."""
    return DiffusionTransition(model, StateBank.from_log(BehaviourLog(table), model),
                               AdwmConfig(reading="retrieval", guidance="none", cfg_scale=cfg_scale, sampler=sampling))


def _histories(model: WorldModel, data: EpisodeArrays, latents: torch.Tensor, episodes: np.ndarray):
    """(episode, t, h̄_t) rows of every transition of ``episodes``, in order."""
    rows, h = [], []
    for e in episodes:
        length = int(data.lengths[e])
        z = latents[data.observations[e, :length]]
        previous = torch.as_tensor(np.r_[NULL, data.actions[e, : length - 1]], dtype=torch.long)
        h.append(model.history(z[None], previous[None])[0])
        rows += [(int(e), t) for t in range(length)]
    return np.array(rows).reshape(-1, 2), torch.cat(h)


def _retrieval(samples: torch.Tensor, candidates: torch.Tensor, k: int = TOP_K) -> torch.Tensor:
    """Indices of the ``k`` candidates nearest (cosine) to each sample: ``(..., d)`` → ``(..., k)``."""
    sim = torch.nn.functional.normalize(samples, dim=-1) @ torch.nn.functional.normalize(candidates, dim=-1).T
    return sim.topk(min(k, len(candidates)), dim=-1).indices


def _outcomes(model: WorldModel, z_next: torch.Tensor, h: torch.Tensor, actions: torch.Tensor):
    """(decoded reward, P(done)) as imagination reads them."""
    return (model.config.reward.decode(model.predicted_reward(z_next, h, actions)),
            model.done_probability(z_next, h, actions))


def _outcome_scores(reward: np.ndarray, done_p: np.ndarray, true_reward: np.ndarray, true_done: np.ndarray,
                    scored: np.ndarray) -> dict[str, float]:
    """Reward MAE and sign accuracy (on ``scored`` transitions), failure recall (true reward < 0
    read as < 0), termination accuracy and recall. Arrays: ``(N, S)`` predictions, ``(N,)`` truth."""
    def mean(x: np.ndarray) -> float:
        return float(x.mean()) if x.size else float("nan")

    done = done_p >= 0.5
    r, y = reward[scored], true_reward[scored][:, None]
    tol = 1e-3
    return {
        "reward_mae": mean(np.abs(r - y)),
        "reward_sign": mean(np.sign(np.where(np.abs(r) < tol, 0, r)) == np.sign(np.where(np.abs(y) < tol, 0, y))),
        "failure_recall": mean(r[y[:, 0] < 0] < 0),
        "done_accuracy": mean(done == true_done[:, None]),
        "done_recall": mean(done[true_done]),
    }


@torch.no_grad()
def one_step_fidelity(model: WorldModel, trajectories: pa.Table, episodes: Sequence[int], *, n_samples: int = 4,
                      cfg_scale: float = 1.0, seed: int = 0,
                      sampling: Sampler = "ancestral") -> dict[str, dict[str, float]]:
    """Teacher-forced one-step fidelity on the transitions of behaviour ``episodes`` (rows of
    :func:`~adwm_core.data.windows.episode_arrays`, e.g. the held-out ones); ``{predictor: metrics}``."""
    model.eval()
    log = BehaviourLog(trajectories)
    data = episode_arrays(log, model.config.actions, model.config.reward)
    episodes = np.asarray(episodes)
    latents = model.encode_texts(data.texts)
    steps, h = _histories(model, data, latents, episodes)
    e, t = steps[:, 0], steps[:, 1]
    now, nxt, actions = data.observations[e, t], data.observations[e, t + 1], torch.as_tensor(data.actions[e, t])
    true_reward = model.config.reward.decode(torch.as_tensor(data.reward_targets[e, t])).numpy()
    true_done, scored = data.done[e, t], data.reward_mask[e, t]
    successors = _successors(data)

    sampler = _sampler(model, trajectories, cfg_scale, sampling)
    generator = torch.Generator().manual_seed(seed)
    n, d = len(e), model.config.d_z

    def sampled(conditioned_on: torch.Tensor) -> torch.Tensor:
        out = []
        for _ in range(n_samples):
            noise = torch.randn((model.diffusion.n_steps + 1, n, d), generator=generator)
            out.append(sampler.sample(h, conditioned_on, noise))
        return torch.stack(out, 1)  # (N, S, d)

    def scores(z_next: torch.Tensor, read_actions: torch.Tensor) -> dict[str, float]:
        top = _retrieval(z_next, latents).numpy()  # (N, S, k)
        first = top[..., 0]
        plausible = np.array([[int(i) in successors[(int(o), int(a))] for i in row]
                              for o, a, row in zip(now, actions.tolist(), first)])
        flat_h = h.repeat_interleave(z_next.shape[1], 0)
        flat_a = read_actions.repeat_interleave(z_next.shape[1], 0)
        reward, done_p = (x.reshape(n, -1).numpy() for x in _outcomes(model, z_next.reshape(-1, d), flat_h, flat_a))
        return {"top1": float((first == nxt[:, None]).mean()), f"top{TOP_K}": float((top == nxt[:, None, None]).any(-1).mean()),
                "plausible": float(plausible.mean()), **_outcome_scores(reward, done_p, true_reward, true_done, scored)}

    conditions, null = model.conditions(actions, [data.texts[i] for i in now]), model.as_conditions(None, n)
    report = {"world_model": scores(sampled(conditions), conditions),
              "null_action": scores(sampled(null), null),
              "copy_z_t": scores(latents[now][:, None], conditions)}
    true_next = latents[nxt][:, None]
    report["heads_on_true_next"] = {name: value for name, value in scores(true_next, conditions).items()
                                    if name not in ("top1", f"top{TOP_K}", "plausible")}
    report["constant"] = _constant_predictor(data, episodes, nxt, model.config.reward, true_reward, true_done,
                                             scored)
    report["transitions"] = {"n": float(n), "logged_actions": float(pc.count_distinct(log.steps["action"]).as_py())}
    return report


def _successors(data: EpisodeArrays) -> dict[tuple[int, int], set[int]]:
    """Every next observation logged after each (observation, action id)."""
    out: dict[tuple[int, int], set[int]] = defaultdict(set)
    for e, length in enumerate(data.lengths):
        for t in range(int(length)):
            out[(int(data.observations[e, t]), int(data.actions[e, t]))].add(int(data.observations[e, t + 1]))
    return out


def _constant_predictor(data: EpisodeArrays, heldout: np.ndarray, nxt: np.ndarray, scale: RewardScale,
                        true_reward: np.ndarray, true_done: np.ndarray, scored: np.ndarray) -> dict[str, float]:
    """The most frequent next observations, mean reward and majority termination of the
    episodes not in ``heldout``."""
    train = np.setdiff1d(np.arange(len(data.lengths)), heldout)
    steps = [(e, t) for e in train for t in range(int(data.lengths[e]))]
    ranked = [o for o, _ in Counter(int(data.observations[e, t + 1]) for e, t in steps).most_common(TOP_K)]
    targets = [data.reward_targets[e, t] for e, t in steps if data.reward_mask[e, t]]
    mean_reward = float(scale.decode(torch.tensor(float(np.mean(targets)) if targets else 0.0)))
    majority_done = float(np.mean([data.done[e, t] for e, t in steps]) >= 0.5)
    n = len(nxt)
    return {"top1": float(np.mean(nxt == ranked[0])), f"top{TOP_K}": float(np.mean(np.isin(nxt, ranked))),
            **_outcome_scores(np.full((n, 1), mean_reward), np.full((n, 1), majority_done), true_reward, true_done,
                              scored)}


def counterfactual_outcomes(env_name: str, env_options: dict, trajectories: pa.Table, n_steps: int,
                            seed: int = 0) -> list[dict]:
    """Up to ``n_steps`` logged behaviour transitions with an admissible list, each with another
    admissible action drawn at random and its real (reward, done), found by replaying the
    episode's logged actions in a fresh environment and then taking the other action. A replay
    whose observation departs from the log is skipped (the engine is not deterministic there)."""
    rows = BehaviourLog(trajectories).steps.select(["episode", "t", "task", "variation", "seed", "observation", "action",
                                                    "admissible"]).to_pylist()
    by_episode: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        by_episode[row["episode"]].append(row)
    rng = np.random.default_rng(seed)
    candidates = [row for row in rows if row["admissible"] and len(set(row["admissible"]) - {row["action"]}) > 0]
    picked = [candidates[i] for i in sorted(rng.choice(len(candidates), min(n_steps, len(candidates)), replace=False))]
    out = []
    with make_env(env_name, **env_options) as env:
        for row in picked:
            others = sorted(set(row["admissible"]) - {row["action"]})
            other = others[int(rng.integers(len(others)))]
            observation = env.reset(row["task"], row["variation"], row["seed"])
            for before in by_episode[row["episode"]][: row["t"]]:
                observation = env.step(before["action"]).observation
            if observation.text != row["observation"]:
                continue
            result = env.step(other)
            out.append({"episode": row["episode"], "t": row["t"], "other_action": other,
                        "other_reward": float(result.reward), "other_done": bool(result.done)})
    return out


@torch.no_grad()
def counterfactual_fidelity(model: WorldModel, trajectories: pa.Table, outcomes: list[dict], *,
                            n_samples: int = 4, cfg_scale: float = 1.0, seed: int = 0,
                            sampling: Sampler = "ancestral") -> dict[str, dict[str, float]]:
    """Outcome accuracy under the logged action and under the other action of each entry of
    ``outcomes`` (:func:`counterfactual_outcomes`), and how often the two predicted outcomes
    differ where the real ones do."""
    model.eval()
    log = BehaviourLog(trajectories)
    data = episode_arrays(log, model.config.actions, model.config.reward)
    episode_ids = log.column("episode")
    row_of = {ep: i for i, ep in enumerate(sorted(set(episode_ids)))}
    latents = model.encode_texts(data.texts)
    wanted = np.array(sorted({row_of[o["episode"]] for o in outcomes}))
    steps, h = _histories(model, data, latents, wanted)
    index = {(int(e), int(t)): i for i, (e, t) in enumerate(steps)}
    pick = np.array([index[(row_of[o["episode"]], o["t"])] for o in outcomes])
    h = h[pick]
    e, t = steps[pick, 0], steps[pick, 1]
    observed = [data.texts[i] for i in data.observations[e, t]]
    logged = model.conditions(torch.as_tensor(data.actions[e, t]), observed)
    other = model.conditions(model.action_ids([o["other_action"] for o in outcomes]), observed)
    sampler = _sampler(model, trajectories, cfg_scale, sampling)
    generator = torch.Generator().manual_seed(seed)
    n, d = len(pick), model.config.d_z
    logged_reward = model.config.reward.decode(torch.as_tensor(data.reward_targets[e, t])).numpy()
    logged_done = data.done[e, t]
    other_reward = np.array([o["other_reward"] for o in outcomes])
    other_done = np.array([o["other_done"] for o in outcomes])

    def predict(actions: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        rewards, dones = [], []
        for _ in range(n_samples):
            noise = torch.randn((model.diffusion.n_steps + 1, n, d), generator=generator)
            reward, done_p = _outcomes(model, sampler.sample(h, actions, noise), h, actions)
            rewards.append(reward.numpy())
            dones.append(done_p.numpy())
        return np.stack(rewards, 1), np.stack(dones, 1)

    (r_logged, d_logged), (r_other, d_other) = predict(logged), predict(other)
    scored_logged = data.reward_mask[e, t]  # every step, or terminal steps for terminal-only rewards
    scored_other = other_done if model.config.reward.terminal_only else np.ones(n, bool)
    differs = (np.abs(logged_reward - other_reward) > 1e-3) | (logged_done != other_done)
    predicted_differs = (np.abs(r_logged - r_other) > 0.5 * np.abs(logged_reward - other_reward)[:, None]) \
        | ((d_logged >= 0.5) != (d_other >= 0.5))
    return {
        "logged_action": _outcome_scores(r_logged, d_logged, logged_reward, logged_done, scored_logged),
        "other_action": _outcome_scores(r_other, d_other, other_reward, other_done, scored_other),
        "outcome_differs": {"n": float(n), "real": float(differs.mean()),
                            "recall": float(predicted_differs[differs].mean()) if differs.any() else float("nan")},
    }


@torch.no_grad()
def open_loop_replay(model: WorldModel, trajectories: pa.Table, ground_truth: pa.Table, *, cfg_scale: float = 1.0,
                     done_threshold: float = 0.5, seed: int = 0, teacher_forced: bool = False,
                     snap: bool = False, sampling: Sampler = "ancestral") -> dict:
    """Feed every ground-truth episode's recorded actions to the world model from its real first
    observation; compare imagined and real return and length, per episode and per ε.

    Open loop, the world model's own samples are the next states; where the environment draws
    the next state at random (Simon Says names a random command), a recorded action answers the
    real state, not the imagined one, so open-loop replay there measures state prediction as
    much as outcomes. ``teacher_forced`` keeps the real states and lets the world model predict
    only the outcomes along them (its predicted termination still ends the episode); ``snap``
    (open loop) replaces each sample by its nearest behaviour observation, as ``AdwmConfig.snap``."""
    model.eval()
    gt = ground_truth.filter(pc.equal(ground_truth["source"], "ground_truth"))
    gt = gt.sort_by([("policy", "ascending"), ("epsilon", "ascending"), ("episode", "ascending"), ("t", "ascending")])
    rows = gt.select(["policy", "epsilon", "episode", "t", "observation", "next_observation", "action",
                      "reward"]).to_pylist()
    episodes: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        episodes[(row["policy"], row["epsilon"], row["episode"])].append(row)
    keys = list(episodes)
    n, horizon, d = len(keys), max(len(v) for v in episodes.values()), model.config.d_z
    if horizon > model.config.max_steps:
        raise ValueError(f"ground-truth episodes of {horizon} steps exceed the world model's history length "
                         f"{model.config.max_steps}")
    sampler = _sampler(model, trajectories, cfg_scale, sampling)
    lengths_real = np.array([len(episodes[k]) for k in keys])
    return_real = np.array([sum(r["reward"] for r in episodes[k]) for k in keys])
    actions = [[r["action"] for r in episodes[k]] + [""] * (horizon - len(episodes[k])) for k in keys]
    z = torch.zeros(n, horizon + 1, d)
    z[:, 0] = model.encode_texts([episodes[k][0]["observation"] for k in keys])
    previous = torch.full((n, horizon + 1), NULL, dtype=torch.long)
    alive = np.ones(n, bool)
    imagined_return, imagined_length = np.zeros(n), np.zeros(n, np.int64)
    scale = model.config.reward
    generator = torch.Generator().manual_seed(seed)
    for t in range(horizon):
        alive &= t < lengths_real
        rows_alive = np.flatnonzero(alive)
        if len(rows_alive) == 0:
            break
        ids = model.action_ids([actions[r][t] for r in rows_alive])
        if teacher_forced or t == 0:
            observed = [episodes[keys[r]][t]["observation"] for r in rows_alive]
        else:  # the behaviour observation nearest to the imagined state, as ADWM reads it
            observed = [sampler.bank.texts[i] for i in sampler.bank.nearest(z[rows_alive, t])]
        conditions = model.conditions(ids, observed)
        h = model.history(z[rows_alive, : t + 1], previous[rows_alive, : t + 1])[:, -1]
        noise = torch.randn((model.diffusion.n_steps + 1, len(rows_alive), d), generator=generator)
        z_next = sampler.sample(h, conditions, noise)
        reward, done_p = _outcomes(model, z_next, h, conditions)
        if teacher_forced:
            z_next = model.encode_texts([episodes[keys[r]][t]["next_observation"] for r in rows_alive])
        elif snap:
            z_next = sampler.bank.latents[sampler.bank.nearest(z_next)]
        done = done_p.numpy() >= done_threshold
        counted = done if scale.terminal_only else np.ones(len(rows_alive), bool)
        imagined_return[rows_alive] += np.where(counted, reward.numpy(), 0.0)
        imagined_length[rows_alive] += 1
        z[rows_alive, t + 1], previous[rows_alive, t + 1] = z_next, ids
        alive[rows_alive[done]] = False

    return _replay_summary(keys, return_real, lengths_real, imagined_return, imagined_length)


def _replay_summary(keys: list[tuple], return_real: np.ndarray, lengths_real: np.ndarray,
                    replayed_return: np.ndarray, replayed_length: np.ndarray) -> dict:
    """Replayed against real return and length of the episodes ``keys`` ((policy, ε, episode)):
    MAE per episode, and per (policy, ε) level the means, their Spearman ρ and |Ĵ − J| / range."""
    levels = sorted({(k[0], k[1]) for k in keys})
    per_level = []
    for policy, epsilon in levels:
        mine = np.array([(k[0], k[1]) == (policy, epsilon) for k in keys])
        per_level.append({"policy": policy, "epsilon": epsilon, "real_return": float(return_real[mine].mean()),
                          "imagined_return": float(replayed_return[mine].mean()),
                          "real_length": float(lengths_real[mine].mean()),
                          "imagined_length": float(replayed_length[mine].mean())})
    real_means = [row["real_return"] for row in per_level]
    imagined_means = [row["imagined_return"] for row in per_level]
    spread = float(np.ptp(real_means)) if len(real_means) > 1 else float("nan")
    rho = stats.spearmanr(real_means, imagined_means).statistic if len(per_level) > 2 else float("nan")
    return {
        "episodes": len(keys),
        "return_mae": float(np.abs(replayed_return - return_real).mean()),
        "length_mae": float(np.abs(replayed_length - lengths_real).mean()),
        "rho_per_level": float(rho),
        "normalised_error": float(np.mean(np.abs(np.subtract(imagined_means, real_means))) / spread) if spread else float("nan"),
        "levels": per_level,
    }


def environment_replay(env_name: str, env_options: dict, ground_truth: pa.Table, trajectories: pa.Table | None = None,
                       *, seed: int = 0) -> dict:
    """The ceiling of :func:`open_loop_replay`: the real environment as the world model. Each
    ground-truth episode's recorded actions are played, open loop, in an instance drawn at random
    among those the logs visited (ground truth, and the behaviour ``trajectories`` if given) whose
    first observation is the episode's own: what a world model that knows the environment
    exactly, shown that observation, may be in. Where the first observation tells
    the instance (a TextWorld game) this reproduces the episode; where the environment draws
    what comes next (Simon Says' later commands), actions chosen for one draw meet another, and
    no world model can replay better than this. Summarised as :func:`open_loop_replay`."""
    gt = ground_truth.filter(pc.equal(ground_truth["source"], "ground_truth"))
    gt = gt.sort_by([("policy", "ascending"), ("epsilon", "ascending"), ("episode", "ascending"), ("t", "ascending")])
    episodes: dict[tuple, list[dict]] = defaultdict(list)
    for row in gt.select(["policy", "epsilon", "episode", "t", "task", "variation", "seed", "observation",
                          "action", "reward"]).to_pylist():
        episodes[(row["policy"], row["epsilon"], row["episode"])].append(row)
    keys = list(episodes)
    instances: dict[str, set[tuple]] = defaultdict(set)  # first observation -> (task, variation, seed)
    for table in (gt, trajectories):
        if table is not None:
            for first in table.filter(pc.equal(table["t"], 0)).select(["task", "variation", "seed",
                                                                       "observation"]).to_pylist():
                instances[first["observation"]].add((first["task"], first["variation"], first["seed"]))
    rng = np.random.default_rng(seed)
    replayed_return, replayed_length = np.zeros(len(keys)), np.zeros(len(keys), np.int64)
    with make_env(env_name, **env_options) as env:
        for i, key in enumerate(keys):
            steps = episodes[key]
            candidates = sorted(instances[steps[0]["observation"]])
            env.reset(*candidates[int(rng.integers(len(candidates)))])
            for step in steps:
                result = env.step(step["action"])
                replayed_return[i] += result.reward
                replayed_length[i] += 1
                if result.done:
                    break
    return_real = np.array([sum(r["reward"] for r in episodes[k]) for k in keys])
    lengths_real = np.array([len(episodes[k]) for k in keys])
    return _replay_summary(keys, return_real, lengths_real, replayed_return, replayed_length)


@torch.no_grad()
def policy_agreement(model: WorldModel, trajectories: pa.Table, episodes: Sequence[int], policy, *,
                     soft_policy=None, max_transitions: int = 200, cfg_scale: float = 1.0,
                     seed: int = 0, sampling: Sampler = "ancestral") -> dict[str, float]:
    """How often π_e acts on an imagined next state as it acts on the real one it stands for.

    On logged transitions of behaviour ``episodes`` (rows of ``episode_arrays``) that the
    episode continues after, z_{t+1} is sampled teacher-forced (real h̄_t, logged a_t); π_e
    (``policy``, anything with ``act(histories)``) acts on the real o_{t+1} with the real past
    turns, and the imagined state is read as ADWM reads it: ``retrieval`` (the behaviour
    observation nearest to z_{t+1}, its admissible list) and, given ``soft_policy`` (π_e with
    its ψ adapter), ``soft_tokens`` (the latents of the real past and z_{t+1} as soft tokens).
    ``chance``: π_e on a behaviour observation drawn at random — what agreement costs nothing."""
    model.eval()
    log = BehaviourLog(trajectories)
    data = episode_arrays(log, model.config.actions, model.config.reward)
    steps_of: dict[int, list[dict]] = defaultdict(list)
    for row in log.steps.select(["episode", "task_description", "observation", "action", "admissible"]).to_pylist():
        steps_of[row["episode"]].append(row)
    episode_ids = sorted(steps_of)
    latents = model.encode_texts(data.texts)
    steps, h = _histories(model, data, latents, np.asarray(episodes))
    keep = np.flatnonzero(steps[:, 1] + 1 < data.lengths[steps[:, 0]])
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(keep, min(max_transitions, len(keep)), replace=False))
    steps, h = steps[keep], h[keep]
    e, t = steps[:, 0], steps[:, 1]
    now = data.observations[e, t]
    conditions = model.conditions(torch.as_tensor(data.actions[e, t]), [data.texts[i] for i in now])
    sampler = _sampler(model, trajectories, cfg_scale, sampling)
    bank = sampler.bank
    noise = torch.randn((model.diffusion.n_steps + 1, len(e), model.config.d_z),
                        generator=torch.Generator().manual_seed(seed))
    z_next = sampler.sample(h, conditions, noise)
    read = bank.nearest(z_next)
    random_rows = rng.integers(len(bank.texts), size=len(e))

    def history(episode: int, step: int, observation: str, admissible, blank: bool = False) -> History:
        """Turns 0…step as logged (their observations blank under soft tokens), then ``observation``."""
        rows = steps_of[episode_ids[episode]]
        turns = tuple(("" if blank else r["observation"], r["action"]) for r in rows[: step + 1])
        return History(rows[0]["task_description"], turns, observation, admissible)

    def actions(decisions) -> np.ndarray:
        return np.array([normal_action(d.action) for d in decisions])

    real = actions(policy.act([history(a, b, steps_of[episode_ids[a]][b + 1]["observation"],
                                       _listed(steps_of[episode_ids[a]][b + 1]["admissible"])) for a, b in zip(e, t)]))
    out = {"n": float(len(e))}
    for name, rows in (("retrieval", read), ("chance", random_rows)):
        imagined = actions(policy.act([history(a, b, bank.texts[i], bank.admissible[i]) for a, b, i in zip(e, t, rows)]))
        out[name] = float((imagined == real).mean())
    if soft_policy is not None:
        past = [latents[data.observations[a, : b + 1]] for a, b in zip(e, t)]
        imagined = actions(soft_policy.act([history(a, b, "", bank.admissible[i], blank=True)
                                            for a, b, i in zip(e, t, read)],
                                           [torch.cat([p, z[None]]) for p, z in zip(past, z_next)]))
        out["soft_tokens"] = float((imagined == real).mean())
    return out


def _listed(admissible) -> tuple[str, ...] | None:
    return None if admissible is None else tuple(admissible)


def logged_coverage(trajectories: pa.Table, ground_truth: pa.Table) -> list[dict]:
    """How much of what π_e^ε does live the behaviour log has seen, per (π_e, ε): the share of
    its steps whose (observation, action) was logged, and of its rewarded steps (reward ≠ 0).
    What no log holds, no world model learnt from it can know except by generalising."""
    logged = {(o, normal_action(a))
              for o, a in zip(*behaviour_rows(trajectories).select(["observation", "action"]).to_pydict().values())}
    gt = ground_truth.filter(pc.equal(ground_truth["source"], "ground_truth"))
    levels: dict[tuple, list[tuple[bool, bool]]] = defaultdict(list)
    for row in gt.select(["policy", "epsilon", "observation", "action", "reward"]).to_pylist():
        seen = (row["observation"], normal_action(row["action"])) in logged
        levels[(row["policy"], row["epsilon"])].append((seen, row["reward"] != 0))
    out = []
    for (policy, epsilon), steps in sorted(levels.items()):
        seen, rewarded = np.array(steps).T
        out.append({"policy": policy, "epsilon": epsilon, "steps_logged": float(seen.mean()),
                    "rewarded_steps_logged": float(seen[rewarded].mean()) if rewarded.any() else float("nan")})
    return out
