"""The stages of a cell, declared once: name, settings slice, input stages, output files, the
function that computes them (``compute(run)`` in ``adwm_core/stages/``) and the key that names
what computed them. Everything that runs or reads a stage — the Prefect tasks, evaluate-policy,
``adwm evaluate``, the benches — goes through :func:`run`, :func:`locate` and :func:`finished`.

What a stage's key hashes (and the one rule of what stays out):

- the stage's name and its settings slice, where a policy is its identity, not its location:
  ``local:<checkpoint>`` by the key of the policies artifact that holds it; a model folder (or
  any file or folder a setting names: a data set, a log file) by its name and content
  (:func:`~adwm_core.fingerprints.content_fingerprint`); a hub model by its name and the
  revision this machine's Hugging Face cache holds, read once per process (so a model the run
  itself downloads keeps the key it started with); an endpoint model by its name and URL;
- the keys of its input stages;
- what computes it: for an estimator stage (ADWM, the baselines, the report: minutes to
  recompute), :func:`~adwm_core.fingerprints.code_fingerprint` of its module (and, where it runs
  the environment or prompts an LLM in it, of its cell's environment module where that is part
  of ``adwm_core``); for an upstream stage (policies, behaviour, ground truth, log-probs, greedy
  actions, world model, ψ: hours to rebuild, kept in ``bench/store``), the declared
  ``Stage.version`` of what its outputs mean instead, so a refactor that moves no value costs no
  rebuild — bumped where a change moves them; ``python -m bench.versions confirm`` recomputes a
  small cell's upstream against the store before its code is confirmed at the version
  (:func:`stage_code`); with, for a stage that runs the environment, the package's environment
  data files.

Left out of keys, because they say where or how fast a stage runs, not what it computes:
the device (``device`` fields and options), a policy's GPU share, request concurrency,
timeouts, retries and credentials (:data:`~adwm_core.specs.UNKEYED_OPTIONS`), progress
reporting, the artifact root and the versions of third-party packages. (The Python version is
in, through the syntax trees the code fingerprint hashes.)

A stage's artifacts go to ``$ADWM_HOME/cells/<cell>/<stage>/<key[:16]>/``; a ``_COMPLETE``
marker is written after ``compute`` returned. A run that finds the marker reuses the folder;
one that finds another process computing the same key (a file lock under
``$ADWM_HOME/locks``, released by the kernel if that process dies) waits, then reuses it; a
killed run's leftovers are removed before computing again, except the finished units a stage
kept under ``_units/`` (``StageRun.units``; the ADWM stage: one per estimator, world model and
seed), which the new run reads instead of computing them again. On an fsspec URL root (``s3://…``)
no lock holds: two runs reaching one stage at once both compute it, and the second to finish
overwrites the first's files with its own (same key, same settings) — the deployments' per-cell
concurrency limit keeps two runs of one cell apart (prefect.yaml).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import posixpath
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from types import ModuleType
from typing import Any

import fsspec
from filelock import FileLock, Timeout
from pydantic import BaseModel

from .cell import LOCAL_PREFIX, CellConfig
from .policies.local_models import OFFLINE_PREFIX
from .envs.registry import env_module
from .fingerprints import code_fingerprint, content_fingerprint, module_file
from .paths import artifact_path
from .specs import REMOTE_BACKENDS, UNKEYED_OPTIONS, PolicySpec, Progress

MARKER = "_COMPLETE"
UNITS = "_units"  # StageRun.units: finished units of a stage's work, kept across a kill
ENVIRONMENT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "envs", "data")  # read by the adapters
UNKEYED_SETTINGS = frozenset({"device"})  # fields of any settings section left out of keys
# A flow runs independent stages on threads (the thread pool, Dask's workers), and a stage's module
# imports transformers; transformers' lazy top-level module is not thread-safe while it initialises,
# so two first imports at once fail ("cannot import name 'GPT2Config' from 'transformers'"). Every
# orchestrator reaches a stage's module through Stage.load, which imports under this one lock.
_IMPORTING = threading.Lock()


@dataclass(frozen=True)
class Artifact:
    """A stage's output folder, the key that names it and its files by role."""

    path: str
    key: str
    files: Mapping[str, str] = field(default_factory=dict)

    def file(self, role: str) -> str:
        """The path of the output ``role`` (e.g. ``"trajectories"``)."""
        if role not in self.files:
            raise KeyError(f"{self.path} has no output {role!r}; it has {sorted(self.files)}")
        return f"{self.path}/{self.files[role]}"


class Tracker:
    """What a stage reports while it computes; this one keeps nothing (tasks/ sends it to MLflow
    and Prefect)."""

    def metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        """Numbers of the stage (per ``step``: a training round)."""

    def keep(self, local_path: str, name: str | None = None) -> None:
        """A local file or folder worth keeping with the stage's tracked run."""

    @contextlib.contextmanager
    def progress(self, what: str) -> Iterator[Progress | None]:
        """``update(done, total)`` for a long loop over ``what``, or None."""
        yield None


@dataclass(frozen=True)
class StageRun:
    """What ``compute`` gets: the cell, its π_e (per-π_e stages), the folder to fill, the
    finished input artifacts by stage name (one per π_e for a cell-wide stage reading a per-π_e
    one) and a tracker."""

    cell: CellConfig
    policy: PolicySpec | None
    artifact: Artifact
    inputs: Mapping[str, tuple[Artifact, ...]]
    tracker: Tracker = Tracker()

    def output(self, role: str) -> str:
        return self.artifact.file(role)

    @property
    def units(self) -> str:
        """Where the stage may keep finished units of its work: the one part of a killed run's
        folder that is kept, so the next run resumes from them; removed once the stage finished."""
        return f"{self.artifact.path}/{UNITS}"

    def input(self, stage: str, role: str) -> str:
        """The file ``role`` of the one artifact of input ``stage``."""
        (artifact,) = self.inputs[stage]
        return artifact.file(role)

    def each_input(self, stage: str, role: str) -> list[str]:
        """The file ``role`` of every artifact of input ``stage`` (one per π_e)."""
        return [artifact.file(role) for artifact in self.inputs.get(stage, ())]

    def resolved(self, spec: PolicySpec) -> PolicySpec:
        """``spec`` with a ``local:<checkpoint>`` model replaced by its folder in the policies artifact
        (an input where the stage's settings name the family; else a pool model the stage reads
        through another input's data, e.g. log-probs re-scoring the behaviour pool)."""
        if "policies" in self.inputs:
            return _in_family(spec, lambda: self.input("policies", "family"))
        return resolved(self.cell, spec)


def _in_family(spec: PolicySpec, family: Callable[[], str]) -> PolicySpec:
    if not spec.model.startswith(LOCAL_PREFIX):
        return spec
    return spec.replace(model=f"{family()}/{spec.model[len(LOCAL_PREFIX):]}")


@dataclass(frozen=True)
class Stage:
    """One stage of a cell (see the module docstring). ``settings(cell)`` — or
    ``settings(cell, policy)`` for a per-π_e stage — is the slice of the cell its key hashes;
    ``inputs(cell)`` the stages it reads; ``module`` holds its ``compute(run: StageRun)``;
    ``environment``: it runs the cell's environment or prompts an LLM in it; ``gpu`` and
    ``retries`` tell the orchestrator where to run it and how often to retry it; ``version``
    (upstream stages): what its outputs mean, which its key reads in place of its code."""

    name: str
    settings: Callable[..., Any]
    outputs: Mapping[str, str]
    module: str
    inputs: Callable[[CellConfig], tuple[str, ...]] = lambda cell: ()
    per_policy: bool = False
    environment: bool = False
    gpu: bool = False
    retries: int = 0
    version: int | None = None

    def run_name(self, label: str | None = None) -> str:
        """The stage's tracked run: ``"<name> [<π_e label>]"`` per π_e."""
        return self.name if label is None else f"{self.name} [{label}]"

    def load(self) -> ModuleType:
        """The stage's module, imported under the process's one import lock (see ``_IMPORTING``)."""
        with _IMPORTING:
            return import_module(self.module)

    def compute(self, run: StageRun) -> None:
        self.load().compute(run)

    def check(self, run: StageRun) -> None:
        """The module's ``check(run)``, where it has one: refuses inputs it cannot use before
        any folder is made."""
        check = getattr(self.load(), "check", None)
        if check is not None:
            check(run)


def _evaluation(cell: CellConfig, policy: PolicySpec) -> dict:
    """The settings a per-π_e stage depends on: that policy and the ε levels (not the other π_e)."""
    return {"policy": policy, "epsilons": cell.evaluation.epsilons}


def _behaviour(cell: CellConfig) -> dict:
    section: dict[str, Any] = {"env": cell.env, "behaviour": cell.behaviour}
    if cell.behaviour.logs is not None:  # imported logs: keyed by their content and the code that reads them
        from .data.logs import fingerprint

        section["logs_sha256"] = fingerprint(cell.behaviour.logs)
        section["reader"] = code_fingerprint("adwm_core.data.logs")
    return section


def _bench_calibration() -> str | None:
    """The shipped bench's errors, which the report's recommended estimate reads, by content."""
    from .fingerprints import content_fingerprint
    from .ope.statistics.recommend import SHIPPED

    return content_fingerprint(SHIPPED) if os.path.exists(SHIPPED) else None


def _maybe(condition: bool, *names: str) -> tuple[str, ...]:
    return names if condition else ()


STAGES: dict[str, Stage] = {stage.name: stage for stage in (
    Stage("policies", lambda cell: {"env": cell.env, "local_policies": cell.local_policies},
          {"family": "family"}, "adwm_core.stages.policies", environment=True, version=1),
    Stage("behaviour", _behaviour, {"trajectories": "trajectories.parquet"}, "adwm_core.stages.behaviour",
          environment=True, retries=2, version=1),
    Stage("ground-truth", lambda cell, policy: {"env": cell.env, "evaluation": _evaluation(cell, policy),
                                                "ground_truth": cell.ground_truth},
          {"episodes": "episodes.parquet", "summary": "summary.parquet"}, "adwm_core.stages.ground_truth",
          per_policy=True, environment=True, retries=2, version=1),
    Stage("logprobs", lambda cell, policy: {"evaluation": _evaluation(cell, policy)},
          {"logprobs": "logprobs.parquet"}, "adwm_core.stages.logprobs", inputs=lambda cell: ("behaviour",),
          per_policy=True, environment=True, gpu=True, retries=1, version=1),
    Stage("greedy", lambda cell, policy: {"evaluation": _evaluation(cell, policy)},
          {"actions": "greedy_actions.parquet"}, "adwm_core.stages.greedy", inputs=lambda cell: ("behaviour",),
          per_policy=True, environment=True, gpu=True, retries=1, version=1),
    Stage("world-model", lambda cell: cell.world_model, {"members": "members"}, "adwm_core.stages.world_model",
          inputs=lambda cell: ("behaviour",), gpu=True, version=1),
    Stage("psi", lambda cell, policy: {"psi": cell.psi, "policy": policy}, {"adapter": "adapter"},
          "adwm_core.stages.psi", inputs=lambda cell: ("behaviour", "world-model"), per_policy=True,
          environment=True, gpu=True, version=1),
    Stage("adwm", lambda cell, policy: {"adwm": cell.adwm, "evaluation": _evaluation(cell, policy),
                                        **({"fqe": cell.handover_fqe} if cell.adwm.hands_over_to_fqe else {})},
          {"estimates": "estimates.parquet", "timings": "timings.json", "samples": "samples.jsonl",
           "rollouts": "rollouts.parquet", "answers": "answers.json"},
          "adwm_core.stages.adwm",
          inputs=lambda cell: ("behaviour", "world-model", *_maybe(cell.adwm.reading == "soft_tokens", "psi"),
                               *_maybe(cell.adwm.hands_over_to_fqe, cell.adwm.handover_actions)),
          per_policy=True, environment=True, gpu=True),
    Stage("baselines", lambda cell, policy: {"baselines": cell.baselines, "policy": policy.name},
          {"estimates": "estimates.parquet", "not_applicable": "not_applicable.json"}, "adwm_core.stages.baselines",
          inputs=lambda cell: ("behaviour", "logprobs", "world-model"), per_policy=True),
    Stage("report", lambda cell: {"cell": cell.name, "bench": _bench_calibration()},
          {"report": "report.md", "results": "results.json", "curves": "curves.json",
           "plot": "estimates_vs_truth.png", "estimates": "estimates.parquet", "rollouts": "rollouts.parquet"},
          "adwm_core.stages.report",
          inputs=lambda cell: (*_maybe(cell.ground_truth is not None, "ground-truth"), "behaviour", "adwm", "baselines")),
)}


def stage(name: str) -> Stage:
    if name not in STAGES:
        raise KeyError(f"no stage {name!r}; the stages are {list(STAGES)}")
    return STAGES[name]


# ------------------------------------------------------------------------------------------ plan

@dataclass(frozen=True)
class Step:
    """Stage ``name`` of a plan, for π_e ``policy`` (None: cell-wide), once the steps ``after``
    (by :attr:`index`) finished."""

    name: str
    policy: PolicySpec | None
    after: tuple[tuple[str, str | None], ...]

    @property
    def index(self) -> tuple[str, str | None]:
        return _index(self.name, self.policy)


def _index(name: str, policy: PolicySpec | None) -> tuple[str, str | None]:
    return name, None if policy is None else policy.name


def _instances(cell: CellConfig, name: str, policy: PolicySpec | None = None) -> list[PolicySpec | None]:
    """The π_e a stage runs for: ``policy`` where given, every π_e of the cell, or None (cell-wide)."""
    if not stage(name).per_policy:
        return [None]
    return [policy] if policy is not None else list(cell.evaluation.policies)


def plan(cell: CellConfig, targets: Sequence[str] | None = None, given: Sequence[str] = ()) -> list[Step]:
    """The stages to run for ``targets`` of ``cell`` (default: its report), inputs first, each
    after exactly the stages its key reads (:func:`stage_key`): ψ only where π_e reads soft tokens,
    the log-prob or greedy-action stage only where it is read, ground truth only where the cell
    is graded, the policies only where a stage runs a model of the cell's family. ``given``:
    stages the caller holds finished (evaluate-policy's behaviour and world model), left out with
    what only they read. The one DAG every runner walks: the flows, :func:`run_all`, the benches."""
    memo: dict = {}
    steps: dict[tuple[str, str | None], Step] = {}

    def visit(name: str, policy: PolicySpec | None) -> tuple[str, str | None]:
        index = _index(name, policy)
        if index not in steps:
            inputs = stage_key(cell, name, policy, memo)[1]
            after = tuple(visit(upstream, p) for upstream in inputs if upstream not in given
                          for p in _instances(cell, upstream, policy))
            steps[index] = Step(name, policy, after)
        return index

    for name in targets or ("report",):
        for policy in _instances(cell, name):
            visit(name, policy)
    order, policies = list(STAGES), [p.name for p in cell.evaluation.policies]
    return sorted(steps.values(),
                  key=lambda s: (order.index(s.name), -1 if s.policy is None else policies.index(s.policy.name)))


# ------------------------------------------------------------------------------------------ keys

def _check_policy(stage: Stage, policy: PolicySpec | None) -> None:
    if stage.per_policy != (policy is not None):
        raise TypeError(f"stage {stage.name!r} is {'' if stage.per_policy else 'not '}per π_e: "
                        f"{'pass' if stage.per_policy else 'do not pass'} a policy")


def _input_artifacts(cell: CellConfig, stage: Stage, policy: PolicySpec | None, uses_family: bool,
                     memo: dict) -> dict[str, tuple[Artifact, ...]]:
    names = stage.inputs(cell)
    if uses_family:
        names = ("policies", *names)
    inputs = {}
    for name in names:
        upstream = STAGES[name]
        if not upstream.per_policy:
            inputs[name] = (_located(cell, name, None, memo),)
        elif policy is not None:
            inputs[name] = (_located(cell, name, policy, memo),)
        else:
            inputs[name] = tuple(_located(cell, name, p, memo) for p in cell.evaluation.policies)
    return inputs


def _code_modules(cell: CellConfig, stage: Stage) -> tuple[str, ...]:
    """The stage's module, and its cell's environment module where the stage runs the environment
    (an environment registered from outside ``adwm_core`` is not fingerprinted)."""
    environment = env_module(cell.env.name) if stage.environment else None
    return (stage.module, *([environment] if environment and module_file(environment) else []))


def stage_code(cell: CellConfig, name: str) -> str:
    """The fingerprint of the code that computes stage ``name`` of ``cell``: an estimator stage's
    key reads it; an upstream stage's code is confirmed at its version (bench/store.py)."""
    return code_fingerprint(*_code_modules(cell, stage(name)))


def _model_identity(spec: PolicySpec, family: Callable[[], str]) -> dict:
    if spec.model.startswith(LOCAL_PREFIX):
        return {"family": family(), "checkpoint": spec.model[len(LOCAL_PREFIX):]}
    if spec.backend in REMOTE_BACKENDS:
        return {"name": spec.model, "endpoint": spec.options.get("base_url")}
    if spec.model.startswith(OFFLINE_PREFIX):  # the same weights on every machine: keyed by name
        return {"offline": spec.model}
    if os.path.exists(os.path.expanduser(spec.model)):  # a folder is loaded before a hub name of the same spelling
        return _path_identity(spec.model)
    if os.path.isabs(os.path.expanduser(spec.model)) or spec.model.startswith("."):
        return {"name": spec.model, "content": None}  # a folder not on this machine: nothing to key but its name
    return {"name": spec.model, "revision": _hub_revision(spec.model)}


def _names_local_path(value: str) -> bool:
    path = os.path.expanduser(value)
    return "://" not in value and (os.sep in path or path.startswith(".")) and os.path.exists(path)


@functools.lru_cache(maxsize=None)
def _hub_revision(name: str) -> str | None:
    """The commit of hub model ``name`` in this machine's Hugging Face cache (None where not cached)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, "config.json")
    except ValueError:  # not a valid hub name either
        return None
    return os.path.basename(os.path.dirname(found)) if isinstance(found, str) else None


def _path_identity(value: str) -> dict:
    return {"name": os.path.basename(os.path.normpath(os.path.expanduser(value))), "content": content_fingerprint(value)}


def _key_form(value: Any, family: Callable[[], str], uses_family: list[bool]) -> Any:
    """``value`` as a key hashes it (see the module docstring); ``uses_family`` is set where a
    ``local:`` model is met."""
    def form(item: Any) -> Any:
        return _key_form(item, family, uses_family)

    if isinstance(value, PolicySpec):
        uses_family[0] |= value.model.startswith(LOCAL_PREFIX)
        options = {k: v for k, v in value.options.items() if k not in UNKEYED_OPTIONS and k != "base_url"}
        return {"label": value.label, "backend": value.backend, "variant": value.variant, "options": form(options),
                "model": _model_identity(value, family)}
    if isinstance(value, BaseModel):
        return {name: form(getattr(value, name)) for name in type(value).model_fields
                if name not in UNKEYED_SETTINGS and getattr(value, name) is not None}
    if isinstance(value, Mapping):
        return {str(k): form(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [form(v) for v in value]
    if isinstance(value, str) and _names_local_path(value):
        return _path_identity(value)
    return value


def stage_key(cell: CellConfig, name: str, policy: PolicySpec | None = None,
              memo: dict | None = None) -> tuple[str, dict[str, tuple[Artifact, ...]]]:
    """The key of stage ``name`` of ``cell`` (for π_e ``policy``), and its input artifacts
    (``memo``: keys already computed in this call, by stage and π_e)."""
    stage_, memo = stage(name), {} if memo is None else memo
    _check_policy(stage_, policy)
    uses_family = [False]
    settings = stage_.settings(cell, policy) if stage_.per_policy else stage_.settings(cell)
    settings = _key_form(settings, lambda: _located(cell, "policies", None, memo).key, uses_family)
    inputs = _input_artifacts(cell, stage_, policy, uses_family[0], memo)
    code = stage_code(cell, name) if stage_.version is None else f"version {stage_.version}"
    if stage_.environment:
        code += content_fingerprint(ENVIRONMENT_DATA)
    payload = json.dumps({"stage": name, "settings": settings, "code": code,
                          "inputs": {k: [a.key for a in v] for k, v in inputs.items()}}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest(), inputs


def _located(cell: CellConfig, name: str, policy: PolicySpec | None, memo: dict) -> Artifact:
    index = (name, None if policy is None else policy.name)
    if index not in memo:
        memo[index] = _artifact(cell, name, stage_key(cell, name, policy, memo)[0])
    return memo[index]


def locate(cell: CellConfig, name: str, policy: PolicySpec | None = None) -> Artifact:
    """Where stage ``name``'s artifact for ``cell`` (and π_e ``policy``) lives, finished or not."""
    return _located(cell, name, policy, {})


def _artifact(cell: CellConfig, name: str, key: str) -> Artifact:
    return Artifact(artifact_path("cells", cell.name, name, key[:16]), key, dict(stage(name).outputs))


def is_finished(artifact: Artifact) -> bool:
    fs, root = fsspec.core.url_to_fs(artifact.path)
    return fs.exists(f"{root}/{MARKER}")


def finished(cell: CellConfig, name: str, policy: PolicySpec | None = None) -> Artifact:
    """The complete artifact of stage ``name`` for ``cell`` (and ``policy``), or an error saying
    which flow produces it."""
    artifact = locate(cell, name, policy)
    if not is_finished(artifact):
        raise FileNotFoundError(f"cell {cell.name} has no finished {name} stage for its current config and code "
                                f"(looked for {artifact.path}): run the cell first, `prefect deployment run "
                                f"ope-cell/{cell.name}` or `python -m flows.ope_cell {cell.name}` (or the "
                                "command that built this cell)")
    return artifact


def resolved(cell: CellConfig, spec: PolicySpec) -> PolicySpec:
    """``spec`` with a ``local:<checkpoint>`` model replaced by its folder in the cell's finished
    policies artifact (for work outside a stage: the benches)."""
    return _in_family(spec, lambda: finished(cell, "policies").file("family"))


# ------------------------------------------------------------------------------------------- run

@contextlib.contextmanager
def _claim(artifact: Artifact, log: Callable[[str], None]) -> Iterator[None]:
    """Hold the file lock of ``artifact`` (local roots; none on fsspec URLs, see the module docstring)."""
    if "://" in artifact.path:
        yield
        return
    parts = os.path.relpath(artifact.path, artifact_path()).split(os.sep)
    lock_file = artifact_path("locks", *parts[:-1], parts[-1] + ".lock")
    os.makedirs(os.path.dirname(lock_file), exist_ok=True)
    lock = FileLock(lock_file)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log(f"another run is computing {artifact.path}; waiting for it")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def run(cell: CellConfig, name: str, policy: PolicySpec | None = None, *, tracker: Tracker = Tracker(),
        log: Callable[[str], None] = print, on_start: Callable[[Artifact, bool], None] | None = None) -> Artifact:
    """Stage ``name`` of ``cell`` (for π_e ``policy``): its finished artifact, computed here unless
    complete already or computed meanwhile by another run. Every input must be finished.
    ``on_start(artifact, reused)`` is told, before any work, what happens."""
    key, inputs = stage_key(cell, name, policy)
    artifact = _artifact(cell, name, key)
    unfinished = [a.path for group in inputs.values() for a in group if not is_finished(a)]
    if unfinished:
        raise RuntimeError(f"stage {name} of {cell.name} reads unfinished artifacts {unfinished}: run its inputs first")
    if is_finished(artifact):
        return _reused(artifact, name, log, on_start)
    work = StageRun(cell, policy, artifact, inputs, tracker)
    stage(name).check(work)
    with _claim(artifact, log):
        if is_finished(artifact):  # computed by the run that held the lock
            return _reused(artifact, name, log, on_start)
        if on_start is not None:
            on_start(artifact, False)
        fs, root = fsspec.core.url_to_fs(artifact.path)
        if fs.exists(root):  # a killed run's leftovers, half-written files included: all but its finished units
            units = fs.ls(f"{root}/{UNITS}", detail=False) if fs.exists(f"{root}/{UNITS}") else []
            log(f"{name}: {artifact.path} was left unfinished; computing it again"
                + (f", resuming from {len(units)} finished unit(s)" if units else " from scratch"))
            for entry in fs.ls(root, detail=False):
                if posixpath.basename(entry.rstrip("/")) != UNITS:
                    fs.rm(entry, recursive=True)
        fs.makedirs(root, exist_ok=True)
        stage(name).compute(work)
        if fs.exists(f"{root}/{UNITS}"):
            fs.rm(f"{root}/{UNITS}", recursive=True)
        with fs.open(f"{root}/{MARKER}", "w") as f:
            f.write(artifact.key)
    return artifact


def _reused(artifact: Artifact, name: str, log: Callable[[str], None],
            on_start: Callable[[Artifact, bool], None] | None) -> Artifact:
    log(f"{name}: reusing {artifact.path} (same settings, inputs and code)")
    if on_start is not None:
        on_start(artifact, True)
    return artifact


def run_all(cell: CellConfig, targets: Sequence[str] | None = None, *, log: Callable[[str], None] = print,
            tracker: Tracker = Tracker()) -> Artifact:
    """Every step of :func:`plan` (``targets``, default the report), one after another in this
    process, without an orchestrator (the Python API, ``adwm evaluate`` without a Prefect server;
    the flow ope-cell runs the same plan, its independent branches concurrently): the last step's
    artifact. Each step is logged as it is reused or computed; ``tracker`` sees the stages' work."""
    for step in plan(cell, targets):
        def started(artifact: Artifact, reused: bool, name: str = step.name) -> None:
            if not reused:
                log(f"{name}: computing {artifact.path}")

        artifact = run(cell, step.name, step.policy, tracker=tracker, log=log, on_start=started)
    return artifact
