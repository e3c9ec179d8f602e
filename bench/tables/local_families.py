"""Calibration of the local cells' tiny policy families: success per training checkpoint.

A local cell's behaviour pool and π_e are checkpoints of one tiny GPT-2 trained on the
expert's trajectories of the cell's instances. Which checkpoints to use is decided here,
before any estimator runs, from the policies' own greedy success on those instances:
the pool (the two latest checkpoints before the first with success above 25 %) should be
weak but not hopeless (the paper's π_b succeed on 3.5–12.5 %, appendix
'Behavior-policy data') and π_e a later, stronger checkpoint, never in the pool. No
estimator and no ground-truth ε curve enters the choice.

For each cell: train the family once with a grid of checkpoints (the cell's policies stage
with those checkpoints, kept under ``$ADWM_HOME/cells/<cell>/policies``), then play every instance once per checkpoint greedily,
prompt variants cycling as in behaviour collection. Writes
``bench/results/local_families.{json,md}``.

A run with another grid adds its checkpoints to the cell's earlier rows (the family's
training is deterministic, so step s is the same model in every grid). The π_b / π_e marks
always follow the cells' current configs; ``--render`` only rewrites the saved
JSON and Markdown with them (no training, no episodes).
Usage: ``python -m bench.tables.local_families [CELL ...] [--steps 40,100,...] [--render]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import pyarrow.compute as pc

from adwm_core import pipeline
from adwm_core.cell import LOCAL_PREFIX, CellConfig
from adwm_core.specs import PolicySpec
from adwm_core.collection import collect_behavior
from bench.common import RESULTS, cell_config, development_cells, machine

STEPS = (40, 100, 200, 400, 800, 1200)
EPISODES = 100  # per checkpoint, at most
WEAK = 0.25  # a pool member succeeds on at most this share of the instances


def suggest(rows: list[dict]) -> dict:
    """The rule the local cells follow: π_b = the two latest checkpoints before the first whose
    success exceeds ``WEAK``, at least one of them above 0 (weak but not hopeless, so the
    success bank has members); π_e = the last checkpoint. None where the grid offers no such pair."""
    first_strong = next((i for i, r in enumerate(rows) if r["success_rate"] > WEAK), len(rows) - 1)
    weak = rows[:first_strong][-2:]
    pool = [r["steps"] for r in weak] if len(weak) == 2 and any(r["success_rate"] > 0 for r in weak) else None
    return {"pool": pool, "evaluation": rows[-1]["steps"]}


def family(cell: CellConfig, steps: list[int]) -> dict[int, str]:
    """{steps: checkpoint folder} of the cell's family trained with every step count of the grid
    (the cell's policies stage with those checkpoints, through the stage registry)."""
    names = {step: f"step{step}" for step in steps}
    grid = cell.replace(local_policies=cell.local_policies.replace(  # the cell's own checkpoints stay: its policies name them
        checkpoints={**cell.local_policies.checkpoints, **{n: s for s, n in names.items()}}))
    start = time.perf_counter()
    trained = pipeline.run(grid, "policies", on_start=lambda _, reused: reused or print(
        f"{cell.name}: training the family", flush=True)).file("family")
    print(f"{cell.name}: family ready in {time.perf_counter() - start:.0f} s", flush=True)
    return {step: os.path.join(trained, name) for step, name in names.items()}


def greedy_success(cell: CellConfig, step: int, path: str, n: int) -> dict:
    """The first ``n`` instances once each, greedy, variants cycling: success rate, mean return
    and steps."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        table = collect_behavior(cell.env, [PolicySpec(f"step{step}", path)], n, os.path.join(tmp, "t.parquet"),
                                 cell=cell.name)
        seconds = time.perf_counter() - start
    episodes = table.group_by("episode").aggregate([("success", "max"), ("reward", "sum"), ("t", "count")])
    return {"steps": step, "episodes": episodes.num_rows,
            "success_rate": pc.mean(pc.cast(episodes["success_max"], "float64")).as_py(),
            "mean_return": pc.mean(episodes["reward_sum"]).as_py(),
            "mean_length": pc.mean(episodes["t_count"]).as_py(), "seconds": seconds}


def load_local_cell(name: str) -> CellConfig:
    cell = cell_config(name)
    if cell.local_policies is None:
        raise SystemExit(f"{name} is not a local cell (no local_policies section)")
    return cell


def roles(cell: CellConfig) -> dict:
    """The training steps of the cell's pool members and of its π_e, from its current config."""
    def steps_of(spec: PolicySpec) -> int:
        return cell.local_policies.checkpoints[spec.model.removeprefix(LOCAL_PREFIX)]

    return {"pool": {p.label: steps_of(p) for p in cell.behaviour.pool},
            "evaluation": {p.label: steps_of(p) for p in cell.evaluation.policies}}


def calibrate(name: str, steps: list[int]) -> dict:
    cell = load_local_cell(name)
    grid = sorted(set(steps) | {c for c in cell.local_policies.checkpoints.values() if c <= max(steps)})
    paths = family(cell, grid)
    n = min(len(cell.env.instances()), EPISODES)  # listing instances starts the environment: once
    rows = []
    for step in grid:
        rows.append(greedy_success(cell, step, paths[step], n))
        print(name, rows[-1], flush=True)
    return {"cell": name, "env": cell.env.model_dump(), "instances": n,
            "rows": rows, "suggested": suggest(rows), **roles(cell)}


def markdown(results: list[dict], host: dict) -> str:
    lines = [f"# Local policy families: greedy success per checkpoint ({host['cpus']} CPUs, {host['date']})", "",
             "Each cell's tiny GPT-2 family, trained on the expert's trajectories of the cell's instances, "
             "plays every instance once per checkpoint (greedy, prompt variants cycling). The cell's pool "
             "checkpoints are marked π_b, its evaluation policy π_e; the heading gives the checkpoints the "
             f"selection rule picks (π_b: the two latest before the first with success above {WEAK:g}, one "
             "of them above 0; π_e: the last). "
             "Generated by `python -m bench.tables.local_families`.", ""]
    for result in results:
        marks = {step: "π_b" for step in result["pool"].values()} | {step: "π_e" for step in result["evaluation"].values()}
        hint = result["suggested"]
        advice = (f"rule: π_b = {' + '.join(map(str, hint['pool']))} steps, π_e = {hint['evaluation']}" if hint["pool"]
                  else "rule: no two weak checkpoints with a success between them — extend the grid")
        lines += [f"## {result['cell']} ({result['instances']} instances; {advice})", "",
                  "| steps | role | success | mean return | mean length | episodes | s |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['steps']} | {marks.get(r['steps'], '')} | {r['success_rate']:.3f} | {r['mean_return']:.3f} | "
                  f"{r['mean_length']:.1f} | {r['episodes']} | {r['seconds']:.0f} |" for r in result["rows"]]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="*", help="local cells (default: every deployments/local-*.yaml)")
    parser.add_argument("--steps", default=",".join(map(str, STEPS)), help="checkpoint grid in optimiser steps")
    parser.add_argument("--render", action="store_true",
                        help="only refresh the saved results' π_b / π_e marks from the current cell configs")
    args = parser.parse_args()
    cells = args.cells or development_cells()
    steps = [int(s) for s in args.steps.split(",")]
    out = RESULTS / "local_families.json"
    saved = json.loads(out.read_text()) if out.exists() else {"cells": []}
    previous = {r["cell"]: r | {"suggested": suggest(r["rows"])} | roles(load_local_cell(r["cell"]))
                for r in saved["cells"]}
    if args.render:
        if "machine" not in saved:
            raise SystemExit(f"--render: {out} does not exist yet; run without --render to measure the families")
        write(previous, saved["machine"])  # the machine and day the rows were measured
        return
    for name in cells:
        result = calibrate(name, steps)
        earlier = previous.get(name)
        if earlier is not None and earlier["env"] == result["env"]:  # same episodes: a finer grid adds rows
            rows = {r["steps"]: r for r in earlier["rows"]} | {r["steps"]: r for r in result["rows"]}
            result["rows"] = [rows[step] for step in sorted(rows)]
            result["suggested"] = suggest(result["rows"])
        previous[name] = result
        write(previous, machine())


def write(by_cell: dict[str, dict], host: dict) -> None:
    results = [by_cell[c] for c in sorted(by_cell)]
    (RESULTS / "local_families.json").write_text(json.dumps({"machine": host, "cells": results}, indent=2))
    (RESULTS / "local_families.md").write_text(markdown(results, host))


if __name__ == "__main__":
    sys.exit(main())
