"""Scoring π_e with ADWM: the estimates of every seed and ε level (the stage that writes them:
stages/adwm.py).

Beside ADWM's rows (``ADWM:<value estimate>``), ``AdwmConfig.reference`` adds those of the
non-parametric reference world model (``kNN-WM:<value estimate>``): the same rollout loop,
reading and seeds, another transition (ope/adwm.py, ope/transitions.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from ..data import ESTIMATES, TRAJECTORIES, read_table, table_from_rows, validate
from ..data.behaviour_log import BehaviourLog
from ..model.world_model import WorldModel
from ..policies.soft_prompt import SoftPromptPolicy
from .settings import VALUE_ESTIMATES, AdwmConfig
from ..specs import Progress, check_epsilons
from .adwm import ESTIMATOR, REFERENCE, adwm_transition, reference_transition
from .diagnostics import off_log_distance
from .fqe import FittedQEvaluation
from .intervals import estimates_row, percentile_bootstrap
from .rollouts import ImaginedRollouts, Rollouts
from .signed_log import SignedLog
from .state_bank import StateBank
from .transitions import Policy


def value_rows(rollouts: Rollouts, bank: StateBank, *, cell: str, policy: str, seed: int, config: AdwmConfig,
               estimator: str = ESTIMATOR) -> list[dict]:
    """One estimates row per value estimate and ε level (``<estimator>:<value estimate>``): the
    mean over rollouts and its percentile-bootstrap interval over rollouts (ope/intervals.py),
    with the share of the ε level's imagined steps the log answered and how far the others'
    (state, action) pairs are from the log (ope/diagnostics.py)."""
    rows, by_epsilon = [], defaultdict(list)
    for step in rollouts.steps:
        by_epsilon[float(rollouts.epsilons[step.rollout])].append(step)
    for epsilon in np.unique(rollouts.epsilons):
        steps = by_epsilon[float(epsilon)]
        off_log = [s for s in steps if s.source != "log"]
        diagnostics = {"log_share": 1 - len(off_log) / len(steps) if steps else None,
                       "off_log_distance": off_log_distance(bank, [s.observation for s in off_log],
                                                            [s.action for s in off_log]) if off_log else None}
        for name in VALUE_ESTIMATES:
            if name == "success_similarity" and np.isnan(rollouts.success_similarity).any():
                continue  # no successful behaviour episode, no success bank
            if name == "success_similarity" and estimator == ESTIMATOR and config.off_log == "fqe":
                continue  # rollouts handed over to Q̂ stop at their first off-log pair: no path to compare
            x = rollouts.values(name, epsilon)
            low, high = percentile_bootstrap(lambda resamples: x[resamples].mean(1), len(x),
                                             n_resamples=config.n_bootstrap, confidence=config.confidence, seed=seed)
            rows.append(estimates_row(cell=cell, estimator=f"{estimator}:{name}", policy=policy, epsilon=epsilon,
                                      seed=seed, value=SignedLog.of(float(x.mean())), ci_low=SignedLog.of(float(low)),
                                      ci_high=SignedLog.of(float(high)), diagnostics=diagnostics))
    return rows


def evaluate_policy(
    world_model: str | WorldModel,
    trajectories: str | pa.Table,
    policy: Policy | SoftPromptPolicy,
    *,
    cell: str,
    label: str,
    epsilons: Sequence[float],
    config: AdwmConfig = AdwmConfig(),
    progress: Progress | None = None,
    q_by_epsilon: Mapping[float, FittedQEvaluation] | None = None,
) -> tuple[pa.Table, list[Rollouts]]:
    """Score one policy against an already trained world model: the estimates table (every
    estimator × value estimate × ε × seed) and ADWM's rollouts of each seed. ``world_model`` and
    ``trajectories``: loaded, or where they are saved; ``policy``: a :class:`SoftPromptPolicy` for
    the soft-token reading, anything with ``act(histories)`` for the text readings.
    ``progress(done, total)`` is told of every finished seed of every world model;
    ``q_by_epsilon``: FQE's Q-networks per ε where ``off_log='fqe'`` hands off-log pairs to them."""
    check_epsilons(epsilons)
    model = world_model if isinstance(world_model, WorldModel) else WorldModel.load(world_model)
    table = (validate(trajectories, TRAJECTORIES, "the trajectories") if isinstance(trajectories, pa.Table)
             else read_table(trajectories, TRAJECTORIES))
    bank = StateBank.from_log(BehaviourLog(table), model)
    imagination = ImaginedRollouts(bank, config, noise_levels=model.diffusion.n_steps)
    imagination.check_policy(policy)
    transitions = {ESTIMATOR: adwm_transition(model, bank, config, q_by_epsilon)}
    if config.reference:
        transitions[REFERENCE] = reference_transition(bank)
    runs: dict[str, list[Rollouts]] = {name: [] for name in transitions}
    total = len(transitions) * len(config.seeds)
    for name, transition in transitions.items():
        for seed in config.seeds:
            runs[name].append(imagination.run(policy, transition, epsilons, seed))
            if progress is not None:
                progress(sum(map(len, runs.values())), total)
    rows = [row for name, seeds in runs.items() for seed, run in zip(config.seeds, seeds)
            for row in value_rows(run, bank, cell=cell, policy=label, seed=seed, config=config, estimator=name)]
    return table_from_rows(rows, ESTIMATES), runs[ESTIMATOR]
