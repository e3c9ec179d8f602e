"""World-model training time per cell on this machine, under each cell's own settings (the
default recipe unless the cell says otherwise): the issue's bound is 5 minutes a local cell.

For every cell named (default: the six development cells ``local-*``) the world model is trained
once here, alone, from the cell's finished ``behaviour`` stage into a scratch folder — the stage
cache is neither read nor written, so the figure is this machine's with nothing beside it.
``--run`` first computes the ``policies`` and ``behaviour`` stages a cell lacks; ``--earlier-log``
instead times a cell that lacks one on its newest behaviour log finished under earlier code (the
log's episodes and texts set the time, not the code that collected them), marked in the table.

Writes ``bench/results/world_model_time.{json,md}`` (cells measured earlier are kept).
Usage: ``python -m bench.costs.world_model_time [--run | --earlier-log] [--transitions N] [CELL ...]``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import tempfile
import time

import numpy as np

from adwm_core import pipeline
from adwm_core.data import TRAJECTORIES, behaviour_rows, read_table
from adwm_core.settings import TrainConfig
from adwm_core.training.world_model import train_world_model
from bench.common import RESULTS, artifact, cell_config, machine
from flows.cells import cell_names

BOUND_SECONDS = 300


def behaviour(cell, run: bool, earlier: bool) -> tuple[str, str | None]:
    """The cell's logged behaviour trajectories (computing the stages it needs with ``run``), and
    the key of the earlier-code log they come from (``earlier``; None for today's)."""
    if run:
        if cell.local_policies:
            pipeline.run(cell, "policies")
        pipeline.run(cell, "behaviour")
    found = artifact(cell, "behaviour", required=False)
    if found is not None:
        return found.file("trajectories"), None
    today = pipeline.locate(cell, "behaviour")
    folder = today.path.rsplit("/", 1)[0]
    logs = sorted(glob.glob(f"{folder}/*/{pipeline.MARKER}"), key=os.path.getmtime) if earlier else []
    if not logs:
        raise FileNotFoundError(f"no finished behaviour stage for {cell.name}'s config under today's code "
                                f"(--run computes it{'' if earlier else '; --earlier-log times an earlier one'})")
    key_folder = os.path.dirname(logs[-1])
    return f"{key_folder}/{today.files['trajectories']}", os.path.basename(key_folder)


def measure(name: str, run: bool, earlier: bool, transitions: int | None = None) -> dict:
    """One timed training of cell ``name``'s world model (its budget replaced by ``transitions``
    drawn transitions where given)."""
    cell = cell_config(name)
    path, earlier_key = behaviour(cell, run, earlier)
    table = behaviour_rows(read_table(path, TRAJECTORIES))
    lengths = np.bincount(np.unique(table["episode"].to_numpy(), return_inverse=True)[1])
    config = cell.world_model if transitions is None else \
        TrainConfig.model_validate({**cell.world_model.model_dump(exclude_unset=True), "transitions": transitions})
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        result = train_world_model(table, f"{scratch}/model", config)
        seconds = time.perf_counter() - started
    last = result.history[-1]
    return {"episodes": int(len(lengths)), "transitions": int(table.num_rows), "mean_length": float(lengths.mean()),
            "budget": {k: getattr(config, k) for k in ("epochs", "steps", "transitions") if getattr(config, k)},
            "optimiser_steps": int(last["optimiser_steps"]), "rounds": len(result.history),
            "best_round": result.best_epoch, "seconds": seconds, "date": time.strftime("%Y-%m-%d"),
            "earlier_log": earlier_key,
            "machine": machine()}


def write(results: dict) -> None:
    (RESULTS / "world_model_time.json").write_text(json.dumps(results, indent=2))
    lines = ["# World-model training time per cell", "",
             "`python -m bench.costs.world_model_time`: each cell's world model trained alone on this machine from its "
             f"behaviour log, under the cell's settings. Bound: {BOUND_SECONDS} s a local cell.", "",
             "| cell | episodes | transitions | mean length | budget | optimiser steps | best round | seconds | "
             f"≤ {BOUND_SECONDS} s | machine, date |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        budget = ", ".join(f"{k} {v:,}" for k, v in r["budget"].items())
        facts = r["machine"]
        log = f" (log of earlier code, `{r['earlier_log']}`)" if r.get("earlier_log") else ""
        lines.append(f"| {name}{log} | {r['episodes']} | {r['transitions']} | {r['mean_length']:.1f} | {budget} | "
                     f"{r['optimiser_steps']} | {r['best_round']} of {r['rounds']} | {r['seconds']:.0f} | "
                     f"{'yes' if r['seconds'] <= BOUND_SECONDS else '**no**'} | "
                     f"{facts['cpus']} CPUs {facts['processor']}, {r['date']} |")
    (RESULTS / "world_model_time.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="*", help="cells to measure (default: every local-* cell)")
    parser.add_argument("--run", action="store_true", help="compute the policies and behaviour stages a cell lacks")
    parser.add_argument("--transitions", type=int, action="append", default=[], metavar="N",
                        help="also time each cell with a budget of N drawn transitions (repeatable; a row each)")
    parser.add_argument("--earlier-log", action="store_true",
                        help="time a cell without today's behaviour stage on its newest earlier-code log")
    args = parser.parse_args()
    known = cell_names()
    unknown = sorted(set(args.cells) - set(known))
    if unknown:
        raise SystemExit(f"unknown cells {unknown}; cells: {known}")
    path = RESULTS / "world_model_time.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    for name in args.cells or [c for c in known if c.startswith("local-")]:
        for transitions in [None, *args.transitions]:
            row = name if transitions is None else f"{name} at {transitions:,} transitions"
            try:
                results[row] = measure(name, args.run, args.earlier_log, transitions)
            except FileNotFoundError as missing:  # no finished behaviour stage and no --run
                print(f"{name}: not measured — {missing}", flush=True)
                break
            print(f"{row}: {results[row]['seconds']:.0f} s, {results[row]['optimiser_steps']} steps", flush=True)
            write(results)


if __name__ == "__main__":
    main()
