"""The interval calibrated inside the log against the bootstrap, on finished cells (issue 58;
the rule, written before its run: docs/notebook.md, "The interval calibrated inside the log").

`python -m bench.studies.calibrated --root DIR CELL ...`: for each development cell whose stages
lie under ``DIR/cells/<cell>/<stage>/<key>/`` (an artifact root; stage folders are found by name,
so artifacts of an earlier commit whose ADWM rows today's code reproduces serve as they are), the
held-out actions' walked errors (adwm_core/ope/imagination/held_out.py: 20 groups, the cell's
hand-over settings) size a shared off-log error, and ADWM's rollouts, rebuilt from its imagined
samples, are graded under three intervals (bench.studies.verdicts.grade):
- ``bootstrap``: the imagined returns' own spread;
- ``calibrated``: a shared error within the conformal range of the groups' mean errors;
- ``calibrated, episodes``: within the 2.5 % and 97.5 % conformal quantiles of single walked episodes' errors.
Per cell: the error ranges, the share of rollouts that left the log per ε, and coverage / median
width over the range of J / decided / precision of each interval.
→ bench/results/calibrated.{md,json}.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np

from adwm_core.data import LOGPROBS, TRAJECTORIES, read_table
from adwm_core.data.behaviour_log import BehaviourLog
from adwm_core.model.world_model import WorldModel
from adwm_core.ope.classical.settings import BaselineConfig
from adwm_core.ope.imagination.encoded_log import EncodedLog
from adwm_core.ope.imagination.estimates import rollout_rows
from adwm_core.ope.imagination.held_out import conformal_range, held_out_errors
from adwm_core.ope.imagination.rollouts import ImaginedStep, Rollouts
from adwm_core.ope.statistics.bounds import ReturnRange
from bench.common import cell_config, development_cells, stage_file, write_grouped
from bench.studies.verdicts import grade

INTERVALS = ("bootstrap", "calibrated", "calibrated, episodes")
GROUPS = 20


def rollouts_from_samples(samples: str, gamma: float) -> tuple[str, list[Rollouts], list[int]]:
    """π_e's label and member 0's rollouts per seed, rebuilt from the ADWM stage's imagined samples."""
    by_seed = defaultdict(list)
    for line in open(samples):
        episode = json.loads(line)
        if episode["member"] == 0:
            by_seed[episode["seed"]].append(episode)
    seeds, runs = sorted(by_seed), []
    for seed in seeds:
        episodes = sorted(by_seed[seed], key=lambda e: e["item_id"])
        steps, returns, lengths = [], [], []
        for e in episodes:
            turns = [turn for turn in e["conversations"] if turn["from"] == "gpt"]
            steps += [ImaginedStep(e["item_id"], t, 0, turn["action"], turn["source"], turn["reward"], False)
                      for t, turn in enumerate(turns)]
            returns.append(sum(gamma ** t * turn["reward"] for t, turn in enumerate(turns)))
            lengths.append(len(turns))
        runs.append(Rollouts(np.array([e["epsilon"] for e in episodes]), np.array(returns), np.zeros(len(episodes)),
                             np.array(lengths), np.zeros(len(episodes), int), {}, steps))
    return episodes[0]["policy"], runs, seeds


def measure(root: str, cell: str) -> dict:
    import pyarrow.parquet as pq

    config = cell_config(cell)
    adwm, settings = config.adwm, BaselineConfig(gamma=config.adwm.gamma, fqe=config.handover_fqe)
    log_file = stage_file(root, cell, "behaviour", "trajectories.parquet")
    scores = stage_file(root, cell, "logprobs", "logprobs.parquet")
    model = WorldModel.load_ensemble(stage_file(root, cell, "world-model", "members"))[0]
    log = BehaviourLog(read_table(log_file, TRAJECTORIES), log_file)
    encoded = EncodedLog(log, model)
    held = held_out_errors(log, model, encoded.bank, encoded.steps(read_table(scores, LOGPROBS), scores_name=scores,
                                                                     action_reading=settings.fqe.action_reading),
                           adwm, settings, groups=GROUPS)
    policy, runs, seeds = rollouts_from_samples(stage_file(root, cell, "adwm", "samples.jsonl"), adwm.gamma)
    rows = rollout_rows([runs], seeds, adwm, ReturnRange.declared(config.env.name), policy=policy)
    truth, stderr = {}, {}
    for point in pq.read_table(stage_file(root, cell, "ground-truth", "summary.parquet")).to_pylist():
        truth[point["policy"], float(point["epsilon"])] = point["mean_return"]
        stderr[point["policy"], float(point["epsilon"])] = point["stderr"]
    ranges = {"calibrated": held.error_range(adwm.confidence),
              "calibrated, episodes": conformal_range(np.concatenate(held.errors), adwm.confidence)}
    plain = [{**row, "low": row["value"], "high": row["value"]} for row in rows]
    return {"bootstrap": grade(plain, truth, stderr, adwm),
            **{name: grade(rows, truth, stderr, adwm, error_range) for name, error_range in ranges.items()},
            "error_ranges": ranges, "held_out": held.to_json(adwm.confidence),
            "left_the_log": {f"{e:g}": float(np.mean([r["log_steps"] < r["steps"] for r in rows if r["epsilon"] == e]))
                             for e in sorted({r["epsilon"] for r in rows})}}


GRADES = ("coverage", "width", "decided", "precision")


def graded(result: dict, intervals: tuple[str, ...]) -> str:
    """One cell's grades under each of ``intervals``, as markdown table cells."""
    return " | ".join(" / ".join(f"{result[name][m]:.2f}" for m in GRADES) for name in intervals)


def mean_grades(results: dict[str, dict], intervals: tuple[str, ...]) -> str:
    """The cells' mean grades under each of ``intervals``, as markdown table cells."""
    return " | ".join(" / ".join(f"{np.nanmean([r[name][m] for r in results.values()]):.2f}" for m in GRADES)
                      for name in intervals)


def development_arguments(doc: str) -> argparse.Namespace:
    """``--root DIR CELL ...`` of a study that chooses an interval on development cells only."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="the artifact root holding cells/<cell>/<stage>/<key>/")
    parser.add_argument("cells", nargs="+")
    args = parser.parse_args()
    if any(cell not in development_cells() for cell in args.cells):
        parser.error("an interval is chosen on development cells (local-*) only: test cells are never tuned on")
    return args


def table(title: str, results: dict[str, dict]) -> list[str]:
    lines = [f"**{title}** (coverage / median width over the range of J / decided / precision)", "",
             "| cell | error range (groups) | left the log, ε = 0…1 | " + " | ".join(INTERVALS) + " |",
             "|---" * (len(INTERVALS) + 3) + "|"]
    for cell, r in results.items():
        low, high = r["error_ranges"]["calibrated"]
        left = " ".join(f"{v:.2f}" for v in r["left_the_log"].values())
        lines.append(f"| {cell} | [{low:+.2f}, {high:+.2f}] | {left} | {graded(r, INTERVALS)} |")
    lines.append(f"| **mean of {len(results)}** | | | {mean_grades(results, INTERVALS)} |")
    return lines + [""]


def main() -> None:
    args = development_arguments(__doc__)
    results = {"Development cells (tuned on)": {cell: measure(args.root, cell) for cell in args.cells}}
    write_grouped("calibrated", "ADWM's interval calibrated inside the log, against ground truth", __doc__, results,
                  table)


if __name__ == "__main__":
    main()
