"""LLM policies run on real environments and on the behaviour log: what the behaviour,
ground-truth, log-prob and greedy-action stages compute (paper Sec. 5 setup; appendix
'Behavior-policy data', 'Ground-truth episode counts', 'Behavior log-probability extraction').

- :func:`collect_behavior`: a pool of behaviour policies × prompt variants, greedy
  decoding, horizon cap, N trajectories → trajectories Parquet (source ``behavior``);
- :func:`ground_truth_rollouts`: π_e^ε for each ε, n_GT episodes per level with the
  episode seeds fixed across ε → trajectories Parquet (source ``ground_truth``) and
  the ground-truth summary (mean return, success rate, standard errors);
- :func:`extract_logprobs`: per logged step, log π_b(a_t|h_t) re-scored by the
  behaviour policy that produced it, log π_e^ε(a_t|h_t) for every ε (Eq. eps-mix),
  and π_e's greedy action at h_t;
- :func:`greedy_actions`: π_e's greedy action alone at every logged step (nothing scored).

Episodes run in parallel on the episode runner, which hands the policy every
waiting episode as one batch. Outputs are checked before any work starts:
an existing file is an error unless ``overwrite`` is given.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import fsspec
import numpy as np
import pyarrow as pa

from .data import GROUND_TRUTH, LOGPROBS, TRAJECTORIES, check_output, read_table, table_from_rows, write_table
from .data.io import atomic_open
from .envs.episodes import Agent, EpisodeSpec, episodes_table
from .envs.runner import EpisodeRunner
from .policies.base import PolicyAgent
from .policies.loading import ModelCache
from .policies.prompts import VARIANTS, History, episode_histories
from .policies.scoring import eps_mix_logprob
from .specs import EPSILONS, EnvSpec, PolicySpec, Progress, check_epsilons


def _runner(env: EnvSpec, n_workers: int | None, envs_per_worker: int) -> EpisodeRunner:
    return EpisodeRunner(
        env.name, env.options, n_workers=n_workers, envs_per_worker=envs_per_worker, max_steps=env.max_steps
    )


def episode_specs(instances: Sequence[tuple[str, int]], ks: Sequence[int], seed: int) -> list[EpisodeSpec]:
    """Episode k plays (task, variation) k (cycling through ``instances``) with a seed drawn
    from ``(seed, k)``, so it is the same episode at every ε and in every rerun."""
    return [EpisodeSpec(k, *instances[k % len(instances)], int(np.random.SeedSequence([seed, k]).generate_state(1)[0]))
            for k in ks]


def collect_behavior(
    env: EnvSpec,
    pool: Sequence[PolicySpec],
    n_trajectories: int,
    out: str,
    *,
    cell: str,
    variants: Sequence[str] = VARIANTS,
    seed: int = 0,
    n_workers: int | None = None,
    envs_per_worker: int = 8,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> pa.Table:
    """N greedy trajectories shared round-robin among ``pool`` × ``variants``;
    the k-th trajectory plays variation k (cycling through the split).
    ``progress(done, total)`` is told of every finished episode."""
    check_output(out, overwrite=overwrite)
    if not pool or n_trajectories < 1:
        raise ValueError("behaviour collection needs at least one policy and one trajectory")
    members = [spec.with_variant(v) for spec in pool for v in variants]
    instances = env.instances()
    models = ModelCache()
    policies = [models.policy(member, env.name) for member in members]  # a bad model path fails before any episode
    tables, done = [], 0
    with _runner(env, n_workers, envs_per_worker) as runner:
        for m, (member, policy) in enumerate(zip(members, policies)):
            specs = episode_specs(instances, range(m, n_trajectories, len(members)), seed)
            if specs:
                episodes = runner.run(specs, PolicyAgent(policy, 0.0), progress=_offset(progress, done, n_trajectories))
                done += len(specs)
                tables.append(episodes_table(episodes, cell=cell, source="behavior", policy=member.name, epsilon=None))
    table = pa.concat_tables(tables)
    write_table(table, out, TRAJECTORIES, overwrite=overwrite)
    return table


def ground_truth_rollouts(
    env: EnvSpec,
    policy: PolicySpec,
    n_episodes: int,
    trajectories_out: str,
    summary_out: str,
    *,
    cell: str,
    epsilons: Sequence[float] = EPSILONS,
    seed: int = 42,
    n_workers: int | None = None,
    envs_per_worker: int = 8,
    overwrite: bool = False,
    timings: dict | None = None,
    progress: Progress | None = None,
    units: str | None = None,
) -> pa.Table:
    """π_e^ε in the environment for every ε: episode k plays the same variation with the
    same seed at every ε (appendix 'ε-greedy mixing protocol'). Returns the summary;
    ``timings``, ``progress`` and ``units`` as in :func:`run_epsilon_family`."""
    for path in (trajectories_out, summary_out):
        check_output(path, overwrite=overwrite)
    check_epsilons(epsilons)
    specs = episode_specs(env.instances(), range(n_episodes), seed)
    pi = ModelCache().policy(policy, env.name)
    with _runner(env, n_workers, envs_per_worker) as runner:
        trajectories, summary = run_epsilon_family(
            runner, specs, lambda eps: PolicyAgent(pi, eps), epsilons, cell=cell, policy=policy.name, timings=timings,
            progress=progress, units=units,
        )
    write_table(trajectories, trajectories_out, TRAJECTORIES, overwrite=overwrite)
    write_table(summary, summary_out, GROUND_TRUTH, overwrite=overwrite)
    return summary


def run_epsilon_family(
    runner: EpisodeRunner,
    specs: Sequence[EpisodeSpec],
    agent_for: Callable[[float], Agent],
    epsilons: Sequence[float],
    *,
    cell: str,
    policy: str,
    timings: dict | None = None,
    progress: Progress | None = None,
    units: str | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Run ``specs`` once per ε with ``agent_for(ε)`` (episode ids offset by i·len(specs) at
    the i-th ε); returns the ground-truth trajectories and their summary, one row per ε.
    ``timings`` (if given) receives the wall seconds of each ε level; ``progress(done,
    total)`` is told of every finished episode over all levels; ``units`` (a folder, if
    given) keeps each finished level, and a level found there is read, not run again: the
    episodes' seeds and ε-flips come from their specs, so a resumed run equals an unbroken one."""
    check_epsilons(epsilons)  # before any worker starts
    levels, total = [], len(specs) * len(epsilons)
    for i, eps in enumerate(epsilons):
        level = _finished_level(units, i, eps)
        if level is None:
            runner.start()
            started = time.perf_counter()
            episodes = runner.run([replace(s, episode=i * len(specs) + s.episode) for s in specs], agent_for(eps),
                                  progress=_offset(progress, i * len(specs), total))
            level = _kept_level(units, i, eps, episodes_table(episodes, cell=cell, source="ground_truth",
                                                              policy=policy, epsilon=eps),
                                _summarise(cell, policy, eps, [e.total_reward for e in episodes],
                                           [e.success for e in episodes]),
                                time.perf_counter() - started)
        elif progress is not None:
            progress((i + 1) * len(specs), total)
        levels.append(level)
        if timings is not None:
            timings[eps] = level[2]
    return (pa.concat_tables([table for table, _, _ in levels]),
            table_from_rows([summary for _, summary, _ in levels], GROUND_TRUTH))


def _level_files(units: str, i: int, eps: float) -> tuple[str, str]:
    """The i-th ε level's kept episodes (Parquet) and its summary row with its wall seconds (JSON)."""
    return f"{units}/level-{i}-eps{eps:g}.parquet", f"{units}/level-{i}-eps{eps:g}.json"


def _finished_level(units: str | None, i: int, eps: float) -> tuple[pa.Table, dict, float] | None:
    """The level kept under ``units``, None where it did not finish (its JSON is written last)."""
    if units is None:
        return None
    episodes, summary = _level_files(units, i, eps)
    fs, local = fsspec.core.url_to_fs(summary)
    if not fs.exists(local):
        return None
    with fs.open(local, "r") as f:
        kept = json.load(f)
    return read_table(episodes, TRAJECTORIES), kept["summary"], kept["seconds"]


def _kept_level(units: str | None, i: int, eps: float, table: pa.Table, summary: dict,
                seconds: float) -> tuple[pa.Table, dict, float]:
    """The level, written under ``units`` first where there is one (episodes, then the summary)."""
    if units is not None:
        episodes, summary_file = _level_files(units, i, eps)
        write_table(table, episodes, TRAJECTORIES, overwrite=True)  # a killed run may have left it without its JSON
        with atomic_open(summary_file, "w") as f:
            json.dump({"summary": summary, "seconds": seconds}, f)
    return table, summary, seconds


def _offset(progress: Progress | None, before: int, total: int) -> Callable[[int, int], None] | None:
    """A runner's (done, its total) as (episodes done in the whole stage, the stage's total)."""
    return None if progress is None else (lambda done, _: progress(before + done, total))


def _summarise(cell: str, policy: str, epsilon: float, returns: Sequence[float], successes: Sequence[bool]) -> dict:
    """Means and their standard errors (sample s.d. / √n; 0 for a single episode)."""
    returns = np.asarray(returns, dtype=np.float64)
    successes = np.asarray(successes, dtype=np.float64)
    n = len(returns)

    def stderr(x: np.ndarray) -> float:
        return float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0

    return {
        "cell": cell,
        "policy": policy,
        "epsilon": epsilon,
        "n_episodes": n,
        "mean_return": float(returns.mean()),
        "success_rate": float(successes.mean()),
        "stderr": stderr(returns),
        "success_stderr": stderr(successes),
    }


def logged_histories(table: pa.Table) -> Iterator[tuple[dict, History]]:
    """Each logged step (as a row dict) with the history the policy saw before acting."""
    rows = sorted(table.to_pylist(), key=lambda r: (r["episode"], r["t"]))
    for _, group in itertools.groupby(rows, key=lambda r: r["episode"]):
        group = list(group)
        for before, after in zip(group, group[1:]):
            if after["t"] != before["t"] + 1:
                raise ValueError(f"episode {after['episode']}: steps jump from t={before['t']} to t={after['t']}")
        turns = [(r["observation"], r["action"], None if r["admissible"] is None else tuple(r["admissible"])) for r in group]
        yield from zip(group, episode_histories(group[0]["task_description"], turns))


def extract_logprobs(
    trajectories: str,
    env_name: str,
    pool: Sequence[PolicySpec],
    policy: PolicySpec,
    out: str,
    *,
    epsilons: Sequence[float] = EPSILONS,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> pa.Table:
    """log π_b(a_t|h_t) by the pool member named in each step's ``policy`` column, and
    log π_e^ε(a_t|h_t) = log((1-ε)π_e(a_t|h_t) + ε·1[a_t∈A_t]/|A_t|) for every ε, with
    π_e's greedy action at h_t (what π_e plays at ε = 0; FQE's target policy needs it).
    ``progress(done, total)`` is told of every batch of steps a model scored or acted on."""
    check_output(out, overwrite=overwrite)
    check_epsilons(epsilons)
    table = read_table(trajectories, TRAJECTORIES)
    members = {spec.with_variant(v).name: spec.with_variant(v) for spec in pool for v in VARIANTS}
    steps = list(logged_histories(table))
    recorded = np.array([np.nan if row["behavior_logprob"] is None else row["behavior_logprob"] for row, _ in steps])
    to_score = sorted({row["policy"] for row, _ in steps if row["behavior_logprob"] is None})
    unknown = sorted(set(to_score) - set(members))
    if unknown and pool:
        raise ValueError(f"{trajectories}: steps logged by {unknown}, which the behaviour pool {sorted(members)} lacks")
    models = ModelCache()
    pi_bs = {} if unknown else {name: models.policy(members[name], env_name) for name in to_score}  # bad paths fail early
    pi_e = models.policy(policy, env_name)
    behaviour_logp = recorded.copy()
    behaviour_tokens = np.zeros(len(steps), dtype=np.int64)
    rescored = sum(row["policy"] in pi_bs and row["behavior_logprob"] is None for row, _ in steps)
    with _reporting([*pi_bs.values(), pi_e], progress, rescored + len(steps) * (2 - pi_e.lm.chat)):
        for name, pi_b in pi_bs.items():
            idx = [i for i, (row, _) in enumerate(steps) if row["policy"] == name and row["behavior_logprob"] is None]
            logp, n_tok = pi_b.logprob([steps[i][1] for i in idx], [steps[i][0]["action"] for i in idx])
            behaviour_logp[idx], behaviour_tokens[idx] = logp, n_tok
        histories = [h for _, h in steps]
        actions = [row["action"] for row, _ in steps]
        if pi_e.lm.chat:  # a chat endpoint cannot score given actions: π_e's rows hold NaN, IS-type estimators sit out
            eval_logp, eval_tokens = np.full(len(steps), np.nan), np.zeros(len(steps), dtype=np.int64)
        else:
            eval_logp, eval_tokens = pi_e.logprob(histories, actions)
        greedy = [decision.action for decision in pi_e.act(histories)]
    in_set = [h.admissible is not None and a in h.admissible for h, a in zip(histories, actions)]
    n_admissible = np.array([len(h.admissible or ()) for h in histories], dtype=np.int64)
    # without log π_b for every step (imported logs lacking them, no pool model to re-score) the
    # behaviour rows are left out, and the estimators that need them report themselves not applicable
    blocks = [("behavior", None, behaviour_logp, behaviour_tokens)] * (not unknown) + [
        ("eval", eps, eps_mix_logprob(eval_logp, eps, in_set, n_admissible), eval_tokens) for eps in epsilons
    ]
    return write_table(logprob_table(steps, blocks, greedy, n_admissible), out, LOGPROBS, overwrite=overwrite)


@contextlib.contextmanager
def _reporting(policies: Sequence, progress: Progress | None, total: int) -> Iterator[None]:
    """``progress(done, total)`` after each batch any of the ``policies``' models answers, inside the block."""
    models = list({id(policy.lm): policy.lm for policy in policies}.values()) if progress is not None else []
    done = 0

    def answered(n: int) -> None:
        nonlocal done
        done += n
        progress(min(done, total), total)

    for model in models:
        model.on_items = answered
    try:
        yield
    finally:
        for model in models:
            model.on_items = None


LogprobBlock = tuple[str, "float | None", np.ndarray, np.ndarray]  # role, ε, log-prob and token count per step


def logprob_table(steps: Sequence[tuple[dict, History]], blocks: Sequence[LogprobBlock], greedy: Sequence[str],
                  n_admissible: np.ndarray) -> pa.Table:
    """The LOGPROBS rows of ``blocks``, each one row per logged step of ``steps`` (as
    ``logged_histories`` yields them); π_e's ``greedy`` action on the rows of its (``eval``) blocks."""
    n = len(steps)
    return pa.table({
        "episode": np.tile([row["episode"] for row, _ in steps], len(blocks)),
        "t": np.tile([row["t"] for row, _ in steps], len(blocks)),
        "policy": [role for role, *_ in blocks for _ in range(n)],
        "epsilon": pa.array([eps for _, eps, *_ in blocks for _ in range(n)], pa.float64()),
        "logprob": np.concatenate([logp for *_, logp, _ in blocks]),
        "n_tokens": np.concatenate([n_tok for *_, n_tok in blocks]),
        "n_admissible": np.tile(n_admissible, len(blocks)),
        "greedy_action": pa.array([a for role, *_ in blocks for a in (greedy if role == "eval" else [None] * n)],
                                  pa.string()),
    })


def greedy_actions(trajectories: str, env_name: str, policy: PolicySpec, out: str, *,
                   epsilons: Sequence[float], overwrite: bool = False) -> pa.Table:
    """A log-prob table (data/schemas.py: LOGPROBS) of π_e's rows alone: per logged step and ε its
    greedy action, the size of the logged admissible list, and no log-prob (NaN, 0 tokens)."""
    check_output(out, overwrite=overwrite)
    check_epsilons(epsilons)
    steps = list(logged_histories(read_table(trajectories, TRAJECTORIES)))
    histories = [history for _, history in steps]
    actions = [decision.action for decision in ModelCache().policy(policy, env_name).act(histories)]
    unscored = (np.full(len(steps), np.nan), np.zeros(len(steps), np.int64))
    n_admissible = np.array([len(h.admissible or ()) for h in histories], np.int64)
    blocks = [("eval", float(eps), *unscored) for eps in epsilons]
    return write_table(logprob_table(steps, blocks, actions, n_admissible), out, LOGPROBS, overwrite=overwrite)
