"""Refits over resampled logs against the bootstrap, on finished cells (issue 58's third interval
candidate; the rule, written before its run: docs/notebook.md, "Refits over resampled logs").

`python -m bench.studies.refits --root DIR CELL ...`: for each development cell whose stages lie
under ``DIR/cells/<cell>/<stage>/<key>/`` (an artifact root, as bench.studies.calibrated reads
it), ADWM's default is refitted 20 times over bootstrap draws of the log's episodes
(adwm_core/ope/imagination/refits.py: the state bank and the hand-over's Q̂ re-fitted, the world
model kept, one run of rollouts per refit) and graded against ground truth beside the bootstrap
of its finished rollouts (bench.studies.verdicts.grade):
- ``bootstrap``: the imagined returns' own spread, per (point, seed) row;
- ``refits``: the refits' order statistics, one interval per point, and the verdict on each
  pair from the refits' paired differences.
Per cell: coverage / median width over the range of J / decided / precision, and the seconds
the refits took; cells measured earlier keep their rows. → bench/results/refits.{md,json}.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow.parquet as pq

from adwm_core.data import LOGPROBS, TRAJECTORIES, read_table
from adwm_core.data.behaviour_log import BehaviourLog
from adwm_core.model.world_model import WorldModel
from adwm_core.ope.classical.settings import BaselineConfig
from adwm_core.ope.imagination.estimates import rollout_rows
from adwm_core.ope.imagination.memo import MemoisedPolicy
from adwm_core.ope.imagination.refits import refit_values
from adwm_core.ope.statistics.bounds import Candidate, ReturnRange, interval, verdicts
from adwm_core.ope.statistics.metrics import verdict_scores
from adwm_core.policies.loading import ModelCache
from bench.common import (
    RESULTS,
    cell_config,
    evaluated_in_root,
    stage_file,
    write_grouped,
)
from bench.studies.calibrated import (
    development_arguments,
    graded,
    mean_grades,
    rollouts_from_samples,
)
from bench.studies.verdicts import grade

INTERVALS = ("bootstrap", "refits")
REFITS = 20


def grade_refits(values: dict, refits: dict, truth: dict, stderr: dict, confidence: float) -> dict:
    """Coverage and median width over the range of J of each point's refit interval, and decided
    and precision of the verdicts on its pairs (``values``: each point's imagined returns;
    ``refits``: its Ĵ_b)."""
    spread = float(np.ptp(list(truth.values())))
    candidates = {point: Candidate.refitted(values[point], refits[point]) for point in sorted(truth)}
    ends = {point: interval(c, n_resamples=1, confidence=confidence, seed=0) for point, c in candidates.items()}
    scores = verdict_scores(verdicts(candidates, n_resamples=1, confidence=confidence, seed=0), truth, stderr)
    return {"coverage": float(np.mean([low <= truth[p] <= high for p, (low, high) in ends.items()])),
            "width": float(np.median([(high - low) / spread for low, high in ends.values()])),
            "decided": scores.decided, "precision": scores.precision,
            "intervals": {f"{p[0]}@{p[1]:g}": list(e) for p, e in ends.items()}}


def measure(root: str, cell: str) -> dict:
    config = cell_config(cell)
    adwm, settings = config.adwm, BaselineConfig(gamma=config.adwm.gamma, fqe=config.handover_fqe)
    log_file = stage_file(root, cell, "behaviour", "trajectories.parquet")
    scores = stage_file(root, cell, "logprobs", "logprobs.parquet")
    members = WorldModel.load_ensemble(stage_file(root, cell, "world-model", "members"))
    label, runs, seeds = rollouts_from_samples(stage_file(root, cell, "adwm", "samples.jsonl"), adwm.gamma)
    spec = evaluated_in_root(root, cell)
    truth, stderr = {}, {}
    for point in pq.read_table(stage_file(root, cell, "ground-truth", "summary.parquet")).to_pylist():
        truth[point["policy"], float(point["epsilon"])] = point["mean_return"]
        stderr[point["policy"], float(point["epsilon"])] = point["stderr"]
    epsilons = sorted({e for _, e in truth})
    started = time.perf_counter()
    found = refit_values(members, BehaviourLog(read_table(log_file, TRAJECTORIES), log_file),
                         read_table(scores, LOGPROBS), MemoisedPolicy(ModelCache().policy(spec, config.env.name)),
                         scores_name=scores, epsilons=epsilons, config=adwm, settings=settings, refits=REFITS,
                         progress=lambda done, total: print(f"{cell}: refit {done}/{total}", flush=True))
    seconds = time.perf_counter() - started
    rows = rollout_rows([runs], seeds, adwm, ReturnRange.declared(config.env.name), policy=label)
    values = {(label, e): np.array([[r["value"] for r in rows if r["epsilon"] == e]]) for e in epsilons}
    plain = [{**row, "low": row["value"], "high": row["value"]} for row in rows]
    return {"bootstrap": grade(plain, truth, stderr, adwm),
            "refits": grade_refits(values, {(label, e): found.at(e) for e in epsilons}, truth, stderr,
                                   adwm.confidence),
            "refit_values": found.to_json(), "seconds": round(seconds)}


def table(title: str, results: dict[str, dict]) -> list[str]:
    lines = [f"**{title}** (coverage / median width over the range of J / decided / precision)", "",
             "| cell | refits s | " + " | ".join(INTERVALS) + " |", "|---" * (len(INTERVALS) + 2) + "|"]
    for cell, r in results.items():
        lines.append(f"| {cell} | {r['seconds']} | {graded(r, INTERVALS)} |")
    lines.append(f"| **mean of {len(results)}** | | {mean_grades(results, INTERVALS)} |")
    return lines + [""]


def main() -> None:
    args = development_arguments(__doc__)
    group, path = "Development cells (tuned on)", RESULTS / "refits.json"
    results = json.loads(path.read_text())["cells"] if path.exists() else {group: {}}
    for cell in args.cells:  # each cell's result kept as it finishes (a killed run keeps the cells it reached)
        results[group][cell] = measure(args.root, cell)
        write_grouped("refits", "ADWM refitted over resampled logs, against ground truth", __doc__, results, table)


if __name__ == "__main__":
    main()
