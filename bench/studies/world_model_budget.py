"""The world model's budget on every development cell: its training seconds and what ADWM reads
through it, at the default's 50 000 drawn transitions and at 250 000 (issue 74's "the world
model's accuracy at its speed"; no stage runs).

Per development cell: each budget's world model (the stage finished at today's keys, its
``members/history.json``: the training loop's seconds, without loading the log or writing the
weights) and ADWM's ρ, NMAE and coverage under each, from the bench loop's reading of the 250 000
candidate (bench/results/loop/world-model.transitions-250000.json: its rows and the default's, one
loop). The issue's two routes: 250 000 transitions in ≤ 300 s on every cell, or the 300 s model
within 0.02 NMAE and 0.02 coverage of the 250 000 one on every cell.
→ bench/results/world_model_budget.{md,json}.
"""

from __future__ import annotations

import json
import math

from adwm_core.cell import CellConfig
from bench.adoption import HEADLINE
from bench.common import RESULTS, artifact, cell_config, development_cells, machine
from bench.tables.heldout import variant_path

LARGE = {"world_model.transitions": 250_000}
LOOP = RESULTS / "loop" / "world-model.transitions-250000.json"
BOUND_S, BOUND_NMAE, BOUND_COVERAGE = 300, 0.02, 0.02


def training_seconds(config: CellConfig) -> float:
    """The finished world model's training seconds (its history's last round), NaN where unfinished."""
    model = artifact(config, "world-model", required=False)
    if model is None:
        return math.nan
    with open(model.file("members") + "/history.json") as f:
        return float(json.load(f)["epochs"][-1]["seconds"])


def main() -> None:
    loop = json.loads(LOOP.read_text())
    rows = {}
    for cell in development_cells():
        large, small = loop["rows"].get(cell, {}), loop["default_rows"].get(cell, {})
        grade = {name: found.get("estimators", {}).get(HEADLINE, {}) for name, found in (("50k", small), ("250k", large))}
        rows[cell] = {"split_pairs": small.get("split_pairs"),
                      "seconds": {"50k": training_seconds(cell_config(cell)),
                                  "250k": training_seconds(CellConfig.load(variant_path(cell, LARGE)))},
                      **{k: {b: grade[b].get(k, math.nan) for b in grade} for k in ("rho", "nmae", "coverage")}}
    within = {c: abs(r["nmae"]["50k"] - r["nmae"]["250k"]) <= BOUND_NMAE
              and abs(r["coverage"]["50k"] - r["coverage"]["250k"]) <= BOUND_COVERAGE for c, r in rows.items()}
    fast = {c: r["seconds"]["250k"] <= BOUND_S for c, r in rows.items()}
    (RESULTS / "world_model_budget.json").write_text(json.dumps(
        {"machine": machine(), "loop_commit": loop["commit"], "rows": rows, "within": within, "fast": fast}, indent=2))

    def number(value: float, form: str) -> str:
        return "–" if value is None or value != value else format(value, form)

    lines = ["# The world model's budget on every development cell", "", __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"ADWM figures from the loop at `{loop['commit']}`; seconds: 2 CPUs x86_64, each model trained when the "
             "bench built it (the 50 000 models on 2026-11-29 morning, the 250 000 ones by the loop on 2026-11-29, "
             "some beside other work).", "",
             "| cell | split pairs | seconds 50k | 250k | ρ 50k | 250k | NMAE 50k | 250k | coverage 50k | 250k | within 0.02 |",
             "|---|---|---|---|---|---|---|---|---|---|---|",
             *[f"| {c} | {r['split_pairs']} | {number(r['seconds']['50k'], '.0f')} | {number(r['seconds']['250k'], '.0f')} | "
               f"{number(r['rho']['50k'], '+.2f')} | {number(r['rho']['250k'], '+.2f')} | {number(r['nmae']['50k'], '.2f')} | "
               f"{number(r['nmae']['250k'], '.2f')} | {number(r['coverage']['50k'], '.2f')} | "
               f"{number(r['coverage']['250k'], '.2f')} | {'yes' if within[c] else 'no'} |" for c, r in rows.items()], "",
             f"250 000 transitions in ≤ {BOUND_S} s: {sum(fast.values())} of {len(fast)} cells. The 50 000 model within "
             f"{BOUND_NMAE} NMAE and {BOUND_COVERAGE} coverage of the 250 000 one: {sum(within.values())} of {len(within)} cells.",
             "", f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "world_model_budget.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
