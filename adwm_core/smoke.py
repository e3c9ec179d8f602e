"""Smoke mode: any cell, seed cells included, run end to end on a small CPU machine in minutes.

A smoke run is the cell's own config with an overlay, nothing else: every model is mapped to
a stand-in (SmolLM2-135M-Instruct from the offline wheel, or a model folder the user names)
on the cell's own backend (transformers for an endpoint's), its prompts cut to 1,024 tokens;
the GPU requirement is dropped (training takes a GPU where there is one, else the CPU);
counts (episodes, training steps, rollouts, seeds) are scaled down by :data:`SMOKE_SETTINGS`;
and a data variable the cell reads (``${WEBSHOP_DATA}`` …) that is unset is given files in
the environment's official format, written from the offline sources shipped with ADWM
(``TextEnv.write_offline_data``), so the official loaders run. The cell is renamed
``<name>-smoke``: its artifacts, MLflow experiment and report can never be taken for a real
run's. Everything else — the chat template, the backend, the pool, the π_e family, the ε
levels, the horizon — is the cell's, which is what a smoke run exists to exercise.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib.metadata import version
from typing import Any

import yaml

from .cell import VARIABLE, CellConfig, CellConfigError, assign
from .envs.registry import env_factory
from .paths import local_cache_dir, write_whole
from .specs import REMOTE_BACKENDS

SMOKE_SUFFIX = "-smoke"
# dotted key → value in a smoke run (minutes on two cores, every stage still doing its work)
SMOKE_SETTINGS: dict[str, Any] = {
    "needs_gpu": False,
    "behaviour.episodes": 8,
    "ground_truth.episodes": 2,
    "world_model.steps": 100,
    "world_model.device": "auto",  # a GPU where there is one, else the CPU
    "psi.epochs": 1,
    "psi.device": "auto",
    "adwm.n_rollouts": 2,
    "adwm.seeds": [0],
    "adwm.n_bootstrap": 200,
    "baselines.seeds": [0],
    "baselines.n_bootstrap": 200,
    "baselines.fqe.epochs": 2,
}
# backend options every stand-in gets: on two cores a forward pass over 1,500 prompt tokens of a
# 135M model takes seconds, so prompts are cut to 1,024 tokens (the context-limit path still runs);
# on a GPU worker a vLLM stand-in takes a tenth of the card, so the smoke suite's cells fit side by side
STAND_IN_OPTIONS = {"max_context": 1024}
VLLM_STAND_IN_OPTIONS = {**STAND_IN_OPTIONS, "gpu_memory_utilization": 0.1}


def smoke_cell(path: str, stand_in: str, *, environ: Mapping[str, str] = os.environ,
               data_root: str | None = None) -> tuple[CellConfig, dict[str, Any]]:
    """The cell of YAML ``path`` in smoke mode, and the overlay applied (what a run prints and
    logs): ``{"stand_in": …, "models": {field: original}, "data": {VAR: folder}, "settings": {…}}``.
    ``stand_in``: the model folder every policy is mapped to. Data is written under
    ``data_root`` (default: the local cache, ``smoke-data/v<version>/<env>``)."""
    with open(path) as f:
        raw = yaml.safe_load(f)
    if not isinstance(raw, dict) or not isinstance(raw.get("env"), dict):
        CellConfig.load(path, environ=environ)  # names what is wrong
        raise CellConfigError(f"{path}: a cell needs an env section")
    if str(raw.get("name", "")).endswith(SMOKE_SUFFIX):
        raise CellConfigError(f"{path}: cell {raw['name']} is already a smoke cell")
    overlay: dict[str, Any] = {"stand_in": stand_in, "models": {}, "data": {}, "settings": dict(SMOKE_SETTINGS),
                               "stand_in_options": {"*": STAND_IN_OPTIONS, "vllm": VLLM_STAND_IN_OPTIONS}}
    raw = {**raw, "name": f"{raw.get('name')}{SMOKE_SUFFIX}", "local_policies": None}
    for section, key in (("behaviour", "pool"), ("evaluation", "policies")):
        policies = (raw.get(section) or {}).get(key) or []
        for i, policy in enumerate(policies):
            if isinstance(policy, dict) and "model" in policy:
                overlay["models"][f"{section}.{key}[{i}]"] = policy["model"]
        raw[section] = {**raw.get(section, {}), key: [_stand_in(p, stand_in) for p in policies]}
    environ = dict(environ)
    options = dict(raw["env"].get("options") or {})
    for value in options.values():
        unset = VARIABLE.fullmatch(value) if isinstance(value, str) else None
        if unset and unset.group(1) not in environ:
            folder = offline_data(raw["env"].get("name"), data_root)
            if folder is not None:
                environ[unset.group(1)] = overlay["data"][unset.group(1)] = folder
    for dotted, value in SMOKE_SETTINGS.items():
        section = dotted.split(".")[0]  # an optional section the cell leaves out or nulls (no ground truth) stays so
        if raw.get(section) is not None or CellConfig.model_fields[section].default is not None:
            assign(raw, dotted, value)
    if raw["behaviour"].get("logs") is not None:  # imported logs: no episodes to collect
        raw["behaviour"].pop("episodes")
    raw.setdefault("world_model", {}).pop("epochs", None)  # the smoke budget is in steps
    return CellConfig.from_mapping(raw, source=f"{path} (smoke overlay)", environ=environ), overlay


def _stand_in(policy: Any, stand_in: str) -> Any:
    """A policy entry of the cell's YAML with its model replaced by ``stand_in``: on its own
    backend, unless that reaches a remote endpoint (then on transformers, its endpoint options
    dropped)."""
    if not isinstance(policy, dict):
        return policy  # the loader names what is wrong
    if policy.get("backend") in REMOTE_BACKENDS:
        return {**policy, "model": stand_in, "backend": "transformers", "options": dict(STAND_IN_OPTIONS)}
    extra = VLLM_STAND_IN_OPTIONS if policy.get("backend") == "vllm" else STAND_IN_OPTIONS
    return {**policy, "model": stand_in, "options": {**(policy.get("options") or {}), **extra}}


def offline_data(env_name: Any, data_root: str | None = None) -> str | None:
    """The folder of ``env_name``'s official-format files written from offline sources, written
    once and whole (concurrent runs never read half a folder); None when the environment reads
    no data files."""
    if not isinstance(env_name, str):
        return None
    try:
        environment = env_factory(env_name)
    except KeyError:
        return None  # the cell's validation names the unknown environment
    write = getattr(environment, "write_offline_data", None)  # a registered factory may declare none
    if write is None:
        return None
    # per library version: a changed generator writes its data afresh
    return write_whole(os.path.join(data_root or local_cache_dir("smoke-data", f"v{version('adwm')}"), env_name),
                       write)
