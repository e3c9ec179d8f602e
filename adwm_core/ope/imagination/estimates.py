"""Scoring π_e with ADWM: the estimates of every seed and ε level (the stage that writes them:
stages/adwm.py).

Beside ADWM's rows (``ADWM:<value estimate>``), ``AdwmConfig.reference`` adds those of the
non-parametric reference world model (``kNN-WM:<value estimate>``): the same rollout loop,
reading and seeds, another transition (ope/imagination/diffusion_transition.py, ope/imagination/transitions.py).
"""

from __future__ import annotations

import json
import pickle
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence

import fsspec
import numpy as np
import pyarrow as pa

from ...data import ESTIMATES, TRAJECTORIES, read_table, table_from_rows, validate
from ...data.behaviour_log import BehaviourLog
from ...data.io import atomic_open
from ...model.world_model import WorldModel
from ...policies.soft_prompt import SoftPromptPolicy
from ...specs import check_epsilons
from ..answers import ADWM, KNN_WM, LOG, REWARD_SUM, SOURCES, row_name
from ..classical.fqe import FittedQEvaluation
from ..settings import VALUE_ESTIMATES, AdwmConfig
from ..statistics.bounds import PROTOCOL, Candidate, ReturnRange, identified_bounds, interval
from ..statistics.intervals import estimates_row, members_bootstrap
from ..statistics.signed_log import SignedLog
from .diffusion_transition import adwm_transition, reference_transition
from .encoded_log import EncodedLog
from .refits import Refits
from .rollouts import ImaginedRollouts, ImaginedStep, Rollouts
from .state_bank import StateBank
from .transitions import Policy, off_log_distance


def value_rows(members: Sequence[Rollouts], banks: Sequence[StateBank], *, cell: str, policy: str, seed: int,
               config: AdwmConfig, estimator: str = ADWM, returns: ReturnRange = PROTOCOL,
               error_range: tuple[float, float] | None = None, refits: Refits | None = None) -> list[dict]:
    """One estimates row per value estimate and ε level (``<estimator>:<value estimate>``) from
    one seed's rollouts in each world-model member (and the member's state bank): the mean over
    every member's rollouts and its interval over members and rollouts — the bootstrap
    (``members_bootstrap``, ope/statistics/intervals.py), or for ADWM's ``reward_sum`` the interval
    ``config.interval`` names: the identified bounds with ``returns``, calibrated with the shared
    off-log error in ``error_range``, or the ``refits``' Ĵ_b (ope/statistics/bounds.py) —, with the share of the ε level's
    imagined steps the log answered and how far the others' (state, action) pairs are from the
    log (ope/statistics/diagnostics.py)."""
    if config.interval == "calibrated" and estimator == ADWM and error_range is None:
        raise ValueError("interval='calibrated' needs the off-log error range the held-out actions give "
                         "(ope/imagination/held_out.py): pass error_range")
    if config.interval == "refits" and estimator == ADWM and refits is None:
        raise ValueError("interval='refits' needs the refits over resampled logs (ope/imagination/refits.py): "
                         "pass refits")
    rows, pooled = [], [_steps_by_epsilon(run) for run in members]
    bounded = [bounded_returns(run, config, returns) for run in members] if config.interval == "bounds" else None
    left = [identified_parts(run, config.gamma)[0] < run.lengths for run in members] if (
        config.interval == "calibrated" and estimator == ADWM) else None
    for epsilon in np.unique(members[0].epsilons):
        diagnostics = _trust(banks, [steps[float(epsilon)] for steps in pooled])
        for name in VALUE_ESTIMATES:
            if name == "success_similarity" and np.isnan(members[0].success_similarity).any():
                continue  # no successful behaviour episode, no success bank
            if name == "success_similarity" and estimator == ADWM and config.hands_over_to_fqe:
                continue  # rollouts handed over to Q̂ stop at their first off-log pair: no path to compare
            x = np.stack([run.values(name, epsilon) for run in members])
            at = members[0].epsilons == epsilon
            if bounded is not None and name == REWARD_SUM:
                low, high = interval(Candidate(x, *(np.stack([b[j][at] for b in bounded]) for j in (1, 2))),
                                     n_resamples=config.n_bootstrap, confidence=config.confidence, seed=seed)
            elif config.interval == "refits" and estimator == ADWM and name == REWARD_SUM:
                low, high = interval(Candidate.refitted(x, refits.at(epsilon)), n_resamples=config.n_bootstrap,
                                     confidence=config.confidence, seed=seed)
            elif left is not None and name == REWARD_SUM:
                low, high = interval(Candidate.calibrated(x, np.stack([m[at] for m in left]), error_range),
                                     n_resamples=config.n_bootstrap, confidence=config.confidence, seed=seed)
            else:
                low, high = members_bootstrap(x, n_resamples=config.n_bootstrap, confidence=config.confidence,
                                              seed=seed)
            rows.append(estimates_row(cell=cell, estimator=row_name(estimator, name), policy=policy, epsilon=epsilon,
                                      seed=seed, value=SignedLog.of(float(x.mean())), ci_low=SignedLog.of(float(low)),
                                      ci_high=SignedLog.of(float(high)), diagnostics=diagnostics))
    return rows


def bounded_returns(rollouts: Rollouts, config: AdwmConfig, returns: ReturnRange) -> np.ndarray:
    """(3, R): each rollout's imagined return Σ_t γ^t r̂_t (``reward_sum``) and its identified
    bounds L, U (``identified_bounds``, ope/statistics/bounds.py) over the horizon ``config.horizon``."""
    return _bounded(rollouts, config, returns, *identified_parts(rollouts, config.gamma))


def _bounded(rollouts: Rollouts, config: AdwmConfig, returns: ReturnRange, log_steps: np.ndarray,
             known: np.ndarray) -> np.ndarray:
    found = np.tile(rollouts.reward_sum, (3, 1))  # a rollout that never left the log is known exactly
    for r in np.flatnonzero(log_steps < rollouts.lengths):
        found[1:, r] = identified_bounds(known[r], int(log_steps[r]), horizon=config.horizon, gamma=config.gamma,
                                         returns=returns)
    return found


def identified_parts(rollouts: Rollouts, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Per rollout: how many of its first steps the log answered before one it did not, and their
    return G_i = Σ γ^t r̂_t (the whole ``reward_sum`` where it never left the log)."""
    log_steps = rollouts.lengths.copy()
    for step in rollouts.steps:
        if step.source != LOG:
            log_steps[step.rollout] = min(log_steps[step.rollout], step.t)
    known = np.zeros(len(log_steps))
    for step in rollouts.steps:
        if step.t < log_steps[step.rollout]:
            known[step.rollout] += gamma ** step.t * step.reward
    never_left = log_steps == rollouts.lengths
    known[never_left] = rollouts.reward_sum[never_left]
    return log_steps, known


def rollout_rows(runs: Sequence[Sequence[Rollouts]], seeds: Sequence[int], config: AdwmConfig, returns: ReturnRange,
                 *, policy: str, estimator: str = ADWM) -> list[dict]:
    """One row per imagined rollout (the ``rollouts`` contract) of ``runs`` (member → seed → rollouts):
    its ε level, unit (rollout index within the level), imagined return and identified bounds."""
    rows = []
    for member, by_seed in enumerate(runs):
        for seed, run in zip(seeds, by_seed):
            log_steps, known = identified_parts(run, config.gamma)
            value, low, high = _bounded(run, config, returns, log_steps, known)
            for r, epsilon in enumerate(run.epsilons):
                rows.append({"estimator": estimator, "policy": policy, "epsilon": float(epsilon), "member": member,
                             "seed": seed, "unit": r % config.n_rollouts, "value": float(value[r]),
                             "low": float(low[r]), "high": float(high[r]), "steps": int(run.lengths[r]),
                             "log_steps": int(log_steps[r]), "known": float(known[r])})
    return rows


def answer_summary(runs: Sequence[Rollouts], top: int = 5) -> dict[str, dict]:
    """Per ε level (as a string key): the imagined steps, the share of them each source answered
    (answers.SOURCES), and the ``top`` actions π_e took where the log never took them, by their
    share of the level's steps — what the log cannot tell about this agent."""
    summary = {}
    for epsilon in np.unique(runs[0].epsilons):
        steps = [s for run in runs for s in run.steps if run.epsilons[s.rollout] == epsilon]
        unseen = Counter(s.action for s in steps if s.source != LOG)
        summary[f"{float(epsilon):g}"] = {
            "steps": len(steps),
            "shares": {source: sum(s.source == source for s in steps) / max(len(steps), 1) for source in SOURCES},
            "unseen_actions": [{"action": a, "share": n / len(steps)} for a, n in unseen.most_common(top)]}
    return summary


def _steps_by_epsilon(rollouts: Rollouts) -> dict[float, list[ImaginedStep]]:
    by_epsilon = defaultdict(list)
    for step in rollouts.steps:
        by_epsilon[float(rollouts.epsilons[step.rollout])].append(step)
    return by_epsilon


def _trust(banks: Sequence[StateBank], members: Sequence[list[ImaginedStep]]) -> dict[str, float | None]:
    """``log_share`` over every member's steps; ``off_log_distance`` over every member's off-log
    pairs, each in its member's bank."""
    steps = sum(map(len, members))
    off_log = [[s for s in member if s.source != LOG] for member in members]
    n_off = sum(map(len, off_log))
    distance = (sum(len(pairs) * off_log_distance(bank, [s.observation for s in pairs], [s.action for s in pairs])
                    for bank, pairs in zip(banks, off_log) if pairs) / n_off) if n_off else None
    return {"log_share": 1 - n_off / steps if steps else None, "off_log_distance": distance}


def adwm_estimates(
    world_model: str | WorldModel | Sequence[WorldModel],
    trajectories: str | pa.Table | BehaviourLog,
    policy: Policy | SoftPromptPolicy,
    *,
    cell: str,
    label: str,
    epsilons: Sequence[float],
    config: AdwmConfig = AdwmConfig(),
    progress: Callable[..., None] | None = None,
    fit_q: Callable[[EncodedLog], Mapping[float, FittedQEvaluation]] | None = None,
    units: str | None = None,
    samples: str | None = None,
    returns: ReturnRange = PROTOCOL,
    error_range: tuple[float, float] | None = None,
    refits: Refits | None = None,
) -> tuple[pa.Table, list[Rollouts]]:
    """Score one policy against an already trained world model: the estimates table (every
    estimator × value estimate × ε × seed) and ADWM's rollouts of every member and seed.
    ``world_model``: loaded — one model or an ensemble's members, member 0 first — or where it is
    saved (every member); ``trajectories``: loaded, or where they are saved; ``policy``: a
    :class:`SoftPromptPolicy` for the soft-token reading, anything with ``act(histories)`` for the
    text readings. ADWM rolls π_e out in every member with the same seeds; kNN-WM reads member 0's
    state bank. ``progress(done, total, imagined_steps=n)`` is told of every finished seed of every
    world model, with the steps imagined so far in this run (a unit read back adds none);
    ``fit_q(encoded)``: FQE's Q-networks per ε on one member's reading of the log
    (encoded_log.py), where ``off_log='fqe'``
    (or ``carry_over_fqe``, the default) hands off-log pairs to them; ``units``: a folder keeping
    each finished (estimator, member, seed) unit's rollouts, read back instead of imagined again
    (a killed stage resumes there);
    ``samples``: a JSONL file receiving ADWM's imagined episodes (``imagined_episodes``);
    ``returns``: what a return can be, for the identified bounds (``config.interval='bounds'``);
    ``error_range``: the shared off-log error of ``config.interval='calibrated'`` (held_out.py);
    ``refits``: the refits' Ĵ_b of ``config.interval='refits'`` (refits.py)."""
    check_epsilons(epsilons)
    if config.hands_over_to_fqe and fit_q is None:
        default = " (the default)" if config.off_log == AdwmConfig().off_log else ""
        raise ValueError(f"off_log={config.off_log!r}{default} ends off-log rollouts with FQE's Q̂: pass fit_q "
                         "(FQE fitted on π_e's greedy actions at the logged steps, as the ADWM stage does), "
                         "or config=AdwmConfig(preset='carry_over') to answer them with the diffusion model")
    if isinstance(world_model, str):
        models = WorldModel.load_ensemble(world_model)
    else:
        models = [world_model] if isinstance(world_model, WorldModel) else list(world_model)
    if isinstance(trajectories, pa.Table):
        trajectories = BehaviourLog(validate(trajectories, TRAJECTORIES, "the trajectories"))
    log = trajectories if isinstance(trajectories, BehaviourLog) else BehaviourLog(read_table(trajectories, TRAJECTORIES))
    encoded = [EncodedLog(log, model) for model in models]  # the log read once per member, by all that follows
    banks = [reading.bank for reading in encoded]
    imaginations = [ImaginedRollouts(bank, config, noise_levels=model.diffusion.n_steps)
                    for model, bank in zip(models, banks)]
    imaginations[0].check_policy(policy)
    members = {ADWM: [(imagination, adwm_transition(reading.model, reading.bank, config,
                                                    fit_q(reading) if fit_q else None))
                      for reading, imagination in zip(encoded, imaginations)]}
    if config.reference:
        members[KNN_WM] = [(imaginations[0], reference_transition(banks[0]))]
    runs: dict[str, list[list[Rollouts]]] = {name: [] for name in members}  # estimator → member → seed
    total, done, imagined = sum(map(len, members.values())) * len(config.seeds), 0, 0
    for name, transitions in members.items():
        for member, (imagination, transition) in enumerate(transitions):
            runs[name].append([])
            for seed in config.seeds:
                unit = None if units is None else f"{units}/{name}-member{member}-seed{seed}.pkl"
                rollouts = _finished_unit(unit)
                if rollouts is None:
                    rollouts = _kept(unit, imagination.run(policy, transition, epsilons, seed))
                    imagined += int(rollouts.lengths.sum())
                runs[name][-1].append(rollouts)
                done += 1
                if progress is not None:
                    progress(done, total, imagined_steps=imagined)
    if samples is not None:
        with atomic_open(samples, "w") as f:
            for member, (bank, by_seed) in enumerate(zip(banks, runs[ADWM])):
                for seed, rollouts in zip(config.seeds, by_seed):
                    for record in imagined_episodes(rollouts, bank, policy=label, seed=seed, member=member):
                        f.write(json.dumps(record, ensure_ascii=False) + "\n")
    rows = [row for name, by_member in runs.items() for i, seed in enumerate(config.seeds)
            for row in value_rows([seeds[i] for seeds in by_member], banks, cell=cell, policy=label, seed=seed,
                                  config=config, estimator=name, returns=returns, error_range=error_range,
                                  refits=refits)]
    return table_from_rows(rows, ESTIMATES), [run for seeds in runs[ADWM] for run in seeds]


def imagined_episodes(rollouts: Rollouts, bank: StateBank, *, policy: str, seed: int, member: int) -> list[dict]:
    """One seed's rollouts as episodes of the JSONL import format (data/logs.py), to read: per
    step the behaviour observation nearest to the imagined state z_t (what π_e reads under the
    retrieval reading), π_e^ε's action, the imagined reward r̂_t and what answered the step
    (``source``: the log, a carried-over logged outcome, the model); per episode its ε, seed,
    world-model member and whether the model ended it (``done``). Imagination predicts rewards
    and the end, not the engine's win flag: ``success`` is written false."""
    by_rollout = defaultdict(list)
    for step in rollouts.steps:
        by_rollout[step.rollout].append(step)
    episodes = []
    for rollout, steps in sorted(by_rollout.items()):
        turns = []
        for step in steps:
            turns += [{"from": "human", "value": bank.texts[step.observation]},
                      {"from": "gpt", "value": step.action, "action": step.action, "reward": step.reward,
                       "source": step.source}]
        episodes.append({"item_id": rollout, "policy": policy, "epsilon": float(rollouts.epsilons[rollout]),
                         "seed": seed, "member": member, "imagined": True,
                         "task_description": bank.task_descriptions[rollouts.starts[rollout]], "conversations": turns,
                         "reward": float(sum(step.reward for step in steps)), "success": False,
                         "done": steps[-1].done})
    return episodes


def _finished_unit(path: str | None) -> Rollouts | None:
    """The rollouts a unit file holds, None where there is none."""
    if path is None:
        return None
    fs, local = fsspec.core.url_to_fs(path)
    if not fs.exists(local):
        return None
    with fs.open(local, "rb") as f:
        return pickle.load(f)  # written by _kept in this stage's own folder


def _kept(path: str | None, rollouts: Rollouts) -> Rollouts:
    """``rollouts``, written to the unit file ``path`` first (atomically) where there is one."""
    if path is not None:
        with atomic_open(path) as f:
            pickle.dump(rollouts, f)
    return rollouts
