"""Every configured classical estimator on a stage's files: behaviour trajectories + log-probs +
a trained world model → the estimates Parquet, one row per estimator × ε level × seed
(app:baselines; what they read: logged_steps.py), the importance-weighted ones with their ESS
and top-trajectory weight share (ope/statistics/diagnostics.py).

Beside each row (percentile-bootstrap interval), one row ``<estimator>@<interval>`` per
concentration interval of ``config.intervals`` with the same Ĵ (ope/statistics/intervals.py); with
``config.clip_weights`` = λ, the importance-weighted estimators again as
``<estimator>:clipped`` (and their ``@`` rows)."""

from __future__ import annotations

import json
from dataclasses import replace

import pyarrow as pa

from ...data import ESTIMATES, LOGPROBS, TRAJECTORIES, check_output, read_table, table_from_rows, write_table
from ...data.behaviour_log import BehaviourLog
from ...data.io import atomic_open
from ...model.world_model import WorldModel
from ..statistics.diagnostics import IMPORTANCE_WEIGHTED, weight_diagnostics
from ..statistics.intervals import estimates_row
from ..statistics.signed_log import SignedLog
from .estimators import ESTIMATORS, Estimate, LoggedTrajectories, OffPolicyEstimator
from .logged_steps import USES_Q, fitted_q, logged_steps, refitted_fqe_interval
from .settings import BaselineConfig


def run_baselines(
    trajectories: str,
    logprobs: str,
    world_model: str,
    out: str,
    *,
    cell: str,
    policy: str,
    config: BaselineConfig = BaselineConfig(),
    overwrite: bool = False,
    not_applicable_out: str | None = None,
) -> pa.Table:
    """Estimates of every configured estimator for π_e (labelled ``policy``) at every ε level
    in ``logprobs``; written to ``out`` and returned. An estimator whose inputs the logs lack
    (importance ratios without log π_b or log π_e) is left out, and the reason written to
    ``not_applicable_out`` (JSON, estimator → reason) where given."""
    check_output(out, overwrite=overwrite)
    model = WorldModel.load(world_model)
    steps = logged_steps(BehaviourLog(read_table(trajectories, TRAJECTORIES), trajectories), read_table(logprobs, LOGPROBS),
                         model, scores_name=logprobs, action_reading=config.fqe.action_reading)
    rows, not_applicable = [], {}
    for seed in config.seeds:
        for epsilon in steps.eval_logp:
            q = v = None
            if set(USES_Q) & set(config.estimators):
                q, v = fitted_q(steps, model, epsilon, config, seed)
            data = LoggedTrajectories(
                rewards=steps.rewards, mask=steps.grid.mask, gamma=config.gamma, q=q, v=v,
                log_ratios=steps.log_ratios(epsilon), predicted_rewards=steps.predicted_rewards,
            )
            for name in config.estimators:
                if ESTIMATORS[name].missing(data):
                    not_applicable[name] = steps.unknown_ratios
                    continue
                estimator = ESTIMATORS[name]()
                refit = None
                if name == "FQE" and config.fqe.refit_resamples:
                    refit = refitted_fqe_interval(steps, model, epsilon, config, seed)
                variants = [(name, data)]
                if name in IMPORTANCE_WEIGHTED and config.clip_weights is not None:
                    variants.append((f"{name}:clipped", data.clipped(config.clip_weights)))
                for label, variant in variants:
                    weights = (weight_diagnostics(variant.cumulative_log_ratios[:, -1])
                               if name in IMPORTANCE_WEIGHTED else None)
                    rows += [estimates_row(cell=cell, estimator=e.estimator, policy=policy, epsilon=epsilon,
                                           seed=seed, value=e.value, ci_low=e.ci_low, ci_high=e.ci_high,
                                           diagnostics=weights)
                             for e in _with_intervals(estimator, variant, label, config, seed, refit)]
    if not_applicable_out is not None:
        with atomic_open(not_applicable_out, "w") as f:
            json.dump(not_applicable, f, indent=2, ensure_ascii=False)
    return write_table(table_from_rows(rows, ESTIMATES), out, ESTIMATES, overwrite=overwrite)


def _with_intervals(estimator: OffPolicyEstimator, data: LoggedTrajectories, label: str, config: BaselineConfig,
                    seed: int, refit: tuple[float, float] | None) -> list[Estimate]:
    """The estimate labelled ``label`` with its percentile-bootstrap interval (FQE's ``refit`` one
    where given), then one labelled ``label@<interval>`` per interval of ``config.intervals``."""
    estimate = replace(estimator.estimate(data, n_bootstrap=config.n_bootstrap, confidence=config.confidence,
                                          seed=seed), estimator=label)
    if refit is not None:
        estimate = replace(estimate, ci_low=SignedLog.of(refit[0]), ci_high=SignedLog.of(refit[1]))
    return [estimate] + [replace(estimator.concentration_estimate(data, method, confidence=config.confidence),
                                 estimator=f"{label}@{method}") for method in config.intervals]
