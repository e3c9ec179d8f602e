"""The Python API: score agents from behaviour logs in a notebook, in the habits of SCOPE-RL and
Open Bandit Pipeline — the logged data built in memory, one evaluation object running a list of
estimators, ``estimate_policy_values``, ``estimate_intervals(alpha=…)`` and the selection of the
best candidate with its ranking metrics — without Prefect or MLflow::

    from adwm_core.api import LoggedEpisodes, OffPolicyEvaluation, agent

    logs = LoggedEpisodes.from_file("examples/simonsays-logs.jsonl", env="textworld-express", task="simonsays")
    ope = OffPolicyEvaluation(logs, [agent("my-agent", "http://127.0.0.1:8000/v1")], epsilons=[0, 1])
    ope.estimate_policy_values()            # Ĵ per (agent, ε), a column per estimator
    ope.estimate_intervals(alpha=0.05)      # Ĵ with its 1 − α interval, a row per estimator
    ope.recommended()                       # the one estimate to read per (agent, ε), and the product's verdicts
    ope.select_best(true_values={...})      # the agents by it, its verdict per pair, ρ and regret@k
    ope.cannot_tell()                       # per agent: what answered its imagined steps, unseen actions

It builds the cell ``adwm evaluate`` builds from the same arguments (``logs_cell``; the command
line is flows/cli.py) and runs its stages in this process (``pipeline.run_all``) under the same
keys: a run of either reuses what the other computed, and both print the same numbers.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import pipeline
from .cell import CellConfig, logs_cell_name
from .data import ESTIMATES, GROUND_TRUTH, ROLLOUTS, TRAJECTORIES, read_table, write_table
from .data.io import atomic_open
from .endpoints import endpoint
from .ope.statistics.intervals import CONCENTRATION
from .ope.statistics.metrics import normalised_absolute_error, regret_at_k, spearman
from .ope.classical.settings import BaselineConfig, EstimatorName
from .ope.settings import AdwmConfig
from .ope.statistics.signed_log import SignedLog
from .paths import artifact_path
from .provenance import write_results
from .ope.answers import ADWM, KNN_WM
from .ranking import PrintedInterval, rank_agents
from .runnable import prepared
from .settings import PsiConfig, TrainConfig
from .specs import EPSILONS, EnvSpec, LogSource, PolicySpec
from .data.log_files import STEP_COLUMNS
from .data.log_steps import episode_of_steps
from .data.logs import ImportSummary, inspect_logs, read_logs
from .envs import EnvironmentUnavailable, check_env_task
from .ope.statistics.calibration import Point, ToppedUp, live_by_point, read_imagined, top_up, topped_up_verdicts
from .ope.statistics.recommend import Recommendation, live_only, point_key, with_live
from .ope.statistics.verdicts import COLUMNS, Verdict, winner

CLASSICAL = EstimatorName.__args__  # the baselines stage's estimators (ope/classical/estimators.py)
WORLD_MODELS = (ADWM, KNN_WM)  # the ADWM stage's: imagination in the learned and in the reference world model


# ------------------------------------------------------------------------------- the cell, shared

def agent(model: str, base_url: str | None = None, *, backend: str | None = None, tokenizer: str | None = None,
          mode: str | None = None, concurrency: int = 8, max_retries: int = 5, timeout: float = 120.0,
          label: str | None = None, variant: str = "p0") -> PolicySpec:
    """π_e: a model at an OpenAI-compatible endpoint (``base_url``: …/v1, or its completions or
    chat route), else a Hugging Face folder loaded in-process (``backend``: transformers or
    vllm); labelled after the model's name."""
    label = label or os.path.basename(model.rstrip("/"))
    if base_url is None:
        return PolicySpec(label, model, backend or "transformers", variant)
    base_url, mode = endpoint(base_url, mode)
    options = {"base_url": base_url, "mode": mode, "concurrency": concurrency, "max_retries": max_retries,
               "timeout": timeout}
    if tokenizer is not None:
        options["tokenizer"] = tokenizer
    return PolicySpec(label, model, "openai", variant, options)


def seed_overrides(seed: int, overrides: Mapping[str, Any] | None = None) -> dict:
    """Every seed of the run shifted by ``seed`` (0: the recipe's own seeds, nothing overridden);
    ADWM's seeds are those of the preset ``overrides`` name (``adwm.preset``), else the default's."""
    if seed == 0:
        return {}
    preset = (overrides or {}).get("adwm.preset", AdwmConfig().preset)
    return {"world_model.seed": TrainConfig().seed + seed, "psi.seed": PsiConfig().seed + seed,
            "adwm.seeds": [s + seed for s in AdwmConfig(preset=preset).seeds],
            "baselines.seeds": [s + seed for s in BaselineConfig().seeds]}


def logs_cell(source: LogSource, env: str, agents: Sequence[PolicySpec], *, task: str = "*", name: str | None = None,
              epsilons: Sequence[float] | None = None, overrides: Mapping[str, Any] | None = None,
              limit: int | None = None) -> CellConfig:
    """The cell of the logs ``source`` and ``agents``; ``limit``: only the logs' first ``limit``
    episodes, as a cell of its own (``<name>-first<limit>``)."""
    name = name or logs_cell_name(source.path)
    if limit is not None:
        source, name = first_episodes(source, limit, name), f"{name}-first{limit}"
    return CellConfig.for_logs(source, env, list(agents), name=name, task=task, epsilons=tuple(epsilons or EPSILONS),
                               overrides=overrides)


def evaluation_cell(logs: LogSource, env: str, models: Sequence[str], *, base_url: str | None = None,
                    backend: str | None = None, tokenizer: str | None = None, mode: str = "completions",
                    concurrency: int = 8, max_retries: int = 5, timeout: float = 120.0,
                    **cell: Any) -> CellConfig:
    """The cell ``adwm evaluate`` runs: each of ``models`` as an agent (``agent``) over the logs
    (``logs_cell``, which takes ``cell``: task, name, epsilons, overrides, limit)."""
    agents = [agent(model, base_url, backend=backend, tokenizer=tokenizer, mode=mode, concurrency=concurrency,
                    max_retries=max_retries, timeout=timeout) for model in models]
    return logs_cell(logs, env, agents, **cell)


def check_live(env: str, task: str, live: int, live_logs: str | None, agents: Sequence[PolicySpec],
               epsilons: Sequence[float] = EPSILONS) -> dict[Point, list[tuple[str, float]]] | None:
    """Refuse a live top-up that cannot happen, before any stage: both ``live`` and ``live_logs``,
    fewer than 2 live episodes, an environment that cannot run here with no ``live_logs``, or
    ``live_logs`` whose agents are not ``agents``, whose ε levels are not ``epsilons`` or with a
    point of fewer than 2 episodes. Returns the live episodes of ``live_logs`` by point (None:
    played in the run)."""
    if live and live_logs is not None:
        raise ValueError("give --live K (played here) or --live-logs FILE (played elsewhere), not both")
    if live_logs is not None:
        points = live_file(live_logs, agents)
        levels = sorted({epsilon for _, epsilon in points} - {float(e) for e in epsilons})
        few = sorted(f"{policy} at ε={epsilon:g}" for (policy, epsilon), episodes in points.items() if len(episodes) < 2)
        if levels or few:
            raise ValueError(f"--live-logs {live_logs}: " + (f"episodes at ε {levels}, which this run does not score "
                             f"(--epsilons {','.join(f'{e:g}' for e in epsilons)}; an episode without one is ε 0)"
                             if levels else f"fewer than 2 live episodes of {few}: PPI needs 2 per point"))
        return points
    if live < 2:
        raise ValueError(f"--live {live}: a live top-up needs at least 2 live episodes per point")
    try:
        EnvSpec(env, task).instances()
    except EnvironmentUnavailable as error:
        raise ValueError(f"--live {live}: the environment {env} cannot be run here ({error}). Either make it "
                         f"runnable (the cause above), or play the agents elsewhere and pass their episodes "
                         f"with --live-logs FILE") from None
    return None


def live_file(path: str, agents: Sequence[PolicySpec]) -> dict[Point, list[tuple[str, float]]]:
    """The live episodes in ``path`` by (agent, ε): any format ``--logs`` reads, each episode's
    ``policy`` one of ``agents`` (its label or name), ε 0 unless an episode says otherwise."""
    table = read_logs(LogSource(path=path), cell="live")
    if 0 < table["epsilon"].null_count < table.num_rows:
        raise ValueError(f"--live-logs {path}: some episodes give their ε and others not; give every one its ε "
                         "(or none: all at ε 0)")
    points = live_by_point(table, 0.0 if table["epsilon"].null_count else None)
    shared = {spec.label for spec in agents if sum(s.label == spec.label for s in agents) > 1}
    names = {name: spec.name for spec in agents for name in (spec.name, *([spec.label] * (spec.label not in shared)))}
    unknown = sorted({policy for policy, _ in points} - set(names))
    if unknown:
        raise ValueError(f"--live-logs {path} holds episodes of {unknown}, but this run's agents are "
                         f"{sorted(spec.name for spec in agents)}: give each live episode its agent's label as "
                         "'policy' (its label@variant where two agents share a label)")
    return {(names[policy], epsilon): episodes for (policy, epsilon), episodes in points.items()}


def live_episodes(config: CellConfig, live: dict[Point, list[tuple[str, float]]] | None = None
                  ) -> dict[Point, list[tuple[str, float]]]:
    """The live episodes (start, return) by point: ``live``, else those the cell's ground-truth stages played."""
    if live is not None:
        return live
    found = {}
    for policy in config.evaluation.policies:
        episodes = read_table(pipeline.finished(config, "ground-truth", policy).file("episodes"), TRAJECTORIES)
        found.update(live_by_point(episodes))
    return found


def recommended_with_live(record: Mapping, config: CellConfig, live: dict[Point, list[tuple[str, float]]] | None,
                          alone: bool = False) -> Recommendation:
    """The report's recommended reading (``record``) with the live episodes folded in under the same
    calibration (ope/statistics/recommend.py's ``with_live``); ``alone``: the same live episodes
    read with no offline estimate (``live_only``), the row to set beside it."""
    episodes = live_episodes(config, live)
    returns = {point_key(*point): [g for _, g in runs] for point, runs in episodes.items()}
    return (live_only if alone else with_live)(Recommendation.from_record(record), returns)


def live_top_up(config: CellConfig, live: dict[Point, list[tuple[str, float]]] | None = None) -> list[ToppedUp]:
    """Each point's ADWM estimate topped up by its live episodes (ope/statistics/calibration.py):
    ``live`` by point, else the episodes the cell's ground-truth stages played."""
    live = live_episodes(config, live)
    imagined = {}
    for policy in config.evaluation.policies:
        imagined.update(read_imagined(pipeline.finished(config, "adwm", policy).file("samples")))
    return top_up(imagined, live, confidence=config.adwm.confidence)


def first_episodes(source: LogSource, limit: int, name: str) -> LogSource:
    """The first ``limit`` episodes of ``source`` (in the logs' order) as a trajectories Parquet
    under ``$ADWM_HOME/limited/`` (rewritten each time, so it follows the logs), read like any logs."""
    if limit < 1:
        raise ValueError(f"--limit must be at least 1 episode, got {limit}")
    table = read_logs(source, cell=name)
    kept = list(dict.fromkeys(table["episode"].to_pylist()))[:limit]
    table = table.filter(pc.is_in(table["episode"], pa.array(kept, table["episode"].type)))
    out = artifact_path("limited", f"{name}-first{limit}.parquet")
    write_table(table, out, TRAJECTORIES, overwrite=True)
    return LogSource(out, "parquet")


def evaluation_line(config: CellConfig, logs: str, limit: int | None, overrides: Mapping | None) -> str:
    """What an ``adwm evaluate`` run scores, in one line: the cell, the logs, the agents and the settings changed."""
    agents = ", ".join(f"{a.model} ({a.backend})" for a in config.evaluation.policies)
    return (f"cell {config.name}: logs {logs}{f' (first {limit} episodes)' if limit else ''}, environment "
            f"{config.env.name}, agents {agents}; settings overridden: {overrides or 'none'}")


def write_outputs(config: CellConfig, folder: str, output_path: str | None, log_samples: str | None) -> None:
    """After an ``adwm evaluate`` run: the results JSON at ``output_path`` (provenance.write_results)
    and the imagined episodes at ``log_samples``, where asked for, each named on the terminal."""
    if output_path:
        write_results(output_path, config, folder)
        print(f"results  {output_path}")
    if log_samples:
        print(f"samples  {log_samples}: {write_samples(config, log_samples)} imagined episodes")


def write_samples(config: CellConfig, path: str) -> int:
    """Every π_e's imagined episodes (the ADWM stage's ``samples``, the JSONL import format) in
    one file at ``path``; returns how many episodes it holds."""
    episodes = 0
    with atomic_open(path, "w") as out:
        for policy in config.evaluation.policies:
            with fsspec.open(pipeline.finished(config, "adwm", policy).file("samples"), "r") as f:
                for line in f:
                    out.write(line)
                    episodes += 1
    return episodes


# --------------------------------------------------------------------------------------- inputs

@dataclass(frozen=True)
class LoggedEpisodes:
    """Behaviour logs of environment ``env`` (task type ``task``; ``*``: all), read and checked
    when built: a malformed episode is refused here, with its line and field, before any stage."""

    source: LogSource
    env: str
    task: str = "*"

    @classmethod
    def from_file(cls, path: str, env: str, task: str = "*", *, format: str | None = None,
                  fields: Mapping[str, str] | None = None, split: str | None = None,
                  preamble_turns: int | None = None, thoughts: str = "fold",
                  agent_prefix: str = "> ", **read_as: Any) -> "LoggedEpisodes":
        """Logs in a file, folder or dataset, as ``adwm import`` and ``adwm evaluate --logs`` read
        them (docs/your-logs.md); an unknown environment or task type is refused first.
        ``read_as``: the other reading settings of ``LogSource`` (``step_observation``,
        ``rewards``, ``allow_degenerate``, ``strip``, ``outcome_line``)."""
        check_env_task(env, task)
        logs = cls(LogSource(path, format, fields=dict(fields or {}), split=split, preamble_turns=preamble_turns,
                             thoughts=thoughts, agent_prefix=agent_prefix, **read_as), env, task)
        logs.steps  # noqa: B018 — read now, so bad logs fail before any stage
        return logs

    @classmethod
    def from_records(cls, episodes: Sequence[Mapping], env: str, task: str = "*", *, name: str = "episodes",
                     fields: Mapping[str, str] | None = None, preamble_turns: int | None = None) -> "LoggedEpisodes":
        """Episodes in memory, each a record of the JSONL format (``conversations`` of observation
        and action turns, ``reward``, ``success``: adwm_core/data/logs.py); line N of an error
        is episode N. They are written once to ``$ADWM_HOME/imported/<content digest>/<name>.jsonl``,
        so the same episodes give the same cell ``logs-<name>`` and reuse its stages."""
        if isinstance(episodes, Mapping) or not len(episodes):
            raise ValueError("episodes: give a non-empty list of episode records (one mapping per episode)")
        text = "".join(json.dumps(dict(e), ensure_ascii=False, default=_plain, allow_nan=False) + "\n"
                       for e in episodes)
        path = artifact_path("imported", hashlib.sha256(text.encode()).hexdigest()[:16], f"{name}.jsonl")
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with atomic_open(path, "w") as f:
                f.write(text)
        return cls.from_file(path, env, task, format="jsonl", fields=fields, preamble_turns=preamble_turns)

    @classmethod
    def from_dataframe(cls, frame, env: str, task: str = "*", *, name: str = "steps") -> "LoggedEpisodes":
        """A pandas DataFrame of steps, one row per action: ``episode``, ``observation`` (what the
        agent saw), ``action``, ``reward``, ``success`` (of the episode, read on its last row);
        optional ``t`` (the order within the episode; else the rows' order), ``next_observation``,
        ``done``, ``response`` (the agent's raw text), ``logprob`` (log π_b of the action),
        ``admissible``, ``valid``, and per episode ``task_description``, ``policy``, ``task``,
        ``variation``, ``seed``."""
        missing = [c for c in STEP_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"the steps DataFrame lacks column(s) {missing}: it needs {list(STEP_COLUMNS)}, one row "
                             "per action (see LoggedEpisodes.from_dataframe)")
        steps = frame.sort_values(["episode", "t"], kind="stable") if "t" in frame.columns else frame
        episodes = [episode_of_steps([{k: v for k, v in row.items() if _present(v)} for row in rows.to_dict("records")])
                    for _, rows in steps.groupby("episode", sort=False)]
        return cls.from_records(episodes, env, task, name=name)

    @property
    def summary(self) -> ImportSummary:
        """How the logs were read: layout, keys, counts, what was read in a way to know of."""
        return self._read[1]

    @cached_property
    def _read(self) -> tuple[pa.Table, ImportSummary]:
        return inspect_logs(self.source, cell=logs_cell_name(self.source.path))

    @property
    def steps(self) -> pa.Table:
        """The logs as the trajectories contract (adwm_core/data/schemas.py)."""
        return self._read[0]

    @property
    def n_episodes(self) -> int:
        return len(pc.unique(self.steps["episode"]))

    def to_pandas(self):
        return self.steps.to_pandas()


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as JSON takes them."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def verdict_frame(verdicts: Sequence[Verdict]):
    """Verdicts as a DataFrame, a row per pair (ope/statistics/verdicts.py's ``COLUMNS``)."""
    import pandas as pd

    return pd.DataFrame([v.row() for v in verdicts], columns=list(COLUMNS))


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


# ----------------------------------------------------------------------------------- evaluation

@dataclass(frozen=True)
class Selection:
    """The agents at one ε by the recommended estimate (best Ĵ first) with its verdict on every pair
    — the one verdict the product stands behind — and the best agent where those verdicts name one
    (None: these logs cannot tell); beside them, as instruments, ADWM's own paired verdicts and the
    log alone's; and, where the true values are known, how well every estimator ranks the candidates."""

    best: str | None
    # DataFrame: agent, value, lower, upper (the recommended estimate's); adwm, adwm_lower, adwm_upper (ADWM's
    # paired reading); log_lower, log_upper (the bounds the log alone identifies)
    ranking: Any
    verdicts: Any  # DataFrame per pair of agents (verdicts.COLUMNS): the recommended estimate's
    instruments: Any  # DataFrame per pair: a, b, difference, lower, upper, better (ADWM's paired interval), log_alone_better
    metrics: Any | None  # DataFrame per estimator: rho, regret_at_1, regret_at_k, nmae, n_points; None: no truth
    source: str = ""  # the estimator the recommended estimate read, or why none could be


@dataclass(frozen=True)
class Recommended:
    """The one number per (agent, ε) to read (``OffPolicyEvaluation.recommended``)."""

    source: str  # the estimator chosen, or why none could be
    estimates: Any  # DataFrame per (agent, ε): value, lower, upper (calibrated on the bench's errors)
    verdicts: Any  # DataFrame per pair of points (verdicts.COLUMNS): better None where it cannot tell, with live_episodes
    excluded: dict  # estimator → why it was not eligible here
    text: str  # what `adwm evaluate` prints

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class LiveTopUp:
    """ADWM with live episodes (``OffPolicyEvaluation.live_top_up``)."""

    estimates: Any  # DataFrame per (agent, ε): adwm, k, live [lower, upper], value [lower, upper], power, narrower
    verdicts: Any  # DataFrame per pair of agents at the lowest ε (verdicts.COLUMNS): an instrument


class OffPolicyEvaluation:
    """Every estimator of ``estimators`` (None: all — ADWM, the kNN-WM reference, and the eight
    classical ones of the baselines stage) for each of ``agents`` at each ε of ``epsilons``,
    from ``logs``. ``settings`` maps dotted cell keys to values (``{"world_model.steps": 500}``,
    as ``--set``), ``seed`` shifts every seed of the recipe, ``limit`` keeps the logs' first
    episodes, ``name`` names the cell — all as ``adwm evaluate`` takes them; ``live=K`` plays K
    live episodes per point, or ``live_logs`` reads live episodes run elsewhere, for
    ``live_top_up``. The stages run on the first call that needs their numbers, once; ``log``
    gets their messages."""

    def __init__(self, logs: LoggedEpisodes, agents: PolicySpec | Sequence[PolicySpec], *,
                 estimators: Sequence[str] | None = None, epsilons: Sequence[float] | None = None,
                 settings: Mapping[str, Any] | None = None, seed: int = 0, limit: int | None = None,
                 name: str | None = None, live: int = 0, live_logs: str | None = None,
                 log: Callable[[str], None] = print) -> None:
        self.logs, self.log = logs, log
        self.agents = [agents] if isinstance(agents, PolicySpec) else list(agents)
        self.estimators = None if estimators is None else _checked_estimators(estimators)
        self._cell = dict(task=logs.task, name=name, epsilons=epsilons, limit=limit)
        self._live_asked = bool(live or live_logs)
        self._live = check_live(logs.env, logs.task, live, live_logs, self.agents,
                                epsilons or EPSILONS) if self._live_asked else None
        played = {"ground_truth.episodes": live} if live and live_logs is None else {}
        self._overrides = {**seed_overrides(seed, settings), **_estimator_settings(self.estimators), **played,
                           **(settings or {})}
        self.config = prepared(self._config())  # the agents' weights, the GPU, a graded environment: checked first
        if self.config.adwm.guidance == "success_bank":  # it needs a logged success; other settings parse nothing here
            self.config.adwm.check_behaviour(self.logs.steps)
        self._reports: dict[float, str] = {}
        self._tables: dict[str, pa.Table] = {}

    def _config(self, confidence: float | None = None) -> CellConfig:
        extra = {} if confidence is None else {"adwm.confidence": confidence, "baselines.confidence": confidence}
        return logs_cell(self.logs.source, self.logs.env, self.agents, overrides={**self._overrides, **extra},
                         **self._cell)

    def run(self, alpha: float | None = None) -> str:
        """The report folder of the cell (its intervals at 1 − ``alpha``; None: the config's),
        every stage computed here unless finished already."""
        config = self.config if alpha is None else self._config(confidence=1 - alpha)
        confidence = config.adwm.confidence
        if confidence not in self._reports:
            self._reports[confidence] = pipeline.run_all(config, log=self.log).path
        return self._reports[confidence]

    def _estimates(self, alpha: float | None = None) -> pa.Table:
        """Every estimate row of the cell's report (intervals at 1 − ``alpha``), read once per level."""
        folder = self.run(alpha)
        if folder not in self._tables:
            self._tables[folder] = read_table(f"{folder}/{pipeline.stage('report').outputs['estimates']}", ESTIMATES)
        return self._tables[folder]

    def _rows(self, alpha: float | None = None, ci: str = "bootstrap") -> list[dict]:
        """Each estimator's estimate rows at its first seed (what ``adwm evaluate`` prints), with
        the ``ci`` interval; estimators without that interval are left out."""
        from .report import first_seed_rows

        if ci != "bootstrap" and ci not in CONCENTRATION:
            raise ValueError(f"ci={ci!r}: choose bootstrap or one of {', '.join(CONCENTRATION)}")
        rows = first_seed_rows(self._estimates(alpha))
        picked = []
        for row in rows:
            name, _, interval = row["estimator"].partition("@")
            if (interval or "bootstrap") == ci and _selected(name, self.estimators):
                picked.append({**row, "estimator": name})
        return picked

    def recommended(self, alpha: float | None = None, live_alone: bool = False) -> Recommended:
        """The recommended estimate (ope/statistics/recommend.py): its source, Ĵ of every (agent, ε)
        with its interval calibrated on the bench's errors, the verdicts on every pair of points
        (``better`` None: cannot tell, with the ``live_episodes`` per point that would likely decide
        it), and the estimators not eligible here with why. With live episodes (``live=K`` or
        ``live_logs``) they are folded in under the same calibration; ``live_alone``: the same live
        episodes read with no offline estimate, the row to compare the combination with."""
        import pandas as pd

        reading, curves = self._recommendation(alpha, live_alone)
        rows = [{"agent": agent, "epsilon": epsilon, "value": reading.values[label], "lower": reading.low[label],
                 "upper": reading.high[label]}
                for agent, epsilon in zip(curves["policy"], curves["epsilon"])
                for label in [point_key(agent, epsilon)] if label in reading.values]
        frame = pd.DataFrame(rows, columns=["agent", "epsilon", "value", "lower", "upper"])
        return Recommended(reading.source, frame.set_index(["agent", "epsilon"]), verdict_frame(reading.verdicts),
                           dict(reading.excluded), "\n".join(reading.lines()))

    def _recommendation(self, alpha: float | None = None, live_alone: bool = False) -> tuple[Recommendation, dict]:
        """The report's recommended reading, with the live episodes folded in where given (``live_alone``:
        read alone), and the report's curves."""
        with fsspec.open(f"{self.run(alpha)}/{pipeline.stage('report').outputs['curves']}") as f:
            curves = json.load(f)
        if live_alone and not self._live_asked:
            raise ValueError("live_alone reads live episodes: give live=K or live_logs to OffPolicyEvaluation first")
        reading = (recommended_with_live(curves["recommended"], self.config, self._live, live_alone) if self._live_asked
                   else Recommendation.from_record(curves["recommended"]))
        return reading, curves

    def estimate_policy_values(self):
        """Ĵ of every (agent, ε): a DataFrame indexed by agent and ε, a column per estimator."""
        import pandas as pd

        frame = pd.DataFrame(self._rows()).rename(columns={"policy": "agent"})
        return frame.pivot(index=["agent", "epsilon"], columns="estimator", values="value")

    def estimate_intervals(self, alpha: float = 0.05, ci: str = "bootstrap"):
        """Ĵ with its 1 − ``alpha`` interval, a row per (agent, ε, estimator): ``ci`` is the
        percentile bootstrap (every estimator; ADWM's over imagined rollouts) or, for the classical
        estimators, ``hoeffding``, ``bernstein`` or ``t`` over the trajectories' contributions
        (ope/statistics/intervals.py). An ``alpha`` other than the config's recomputes the estimator stages
        only; the world model is reused."""
        import pandas as pd

        if not 0 < alpha < 1:
            raise ValueError(f"alpha={alpha}: the interval's level is 1 − alpha, so 0 < alpha < 1")
        rows = self._rows(alpha, ci)
        return pd.DataFrame([{"agent": r["policy"], "epsilon": r["epsilon"], "estimator": r["estimator"],
                              "value": r["value"], "lower": r["ci_low"], "upper": r["ci_high"]} for r in rows])

    def true_values(self) -> dict[tuple[str, float], float]:
        """J of every (agent, ε) from the cell's ground-truth stage (``settings={"ground_truth.episodes":
        N}`` plays each agent N episodes per ε in the environment); empty without one."""
        if self.config.ground_truth is None:
            return {}
        self.run()
        truth = {}
        for policy in self.config.evaluation.policies:
            summary = read_table(pipeline.finished(self.config, "ground-truth", policy).file("summary"), GROUND_TRUTH)
            truth.update({(row["policy"], row["epsilon"]): row["mean_return"] for row in summary.to_pylist()})
        return truth

    def select_best(self, *, epsilon: float | None = None, true_values: Mapping | None = None, top_k: int = 3,
                    alpha: float = 0.05) -> Selection:
        """The agents at ``epsilon`` (None: the lowest ε, the agents themselves at ε = 0) ranked by
        the recommended estimate, with its verdict on every pair of them and the agent those
        verdicts name best (``recommended``, with the live episodes where given); beside it, as
        instruments, ADWM's Ĵ over every seed's rollouts, the paired interval on each difference
        and the log alone's bounds (adwm_core/ranking.py); and, where the true values are known —
        ``true_values`` as {agent: J} (at that ε) or {(agent, ε): J}, else the cell's ground truth —
        each estimator's Spearman ρ, regret@1, regret@``top_k`` and NMAE over the (agent, ε)
        candidates that have a true value."""
        import pandas as pd

        epsilon = min(self.config.evaluation.epsilons) if epsilon is None else epsilon
        ranked, comparisons = rank_agents(self._rollouts(), epsilon=epsilon, confidence=1 - alpha,
                                          n_resamples=self.config.adwm.n_bootstrap,
                                          printed=PrintedInterval.of(self._answers()))
        reading, _ = self._recommendation(alpha)
        agent_at = {point_key(a.policy, epsilon): a.policy for a in ranked}
        ranking = pd.DataFrame([{"agent": a.policy, "value": reading.values.get(label, math.nan),
                                 "lower": reading.low.get(label, math.nan), "upper": reading.high.get(label, math.nan),
                                 "adwm": a.value, "adwm_lower": a.ci_low, "adwm_upper": a.ci_high,
                                 "log_lower": a.bounds_low, "log_upper": a.bounds_high}
                                for label, a in zip(agent_at, ranked)])
        ranking = ranking.sort_values(["value", "adwm"], ascending=False, na_position="last", kind="stable")
        said = [replace(v, a=agent_at[v.a], b=agent_at[v.b]) for v in reading.verdicts
                if v.a in agent_at and v.b in agent_at]
        instruments = pd.DataFrame([{**c.verdict.row(), "log_alone_better": c.log_alone.better} for c in comparisons],
                                   columns=[*COLUMNS[:-1], "log_alone_better"])  # a paired interval reckons no episodes
        truth = self.true_values() if true_values is None else {
            key if isinstance(key, tuple) else (key, epsilon): float(value) for key, value in true_values.items()}
        metrics = pd.DataFrame(_ranking_metrics(self._rows(alpha), truth, top_k)) if truth else None
        return Selection(winner(agent_at.values(), said), ranking.reset_index(drop=True), verdict_frame(said),
                         instruments, metrics, reading.source)

    def cannot_tell(self, epsilon: float | None = None) -> dict[str, dict]:
        """What the log cannot tell about each agent at ``epsilon`` (None: the lowest ε): its imagined
        steps, the share each source answered (``shares``: log, carried, value, diffusion,
        nearest) and the actions it took where the log never took them (``unseen_actions``, by
        share of steps)."""
        epsilon = min(self.config.evaluation.epsilons) if epsilon is None else epsilon
        return {answers["policy"]: answers["by_epsilon"][f"{epsilon:g}"] for answers in self._answers()}

    def _answers(self) -> list[dict]:
        """Each agent's ADWM stage ``answers``: what answered its imagined steps, and the
        calibrated interval's error range or the refits where they were made."""
        found = []
        for policy in self.config.evaluation.policies:
            with fsspec.open(pipeline.finished(self.config, "adwm", policy).file("answers")) as f:
                found.append(json.load(f))
        return found

    def _rollouts(self) -> list[dict]:
        """ADWM's rollouts of every agent (the report's ``rollouts`` table)."""
        return read_table(f"{self.run()}/{pipeline.stage('report').outputs['rollouts']}", ROLLOUTS).to_pylist()

    def live_top_up(self) -> LiveTopUp:
        """ADWM topped up by the live episodes (``live=K`` played per point in the environment, or
        ``live_logs``): per (agent, ε) the prediction-powered value and interval beside the live
        episodes' own and ADWM's, and the verdicts on the agents at the lowest ε recomputed from them."""
        import pandas as pd

        if not self._live_asked:
            raise ValueError("no live episodes: pass live=K (played here) or live_logs=FILE to OffPolicyEvaluation")
        self.run()
        topped = live_top_up(self.config, self._live)
        estimates = pd.DataFrame([{"agent": t.point[0], "epsilon": t.point[1], "adwm": t.adwm, "k": t.topped.k,
                                   "live": t.live.value, "live_lower": t.live.low, "live_upper": t.live.high,
                                   "value": t.topped.value, "lower": t.topped.low, "upper": t.topped.high,
                                   "power": t.topped.power, "matched": t.topped.matched, "narrower": t.narrower}
                                  for t in topped])
        lowest = min(t.point[1] for t in topped)
        said = topped_up_verdicts([t for t in topped if t.point[1] == lowest], confidence=self.config.adwm.confidence)
        return LiveTopUp(estimates, verdict_frame(said))

    def log_samples(self, path: str) -> int:
        """ADWM's imagined episodes of every agent, ε and seed as JSONL at ``path`` (the logs' import
        format, with each step's imagined reward and what answered it); returns how many."""
        self.run()
        return write_samples(self.config, path)


def _checked_estimators(names: Sequence[str]) -> tuple[str, ...]:
    known = (*WORLD_MODELS, *CLASSICAL)
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"estimators {list(names)}: {'unknown ' + str(unknown) if unknown else 'none named'}; "
                         f"choose among {', '.join(known)}")
    return tuple(names)


def _estimator_settings(estimators: tuple[str, ...] | None) -> dict:
    """The cell settings that compute just ``estimators``: kNN-WM is ADWM's reference rollout;
    the baselines stage runs the classical ones named (DM alone, the cheapest, where none is:
    the report reads that stage)."""
    if estimators is None:
        return {}
    classical = [n for n in estimators if n in CLASSICAL]
    return {"adwm.reference": KNN_WM in estimators, "baselines.estimators": classical or ["DM"]}


def _selected(row_estimator: str, estimators: tuple[str, ...] | None) -> bool:
    """Whether a row's estimator (``ADWM:reward_sum``, ``WIS:clipped``, ``FQE``) is one of ``estimators``."""
    return estimators is None or row_estimator.split(":")[0] in estimators


def _ranking_metrics(rows: list[dict], truth: Mapping[tuple[str, float], float], top_k: int) -> list[dict]:
    """ρ (by each Ĵ's order, ``SignedLog.order_key``), regret@1, regret@k and NMAE per estimator
    over the points with a true value."""
    by_estimator: dict[str, list[dict]] = {}
    for row in rows:
        if (row["policy"], row["epsilon"]) in truth:
            by_estimator.setdefault(row["estimator"], []).append(row)
    if not by_estimator:
        raise ValueError(f"no estimate at the points of the true values {sorted(truth)}: name them as (agent, ε) "
                         "with the agents' labels and the run's ε levels")
    metrics = []
    for name, points in sorted(by_estimator.items()):
        order = [SignedLog(r["log_abs_value"], r["sign"]).order_key for r in points]
        values = [r["value"] for r in points]
        truths = [truth[r["policy"], r["epsilon"]] for r in points]
        k = min(top_k, len(points))
        metrics.append({"estimator": name, "rho": spearman(order, truths), "regret_at_1": regret_at_k(order, truths, 1),
                        f"regret_at_{top_k}": regret_at_k(order, truths, k),
                        "nmae": normalised_absolute_error(values, truths) if np.isfinite(values).all() else math.inf,
                        "n_points": len(points)})
    return metrics
