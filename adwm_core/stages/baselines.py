"""The COBS baselines stage: behaviour trajectories + log-probs + a trained world model → the
estimates Parquet, one row per estimator × ε level × seed (app:baselines; ope/baselines.py),
the importance-weighted ones with their ESS and top-trajectory weight share (ope/diagnostics.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from ..data import ESTIMATES, LOGPROBS, TRAJECTORIES, check_output, read_table, table_from_rows, write_table
from ..data.behaviour_log import BehaviourLog
from ..data.io import atomic_open
from ..model.world_model import WorldModel
from ..ope.baselines import USES_Q, fitted_q, logged_steps, refitted_fqe_interval
from ..ope.diagnostics import IMPORTANCE_WEIGHTED, weight_diagnostics
from ..ope.settings import BaselineConfig
from ..ope.estimators import ESTIMATORS, LoggedTrajectories
from ..ope.intervals import estimates_row
from ..ope.signed_log import SignedLog

if TYPE_CHECKING:
    from ..pipeline import StageRun


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
                         model, scores_name=logprobs)
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
                estimate = ESTIMATORS[name]().estimate(data, n_bootstrap=config.n_bootstrap,
                                                       confidence=config.confidence, seed=seed)
                if name == "FQE" and config.fqe.refit_resamples:
                    low, high = refitted_fqe_interval(steps, model, epsilon, config, seed)
                    estimate = replace(estimate, ci_low=SignedLog.of(low), ci_high=SignedLog.of(high))
                weights = (weight_diagnostics(data.cumulative_log_ratios[:, -1]) if name in IMPORTANCE_WEIGHTED
                           else None)
                rows.append(estimates_row(cell=cell, estimator=name, policy=policy, epsilon=epsilon, seed=seed,
                                          value=estimate.value, ci_low=estimate.ci_low, ci_high=estimate.ci_high,
                                          diagnostics=weights))
    if not_applicable_out is not None:
        with atomic_open(not_applicable_out, "w") as f:
            json.dump(not_applicable, f, indent=2, ensure_ascii=False)
    return write_table(table_from_rows(rows, ESTIMATES), out, ESTIMATES, overwrite=overwrite)


def compute(run: StageRun) -> None:
    run_baselines(run.input("behaviour", "trajectories"), run.input("logprobs", "logprobs"),
                  run.input("world-model", "model"), run.output("estimates"), cell=run.cell.name,
                  policy=run.policy.name, config=run.cell.baselines, not_applicable_out=run.output("not_applicable"))
