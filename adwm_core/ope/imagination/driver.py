"""ADWM on a stage's files: the behaviour log, the world model's members, π_e and (where the
default hands off-log steps to a value) FQE's Q̂ per member and ε level, scored by
:func:`~.estimates.adwm_estimates` into the estimates Parquet (the stage: stages/adwm.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from ...data import ESTIMATES, LOGPROBS, ROLLOUTS, TRAJECTORIES, check_output, read_table, table_from_rows, write_table
from ...data.behaviour_log import BehaviourLog
from ...model.psi import PsiAdapter
from ...model.world_model import WorldModel
from ...policies.loading import ModelCache
from ...policies.soft_prompt import SoftPromptPolicy
from ...specs import EPSILONS, PolicySpec, check_epsilons
from ..answers import SOURCES
from ..classical.logged_steps import fit_fqe
from ..classical.settings import BaselineConfig, FQEConfig
from ..settings import AdwmConfig
from .encoded_log import EncodedLog
from ...data.io import atomic_open
from ..statistics.bounds import ReturnRange
from .estimates import adwm_estimates, answer_summary, rollout_rows
from .held_out import held_out_errors
from .memo import MemoisedPolicy
from .refits import refit_values


def run_adwm(
    trajectories: str,
    world_model: str,
    policy: PolicySpec,
    env_name: str,
    out: str,
    *,
    cell: str,
    psi: str | None = None,
    epsilons: Sequence[float] = EPSILONS,
    config: AdwmConfig = AdwmConfig(),
    logprobs: str | None = None,
    fqe: FQEConfig = FQEConfig(),
    overwrite: bool = False,
    timings: dict | None = None,
    progress: Callable[..., None] | None = None,
    units: str | None = None,
    samples: str | None = None,
    rollouts: str | None = None,
    answers: str | None = None,
) -> pa.Table:
    """The ADWM stage: π_e (an LLM policy spec, read through the ψ adapter at ``psi`` under the
    soft-token reading) over the ε family → estimates Parquet at ``out``. ``timings`` (if
    given) receives the imagined steps of all seeds, the share of them answered by each source
    (``<source>_share`` for each of answers.SOURCES) and the seconds spent in the transition (the guidance among them), π_e and FQE's fits; ``progress(done, total,
    imagined_steps=n)`` of finished seeds. Every member of the world model's ensemble imagines
    (ope/imagination/estimates.py). With
    ``off_log='fqe'`` (or ``carry_over_fqe``) the off-log pairs are handed to FQE (settings ``fqe``, γ of ``config``)
    fitted per ε level and member on the behaviour log and π_e's greedy actions at the logged steps,
    read from the log-prob table at ``logprobs`` (the log-prob stage's, or the greedy-action stage's).
    ``units``: where each finished (estimator, member, seed) is kept, so a killed stage resumes;
    ``samples``: a JSONL file receiving ADWM's imagined episodes, in the logs' import format;
    ``rollouts``: a Parquet file receiving one row per ADWM rollout with its identified bounds under
    the environment's declared ranges (the ``rollouts`` contract); ``answers``: a JSON file
    receiving, per ε level, what answered the imagined steps and the actions the log never took
    (``answer_summary``), with the ranges the bounds assumed and, under ``interval='calibrated'``,
    the held-out actions' errors that size its shared off-log error (held_out.py), under
    ``interval='refits'`` each refit's Ĵ_b (refits.py)."""
    check_output(out, overwrite=overwrite)
    check_epsilons(epsilons)
    if config.reading == "soft_tokens" and psi is None:
        raise ValueError("the soft-token reading needs π_e's ψ adapter: pass psi=<folder of the ψ-training stage>, "
                         "or choose reading='retrieval'")
    if config.hands_over_to_fqe and logprobs is None:
        raise ValueError(f"off_log={config.off_log!r} fits FQE on π_e's greedy actions at the behaviour steps: pass "
                         "logprobs=<the log-prob or greedy-action stage's file>, or choose another off_log")
    members = WorldModel.load_ensemble(world_model)  # missing checkpoints fail before the LLM loads
    log, fit_q = BehaviourLog(read_table(trajectories, TRAJECTORIES), trajectories), None
    scores, settings = read_table(logprobs, LOGPROBS) if logprobs else None, BaselineConfig(gamma=config.gamma, fqe=fqe)
    if config.hands_over_to_fqe:
        fit_q = fqe_per_member(scores, logprobs, epsilons, settings, timings)
    adapter = PsiAdapter.load(psi) if config.reading == "soft_tokens" else None
    llm = ModelCache().policy(policy, env_name)
    reader = SoftPromptPolicy(llm, adapter) if adapter is not None else MemoisedPolicy(llm)
    returns = ReturnRange.declared(env_name)
    held_out = None
    if config.interval == "calibrated":
        started, encoded = time.perf_counter(), EncodedLog(log, members[0])
        held_out = held_out_errors(log, members[0], encoded.bank, encoded.steps(
            scores, scores_name=logprobs, action_reading=fqe.action_reading), config, settings,
            groups=config.held_out_groups)
        if timings is not None:
            timings["held_out_seconds"] = time.perf_counter() - started
    refits = None
    if config.interval == "refits":
        started = time.perf_counter()
        # the refits ask π_e through a memo of their own: the stage's decision counts stay the estimate's
        refit_reader = MemoisedPolicy(llm) if isinstance(reader, MemoisedPolicy) else reader
        refits = refit_values(members, log, scores, refit_reader, scores_name=logprobs, epsilons=epsilons,
                              config=config, settings=settings, refits=config.refits)
        if timings is not None:
            timings["refits_seconds"] = time.perf_counter() - started
            if isinstance(refit_reader, MemoisedPolicy):
                timings["refit_decisions"], timings["refit_memo_hit_rate"] = (float(refit_reader.asked),
                                                                              refit_reader.hit_rate)
    estimates, runs = adwm_estimates(members, log, reader, cell=cell, label=policy.name, epsilons=epsilons,
                                      config=config, progress=progress, fit_q=fit_q, units=units,
                                      samples=samples, returns=returns,
                                      error_range=held_out.error_range(config.confidence) if held_out else None,
                                      refits=refits)
    by_member = [runs[k * len(config.seeds):(k + 1) * len(config.seeds)] for k in range(len(members))]
    if rollouts is not None:
        write_table(table_from_rows(rollout_rows(by_member, config.seeds, config, returns, policy=policy.name),
                                    ROLLOUTS), rollouts, ROLLOUTS, overwrite=overwrite)
    if answers is not None:
        with atomic_open(answers, "w") as f:
            json.dump({"policy": policy.name, "returns": {"reward": returns.reward, "episode": returns.episode,
                                                          "declared_by": returns.source},
                       "by_epsilon": answer_summary(runs),
                       **({"held_out": held_out.to_json(config.confidence)} if held_out else {}),
                       **({"refits": refits.to_json()} if refits else {})},
                      f, indent=2, ensure_ascii=False)
    if timings is not None:
        timings["imagined_steps"] = float(sum(run.lengths.sum() for run in runs))
        timings["world_models"] = float(len(members))
        if isinstance(reader, MemoisedPolicy):  # decisions π_e was asked for, and the share the memo answered
            timings["decisions"], timings["decision_memo_hit_rate"] = float(reader.asked), reader.hit_rate
        sources = np.array([step.source for run in runs for step in run.steps])
        timings.update({f"{source}_share": float(np.mean(sources == source)) for source in SOURCES})
        for part in sorted({part for run in runs for part in run.seconds}):
            timings[f"{part}_seconds"] = sum(run.seconds.get(part, 0.0) for run in runs)
    return write_table(estimates, out, ESTIMATES, overwrite=overwrite)


def fqe_per_member(scores: pa.Table, scores_name: str, epsilons: Sequence[float], settings: BaselineConfig,
                   timings: dict | None = None) -> Callable[[EncodedLog], dict]:
    """``fit_q(encoded)``: FQE's Q̂ per ε level on one member's reading of the log (the hand-over's,
    fitted on π_e's greedy actions in ``scores``), its seconds added to ``timings["fqe_seconds"]``
    where given."""
    def fit_q(encoded: EncodedLog) -> dict:
        started = time.perf_counter()
        steps = encoded.steps(scores, scores_name=scores_name, action_reading=settings.fqe.action_reading)
        fitted = {epsilon: fit_fqe(steps, encoded.model, epsilon, settings, seed=0) for epsilon in epsilons}
        if timings is not None:
            timings["fqe_seconds"] = timings.get("fqe_seconds", 0.0) + time.perf_counter() - started
        return fitted

    return fit_q
