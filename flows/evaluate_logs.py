"""evaluate-logs: the user's own behaviour logs and agent, scored without a cell file — the logs
are imported, the world model trained on them (or reused: same logs, same settings), and the
agent's Ĵ over its ε family estimated by ADWM and every estimator the logs can feed. The same
run as ``adwm evaluate`` on the command line (flows/cli.py)."""

from __future__ import annotations

import os

from prefect import flow

from adwm_core.cell import CellConfig
from adwm_core.specs import EPSILONS, LogSource, PolicySpec
from flows.ope_cell import run_cell
from flows.runners import cell_task_runner


def agent_spec(model: str, base_url: str | None = None, *, backend: str | None = None, tokenizer: str | None = None,
               mode: str = "completions", concurrency: int = 8, label: str | None = None,
               variant: str = "p0") -> PolicySpec:
    """π_e: a model at an OpenAI-compatible endpoint (``base_url``), else a Hugging Face folder
    loaded in-process (``backend``: transformers or vllm); labelled after the model's name."""
    label = label or os.path.basename(model.rstrip("/"))
    if base_url is None:
        return PolicySpec(label, model, backend or "transformers", variant)
    options = {"base_url": base_url, "mode": mode, "concurrency": concurrency}
    if tokenizer is not None:
        options["tokenizer"] = tokenizer
    return PolicySpec(label, model, "openai", variant, options)


def logs_cell(logs: str, env: str, agent: PolicySpec, *, logs_format: str | None = None, preamble_turns: int = 0,
              task: str = "*", name: str | None = None, epsilons: list[float] | None = None,
              overrides: dict | None = None) -> CellConfig:
    return CellConfig.for_logs(LogSource(logs, logs_format, preamble_turns=preamble_turns), env, agent, name=name,
                               task=task,
                               epsilons=tuple(epsilons or EPSILONS), overrides=overrides)


@flow(name="evaluate-logs", log_prints=True, task_runner=cell_task_runner())
def evaluate_logs(logs: str, env: str, agent_model: str, agent_base_url: str | None = None,
                  agent_backend: str | None = None, agent_tokenizer: str | None = None, agent_mode: str = "completions",
                  logs_format: str | None = None, preamble_turns: int = 0, task: str = "*", name: str | None = None,
                  epsilons: list[float] | None = None, overrides: dict | None = None) -> str:
    """Ĵ of ``agent_model`` (at ``agent_base_url``, or a local folder) from the behaviour logs
    ``logs`` of environment ``env``; returns the report's folder."""
    agent = agent_spec(agent_model, agent_base_url, backend=agent_backend, tokenizer=agent_tokenizer, mode=agent_mode)
    config = logs_cell(logs, env, agent, logs_format=logs_format, preamble_turns=preamble_turns, task=task, name=name,
                       epsilons=epsilons, overrides=overrides)
    print(f"cell {config.name}: logs {logs}, environment {env}, agent {agent.model} ({agent.backend}); "
          f"settings overridden: {overrides or 'none'}")
    return run_cell(config)
