"""The bench's upstream kept in the repository, so that a clean clone reads the bench in an hour.

A session's checkout and artifact root are laid anew (docs/operations.md), and a bench cell's
upstream — the stages no estimator figure comes from: policies, behaviour, log-probs, greedy
actions, world model, ψ and ground truth — takes hours of two cores to build. Each finished
upstream stage is kept as one ``bench/store/<cell>/<stage>/<key[:16]>.tar.gz``, named by its key
and never rewritten; :func:`restore` unpacks into the artifact root every kept stage it lacks.

An upstream stage's key reads its declared version, not its code (adwm_core/pipeline.py), so a
refactor that moves no value keeps the store valid, and one that moves values bumps the version
and rebuilds the cells it touches. `python -m bench.store`:

- ``build CELL|BATCH|development …``: restore, then compute every upstream stage not kept and keep it;
- ``keep CELL|BATCH …``: keep what another command built;
- ``restore``: unpack the store into ``$ADWM_HOME``;
- ``missing [CELL|BATCH …]``: the cells and stages today's keys ask for that the store lacks;
- ``prune``: drop every kept stage that no bench cell's key names any more.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

from adwm_core import pipeline
from adwm_core.cell import CellConfig
from adwm_core.paths import artifact_path
from bench.common import REPO, bench_cells, cell_config, stored_world_models, test_batches
from bench.compact import HISTORY, WEIGHTS, compact, expand

STORE = REPO / "bench" / "store"
RECORD = ".record.json"  # a world model the store does not keep whole (``world_model_record``)
MAX_STORE_BYTES = 150 * 2**20  # what a user clones (issue 86): the README's bench section states the size
# the small cell whose upstream is recomputed against the store before upstream code is confirmed (bench/versions.py)
REFERENCE = str(REPO / "bench" / "reference-cell.yaml")
BENCH = ("development", *test_batches(), REFERENCE)  # every cell kept: the development cells, the batches', the reference


def upstream_stages(config: CellConfig) -> tuple[str, ...]:
    """The stages of the cell's plan that no estimator figure comes from (those keyed by a
    declared version), in plan order."""
    names = [step.name for step in pipeline.plan(config)]
    return tuple(dict.fromkeys(name for name in names if pipeline.stage(name).version is not None))


def kept_file(artifact: pipeline.Artifact, store: Path = STORE) -> Path:
    """Where ``artifact`` (…/cells/<cell>/<stage>/<key[:16]>) is kept: its files, or for a world
    model the store does not keep whole, a record of it (``world_model_record``)."""
    cell, stage, name = Path(artifact.path).parts[-3:]
    whole = stage != "world-model" or cell in stored_world_models()
    return store / cell / stage / (f"{name}.tar.gz" if whole else f"{name}{RECORD}")


def world_model_record(folder: str) -> dict[str, dict]:
    """What the store keeps of a world model it does not keep whole: the SHA-256 of every member's
    weights and every member's training record (its held-out metrics round by round), by path."""
    return {"weights": {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
                        for path in sorted(Path(folder).rglob(WEIGHTS))},
            "history": {str(path.relative_to(folder)): json.loads(path.read_text())
                        for path in sorted(Path(folder).rglob(HISTORY))}}


def retrained(artifact: pipeline.Artifact, store: Path = STORE) -> str | None:
    """Whether a world model trained again where the store keeps only its digests is the one the
    bench was measured with: a line saying so (None: the store keeps it whole, or nothing of it)."""
    record = kept_file(artifact, store)
    if not record.name.endswith(RECORD) or not record.exists() or not pipeline.is_finished(artifact):
        return None
    same = json.loads(record.read_text())["weights"] == world_model_record(artifact.path)["weights"]
    return (f"{artifact.path}: trained again, " + ("byte for byte the world model the bench was measured with" if same
            else "NOT the world model the bench was measured with (another machine or thread count?): its rows "
                 "may differ from bench/results"))


def keep(artifact: pipeline.Artifact, store: Path = STORE) -> Path | None:
    """A finished stage ``artifact`` written to the store (atomically; an existing one is kept), a
    world model in its compact form (bench/compact.py), or only its weights' digests where the
    store does not keep it whole; None where it is not finished or the root is not a local folder."""
    if "://" in artifact.path or not pipeline.is_finished(artifact):
        return None
    target = kept_file(artifact, store)
    if target.name.endswith(RECORD):
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(world_model_record(artifact.path)) + "\n")
        return target
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".partial-{os.getpid()}")
        with tempfile.TemporaryDirectory() as copy:
            folder = Path(copy) / Path(artifact.path).name
            shutil.copytree(artifact.path, folder)
            if Path(artifact.path).parts[-2] == "world-model":
                compact(folder)
            with tarfile.open(partial, "w:gz") as tar:
                tar.add(folder, arcname=folder.name)
        partial.rename(target)
    return target


def restore(store: Path = STORE, cells: list[str] | None = None) -> list[str]:
    """Unpack every kept stage (of ``cells``, default all) whose folder the artifact root lacks (one
    it holds, finished or being computed, is left as it is); the restored folders, by
    ``<cell>/<stage>/<key[:16]>``."""
    restored = []
    for kept in sorted(p for cell in (cells or ["*"]) for p in store.glob(f"{cell}/*/*.tar.gz")):
        cell, stage = kept.parts[-3:-1]
        name = kept.name.removesuffix(".tar.gz")
        folder = artifact_path("cells", cell, stage, name)
        if "://" in folder or os.path.exists(folder):
            continue
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.dirname(folder))) as unpacked:
            with tarfile.open(kept) as tar:  # unpacked aside, then moved in whole: a half-restored stage is never seen
                tar.extractall(unpacked, filter="data")
            expand(Path(unpacked) / name)
            os.rename(Path(unpacked) / name, folder)
        restored.append(f"{cell}/{stage}/{name}")
    return restored


def upstream(cells: list[str]) -> dict[str, list[pipeline.Artifact]]:
    """Every upstream artifact today's code and settings ask of each cell, in plan order."""
    found = {}
    for cell in cells:
        config = cell_config(cell)
        found[cell] = [pipeline.locate(config, step.name, step.policy)
                       for step in pipeline.plan(config, upstream_stages(config))]
    return found


def missing(cells: list[str], store: Path = STORE) -> dict[str, list[str]]:
    """Per cell, the upstream stages (their name and key) the store lacks."""
    lacking = {}
    for cell, artifacts in upstream(cells).items():
        named = [f"{Path(a.path).parts[-2]} {a.key[:16]}" for a in artifacts if not kept_file(a, store).exists()]
        if named:
            lacking[cell] = named
    return lacking


def stale(store: Path = STORE) -> list[Path]:
    """The kept stages no bench cell's key names any more: re-keyed by a bumped version or a changed
    config (their new keys are not kept), or of a cell no longer on the bench."""
    wanted = {kept_file(a, store) for artifacts in upstream(bench_cells(list(BENCH))).values() for a in artifacts}
    return [kept for kept in sorted(store.glob("*/*/*.tar.gz")) + sorted(store.glob(f"*/*/*{RECORD}"))
            if kept not in wanted]


def build_arguments(kept: list[Path]) -> list[str]:
    """What `python -m bench.store build` takes to rebuild the cells of the ``kept`` files: their
    names, the reference cell by its YAML path (it is no deployment)."""
    reference = CellConfig.load(REFERENCE).name
    cells = sorted({path.parts[-3] for path in kept})
    return [str(Path(REFERENCE).relative_to(REPO)) if cell == reference else cell for cell in cells]


def rebuild_message(kept: list[Path], store: Path = STORE) -> str:
    """What to run where the ``kept`` files are :func:`stale`: the build of their cells, the prune, the commit."""
    return ("kept upstream stages no key of today's code names (re-keyed?): rebuild them with "
            f"`python -m bench.store build {' '.join(build_arguments(kept))}`, then "
            "`python -m bench.store prune`, and commit bench/store:\n"
            + "\n".join(f"  {path.relative_to(store)}" for path in kept))


def prune(store: Path = STORE) -> list[Path]:
    """Remove every :func:`stale` kept stage; the files removed."""
    dropped = stale(store)
    for kept in dropped:
        kept.unlink()
    for folder in sorted(store.glob("*/*"), reverse=True) + sorted(store.glob("*")):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    return dropped


def build(cells: list[str], reverse: bool = False, store: Path = STORE) -> None:
    """Restore the store, then compute each cell's upstream stages the root lacks and keep every
    one: reads no estimator figure. ``reverse``: from the last cell, for a second worker beside a
    first (the stage locks keep two apart)."""
    stamped(f"restored {len(restore(store))} kept stage(s) from {store}")
    for cell in reversed(cells) if reverse else cells:
        config = cell_config(cell)
        stages = upstream_stages(config)
        stamped(f"{cell}: building {', '.join(stages)}")
        for step in pipeline.plan(config, stages):
            built = pipeline.run(config, step.name, step.policy, log=stamped, on_start=_started)
            if (note := retrained(built, store)) is not None:
                stamped(note)
            keep(built, store)
    stamped(f"upstream of {len(cells)} cell(s) complete and kept")


def _started(artifact: pipeline.Artifact, reused: bool) -> None:
    if not reused:
        stamped(f"computing {artifact.path}")


def stamped(message: str) -> None:
    """A progress line with the wall clock, so that the stages' durations read off the log."""
    print(time.strftime("%H:%M:%S"), message, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    built = commands.add_parser("build", help="restore, then compute and keep every upstream stage the cells lack")
    built.add_argument("cells", nargs="+", help="cell names, test batches of bench/bench.yaml, or 'development'")
    built.add_argument("--reverse", action="store_true", help="from the last cell (a second worker)")
    kept = commands.add_parser("keep", help="keep the finished upstream stages of cells")
    kept.add_argument("cells", nargs="+", help="cell names, test batches of bench/bench.yaml, or 'development'")
    commands.add_parser("restore", help="unpack the kept stages into the artifact root ($ADWM_HOME)")
    lacking = commands.add_parser("missing", help="the upstream stages today's keys ask for that the store lacks")
    lacking.add_argument("cells", nargs="*", default=list(BENCH), help="default: every bench cell")
    commands.add_parser("prune", help="drop the kept stages no bench cell's key names any more")
    args = parser.parse_args(argv)
    if args.command == "build":
        build(bench_cells(args.cells), args.reverse)
    elif args.command == "keep":
        for cell, artifacts in upstream(bench_cells(args.cells)).items():
            print(f"{cell}: {sum(keep(a) is not None for a in artifacts)} stage(s) kept")
    elif args.command == "restore":
        print(f"restored {len(restore())} stage(s)")
    elif args.command == "missing":
        for cell, stages in missing(bench_cells(args.cells)).items():
            print(f"{cell}: {', '.join(stages)}")
    elif args.command == "prune":
        print(f"dropped {len(prune())} kept stage(s)")


if __name__ == "__main__":
    main()
