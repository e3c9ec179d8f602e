"""Where ADWM's error sits on a cell, by what answered (adwm_core/ope/instruments/source_errors.py).

`python -m bench.studies.source_errors [CELL ...]` (default: the development cells), for each cell whose
behaviour, world-model, log-prob, ground-truth and ADWM stages have finished under today's code
and config: every ground-truth episode of π_e^ε walked, teacher forced, through the cell's ADWM
transition (member 0 of its world model; under the hand-over, FQE fitted as the ADWM stage fits
it), and per cell:

- ρ and NMAE against J of ADWM's own Ĵ (``imagined``), of the teacher-forced walk (``walked``)
  and of each source's oracle walk (``oracle_<source>``: that source's answers replaced by the
  environment's);
- each source's share of π_e's real steps and the mean signed error of its answers (r̂ − r; for
  the hand-over's values Q̂ − G_t).

A test cell may be named (for the record of where its error sits); nothing is tuned on it.
Writes ``bench/results/source_errors.{md,json}``; rows of cells not measured in this run are kept.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from adwm_core.data import ESTIMATES, LOGPROBS, TRAJECTORIES, read_table
from adwm_core.data.behaviour_log import BehaviourLog
from adwm_core.model.world_model import WorldModel
from adwm_core.ope.imagination.diffusion_transition import adwm_transition
from adwm_core.ope.classical.settings import BaselineConfig
from adwm_core.ope.imagination.walks import walk_ground_truth
from adwm_core.ope.instruments.source_errors import source_points, source_summary
from adwm_core.ope.answers import SOURCES
from adwm_core.ope.imagination.encoded_log import EncodedLog
from adwm_core.ope.imagination.driver import fqe_per_member
from bench.common import ADWM, RESULTS, artifact, cell_config, development_cells, machine

WALKS = ("imagined", "walked", *(f"oracle_{source}" for source in SOURCES))


def imagined_values(estimates: pa.Table) -> dict[tuple[str, float], float]:
    """(π_e, ε) → ADWM's seed-averaged reward_sum, π_e as the estimates name it."""
    rows = estimates.filter(pc.equal(estimates["estimator"], ADWM)).to_pylist()
    by_point: dict[tuple[str, float], list[float]] = {}
    for row in rows:
        by_point.setdefault((row["policy"], float(row["epsilon"])), []).append(row["value"])  # finite for a world model
    return {point: float(np.mean(values)) for point, values in by_point.items()}


def measure(cell_name: str) -> dict:
    """The cell's points and summary (module docstring)."""
    cell = cell_config(cell_name)
    trajectories = artifact(cell, "behaviour").file("trajectories")
    log = BehaviourLog(read_table(trajectories, TRAJECTORIES), trajectories)
    model = WorldModel.load_ensemble(artifact(cell, "world-model").file("members"))[0]
    reading, config = EncodedLog(log, model), cell.adwm
    bank = reading.bank
    points, imagined = [], {}
    for policy in cell.evaluation.policies:
        q = None
        if config.hands_over_to_fqe:
            scores = artifact(cell, "logprobs", policy.label).file("logprobs")
            q = fqe_per_member(read_table(scores, LOGPROBS), scores, cell.evaluation.epsilons,
                               BaselineConfig(gamma=config.gamma, fqe=cell.handover_fqe))(reading)
        episodes = read_table(artifact(cell, "ground-truth", policy.label).file("episodes"), TRAJECTORIES)
        walked = walk_ground_truth(adwm_transition(model, bank, config, q), bank, model, episodes,
                                   gamma=config.gamma, noise_levels=model.diffusion.n_steps)
        points += source_points(walked, config.gamma)
        estimates = read_table(artifact(cell, "adwm", policy.label).file("estimates"), ESTIMATES)
        imagined.update(imagined_values(estimates))
    return {"points": points, "summary": source_summary(points, imagined)}


def report(results: dict[str, dict]) -> list[str]:
    lines = ["# Where ADWM's error sits, by what answered", "",
             "`python -m bench.studies.source_errors [CELL ...]` (adwm_core/ope/instruments/source_errors.py): every ground-truth "
             "episode of π_e^ε walked, teacher forced, through the cell's ADWM transition. ρ / NMAE against J "
             "of ADWM's own Ĵ (*imagined*), of the teacher-forced walk (*walked*: the real states, the "
             "transition's answers) and of each source's *oracle* walk (that source's answers replaced by the "
             "environment's: (r, done), or G_t for the hand-over's values). imagined → walked is what "
             "imagination's own states cost; walked → oracle of a source is what that source's answers cost.",
             "", "| cell | measured | " + " | ".join(WALKS) + " |", "|---|---|" + "---|" * len(WALKS)]
    for cell, result in sorted(results.items()):
        s, facts = result["summary"], result.get("measured", {})
        where = f"{facts.get('cpus', '?')} CPUs {facts.get('processor', '')}, {facts.get('date', '?')}"
        lines.append(f"| {cell} | {where} | " + " | ".join(
            f"{s[w]['rho']:+.2f} / {s[w]['nmae']:.2f}" if w in s else "–" for w in WALKS) + " |")
    lines += ["", "Share of π_e's real steps each source answered, and the mean signed error of its answers "
              "(r̂ − r; Q̂ − G_t for the hand-over's values):", "",
              "| cell | " + " | ".join(f"{s} share / error" for s in SOURCES) + " |", "|---|" + "---|" * len(SOURCES)]
    for cell, result in sorted(results.items()):
        s = result["summary"]
        cells = []
        for source in SOURCES:
            error = s.get(f"{source}_value_error", s.get(f"{source}_reward_error", float("nan")))
            cells.append(f"{s[f'{source}_share']:.2f} / {error:+.3g}")
        lines.append(f"| {cell} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cells", nargs="*", help="cells to measure (default: the development cells)")
    cells = parser.parse_args().cells or development_cells()
    path = RESULTS / "source_errors.json"
    results = json.loads(path.read_text())["cells"] if path.exists() else {}
    for cell in cells:
        started = time.perf_counter()
        results[cell] = measure(cell)
        results[cell]["measured"] = {**machine(), "seconds": round(time.perf_counter() - started, 1)}
        print(cell, json.dumps({w: results[cell]["summary"][w] for w in WALKS if w in results[cell]["summary"]}))
    path.write_text(json.dumps({"cells": results}, indent=1))
    (RESULTS / "source_errors.md").write_text("\n".join(report(results)) + "\n")


if __name__ == "__main__":
    main()
