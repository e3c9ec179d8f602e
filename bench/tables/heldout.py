"""The held-out measuring stick: which declared test cells are admitted, and how every estimator
ranks π_e on the development cells.

``--admit`` runs only the ``policies`` and ``ground-truth`` stages of every declared test cell
(``deployments/test-*.yaml``, in the order of deployments/TEST_CELLS.md) and applies the rule
stated there on ground truth alone:

    admitted  ⇔  max_p J_p − min_p J_p ≥ 4 · max_p SE_p   over the cell's points p = (π_e, ε)

It writes ``bench/results/admission.{md,json}``; no estimator runs.

Without ``--admit`` it reads the finished report stage of every development cell
(bench/bench.yaml: every cell whose estimator figures were read) as its config stands; a
cell whose stages are stale under today's code keeps its row of the previous run, marked with the
commit and day it was measured at (never mixed in silently), else shows as not measured (``--run``
runs its flow first, reusing every stage a change did not touch) — and writes
``bench/results/heldout.{md,json}``: ρ and NMAE (|Ĵ − J| / range of J, mean over points) of every
estimator per cell, with the share of its 95 % intervals (every point and seed) that hold the
true J, its verdicts on pairs of points (decided: the share of the pairs the ground truth tells
apart given a verdict; precision: the share of decided pairs ordered as J orders them; ADWM's
paired, every other estimator's from its intervals read apart; beside ADWM, ADWM under the
paper's recipe — the cell's ``adwm.preset: paper`` variant, where it ran — and ADWM topped up by
8 live episodes per point), the mean ρ over the cells with a percentile-bootstrap interval over
cells. Each test batch's table comes from the reading ledger (bench/ledger.py) and nothing else.

``--set KEY=VALUE`` (repeatable; a dotted key of the cell YAML, the value read as YAML) scores a
variant on the development cells only (or those named) — test cells are never tuned on — each cell run as its
config with the settings changed (``--run``: its flow first; only the stages the settings reach
are recomputed), beside the cell as it stands: ρ, NMAE and interval coverage of ADWM and kNN-WM
under both, the share of ADWM's imagined steps each source answered (the log, a carried-over
logged outcome, the model) and the world model's training seconds (all ensemble members). It writes ``bench/results/variants/<settings>.{md,json}``.

``--batches`` rewrites only heldout.md's test-batch tables from the ledger, its development rows kept
as they were measured (after a reading, where the development cells' stages are not at hand).

Usage: ``python -m bench.tables.heldout --admit [CELL ...]``; ``python -m bench.tables.heldout [--run]``;
``python -m bench.tables.heldout --set adwm.off_log=carry_over [--run]``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from adwm_core.cell import CellConfig, assign
from adwm_core.data import TRAJECTORIES, read_table
from adwm_core.ope.settings import AdwmConfig
from adwm_core.ope.answers import SOURCES
from adwm_core.paths import local_cache_dir
from adwm_core.report import RECOMMENDED
from bench.studies.verdicts import LIVE, LIVE_ALONE, LIVE_EPISODES, LIVE_ONLY, RECOMMENDED_LIVE, live_results
from bench.common import (ADWM, RESULTS, TEST, artifact, cell_config, development_cells, ground_truth, machine,
                          slug, test_batches, world_model_histories)
from bench.adoption import MIN_SPLIT_PAIRS
from bench.figures import mean_with_interval, report_results, truth_split_pairs
from flows.cells import cell_config_path, cell_names
from adwm_core.provenance import source_version

SPREAD_FACTOR = 4.0  # range of J ≥ SPREAD_FACTOR × the largest standard error of a point (TEST_CELLS.md)
PAPER = "ADWM (paper)"  # ADWM under adwm.preset: paper (the diffusion model answers every step), a variant run
SHOWN = (ADWM, PAPER, LIVE, LIVE_ALONE, "kNN-WM:reward_sum", "FQE", "WDR", "WIS", "WPDIS", "DR", "IS", "PDIS", "DM")
BATCH_SHOWN = (RECOMMENDED, RECOMMENDED_LIVE, LIVE_ONLY, *SHOWN)  # a test batch's table: the headline a user reads first, too
BATCHES_FROM = "**Test batch `"  # heldout.md's test-batch tables start at the first such line


def test_cells() -> list[str]:
    """Every declared test cell."""
    return [name for name in cell_names() if name.startswith(TEST)]


def admission(points: list[dict]) -> dict:
    """The rule of TEST_CELLS.md on one cell's points."""
    values = [p["mean_return"] for p in points]
    spread, largest_se = max(values) - min(values), max(p["stderr"] for p in points)
    return {"n": len(points), "range": spread, "max_stderr": largest_se,
            "admitted": len(points) == 10 and spread >= SPREAD_FACTOR * largest_se}


def write_admission(cells: list[str]) -> dict:
    """Admission of ``cells`` → bench/results/admission.{md,json}, rewritten after each cell (a
    killed run keeps the verdicts it reached; verdicts of other cells are kept)."""
    path = RESULTS / "admission.json"
    verdicts = json.loads(path.read_text())["cells"] if path.exists() else {}
    report = {}
    for cell in cells:
        started = time.perf_counter()
        points = ground_truth(cell)
        verdicts[cell] = {**admission(points), "points": points, "date": time.strftime("%Y-%m-%d"),
                          "seconds": round(time.perf_counter() - started)}
        print(f"{cell}: range {verdicts[cell]['range']:.3f}, largest stderr {verdicts[cell]['max_stderr']:.3f} "
              f"→ {'admitted' if verdicts[cell]['admitted'] else 'not admitted'}", flush=True)
        report = _write_verdicts(verdicts)
    return report


def _write_verdicts(verdicts: dict) -> dict:
    order = [c for c in test_cells() if c in verdicts]
    report = {"rule": f"range of J over the 10 points >= {SPREAD_FACTOR:g} x the largest stderr of a point",
              "machine": machine(), "cells": {c: verdicts[c] for c in order}}
    (RESULTS / "admission.json").write_text(json.dumps(report, indent=2))
    lines = ["# Admission of the test cells (deployments/TEST_CELLS.md)", "",
             f"`python -m bench.tables.heldout --admit`: ground truth only (the `policies` and `ground-truth` stages), "
             f"no estimator. Rule: {report['rule']}.", "",
             "| cell | n | J min | J max | range | largest stderr | range / stderr | admitted | measured |",
             "|---|---|---|---|---|---|---|---|---|"]
    for cell in order:
        v = verdicts[cell]
        values = [p["mean_return"] for p in v["points"]]
        lines.append(f"| {cell} | {v['n']} | {min(values):.3f} | {max(values):.3f} | {v['range']:.3f} | "
                     f"{v['max_stderr']:.3f} | {v['range'] / max(v['max_stderr'], 1e-12):.1f} | "
                     f"{'yes' if v['admitted'] else '**no**'} | {v['date']} |")
    admitted = [c for c in order if verdicts[c]["admitted"]]
    lines += ["", f"Admitted: {len(admitted)} of {len(order)} judged, {len(test_cells())} declared "
                  f"({', '.join(admitted) if admitted else 'none'}).", "",
              f"Machine: `{json.dumps(report['machine'])}`"]
    (RESULTS / "admission.md").write_text("\n".join(lines) + "\n")
    return report


def finished_report(cell: str, run: bool):
    """The finished report of ``cell`` (a name or a YAML path; None: not finished), the cell's flow
    run first with ``run``."""
    if run:
        subprocess.run([sys.executable, "-m", "flows.ope_cell", cell], check=True)
    return artifact(cell, "report", required=False)


def paper_results(cell: str, run: bool) -> dict | None:
    """ADWM's row under the paper's recipe: the cell run as its variant ``adwm.preset: paper`` (the
    world model is the default's; ``run``: its flow first), None where that has not run, and
    ``{"not_applicable": why}`` where the recipe cannot run on the cell's log (never run then)."""
    why = paper_not_applicable(cell)
    if why is not None:
        return {"not_applicable": why}
    path = variant_path(cell, {"adwm.preset": "paper"})
    found = report_results(finished_report(path, run), path)
    return None if found is None else found.get(ADWM)


def paper_not_applicable(cell: str) -> str | None:
    """Why the paper's recipe cannot run on the cell's finished behaviour log, or None (also where
    the log is not finished): its success-bank guidance steers toward the last observations of
    successful logged episodes, and refuses a log without one."""
    behaviour = artifact(cell, "behaviour", required=False)
    if behaviour is None:
        return None
    try:
        AdwmConfig(preset="paper").check_behaviour(read_table(behaviour.file("trajectories"), TRAJECTORIES))
    except ValueError:  # the product's own refusal (it says what to do; the table says why)
        return "no logged episode succeeds: the success-bank guidance needs one"
    return None


def with_adwm_variants(results: dict[str, dict] | None, cell: str, run: bool) -> dict[str, dict] | None:
    """A cell's rows with ADWM under the paper's recipe and ADWM topped up by live episodes (with the
    same episodes alone beside it), where measured."""
    if results is None:
        return None
    paper = paper_results(cell, run)
    if paper is not None:
        results[PAPER] = paper
    results.update(live_results(cell) or {})
    return results


def measured(cell: str, run: bool) -> dict[str, dict] | None:
    """:func:`report_results` of the cell's :func:`finished_report`."""
    return report_results(finished_report(cell, run), cell)


def _interval_table(title: str, reports: list) -> list[str]:
    """Mean coverage / median width (a cell's width is already a median, and importance-weighted
    widths span hundreds of orders of magnitude) of each estimator's interval methods over the
    finished ``reports`` (the report's interval-methods table, from its curves)."""
    graded: dict[str, dict[str, list[tuple[float, float]]]] = {}
    finished = [r for r in reports if r is not None]
    for report in finished:
        with open(report.file("curves")) as f:
            by_estimator = json.load(f).get("intervals", {})
        for estimator, by_method in by_estimator.items():
            for method, g in by_method.items():
                graded.setdefault(estimator, {}).setdefault(method, []).append((g["coverage"], g["width"]))
    if not graded:
        return []
    methods = list(dict.fromkeys(m for by_method in graded.values() for m in by_method))
    lines = [f"**{title}: interval methods** (over {len(finished)} cells: mean coverage / median of the cells' "
             "median width over the range of J; the same Ĵ in every column)", "",
             "| estimator | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for estimator, by_method in sorted(graded.items()):
        lines.append(f"| {estimator} | " + " | ".join(
            "{:.2f} / {:.3g}".format(np.mean([c for c, _ in by_method[m]]), np.nanmedian([w for _, w in by_method[m]]))
            if m in by_method else "–" for m in methods) + " |")
    return lines + [""]


def _cell_table(title: str, results: dict[str, dict | None], measured_at: dict[str, dict],
                splits: dict[str, int | None]) -> list[str]:
    """One row per cell with its count of truth-split pairs; the mean ρ over the cells whose truth
    splits at least ``MIN_SPLIT_PAIRS`` of them (bench/ADOPTION.md), the others marked and kept."""
    lines = [f"**{title}** (split pairs: of its pairs of points, how many the ground truth splits; a cell with "
             f"fewer than {MIN_SPLIT_PAIRS} ranks noise and stays out of the means. ρ / NMAE / coverage of the 95 % "
             "intervals / decided / precision of the verdicts on pairs of points: ADWM's paired over every seed's "
             "rollouts, every other estimator's from its first seed's intervals read apart, so not like for like)", "",
             "| cell | split pairs | measured | " + " | ".join(SHOWN) + " |", "|---|---|---|" + "---|" * len(SHOWN)]
    counts = {cell for cell, n in splits.items() if (n or 0) >= MIN_SPLIT_PAIRS}
    for cell, by_estimator in results.items():
        split = "–" if splits.get(cell) is None else str(splits[cell])
        if by_estimator is None:
            lines.append(f"| {cell} | {split} | not measured | " + " | ".join("–" for _ in SHOWN) + " |")
            continue
        cells = [_grades(by_estimator.get(e)) for e in SHOWN]
        noise = "" if cell in counts else " (not counted)"
        lines.append(f"| {cell}{noise} | {split} | {_provenance(measured_at[cell])} | " + " | ".join(cells) + " |")
    done = {c: r for c, r in results.items() if r is not None and c in counts}
    if done:
        row = []
        for e in SHOWN:
            rhos = [r[e]["rho"] for r in done.values() if "rho" in r.get(e, {}) and np.isfinite(r[e]["rho"])]
            row.append("–" if not rhos else "{:+.2f} [{:+.2f}, {:+.2f}]".format(*mean_with_interval(rhos)))
        earlier = sum(not measured_at[c]["current"] for c in done)
        counted = f"{len(done)} counted cells, {earlier} under earlier code" if earlier else f"{len(done)} counted cells"
        lines.append(f"| **mean ρ [CI95 over cells]** ({counted}) | | | " + " | ".join(row) + " |")
    return lines + [""]


def _grades(row: dict | None) -> str:
    """One estimator's grades on one cell as the tables print them: – where not measured, n/a and
    why where it cannot run there."""
    if row is None:
        return "–"
    if "not_applicable" in row:
        return f"n/a: {row['not_applicable']}"
    return (f"{row['rho']:+.2f} / {row['nmae']:.2g} / {row['coverage']:.2f} / {_share(row.get('decided'))} / "
            f"{_share(row.get('precision'))}")


def _share(value: float | None) -> str:
    """A share as the tables print it; – where not measured (rows from before verdicts existed) or undefined."""
    return "–" if value is None or value != value else f"{value:.2f}"


def _provenance(measured: dict) -> str:
    """Where a row's figures come from: today's code, or the commit and day of an earlier run."""
    where = f"`{measured.get('commit') or 'unknown'}` {measured['date']}"
    return where if measured["current"] else f"{where}, **earlier code**"


def fill_earlier_rows(cells: list[str], results: dict[str, dict | None]) -> dict[str, dict]:
    """Provenance of every measured row (``{"commit", "date", "current"}``). A cell not finished
    under today's code gets (in ``results``) its row from the previous heldout.json, marked as measured under
    earlier code (``current`` false) — rerunning every cell after each change is a day's work,
    and a row is never shown without the commit it was measured at."""
    path = RESULTS / "heldout.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    today = {"commit": source_version(), "date": time.strftime("%Y-%m-%d"), "current": True}
    measured_at = {}
    for cell in cells:
        earlier = previous.get("measured", {}).get(cell)
        if results[cell] is not None:
            measured_at[cell] = today
        elif earlier is not None and previous["results"].get(cell) is not None:
            results[cell], measured_at[cell] = previous["results"][cell], {**earlier, "current": False}
    return measured_at


def write_table(run: bool) -> dict:
    """Every development cell's row (its report under today's code, else its previous row marked
    earlier code), and each test batch's table from the reading ledger (never computed here)."""
    development = development_cells()
    reports = {cell: finished_report(cell, run) for cell in development}
    results = {cell: with_adwm_variants(report_results(report, cell), cell, run) for cell, report in reports.items()}
    measured_at = fill_earlier_rows(development, results)
    lines = ["# The held-out measuring stick", "",
             "`python -m bench.tables.heldout`: every development cell (bench/bench.yaml: every cell whose "
             "estimator figures were read, tuned on) as its finished report under today's code and config; a cell "
             "whose stages are not all finished under them keeps its row of the previous run, marked **earlier "
             "code** with the commit it was measured at, or shows `not measured`. Test batches: their figures come "
             "only from the reading ledger (`python -m bench.ledger`), never computed here. ρ: Spearman of "
             "seed-averaged Ĵ against ground truth over the cell's points; NMAE: mean |Ĵ − J| / range of J. "
             "`ADWM (paper)`: ADWM under the paper's recipe (`adwm.preset: paper`, the diffusion model answering "
             "every step), run as the cell's variant on the same world model; "
             f"`{LIVE}`: ADWM topped up by {LIVE_EPISODES} of each point's ground-truth episodes (PPI++, paired by "
             "start; the mean over 100 draws, bench/studies/verdicts.py), and beside it "
             f"`{LIVE_ALONE}`: the same episodes with no offline estimate.", ""]
    splits = {cell: truth_split_pairs(cell) for cell in development}
    lines += _cell_table("Development cells (tuned on)", results, measured_at, splits)
    lines += _interval_table("Development cells (today's code only)", list(reports.values()))
    lines += batch_tables()
    lines.append(f"Machine: `{json.dumps(machine())}`")
    (RESULTS / "heldout.md").write_text("\n".join(lines) + "\n")
    report = {"machine": machine(), "development": development, "results": results, "measured": measured_at,
              "split_pairs": splits}
    (RESULTS / "heldout.json").write_text(json.dumps(report, indent=2))
    print("\n".join(lines))
    return report


def batch_tables(ledger: Path | None = None) -> list[str]:
    """Every declared test batch's table, from the reading ledger alone (None: bench/results')."""
    from bench.ledger import LEDGER, batch_table

    return [line for batch in test_batches() for line in batch_table(batch, ledger or LEDGER, shown=BATCH_SHOWN)]


def write_batch_tables(path: Path = RESULTS / "heldout.md", ledger: Path | None = None) -> None:
    """heldout.md with its test-batch tables rewritten from the ledger and its development rows kept
    as they were measured (``--batches``: nothing run, no artifact read)."""
    text = path.read_text()
    if BATCHES_FROM not in text:
        raise SystemExit(f"{path} holds no test-batch table to rewrite: run `python -m bench.tables.heldout`")
    kept, rest = text.split(BATCHES_FROM, 1)
    machine_line = next(line for line in rest.splitlines() if line.startswith("Machine: "))
    path.write_text(kept + "\n".join([*batch_tables(ledger), machine_line]) + "\n")


def parse_settings(settings: list[str]) -> dict[str, object]:
    """``["adwm.off_log=carry_over", …]`` → ``{"adwm.off_log": "carry_over", …}``, values read as YAML."""
    parsed = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not re.fullmatch(r"[a-z_]+(\.[a-z_]+)*", key):
            raise SystemExit(f"--set {setting!r}: expected KEY=VALUE with a dotted key of the cell YAML, "
                             "e.g. adwm.off_log=carry_over")
        parsed[key] = yaml.safe_load(value)
    return parsed


def variant_path(cell: str, settings: dict[str, object]) -> str:
    """The cell's YAML with ``settings`` changed, written under $ADWM_HOME/variants (validated first)."""
    with open(cell_config_path(cell)) as f:
        raw = yaml.safe_load(f)
    for key, value in settings.items():
        assign(raw, key, value)
    CellConfig.from_mapping(raw, source=f"{cell} with {settings}")
    path = f"{local_cache_dir('variants')}/{cell}--{slug(settings)}.yaml"
    with open(path, "w") as f:
        yaml.safe_dump(raw, f, sort_keys=False)
    return path


def answered_shares(cell: str) -> dict[str, float] | None:
    """The share of ADWM's imagined steps each source answered, over the cell's π_e (mean), from
    the finished ADWM stages; None where one is not finished."""
    stages = [artifact(cell, "adwm", p, required=False) for p in cell_config(cell).evaluation.policies]
    if None in stages:
        return None
    timings = [json.loads(open(stage.file("timings")).read()) for stage in stages]
    return {source: float(np.mean([t.get(f"{source}_share", np.nan) for t in timings])) for source in SOURCES}


def world_model_seconds(cell: str) -> float | None:
    """Training seconds of the cell's finished world model, summed over its ensemble's members;
    None where it is not finished."""
    histories = world_model_histories(cell)
    return None if histories is None else sum(h["seconds"] for h in histories)


def write_variant(settings: dict[str, object], run: bool, cells: list[str] | None = None) -> dict:
    """The variant beside the cells as they stand, on the development cells (``cells``: those
    only) → results/variants/."""
    development = cells or development_cells()
    shown = (ADWM, "kNN-WM:reward_sum")
    results = {}
    for cell in development:
        path = variant_path(cell, settings)
        try:
            variant = measured(path, run)
        except subprocess.CalledProcessError as failed:  # one cell's refusal keeps the others' rows
            print(f"{cell}: the variant's flow failed (exit {failed.returncode}; its log is above)", file=sys.stderr)
            variant = {"failed": f"flow failed (exit {failed.returncode})"}
        results[cell] = {"as_is": measured(cell, False), "variant": variant,
                         "shares_as_is": answered_shares(cell), "shares_variant": answered_shares(path),
                         "wm_seconds_as_is": world_model_seconds(cell), "wm_seconds_variant": world_model_seconds(path)}
    name = slug(settings)

    def graded(result: dict | None, estimator: str) -> str:
        if result is not None and "failed" in result:
            return result["failed"]
        if result is None or estimator not in result:
            return "not measured"
        r = result[estimator]
        return f"{r['rho']:+.2f} / {r['nmae']:.2g} / {r['coverage']:.2f} ({r['width']:.2g})"

    def shares(values: dict | None) -> str:
        return " / ".join(f"{values[s]:.2f}" for s in SOURCES) if values else "–"

    def seconds(value: float | None) -> str:
        return "–" if value is None else f"{value:.0f}"

    lines = [f"# Variant `{', '.join(f'{k}={v}' for k, v in settings.items())}` on the development cells", "",
             "`python -m bench.tables.heldout --set …`: each development cell as it stands and with the settings changed "
             "(test cells are never tuned on). ρ / NMAE / coverage of the 95 % intervals (median width over the "
             f"range of J) as in heldout.md; shares: of ADWM's imagined steps answered by {' / '.join(SOURCES)}; "
             "world-model training seconds (every ensemble member).", "",
             "| cell | " + " | ".join(f"{e} as is | {e} variant" for e in shown)
             + " | shares as is | shares variant | WM s as is | WM s variant |",
             "|---|" + "---|" * (2 * len(shown) + 4)]
    for cell, r in results.items():
        lines.append(f"| {cell} | " + " | ".join(f"{graded(r['as_is'], e)} | {graded(r['variant'], e)}" for e in shown)
                     + f" | {shares(r['shares_as_is'])} | {shares(r['shares_variant'])}"
                     + f" | {seconds(r['wm_seconds_as_is'])} | {seconds(r['wm_seconds_variant'])} |")
    for label, key in (("as is", "as_is"), ("variant", "variant")):
        done = [r[key][ADWM] for r in results.values() if r[key] is not None and ADWM in r[key]]
        lines.append(f"\nMean {ADWM} {label}: " + (f"ρ {np.mean([d['rho'] for d in done]):+.2f}, NMAE "
                                                  f"{np.mean([d['nmae'] for d in done]):.2f}, coverage "
                                                  f"{np.mean([d['coverage'] for d in done]):.2f} over {len(done)} cells"
                                                  if done else "–"))
    lines += ["", f"Measured at commit `{source_version() or 'unknown'}`; machine: `{json.dumps(machine())}`"]
    folder = RESULTS / "variants"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.md").write_text("\n".join(lines) + "\n")
    report = {"settings": settings, "commit": source_version(), "machine": machine(), "results": results}
    (folder / f"{name}.json").write_text(json.dumps(report, indent=2))
    print("\n".join(lines))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="*", help="test cells to admit (default: every declared test-* cell); with "
                                                 "--set, the development cells to score (default: all)")
    parser.add_argument("--admit", action="store_true", help="run ground truth only and apply the admission rule")
    parser.add_argument("--run", action="store_true", help="run each cell's flow first (finished stages are reused)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="score a variant (a dotted key of the cell YAML) on the development cells")
    parser.add_argument("--batches", action="store_true",
                        help="rewrite only heldout.md's test-batch tables from the reading ledger")
    args = parser.parse_args()
    if args.batches:
        write_batch_tables()
        return
    if args.set:
        outside = [c for c in args.cells if c not in development_cells()]
        if args.admit or outside:
            raise SystemExit(f"--set scores a variant on development cells only (bench/bench.yaml): no --admit, "
                             f"not {outside}")
        write_variant(parse_settings(args.set), args.run, args.cells)
        return
    if args.cells and not args.admit:
        raise SystemExit("cells are named for --admit only; the table reads every development and admitted test cell")
    unknown = sorted(set(args.cells) - set(test_cells()))
    if unknown:
        raise SystemExit(f"not declared test cells: {unknown}; declared: {test_cells()}")
    if args.admit:
        write_admission(args.cells or test_cells())
    else:
        write_table(args.run)


if __name__ == "__main__":
    main()
