"""Finished upstream stages kept in the repository, for a bench whose work outlasts a session.

This project's sessions get their checkout and their artifact root laid anew (docs/operations.md,
"The team's bench root outlives a checkout"): only what is committed survives. A test batch's
upstream takes several sessions of two cores, and most of it is small on disk — the policies
(about 2 MB a cell), the behaviour data, the ground truth and the log-probs (kilobytes) — while
its cheapest stage, the world model, is the largest. So :func:`keep` writes each finished stage
up to ``MAX_BYTES`` as one ``bench/store/<cell>/<stage>/<key[:16]>.tar.gz``, named by its key
and never rewritten, and :func:`restore` unpacks into the artifact root every kept stage not
finished there. A stage is reused only where today's code and settings give it the same key
(pipeline.py), so a store from older code is merely left unread. Nothing of an estimator stage is
ever kept (the ledger's reading computes those; bench/ledger.py).
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from adwm_core import pipeline
from adwm_core.cell import CellConfig
from adwm_core.paths import artifact_path
from bench.common import REPO

STORE = REPO / "bench" / "store"
MAX_BYTES = 8 * 2**20  # a world model (tens of MB, a minute or two to train) is trained again instead


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def kept_file(artifact: pipeline.Artifact, store: Path = STORE) -> Path:
    """Where ``artifact`` (…/cells/<cell>/<stage>/<key[:16]>) is kept."""
    cell, stage, name = Path(artifact.path).parts[-3:]
    return store / cell / stage / f"{name}.tar.gz"


def keep(artifact: pipeline.Artifact, store: Path = STORE) -> Path | None:
    """A finished stage ``artifact`` written to the store (atomically; an existing one is kept);
    None where it is too large or not finished, or the root is not a local folder."""
    if "://" in artifact.path or not pipeline.is_finished(artifact) or folder_bytes(artifact.path) > MAX_BYTES:
        return None
    target = kept_file(artifact, store)
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".partial-{os.getpid()}")
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(artifact.path, arcname=Path(artifact.path).name)
        partial.rename(target)
    return target


def restore(store: Path = STORE) -> list[str]:
    """Unpack every kept stage whose folder the artifact root lacks (one it holds, finished or
    being computed, is left as it is); the restored folders, by ``<cell>/<stage>/<key[:16]>``."""
    restored = []
    for kept in sorted(store.glob("*/*/*.tar.gz")):
        cell, stage = kept.parts[-3:-1]
        name = kept.name.removesuffix(".tar.gz")
        folder = artifact_path("cells", cell, stage, name)
        if "://" in folder or os.path.exists(folder):
            continue
        with tarfile.open(kept) as tar:
            tar.extractall(os.path.dirname(folder), filter="data")
        restored.append(f"{cell}/{stage}/{name}")
    return restored


def keep_finished(config: CellConfig, stages: tuple[str, ...]) -> list[Path]:
    """Every finished artifact of ``stages`` of the cell kept (``keep``); those written or found."""
    return [kept for step in pipeline.plan(config, stages)
            if (kept := keep(pipeline.locate(config, step.name, step.policy))) is not None]


def main(argv: list[str] | None = None) -> None:
    import argparse

    from bench.common import cell_config, test_batches
    from bench.ledger import batch_cells, upstream_stages

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    kept = commands.add_parser("keep", help="keep the finished upstream stages of cells (a test batch names its cells)")
    kept.add_argument("cells", nargs="+", help="cell names, or a test batch of bench/bench.yaml")
    commands.add_parser("restore", help="unpack the kept stages into the artifact root ($ADWM_HOME)")
    args = parser.parse_args(argv)
    if args.command == "restore":
        print(f"restored {len(restore())} stage(s)")
        return
    batches = test_batches()
    for cell in [c for name in args.cells for c in (batch_cells(name) if name in batches else [name])]:
        config = cell_config(cell)
        print(f"{cell}: {len(keep_finished(config, upstream_stages(config)))} stage(s) kept")


if __name__ == "__main__":
    main()
