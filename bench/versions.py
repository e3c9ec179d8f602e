"""Upstream code confirmed at its stage's version: a refactor keeps the store, a change of values bumps it.

An upstream stage's key reads ``Stage.version``, not its code (adwm_core/pipeline.py). Where its
code moves, one of two things is true, and this module tells which before the store is trusted:

- its outputs moved: bump the stage's version in pipeline.STAGES (every cell's key of it, and of
  what reads it, moves) and rebuild the bench's store (`python -m bench.store build …`);
- they did not: `python -m bench.versions confirm` recomputes every upstream stage of the small
  reference cell (bench/reference-cell.yaml) from its kept inputs, compares each with the kept
  one, and records the code it confirmed (bench/store/confirmed.json).

``tests/test_store.py`` fails where a stage's code is not the one confirmed at its version, and
recomputes the reference cell itself, so a change that moves values without a bump cannot land.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from adwm_core import pipeline
from adwm_core.cell import CellConfig
from bench.common import REPO, bench_cells, cell_config
from bench.store import BENCH, RECORD, REFERENCE, STORE, kept_file, restore, upstream_stages, world_model_record

CONFIRMED = REPO / "bench" / "store" / "confirmed.json"
TOLERANCE = 1e-4  # floats of a recomputed stage: 2-core x86_64 machines agree far closer (compared in the test)
# trained weights (the tiny family, 80 steps): the reference's late checkpoint retrained on an AVX2 AMD EPYC
# differed from the store's (built on another x86_64) by 9.3e-4, the same on two runs; the same code with its
# learning rate 0.1 % higher differed by 0.125 and 1 % higher by 0.179 (2026-12-06), so 1e-2 tells a value
# that moved from another CPU's rounding with two orders of magnitude to spare on either side
WEIGHTS_TOLERANCE = 1e-2


def upstream_code(cells: list[str]) -> dict[str, dict[str, str]]:
    """Per upstream stage (``name@version``), the fingerprint of its code per environment the bench's
    ``cells`` play (a stage that runs no environment: under ``*``)."""
    code: dict[str, dict[str, str]] = {}
    for cell in cells:
        config = cell_config(cell)
        for name, stage in pipeline.STAGES.items():
            if stage.version is not None:
                where = config.env.name if stage.environment else "*"
                code.setdefault(f"{name}@{stage.version}", {})[where] = pipeline.stage_code(config, name)
    return {stage: dict(sorted(by_env.items())) for stage, by_env in sorted(code.items())}


def unconfirmed(cells: list[str], confirmed: Path = CONFIRMED) -> list[str]:
    """The upstream stages (``name@version [environment]``) whose code is not the code confirmed
    at their version."""
    recorded = json.loads(confirmed.read_text()) if confirmed.exists() else {}
    return [f"{stage} [{where}]" for stage, by_env in upstream_code(cells).items() for where, code in by_env.items()
            if recorded.get(stage, {}).get(where) != code]


@contextmanager
def artifact_root(path: str) -> Iterator[str]:
    """``$ADWM_HOME`` set to ``path`` inside the block."""
    before = os.environ.get("ADWM_HOME")
    os.environ["ADWM_HOME"] = path
    try:
        yield path
    finally:
        if before is None:
            del os.environ["ADWM_HOME"]
        else:
            os.environ["ADWM_HOME"] = before


def recompute_reference(store: Path) -> dict[str, str | None]:
    """Every upstream stage of the reference cell recomputed from its kept inputs and compared with
    its kept outputs: per stage, None where they agree, else what differs."""
    config = CellConfig.load(REFERENCE)
    found: dict[str, str | None] = {}
    with tempfile.TemporaryDirectory() as kept_root, tempfile.TemporaryDirectory() as fresh_root:
        with artifact_root(kept_root):
            restore(store, cells=[config.name])
            kept = {step.index: pipeline.locate(config, step.name, step.policy)
                    for step in pipeline.plan(config, upstream_stages(config))}
        recorded = {index: kept_file(a, store) for index, a in kept.items() if kept_file(a, store).name.endswith(RECORD)}
        missing = [a.path for index, a in kept.items() if not pipeline.is_finished(a) and
                   not (index in recorded and recorded[index].exists())]
        if missing:
            raise FileNotFoundError(f"the reference cell's store is incomplete ({missing}): run `python -m bench.store "
                                    f"build {REFERENCE}` first")
        for index, artifact in kept.items():
            name = index[0] + (f"@{index[1]}" if index[1] else "")
            shutil.rmtree(fresh_root)
            shutil.copytree(kept_root, fresh_root)
            shutil.rmtree(artifact.path.replace(kept_root, fresh_root), ignore_errors=True)
            with artifact_root(fresh_root):
                step = next(s for s in pipeline.plan(config) if s.index == index)
                fresh = pipeline.run(config, step.name, step.policy, log=lambda _: None)
            if index in recorded:  # kept as a record: its training, round by round, within the tolerance
                history = json.loads(recorded[index].read_text())["history"]
                found[name] = _json_difference(_without_timings(history),
                                               _without_timings(world_model_record(fresh.path)["history"]))
            else:
                found[name] = differences(Path(artifact.path), Path(fresh.path))
    return found


def differences(kept: Path, fresh: Path) -> str | None:
    """What differs between two artifact folders (files, tables, weights, JSON), or None."""
    names = {p.relative_to(kept) for p in kept.rglob("*") if p.is_file()}
    fresh_names = {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}
    if names != fresh_names:
        return f"files differ: {sorted(map(str, names ^ fresh_names))}"
    for name in sorted(names):
        problem = _file_difference(kept / name, fresh / name)
        if problem:
            return f"{name}: {problem}"
    return None


def _file_difference(kept: Path, fresh: Path) -> str | None:
    if kept.suffix == ".parquet":
        import pyarrow.parquet as pq

        return _table_difference(pq.read_table(kept).to_pydict(), pq.read_table(fresh).to_pydict())
    if kept.suffix == ".safetensors":
        from safetensors.torch import load_file

        a, b = load_file(kept), load_file(fresh)
        if a.keys() != b.keys():
            return "tensors differ"
        worst = max(((a[k].double() - b[k].double()).abs().max().item() for k in a if a[k].numel()), default=0.0)
        return None if worst <= WEIGHTS_TOLERANCE else f"weights differ by up to {worst:.3g}"
    if kept.name == "history.json":  # a world model's training record: its seconds are the machine's
        return _json_difference(_without_timings(json.loads(kept.read_text())),
                                _without_timings(json.loads(fresh.read_text())))
    if kept.suffix == ".json":
        return _json_difference(json.loads(kept.read_text()), json.loads(fresh.read_text()))
    return None if kept.read_bytes() == fresh.read_bytes() else "bytes differ"


TIMINGS = ("seconds", "transitions_per_s")


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _json_difference(a, b) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"keys differ: {sorted(set(a) ^ set(b))}"
        return next((f"{k}: {d}" for k in a if (d := _json_difference(a[k], b[k]))), None)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"lengths {len(a)} and {len(b)}"
        return next((f"[{i}]: {d}" for i, (x, y) in enumerate(zip(a, b)) if (d := _json_difference(x, y))), None)
    if isinstance(a, float) and isinstance(b, (int, float)):
        return None if np.isclose(a, b, rtol=TOLERANCE, atol=TOLERANCE, equal_nan=True) else f"{a} and {b}"
    return None if a == b else f"{a!r} and {b!r}"


def _table_difference(a: dict, b: dict) -> str | None:
    if a.keys() != b.keys():
        return f"columns differ: {sorted(set(a) ^ set(b))}"
    for column in a:
        if (problem := _json_difference(a[column], b[column])) is not None:
            return f"column {column}: {problem}"
    return None


def confirm(store: Path, confirmed: Path = CONFIRMED) -> dict[str, str | None]:
    """Recompute the reference cell; where every upstream stage agrees with the store, record
    today's upstream code as confirmed at its version. What differed, per stage."""
    found = recompute_reference(store)
    if not any(found.values()):
        confirmed.write_text(json.dumps(upstream_code(bench_cells(list(BENCH))), indent=1) + "\n")
    return found


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("confirm", help="recompute the reference cell's upstream against the store; record the code "
                                        "where nothing moved")
    commands.add_parser("check", help="the upstream stages whose code is not the code confirmed at their version")
    args = parser.parse_args(argv)
    if args.command == "check":
        print("\n".join(unconfirmed(bench_cells(list(BENCH)))) or "every upstream stage's code is confirmed")
        return
    found = confirm(STORE)
    for stage, problem in found.items():
        print(f"{stage}: {problem or 'the same outputs'}")
    if any(found.values()):
        raise SystemExit("outputs moved: bump those stages' version in adwm_core/pipeline.py (STAGES) and rebuild the "
                         "store (`python -m bench.store build development third`, then prune); nothing was confirmed")
    print(f"confirmed today's upstream code at its versions → {CONFIRMED.relative_to(REPO)}")


if __name__ == "__main__":
    main()
