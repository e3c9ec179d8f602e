"""How the recommended estimate's verdicts are calibrated, judged by bench/ADOPTION_VERDICTS.md
(issue 87: "calibrate with cells as the units, drop pairs the truth does not split"; no stage runs).

`python -m bench.studies.verdict_calibration`: the shipped bench file's cells, each given its
verdicts from the other cells alone (``leave_one_cell_out``, no live episodes), under today's
settings and under each of ``CANDIDATES`` (``VERDICT_PAIRS``, ``VERDICT_WEIGHTS``,
``VERDICT_ERROR_RATE`` of adwm_core/ope/statistics/recommend.py); per cell decided and precision,
and how many pairs the truth does not split got a verdict anyway; then the rule's verdict, appended
to bench/results/adoptions.md → bench/results/verdict_calibration.{md,json}.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from datetime import date

import numpy as np

from adwm_core.ope.statistics import recommend
from adwm_core.ope.statistics.recommend import MIN_SPLIT_PAIRS, BenchCalibration
from adwm_core.provenance import source_version
from bench.calibrate import leave_one_cell_out
from bench.common import RESULTS, machine
from bench.figures import mean_with_interval

SETTINGS = ("VERDICT_PAIRS", "VERDICT_WEIGHTS", "VERDICT_ERROR_RATE")
CANDIDATES = {  # named in bench/ADOPTION_VERDICTS.md before the first reading
    "split": {"VERDICT_PAIRS": "split"},
    "split, cells": {"VERDICT_PAIRS": "split", "VERDICT_WEIGHTS": "cells"},
    "cells": {"VERDICT_WEIGHTS": "cells"},
}
MIN_PRECISION = 0.90
LOW_PRECISION = 0.80


@contextmanager
def settings(changed: dict, allowed: tuple[str, ...] = SETTINGS):
    """recommend.py's settings named in ``allowed`` changed for the block, then restored."""
    kept = {name: getattr(recommend, name) for name in allowed}
    for name, value in changed.items():
        if name not in allowed:
            raise ValueError(f"{name} is not a setting this study judges; choose from {', '.join(allowed)}")
        setattr(recommend, name, value)
    try:
        yield
    finally:
        for name, value in kept.items():
            setattr(recommend, name, value)


def graded(bench: BenchCalibration, changed: dict) -> dict[str, dict]:
    """Per counted cell: its environment, decided, precision and the verdict on its agents at ε = 0."""
    counted = {c.name: c for c in bench.cells if c.split_pairs >= MIN_SPLIT_PAIRS}
    with settings(changed):
        readings = leave_one_cell_out(bench)
    found = {}
    for name, cell in counted.items():
        reading = readings[name]
        found[name] = {"group": cell.group, "decided": reading.get("decided", math.nan),
                       "precision": reading.get("precision", math.nan), "agents": reading.get("agents")}
    return found


def unsplit_named(bench: BenchCalibration, changed: dict) -> dict[str, tuple[int, int]]:
    """Per counted cell: (verdicts given on pairs the truth does not split, such pairs)."""
    found = {}
    with settings(changed):
        for cell in bench.cells:
            if cell.split_pairs < MIN_SPLIT_PAIRS:
                continue
            reading = recommend.recommend(cell.estimates, return_range=(cell.low, cell.high), answered=cell.answered,
                                          bench=bench, cell=cell.name, scale=cell.scale)
            unsplit = [v for v in reading.verdicts if not cell.splits(v.a, v.b)]
            found[cell.name] = (sum(v.better is not None for v in unsplit), len(unsplit))
    return found


def decide(default: dict[str, dict], candidates: dict[str, dict[str, dict]]) -> tuple[str | None, dict[str, list[str]]]:
    """bench/ADOPTION_VERDICTS.md: the adopted candidate (None: the default stays) and each one's reasons."""
    reasons, passing = {}, {}
    low_default = sum(r["precision"] < LOW_PRECISION for r in default.values() if math.isfinite(r["precision"]))
    for name, rows in candidates.items():
        precision = float(np.nanmean([r["precision"] for r in rows.values()]))
        delta = mean_with_interval([rows[c]["decided"] - default[c]["decided"] for c in default])
        low = sum(r["precision"] < LOW_PRECISION for r in rows.values() if math.isfinite(r["precision"]))
        checks = [(precision >= MIN_PRECISION, f"mean precision {precision:.3f} (needs ≥ {MIN_PRECISION})"),
                  (delta[0] > 0 and delta[1] > 0,
                   f"mean Δdecided {delta[0]:+.3f} [{delta[1]:+.3f}, {delta[2]:+.3f}] (needs > 0, low end > 0)"),
                  (low <= low_default, f"precision < {LOW_PRECISION} on {low} cells (default: {low_default})")]
        reasons[name] = [("✓ " if ok else "✗ ") + why for ok, why in checks]
        if all(ok for ok, _ in checks):
            passing[name] = float(np.mean([r["decided"] for r in rows.values()]))
    return (max(passing, key=passing.get) if passing else None), reasons


def main() -> None:
    bench = BenchCalibration.shipped()
    default_settings = {name: getattr(recommend, name) for name in SETTINGS}
    rows = {"default": graded(bench, {}), **{name: graded(bench, changed) for name, changed in CANDIDATES.items()}}
    unsplit = {"default": unsplit_named(bench, {}),
               **{name: unsplit_named(bench, changed) for name, changed in CANDIDATES.items()}}
    adopted, reasons = decide(rows["default"], {n: rows[n] for n in CANDIDATES})
    cells = list(rows["default"])

    def mean(name: str, key: str) -> float:
        return float(np.nanmean([rows[name][c][key] for c in cells]))

    def figure(value: float) -> str:
        return "–" if value != value else f"{value:.2f}"

    lines = ["# How the verdicts are calibrated, judged by bench/ADOPTION_VERDICTS.md", "",
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"Bench file measured at `{bench.commit}`; {len(cells)} counted cells; today's settings "
             f"{json.dumps(default_settings, ensure_ascii=False)}.", "",
             "| setting | decided | precision | cells precision < 0.80 | verdicts on pairs the truth does not split |",
             "|---|---|---|---|---|",
             *[f"| {name} | {mean(name, 'decided'):.3f} | {mean(name, 'precision'):.3f} | "
               f"{sum(rows[name][c]['precision'] < LOW_PRECISION for c in cells)} | "
               f"{sum(u[0] for u in unsplit[name].values())} of {sum(u[1] for u in unsplit[name].values())} |"
               for name in rows], "",
             "Per cell, decided / precision:", "",
             "| cell | " + " | ".join(rows) + " |", "|---" * (len(rows) + 1) + "|",
             *[f"| {c} | " + " | ".join(f"{figure(rows[n][c]['decided'])} / {figure(rows[n][c]['precision'])}"
                                        for n in rows) + " |" for c in cells], "",
             "The agents at ε = 0, per setting:", "",
             "| cell | " + " | ".join(rows) + " |", "|---" * (len(rows) + 1) + "|",
             *[f"| {c} | " + " | ".join(rows[n][c]["agents"] or "–" for n in rows) + " |" for c in cells], "",
             "## The rule's verdict", "",
             *[line for name in CANDIDATES for line in (f"- `{name}`:", *(f"  - {r}" for r in reasons[name]))], "",
             f"**{'adopt `' + adopted + '`' if adopted else 'keep the default'}**", "",
             f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "verdict_calibration.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "verdict_calibration.json").write_text(json.dumps(
        {"commit": bench.commit, "default": default_settings, "candidates": CANDIDATES, "rows": rows,
         "unsplit_named": unsplit, "reasons": reasons, "adopted": adopted, "machine": machine()}, indent=2,
        default=str))
    append_adoption("verdicts", reasons, adopted, "ADOPTION_VERDICTS.md", "verdict_calibration.md")
    print("\n".join(lines))


def append_adoption(kind: str, reasons: dict[str, list[str]], adopted: str | None, rule: str, figures: str) -> None:
    """A reading's verdict under its own rule (bench/``rule``), appended to bench/results/adoptions.md."""
    entry = [f"## {kind}: {', '.join(f'`{n}`' for n in reasons)} — "
             f"{'adopt `' + adopted + '`' if adopted else 'keep the default'} ({date.today()}, `{source_version()}`)", "",
             *[f"- `{name}`: " + "; ".join(r[2:] for r in why) for name, why in reasons.items()],
             f"- rule: [../{rule}](../{rule}); figures: [{figures}]({figures})", ""]
    with open(RESULTS / "adoptions.md", "a") as f:
        f.write("\n" + "\n".join(entry))


if __name__ == "__main__":
    main()
