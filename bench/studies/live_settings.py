"""How the recommended estimate folds in live episodes, judged by bench/ADOPTION_LIVE.md (issue 87:
"the combination is never worse than live-only in coverage or decided pairs").

`ADWM_HOME=<a root where make loop ran> python -m bench.studies.live_settings`: the shipped bench
file's cells, each read from the others with 8 of each point's ground-truth episodes folded in
(``leave_one_cell_out``: the mean of 10 draws), under today's ``with_live`` and under each of
``CANDIDATES`` (settings of adwm_core/ope/statistics/recommend.py), beside the same episodes alone;
then the rule's verdict, appended to bench/results/adoptions.md →
bench/results/live_settings.{md,json}.
"""

from __future__ import annotations

import json
import numpy as np

from adwm_core.ope.statistics.recommend import MIN_SPLIT_PAIRS, BenchCalibration
from bench.calibrate import leave_one_cell_out, live_returns
from bench.common import RESULTS, machine
from bench.studies.verdict_calibration import append_adoption, settings

SETTINGS = ("LIVE_PRIOR_TEST", "PRIOR_CONTRADICTED")
CANDIDATES = {"cell": {"LIVE_PRIOR_TEST": "cell"}}  # named in bench/ADOPTION_LIVE.md before the first reading
FIGURES = ("coverage", "half_width", "decided", "precision")
MIN_COVERAGE = MIN_PRECISION = 0.90
DECIDED_SLACK = 0.03


def graded(bench: BenchCalibration, live: dict, changed: dict) -> dict[str, dict[str, dict]]:
    """Per counted cell: the +live figures and the live-only ones, under ``changed``."""
    with settings(changed, SETTINGS):
        readings = leave_one_cell_out(bench, live)
    counted = [c.name for c in bench.cells if c.split_pairs >= MIN_SPLIT_PAIRS and "live" in readings[c.name]]
    return {name: {"live": readings[name]["live"], "alone": readings[name]["live_alone"]} for name in counted}


def means(rows: dict[str, dict[str, dict]], side: str) -> dict[str, float]:
    return {k: float(np.nanmean([r[side][k] for r in rows.values()])) for k in FIGURES}


def decide(default: dict, candidates: dict[str, dict]) -> tuple[str | None, dict[str, list[str]]]:
    """bench/ADOPTION_LIVE.md: the adopted candidate (None: the default stays) and each one's reasons."""
    reasons, passing, before = {}, {}, means(default, "live")
    for name, rows in candidates.items():
        got, alone = means(rows, "live"), means(rows, "alone")
        checks = [(got["coverage"] >= alone["coverage"] and got["decided"] >= alone["decided"],
                   f"coverage {got['coverage']:.3f} vs alone {alone['coverage']:.3f}, decided {got['decided']:.3f} "
                   f"vs alone {alone['decided']:.3f} (neither below)"),
                  (got["coverage"] >= MIN_COVERAGE and got["precision"] >= MIN_PRECISION,
                   f"coverage {got['coverage']:.3f}, precision {got['precision']:.3f} (each ≥ 0.90)"),
                  (got["decided"] >= before["decided"] - DECIDED_SLACK,
                   f"decided {got['decided']:.3f} vs the default's {before['decided']:.3f} (at most {DECIDED_SLACK} lower)")]
        reasons[name] = [("✓ " if ok else "✗ ") + why for ok, why in checks]
        if all(ok for ok, _ in checks):
            passing[name] = got["half_width"]
    return (min(passing, key=passing.get) if passing else None), reasons


def main() -> None:
    bench = BenchCalibration.shipped()
    live = {c.name: found[1] for c in bench.cells if (found := live_returns(c.name)) is not None}
    if not live:
        raise SystemExit("no development cell's ground truth is in ADWM_HOME: run `make loop` there first")
    rows = {"default": graded(bench, live, {}), **{n: graded(bench, live, ch) for n, ch in CANDIDATES.items()}}
    adopted, reasons = decide(rows["default"], {n: rows[n] for n in CANDIDATES})
    cells = list(rows["default"])

    def row(values: dict) -> str:
        return " | ".join(f"{values[k]:.3f}" for k in FIGURES)

    lines = ["# How live episodes are folded in, judged by bench/ADOPTION_LIVE.md", "",
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"Bench file measured at `{bench.commit}`; {len(cells)} counted cells with ground-truth episodes.", "",
             "| setting | coverage | half-width | decided | precision | alone: coverage | half-width | decided | "
             "precision |", "|---" * 9 + "|",
             *[f"| {n} | {row(means(r, 'live'))} | {row(means(r, 'alone'))} |" for n, r in rows.items()], "",
             "Per cell, coverage / half-width / decided with the live episodes (the episodes alone are the same under "
             "every setting):", "",
             "| cell | alone | " + " | ".join(rows) + " |", "|---" * (len(rows) + 2) + "|",
             *[f"| {c} | " + " / ".join(f"{rows['default'][c]['alone'][k]:.2f}" for k in ("coverage", "half_width",
                                                                                         "decided")) + " | "
               + " | ".join(" / ".join(f"{rows[n][c]['live'][k]:.2f}" for k in ("coverage", "half_width", "decided"))
                            for n in rows) + " |" for c in cells], "",
             "## The rule's verdict", "",
             *[line for n in CANDIDATES for line in (f"- `{n}`:", *(f"  - {r}" for r in reasons[n]))], "",
             f"**{'adopt `' + adopted + '`' if adopted else 'keep the default'}**", "",
             f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "live_settings.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "live_settings.json").write_text(json.dumps(
        {"commit": bench.commit, "candidates": CANDIDATES, "rows": rows, "reasons": reasons, "adopted": adopted,
         "machine": machine()}, indent=2))
    append_adoption("live top-up", reasons, adopted, "ADOPTION_LIVE.md", "live_settings.md")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
