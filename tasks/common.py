"""What every stage task shares: content-addressed artifact folders and MLflow stage runs.

Each task module declares its stage once, as a :class:`Stage` (name, the slice of the cell
config it depends on, per π_e or not); flows, ``evaluate-policy`` and the benches find its
artifacts through that descriptor. A stage's key is the SHA-256 of its name, its config slice
(JSON), the keys of its input artifacts and the library version — never a live object. Its artifacts go to
``$ADWM_HOME/cells/<cell>/<stage>/<key[:16]>/`` and a ``_COMPLETE`` marker is written
only after the stage function returned, so a rerun with the same key skips the stage, a
killed stage leaves no folder that counts as finished (the rerun empties it first), and a
changed π_e reuses every stage that does not depend on it (the world model, for one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version

import fsspec
import mlflow
from prefect import get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from tqdm import tqdm

from adwm_core.paths import artifact_path
from adwm_core.specs import UNKEYED_OPTIONS, PolicySpec

MARKER = "_COMPLETE"
LIBRARY_VERSION = version("adwm")


@dataclass(frozen=True)
class Artifact:
    """A finished stage's output folder and the key that names it."""

    path: str
    key: str

    def file(self, name: str) -> str:
        return f"{self.path}/{name}"


def keyed(policy: PolicySpec) -> PolicySpec:
    """``policy`` as stage keys see it: what the model computes, not where it runs."""
    return dataclasses.replace(policy, options={k: v for k, v in policy.options.items() if k not in UNKEYED_OPTIONS})


def _plain(value):
    """JSON-ready form of configs: pydantic models, dataclasses, tuples, mappings."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, PolicySpec):
        return _plain(dataclasses.asdict(keyed(value)))
    if dataclasses.is_dataclass(value):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def stage_key(stage: str, config_slice, inputs: tuple[Artifact, ...] = ()) -> str:
    payload = json.dumps({"stage": stage, "config": _plain(config_slice), "inputs": [a.key for a in inputs],
                          "version": LIBRARY_VERSION}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _locate(cell: str, stage: str, config_slice, inputs: tuple[Artifact, ...] = ()) -> Artifact:
    """Where the stage's artifact with these settings and inputs lives, finished or not."""
    key = stage_key(stage, config_slice, inputs)
    return Artifact(artifact_path("cells", cell, stage, key[:16]), key)


def evaluation_slice(cell, policy) -> dict:
    """The settings a per-π_e stage depends on: that policy and the ε levels (not the other π_e)."""
    return {"policy": policy, "epsilons": cell.evaluation.epsilons}


def _run_stage(cell: str, stage: str, config_slice, inputs: tuple[Artifact, ...],
              build: Callable[[str], object], parent_run: str | None, policy: str | None = None) -> Artifact:
    """Run ``build(folder)`` into an empty folder unless the stage's artifact with this key is complete;
    the run is tracked as an MLflow run nested under ``parent_run`` (named after ``policy`` too
    for per-π_e stages)."""
    artifact = _locate(cell, stage, config_slice, inputs)
    fs, root = fsspec.core.url_to_fs(artifact.path)
    logger = get_run_logger()
    finished = fs.exists(f"{root}/{MARKER}")
    with stage_run(parent_run, stage if policy is None else f"{stage} [{policy}]"):
        if mlflow.active_run() is not None:
            mlflow.log_params({"stage_key": artifact.key[:16], "artifact": artifact.path, "reused": finished})
        if finished:
            logger.info("%s: reusing %s (same config, inputs and library version)", stage, artifact.path)
            return artifact
        if fs.exists(root):  # a killed run's leftovers, half-written files included
            logger.info("%s: %s was left unfinished; computing it again from scratch", stage, artifact.path)
            fs.rm(root, recursive=True)
        fs.makedirs(root, exist_ok=True)
        build(artifact.path)
    with fs.open(f"{root}/{MARKER}", "w") as f:
        f.write(artifact.key)
    return artifact


@dataclass(frozen=True)
class Stage:
    """A stage's identity: its name (artifact folder; MLflow run, ``"<name> [<π_e label>]"`` per
    π_e) and ``settings``, the slice of the cell config its key hashes — ``settings(cell)``, or
    ``settings(cell, policy)`` for a per-π_e stage."""

    name: str
    settings: Callable[..., object]
    per_policy: bool = False

    def run_name(self, label: str | None = None) -> str:
        return self.name if label is None else f"{self.name} [{label}]"

    def _slice(self, cell, policy):
        if self.per_policy != (policy is not None):
            raise TypeError(f"stage {self.name!r} is {'' if self.per_policy else 'not '}per π_e: "
                            f"{'pass' if self.per_policy else 'do not pass'} a policy")
        return self.settings(cell, policy) if self.per_policy else self.settings(cell)

    def run(self, cell, build: Callable[[str], object], parent_run: str | None, *, policy=None,
            inputs: tuple[Artifact, ...] = ()) -> Artifact:
        """``build(folder)`` unless this stage's artifact for ``cell`` (and ``policy``) is complete."""
        return _run_stage(cell.name, self.name, self._slice(cell, policy), inputs, build, parent_run,
                         None if policy is None else policy.label)

    def finished(self, cell, *, policy=None, inputs: tuple[Artifact, ...] = ()) -> Artifact:
        """The complete artifact of this stage for ``cell`` (and ``policy``) on ``inputs``, or an
        error saying which flow produces it."""
        return _finished_stage(cell.name, self.name, self._slice(cell, policy), inputs)


def _finished_stage(cell: str, stage: str, config_slice, inputs: tuple[Artifact, ...] = ()) -> Artifact:
    """The complete artifact a stage with these settings and inputs wrote, or an error saying
    which flow produces it."""
    artifact = _locate(cell, stage, config_slice, inputs)
    fs, root = fsspec.core.url_to_fs(artifact.path)
    if not fs.exists(f"{root}/{MARKER}"):
        raise FileNotFoundError(f"cell {cell} has no finished {stage} stage for its current config (looked for "
                                f"{artifact.path}): run the cell first, `prefect deployment run ope-cell/{cell}` "
                                f"or `python -m flows.ope_cell {cell}`")
    return artifact


@contextlib.contextmanager
def stage_run(parent_run: str | None, stage: str) -> Iterator[object]:
    """An MLflow run for one stage, nested under the flow run's parent run (none: untracked)."""
    if parent_run is None:
        yield None
        return
    with mlflow.start_run(run_name=stage, nested=True, parent_run_id=parent_run,
                          experiment_id=mlflow.get_run(parent_run).info.experiment_id) as run:
        yield run


def log_metrics(metrics: dict, step: int | None = None) -> None:
    """``metrics`` to the active MLflow run (the stage's), if any."""
    if mlflow.active_run() is not None:
        mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)


def epoch_logger(prefix: str = "") -> Callable[[int, dict], None]:
    """An ``on_epoch`` callback logging every metric of an epoch to the active MLflow run."""
    def log(epoch: int, metrics: dict) -> None:
        log_metrics({f"{prefix}{k}": v for k, v in metrics.items()}, step=epoch)
    return log


@contextlib.contextmanager
def stage_progress(cell: str, what: str) -> Iterator[Callable[[int, int], None]]:
    """``update(done, total)`` for a long stage: a Prefect progress artifact (updated per whole
    percent) and a progress bar on the CLI (stderr)."""
    artifact = create_progress_artifact(0.0, description=f"{cell}: {what}")
    bar = tqdm(desc=f"{cell}: {what}", file=sys.stderr, leave=False, dynamic_ncols=True)
    shown = -1

    def update(done: int, total: int) -> None:
        nonlocal shown
        bar.total, bar.n = total, done
        bar.refresh()
        percent = int(100 * done / total)
        if percent > shown:
            update_progress_artifact(artifact, float(percent))
            shown = percent

    try:
        yield update
    finally:
        bar.close()


def use_tracking_store() -> str | None:
    """Point MLflow at ``MLFLOW_TRACKING_URI``, else at a SQLite store under the artifact root
    (MLflow refuses its file store); the URI given, None for the local store."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri is None and "://" in artifact_path():
        raise RuntimeError("ADWM_HOME is remote: set MLFLOW_TRACKING_URI to your MLflow server")
    mlflow.set_tracking_uri(uri or f"sqlite:///{os.path.abspath(artifact_path('mlflow.db'))}")
    return uri


SOURCE_TAG = "adwm.source"  # the code a flow ran: MLflow's own commit tag cannot say the tree was ahead of it


def source_version() -> str | None:
    """The checkout this code runs from: its short commit, ``+changes`` where tracked files differ
    from it; None outside a git checkout (an installed package, a worker's pulled copy without git)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, timeout=30)
    try:
        head, status = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode or status.returncode:
        return None
    return head.stdout.strip() + ("+changes" if status.stdout.strip() else "")


@contextlib.contextmanager
def cell_run(cell: str, run_name: str) -> Iterator[str]:
    """The flow run's parent MLflow run in experiment ``cell/<cell>`` (tracking as in
    :func:`use_tracking_store`, run artifacts under ``$ADWM_HOME/mlartifacts``); yields its id."""
    uri = use_tracking_store()
    name = f"cell/{cell}"
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is None:
        location = None if uri else os.path.abspath(artifact_path("mlartifacts"))  # a server stores its own
        mlflow.create_experiment(name, artifact_location=location)
    mlflow.set_experiment(name)
    with mlflow.start_run(run_name=run_name) as run:
        source = source_version()
        if source is not None:
            mlflow.set_tag(SOURCE_TAG, source)
        yield run.info.run_id
