"""The reading ledger: a test batch's estimator figures come from one command, which appends them
to bench/results/ledger.jsonl, and from nothing else (bench/bench.yaml, bench/ADOPTION.md).

`python -m bench.ledger read BATCH`: the batch's admitted cells (bench/results/admission.json) run
in this process (finished stages reused: their upstream first, then the estimator stages under
today's default), then one line is appended: the date, the commit, the headline estimator, every
cell's stage keys, the default read (a digest of the cells' report keys: they fold in every
setting and the code of every stage), and the figures — per cell its truth-split pairs, per
estimator ρ, NMAE, coverage, decided and precision, and the recommended estimate as the product
printed it, with its half-width and its verdict on the cell's two agents at ε = 0. A batch already
read is refused unless ``--again``: a second reading under another default makes the batch **seen**, and every table
says so (:func:`standing`). `python -m bench.ledger prepare BATCH`: only the stages no figure
comes from (policies, behaviour, log-probs, world model, ψ, ground truth) of the admitted cells, so
that the one reading, later, computes just the estimator stages; it reads and appends nothing, and
may be stopped and resumed (finished stages are kept, and the small ones also in bench/store to
commit, which the next session's prepare restores: bench/store.py). `python -m bench.ledger show`: the batches'
tables from the ledger, computing nothing. → bench/results/ledger.jsonl, bench/results/test_batches.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from adwm_core import pipeline
from adwm_core.provenance import source_version
from bench import store
from bench.adoption import HEADLINE, MIN_SPLIT_PAIRS
from bench.calibrate import cell_results, recommended_grades
from bench.studies.verdicts import LIVE_EPISODES, LIVE_ONLY, RECOMMENDED_LIVE
from bench.common import RESULTS, batch_cells, cell_config, test_batches
from bench.figures import mean_with_interval, truth_split_pairs

LEDGER = RESULTS / "ledger.jsonl"


def _entries(batch: str, ledger: Path) -> list[dict]:
    if not ledger.exists():
        return []
    lines = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
    return [entry for entry in lines if entry["batch"] == batch]


def readings(batch: str, ledger: Path = LEDGER) -> list[dict]:
    """The ledger's readings of ``batch``, oldest first."""
    return [entry for entry in _entries(batch, ledger) if entry.get("kind", "reading") == "reading"]


def protocol(batch: str, ledger: Path = LEDGER) -> dict | None:
    """What the ledger committed for ``batch`` before its reading: its headline row and the cells
    reported apart from its means (``declare``); None where nothing was."""
    declared = [entry for entry in _entries(batch, ledger) if entry.get("kind") == "protocol"]
    return declared[0] if declared else None


def declare(batch: str, headline: str, apart: list[str], why: str, ledger: Path = LEDGER) -> dict:
    """Commit the batch's reading protocol before its reading: which row is its headline, which
    cells are reported apart from its means, and why; refused once the batch is read or declared."""
    cells = batch_cells(batch)
    if readings(batch, ledger) or protocol(batch, ledger):
        raise SystemExit(f"batch {batch!r} already has a {'reading' if readings(batch, ledger) else 'protocol'}: "
                         "its protocol is fixed once, before its reading")
    outside = [cell for cell in apart if cell not in cells]
    if outside:
        raise SystemExit(f"cells to report apart {outside} are not admitted cells of batch {batch!r}: {cells}")
    entry = {"batch": batch, "kind": "protocol", "date": time.strftime("%Y-%m-%d %H:%M"), "commit": source_version(),
             "headline": headline, "apart": apart, "why": why}
    append(entry, ledger)
    return entry


def standing(batch: str, ledger: Path = LEDGER) -> str:
    """``unread``; ``test`` (read under one default); ``seen`` (read under two defaults or more)."""
    defaults = {entry["default"] for entry in readings(batch, ledger)}
    return "unread" if not defaults else "test" if len(defaults) == 1 else "seen"


def default_digest(stage_keys: dict[str, dict[str, str]]) -> str:
    """What was read, as one name: the digest of the cells' report keys."""
    reports = {cell: keys["report"] for cell, keys in sorted(stage_keys.items())}
    return hashlib.sha256(json.dumps(reports, sort_keys=True).encode()).hexdigest()[:16]


def append(entry: dict, ledger: Path = LEDGER) -> None:
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with ledger.open("a") as f:
        f.write(json.dumps(entry) + "\n")


def read_batch(batch: str, again: bool = False, ledger: Path = LEDGER) -> dict:
    """Run and read the batch's admitted cells once, appending the reading to the ledger."""
    admitted = batch_cells(batch)
    declared = protocol(batch, ledger)
    if declared is None:
        raise SystemExit(f"batch {batch!r} has no protocol in the ledger: commit its headline row first, "
                         f"`python -m bench.ledger declare {batch} --headline ESTIMATOR [--apart CELL …] --why …`")
    if readings(batch, ledger) and not again:
        raise SystemExit(f"batch {batch!r} was read already ({len(readings(batch, ledger))} reading(s)): a second "
                         "reading under another default makes it seen; pass --again to read it anyway, or "
                         "`python -m bench.ledger show` to print what was read")
    stage_keys, figures = {}, {}
    for cell in admitted:
        config = cell_config(cell)
        report = pipeline.run_all(config)
        stage_keys[cell] = {f"{step.name}" + (f"@{step.policy.name}" if step.policy else ""):
                            pipeline.locate(config, step.name, step.policy).key for step in pipeline.plan(config)}
        figures[cell] = {"split_pairs": truth_split_pairs(config), "estimators": cell_results(report, cell),
                         "recommended": recommended_grades(report, cell) if report is not None else None}
    entry = {"batch": batch, "date": time.strftime("%Y-%m-%d %H:%M"), "commit": source_version(),
             "headline": declared["headline"], "rule_headline": HEADLINE, "apart": declared["apart"], "cells": admitted, "default": default_digest(stage_keys),
             "stage_keys": stage_keys, "figures": figures}
    append(entry, ledger)
    return entry


def batch_table(batch: str, ledger: Path = LEDGER, shown: tuple[str, ...] | None = None) -> list[str]:
    """The batch's table from its latest reading, titled with its standing; nothing computed."""
    found = readings(batch, ledger)
    if not found:
        return [f"**Test batch `{batch}`: unread.**", ""]
    latest, status = found[-1], standing(batch, ledger)
    defaults = len({entry["default"] for entry in found})
    title = (f"**Test batch `{batch}` (test: read once, {latest['date']}, `{latest['commit']}`)**" if status == "test"
             else f"**Test batch `{batch}` — SEEN: read {len(found)} times under {defaults} defaults, no longer held "
                  f"out (latest {latest['date']}, `{latest['commit']}`)**")
    estimators = shown or _graded_rows(latest)
    headline, apart = latest.get("headline", HEADLINE), latest.get("apart", [])
    if "apart" in latest and headline in estimators:  # a reading under a declared protocol opens on its headline
        estimators = (headline, *(e for e in estimators if e != headline))
    lines = [title + f" (ρ / NMAE / coverage / decided / precision; headline `{headline}`, committed before the "
                     "reading" + (f"; reported apart from the means: {', '.join(apart)}" if apart else "") + ")", "",
             "| cell | truth-split pairs | " + " | ".join(estimators) + " |", "|---|---|" + "---|" * len(estimators)]
    for cell, f in latest["figures"].items():
        grades = [_grades((f["estimators"] or {}).get(e)) for e in estimators]
        lines.append(f"| {cell}{' (apart)' if cell in apart else ''} | {f['split_pairs']} | " + " | ".join(grades) + " |")
    counted = [f for cell, f in latest["figures"].items() if _counted(cell, f, apart) and f["estimators"]]
    means = []
    for e in estimators:
        rows = [f["estimators"][e] for f in counted if "rho" in f["estimators"].get(e, {})]
        rhos = [row["rho"] for row in rows if np.isfinite(row["rho"])]
        rest = [[row[k] for row in rows if row.get(k) is not None and np.isfinite(row[k])]
                for k in ("nmae", "coverage", "decided", "precision")]
        means.append("–" if not rhos else "{:+.2f} [{:+.2f}, {:+.2f}]".format(*mean_with_interval(rhos)) + " / "
                     + " / ".join("–" if not shares else f"{np.mean(shares):.2g}" if k == 0 else f"{np.mean(shares):.2f}"
                                  for k, shares in enumerate(rest)))
    lines.append(f"| **mean ρ [CI95] / NMAE / coverage / decided / precision** ({len(counted)} cells splitting "
                 f"≥ {MIN_SPLIT_PAIRS} pairs) | | " + " | ".join(means) + " |")
    return lines + [""]


def _graded_rows(reading: dict) -> tuple[str, ...]:
    """The estimators a reading grades on ρ (the rows that carry only verdicts are left out)."""
    return tuple(dict.fromkeys(e for f in reading["figures"].values() for e, row in (f["estimators"] or {}).items()
                               if "rho" in row))


def verdict_only_table(batch: str, ledger: Path = LEDGER) -> list[str]:
    """The latest reading's rows that carry only verdicts (a classical estimator's verdicts under a
    named bound, ``FQE@bernstein``): per row and cell, decided / precision; the mean over the
    counted cells."""
    found = readings(batch, ledger)
    if not found:
        return []
    latest = found[-1]
    apart, graded = latest.get("apart", []), set(_graded_rows(latest))
    rows = tuple(dict.fromkeys(e for f in latest["figures"].values() for e in f["estimators"] or {} if e not in graded))
    if not rows:
        return []
    cells = list(latest["figures"])
    lines = [f"**Test batch `{batch}`: verdicts under a named bound** (decided / precision, of the pairs the truth "
             "splits; these rows estimate no level)", "",
             "| verdicts | " + " | ".join(cells) + " | **mean** |", "|---|" + "---|" * (len(cells) + 1)]
    for name in rows:
        found_rows = {c: (latest["figures"][c]["estimators"] or {}).get(name) for c in cells}
        counted = [r for c, r in found_rows.items() if r and _counted(c, latest["figures"][c], apart)]
        means = {k: [r[k] for r in counted if r.get(k) is not None and r[k] == r[k]] for k in ("decided", "precision")}
        mean = {k: float(np.mean(v)) if v else None for k, v in means.items()}
        lines.append(f"| {name} | " + " | ".join(_shares(r) for r in found_rows.values()) + f" | {_shares(mean)} |")
    return lines + [""]


def recommended_table(batch: str, ledger: Path = LEDGER) -> list[str]:
    """The batch's headline as a user reads it, from its latest reading: per cell the recommended
    estimate's ρ, NMAE, coverage, half-width over the return range, decided and precision; the same
    with live episodes folded in, and those episodes alone; and its verdict on the cell's two agents
    at ε = 0 beside the truth. Means over the counted cells, those reported apart left out."""
    found = readings(batch, ledger)
    if not found or not any(f.get("recommended") for f in found[-1]["figures"].values()):
        return []
    latest = found[-1]
    apart = latest.get("apart", [])
    offline, live = ("rho", "nmae", "coverage", "half_width", "decided", "precision"), ("coverage", "half_width",
                                                                                         "decided", "precision")

    def row(f: dict) -> list[float | None]:
        estimators = f["estimators"] or {}
        return ([(f.get("recommended") or {}).get(k) for k in offline]
                + [(estimators.get(RECOMMENDED_LIVE) or {}).get(k) for k in live]
                + [(estimators.get(LIVE_ONLY) or {}).get(k) for k in live])

    def shown(values: list) -> str:
        return " | ".join("–" if v is None or v != v else f"{v:+.2f}" if i == 0 else f"{v:.2f}"
                          for i, v in enumerate(values))

    lines = [f"**Test batch `{batch}`: the recommended estimate per cell** (95 % intervals; half-width over the "
             f"return range; decided: of the pairs the truth splits; +live{LIVE_EPISODES}: {LIVE_EPISODES} of each "
             "point's ground-truth episodes folded in, the mean of the draws, and beside it the same episodes alone)",
             "", "| cell | split pairs | ρ | NMAE | coverage | half-width | decided | precision | "
             f"+live{LIVE_EPISODES} coverage | half-width | decided | precision | live{LIVE_EPISODES} alone coverage | "
             "half-width | decided | precision | agents at ε = 0 |", "|---" * 17 + "|"]
    counted = [row(f) for cell, f in latest["figures"].items() if _counted(cell, f, apart)]
    for cell, f in latest["figures"].items():
        label = " (apart)" if cell in apart else "" if _counted(cell, f, apart) else " (not counted)"
        lines.append(f"| {cell}{label} | {f['split_pairs']} | {shown(row(f))} | "
                     f"{(f.get('recommended') or {}).get('agents') or '–'} |")
    means = [np.nanmean([v for v in column if v is not None] or [np.nan]) for column in zip(*counted)] if counted \
        else [None] * (len(offline) + 2 * len(live))
    return lines + [f"| **mean** ({len(counted)} cells) | | {shown(means)} | |", ""]


def _counted(cell: str, figures: dict, apart: list[str]) -> bool:
    """Whether a read cell enters a batch's means: not reported apart, and its truth splits enough pairs."""
    return cell not in apart and (figures["split_pairs"] or 0) >= MIN_SPLIT_PAIRS


def _shares(row: dict | None) -> str:
    """``decided / precision`` of a graded row ("–" where absent or undefined)."""
    if row is None:
        return "–"
    return " / ".join("–" if row.get(k) is None or row[k] != row[k] else f"{row[k]:.2f}" for k in ("decided", "precision"))


def _grades(row: dict | None) -> str:
    if row is None or "rho" not in row:
        return "–"
    return f"{row['rho']:+.2f} / {row['nmae']:.2g} / {row['coverage']:.2f} / {_shares(row)}"


def write_tables(ledger: Path = LEDGER) -> str:
    """bench/results/test_batches.md: every declared batch's table from the ledger."""
    lines = ["# Test batches, as the reading ledger holds them", "", __doc__.split("\n\n")[1].strip(), ""]
    for batch in test_batches():
        lines += batch_table(batch, ledger) + recommended_table(batch, ledger) + verdict_only_table(batch, ledger)
    text = "\n".join(lines) + "\n"
    (RESULTS / "test_batches.md").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    read = commands.add_parser("read", help="run and read a test batch once, appending to the ledger")
    read.add_argument("batch")
    read.add_argument("--again", action="store_true", help="read a batch already read (it becomes seen)")
    prepare = commands.add_parser("prepare", help="build a test batch's upstream stages only, reading nothing")
    prepare.add_argument("batch")
    prepare.add_argument("--reverse", action="store_true",
                         help="from the last cell: a second worker beside a first one (the stage locks keep them apart)")
    declared = commands.add_parser("declare", help="commit a batch's headline row (and cells reported apart) before "
                                                   "its reading")
    declared.add_argument("batch")
    declared.add_argument("--headline", required=True, help="the row that is the batch's result")
    declared.add_argument("--apart", nargs="*", default=[], help="admitted cells reported apart from the means")
    declared.add_argument("--why", required=True, help="why this headline, and why those cells apart")
    commands.add_parser("show", help="the batches' tables from the ledger, computing nothing")
    args = parser.parse_args()
    if args.command == "declare":
        print(json.dumps(declare(args.batch, args.headline, args.apart, args.why)))
        return
    if args.command == "prepare":
        store.build(batch_cells(args.batch), args.reverse)
        return
    if args.command == "read":
        read_batch(args.batch, args.again)
    print(write_tables())


if __name__ == "__main__":
    main()
