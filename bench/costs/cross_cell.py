"""A cross-policy cell's upstream from an empty root, stage by stage (issue 74, part 2).

`python -m bench.costs.cross_cell [CELL]` (default B4, `test-b2-twx-sorting-cross`: SmolLM2-135M-Instruct
as π_e against a tiny GPT-2 family): every stage the cell's estimators read — the policies, the
behaviour log, the log-probs, the world model, ψ where π_e reads soft tokens, the greedy actions
where ADWM hands over to FQE, and the ground truth — runs in this process, one after another, in
the regular artifact root (so the bench reuses them), each timed; a stage already finished is
shown as reused, with no time. The estimator stages (ADWM, the baselines, the report) are not
run: a test cell's estimator figures come only through the reading ledger (bench/ledger.py),
which times them. → bench/results/cross_cell.{md,json}
"""

from __future__ import annotations

import argparse
import json
import time

from adwm_core import pipeline
from bench.common import RESULTS, cell_config, machine

ESTIMATOR_STAGES = ("adwm", "baselines", "report")


def upstream_steps(config) -> list[pipeline.Step]:
    """Every step of the cell's plan that is not an estimator stage, inputs first."""
    return [s for s in pipeline.plan(config) if s.name not in ESTIMATOR_STAGES]


def shown(seconds: float | None) -> str:
    return "reused" if seconds is None else f"{seconds:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cell", nargs="?", default="test-b2-twx-sorting-cross")
    args = parser.parse_args()
    config = cell_config(args.cell)
    rows, started = [], time.perf_counter()
    for step in upstream_steps(config):
        reused = []
        began = time.perf_counter()
        pipeline.run(config, step.name, step.policy, log=print,
                     on_start=lambda artifact, was_reused: reused.append(was_reused))
        seconds = time.perf_counter() - began
        rows.append({"stage": step.name, "policy": None if step.policy is None else step.policy.label,
                     "seconds": None if reused and reused[0] else seconds})
        print(f"{step.name} {rows[-1]['policy'] or ''}: {shown(rows[-1]['seconds'])} s", flush=True)
    total = time.perf_counter() - started
    host = machine()
    (RESULTS / "cross_cell.json").write_text(json.dumps({"cell": args.cell, "machine": host, "seconds": total,
                                                         "stages": rows}, indent=2))
    computed = [r for r in rows if r["seconds"] is not None]
    lines = [f"# A cross-policy cell's upstream from an empty root: `{args.cell}`", "", __doc__.split("\n\n")[1], "",
             f"{host['cpus']} CPUs, {host['processor']}, {host['date']}: **{total / 60:.1f} min** for the "
             f"{len(computed)} stages computed ({len(rows) - len(computed)} reused).", "",
             "| stage | π_e | seconds |", "|---|---|---|",
             *(f"| {r['stage']} | {r['policy'] or '–'} | {shown(r['seconds'])} |" for r in rows), "",
             f"Machine: `{json.dumps(host)}`"]
    (RESULTS / "cross_cell.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
