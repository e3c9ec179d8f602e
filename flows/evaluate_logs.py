"""evaluate-logs: the user's own behaviour logs and agents, scored without a cell file — the logs
are imported, the world model trained on them (or reused: same logs, same settings), and each
agent's Ĵ over its ε family estimated by ADWM and every estimator the logs can feed. The same
run as ``adwm evaluate`` on the command line (flows/cli.py). Several agents share one import
and one world model."""

from __future__ import annotations

from prefect import flow

from adwm_core.api import evaluation_cell, evaluation_line, write_outputs
from adwm_core.specs import LogSource
from flows.ope_cell import run_cell
from flows.runners import cell_task_runner


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
    print(evaluation_line(config, logs, limit, overrides))
    folder = run_cell(config)
    write_outputs(config, folder, output_path, log_samples)
    return folder
