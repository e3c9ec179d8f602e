"""One loop over the whole development bench, and the adoption rule's verdict (issue 72).

`python -m bench.loop [--set KEY=VALUE ...] [CELL ...]`: the cells' upstream is restored from
bench/store into the artifact root where it lacks it (bench/store.py), then every development cell
of bench/bench.yaml (or those named) runs in this process, one after another, its finished
stages reused (only what today's code and settings have not computed runs: the estimator stages
for an estimator setting, the world model too for a world-model one and where the store keeps none):
- without ``--set``, as its config stands (the current default) → bench/results/bench.{md,json}:
  per cell its environment group, how many of its pairs of points the ground truth splits, the
  seconds it took and, per estimator, ρ / NMAE / coverage of the 95 % intervals / decided /
  precision of the verdicts; per estimator the mean of each over the cells whose truth splits at
  least 3 pairs (ρ with its 95 % bootstrap interval over cells), and mean ρ per environment group;
  the manifest of every stage's key and whether it is finished (bench/results/manifest.json); the
  README's results block; and the bench's errors the recommended estimate reads (bench/calibrate.py);
- with ``--set`` (repeatable; a dotted key of the cell YAML, the value read as YAML), as its config
  with the settings changed, beside the default's rows (run too, where not finished) →
  bench/results/loop/<settings>.{md,json}: per estimator the paired Δρ (candidate − default) per
  cell and its mean with a 95 % bootstrap interval, the same figures as above, and the verdict of
  bench/ADOPTION.md on the headline estimator, also appended to bench/results/adoptions.md.
A cell whose flow fails is shown failed, with why; the others' rows are kept.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback

import numpy as np

from adwm_core import pipeline
from adwm_core.cell import CellConfig
from adwm_core.ope.statistics.recommend import SHIPPED
from adwm_core.provenance import source_version
from bench.adoption import HEADLINE, MIN_SPLIT_PAIRS, CellFigures, decide
from bench.calibrate import cell_results, from_reports, save_calibration
from bench.common import REPO, RESULTS, cell_config, development_cells, machine, slug
from bench.figures import mean_with_interval, truth_split_pairs
from bench.store import restore, retrained
from bench.tables.heldout import parse_settings, variant_path

GRADES = ("rho", "nmae", "coverage", "decided", "precision")
README_START, README_END = "<!-- results:start -->", "<!-- results:end -->"
README_ESTIMATORS = ("recommended", HEADLINE, "FQE", "WIS", "DR", "kNN-WM:reward_sum")


def run_cell(source: str) -> dict:
    """One cell (a name or a variant's YAML) run in this process: its figures, seconds and stage keys."""
    config = CellConfig.load(source) if source.endswith(".yaml") else cell_config(source)
    started = time.perf_counter()
    try:
        report = pipeline.run_all(config)
        if (note := retrained(pipeline.locate(config, "world-model"))) is not None:
            print(note, flush=True)
    except Exception as error:  # one cell's failure (a refusal, a crash) keeps the others' rows
        traceback.print_exc()
        return {"failed": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}",
                "seconds": time.perf_counter() - started, "group": config.env.name}
    return {"group": config.env.name, "split_pairs": truth_split_pairs(config),
            "estimators": cell_results(report, source), "seconds": time.perf_counter() - started,
            "stages": manifest_entry(config)}


def manifest_entry(config: CellConfig) -> list[dict]:
    """Every stage of the cell's plan with its key and whether it is finished."""
    entries = []
    for step in pipeline.plan(config):
        artifact = pipeline.locate(config, step.name, step.policy)
        entries.append({"stage": step.name, "policy": step.policy.name if step.policy else None,
                        "key": artifact.key[:16], "finished": pipeline.is_finished(artifact)})
    return entries


def counted(rows: dict[str, dict]) -> list[str]:
    """Cells with figures whose truth splits at least MIN_SPLIT_PAIRS pairs (the means' cells)."""
    return [c for c, r in rows.items() if "estimators" in r and r["estimators"] and (r["split_pairs"] or 0)
            >= MIN_SPLIT_PAIRS]


def summary(rows: dict[str, dict]) -> dict[str, dict]:
    """Per estimator: each grade's mean over the counted cells (ρ with its interval), and mean ρ per group."""
    cells = counted(rows)
    estimators = dict.fromkeys(e for c in cells for e in rows[c]["estimators"])
    found = {}
    for e in estimators:
        values = {g: [rows[c]["estimators"][e].get(g) for c in cells if e in rows[c]["estimators"]] for g in GRADES}
        values = {g: [v for v in vs if v is not None and np.isfinite(v)] for g, vs in values.items()}
        groups = {}
        for c in cells:
            rho = rows[c]["estimators"].get(e, {}).get("rho")
            if rho is not None and np.isfinite(rho):
                groups.setdefault(rows[c]["group"], []).append(rho)
        found[e] = {"rho": mean_with_interval(values["rho"]) if values["rho"] else None,
                    **{g: float(np.mean(values[g])) if values[g] else None for g in GRADES[1:]},
                    "n": len(values["rho"]), "groups": {g: float(np.mean(v)) for g, v in sorted(groups.items())}}
    return found


def _num(value, form: str = "{:.2f}") -> str:
    """A figure as the tables print it: – where undefined, in powers of ten past a thousand (DR's NMAE of 1e+79)."""
    if value is None or value != value:
        return "–"
    return form.format(value) if abs(value) < 1000 else f"{value:.2g}"


def cell_lines(rows: dict[str, dict], estimators: list[str]) -> list[str]:
    lines = ["| cell | group | truth-split pairs | s | " + " | ".join(estimators) + " |",
             "|---|---|---|---|" + "---|" * len(estimators)]
    for cell, r in rows.items():
        if "failed" in r:
            lines.append(f"| {cell} | {r['group']} | – | {r['seconds']:.0f} | failed: {r['failed']} |")
            continue
        marked = "" if (r["split_pairs"] or 0) >= MIN_SPLIT_PAIRS else " (out of the means)"
        grades = [" / ".join(_num(r["estimators"].get(e, {}).get(g), "{:+.2f}" if g == "rho" else "{:.2f}")
                             for g in GRADES) if e in (r["estimators"] or {}) else "–" for e in estimators]
        lines.append(f"| {cell} | {r['group']} | {r['split_pairs']}{marked} | {r['seconds']:.0f} | "
                     + " | ".join(grades) + " |")
    return lines


def summary_lines(found: dict[str, dict]) -> list[str]:
    groups = sorted({g for s in found.values() for g in s["groups"]})
    lines = ["| estimator | cells | mean ρ [CI95] | NMAE | coverage | decided | precision | "
             + " | ".join(f"ρ {g}" for g in groups) + " |", "|---|---|---|---|---|---|---|" + "---|" * len(groups)]
    for e, s in sorted(found.items(), key=lambda item: -(item[1]["rho"] or (-9,))[0]):
        rho = "–" if s["rho"] is None else "{:+.2f} [{:+.2f}, {:+.2f}]".format(*s["rho"])
        lines.append(f"| {e} | {s['n']} | {rho} | " + " | ".join(_num(s[g]) for g in GRADES[1:]) + " | "
                     + " | ".join(_num(s["groups"].get(g), "{:+.2f}") for g in groups) + " |")
    return lines


def run_bench(sources: dict[str, str], after_each=None) -> tuple[dict[str, dict], float]:
    """Each cell (name → its name or variant YAML) run in turn; the rows and the wall seconds
    (``after_each(rows, seconds)`` is called with the rows so far after every cell)."""
    started, rows = time.perf_counter(), {}
    for cell, source in sources.items():
        print(f"=== {cell} ({len(rows) + 1}/{len(sources)})", flush=True)
        rows[cell] = run_cell(source)
        if after_each is not None:
            after_each(rows, time.perf_counter() - started)
    return rows, time.perf_counter() - started


def write_bench(rows: dict[str, dict], seconds: float, of: int) -> tuple[dict, dict, list[str]]:
    """bench/results/bench.{json,md} from the rows so far (``of``: how many cells the run has)."""
    found = summary(rows)
    report = {"commit": source_version(), "machine": machine(), "seconds": seconds, "rows": rows, "summary": found}
    (RESULTS / "bench.json").write_text(json.dumps(report, indent=2))
    so_far = "" if len(rows) == of else f" (so far: {len(rows)} of the run's {of})"
    lines = ["# The development bench under the current default", "", __doc__.split("\n\n")[1].split("- with")[0].strip(),
             "", f"{len(rows)} cells{so_far} in {seconds / 60:.1f} min at `{report['commit']}` "
             f"({machine()['cpus']} CPUs, {machine()['date']}; finished stages reused).", "",
             f"**Per estimator** (means over the {len(counted(rows))} cells whose truth splits ≥ {MIN_SPLIT_PAIRS} "
             "pairs; ρ per environment group)", "", *summary_lines(found), "",
             "**Per cell** (ρ / NMAE / coverage / decided / precision)", "", *cell_lines(rows, list(found)), "",
             f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "bench.md").write_text("\n".join(lines) + "\n")
    return report, found, lines


def default_run(cells: list[str], whole: bool) -> dict:
    """The cells under the current default, the tables rewritten after every cell (a stopped
    build keeps the rows it finished); ``whole`` (every development cell): the manifest, the
    README's block and the recommended estimate's calibration too."""
    rows, seconds = run_bench({c: c for c in cells}, lambda so_far, elapsed: write_bench(so_far, elapsed, len(cells)))
    report, found, lines = write_bench(rows, seconds, len(cells))
    if whole:
        manifest = {"commit": report["commit"], "date": machine()["date"],
                    "cells": {c: r.get("stages") for c, r in rows.items()}}
        (RESULTS / "manifest.json").write_text(json.dumps(manifest, indent=2))
        update_readme(rows, found, report)
        calibrated, _ = from_reports(cells)  # the recommended estimate's bench, from these reports (bench/calibrate.py)
        written = save_calibration(calibrated, report["commit"])
        print(f"{SHIPPED}: the bench's errors of {len(calibrated)} cells" + ("" if written else ", unchanged"))
    print("\n".join(lines))
    return report


def candidate_run(cells: list[str], settings: dict) -> dict:
    default_rows, default_seconds = run_bench({c: c for c in cells})
    rows, seconds = run_bench({c: variant_path(c, settings) for c in cells})
    found, default_found = summary(rows), summary(default_rows)
    figures = {c: CellFigures(default_rows[c]["group"], default_rows[c].get("split_pairs") or 0,
                              (default_rows[c].get("estimators") or {}).get(HEADLINE),
                              (rows[c].get("estimators") or {}).get(HEADLINE)) for c in cells}
    verdict = decide(figures)
    paired = {}
    for e in dict.fromkeys(found) | dict.fromkeys(default_found):
        pairs = {c: (rows[c]["estimators"].get(e, {}).get("rho"), default_rows[c]["estimators"].get(e, {}).get("rho"))
                 for c in counted(rows) if c in counted(default_rows)}  # rows such as DR@t grade verdicts, no ρ
        deltas = {c: new - old for c, (new, old) in pairs.items()
                  if new is not None and old is not None and np.isfinite(new - old)}
        paired[e] = {"cells": deltas, "mean": mean_with_interval(list(deltas.values())) if deltas else None}
    name = slug(settings)
    shown = ", ".join(f"{k}={v}" for k, v in settings.items())
    report = {"settings": settings, "commit": source_version(), "machine": machine(), "seconds": seconds,
              "default_seconds": default_seconds, "rows": rows, "default_rows": default_rows, "summary": found,
              "default_summary": default_found, "paired": paired,
              "verdict": {"adopt": verdict.adopt, "reasons": verdict.reasons, "counted": verdict.counted,
                          "means": verdict.means, "groups": verdict.groups}}
    estimators = list(found)
    lines = [f"# Candidate `{shown}` on the development bench", "",
             f"{len(cells)} cells: candidate {seconds / 60:.1f} min, default {default_seconds / 60:.1f} min "
             f"(finished stages reused) at `{report['commit']}`.", "",
             f"**Adoption rule (bench/ADOPTION.md) on {HEADLINE}: {'ADOPT' if verdict.adopt else 'keep the default'}**",
             "", *[f"- {reason}" for reason in verdict.reasons], "",
             "**Paired Δρ, candidate − default** (cells whose truth splits ≥ "
             f"{MIN_SPLIT_PAIRS} pairs)", "", "| estimator | mean Δρ [CI95] | " + " | ".join(cells) + " |",
             "|---|---|" + "---|" * len(cells)]
    for e, p in paired.items():
        mean = "–" if p["mean"] is None else "{:+.2f} [{:+.2f}, {:+.2f}]".format(*p["mean"])
        lines.append(f"| {e} | {mean} | " + " | ".join(_num(p["cells"].get(c), "{:+.2f}") for c in cells) + " |")
    lines += ["", "**Candidate, per estimator**", "", *summary_lines(found), "",
              "**Default, per estimator**", "", *summary_lines(default_found), "",
              "**Candidate, per cell**", "", *cell_lines(rows, estimators), "",
              f"Machine: `{json.dumps(machine())}`"]
    return logged_verdict(name, shown, report, verdict, lines)


def headline_run(cells: list[str], headline: str) -> dict:
    """The rule's verdict on putting ``headline`` first in the product instead of ``HEADLINE``: both
    rows of the same default run, compared cell by cell (bench/ADOPTION.md: "a candidate that
    proposes another headline") → bench/results/loop/headline-<name>.{md,json} and adoptions.md."""
    rows, seconds = run_bench({c: c for c in cells})
    known = sorted({e for r in rows.values() for e in (r.get("estimators") or {})})
    if known and headline not in known:
        raise SystemExit(f"--headline {headline}: no cell has a row of that name; the rows are {', '.join(known)}")
    figures = {c: CellFigures(r["group"], r.get("split_pairs") or 0, (r.get("estimators") or {}).get(HEADLINE),
                              (r.get("estimators") or {}).get(headline)) for c, r in rows.items()}
    verdict = decide(figures)
    name, shown = slug({"headline": headline}), f"headline={headline} (default {HEADLINE})"
    deltas = {c: {k: f.candidate[k] - f.default[k] for k in ("rho", "nmae", "coverage")}
              for c, f in figures.items() if c in verdict.counted}
    report = {"headline": headline, "default": HEADLINE, "commit": source_version(), "machine": machine(),
              "seconds": seconds, "cells": {c: {"default": f.default, "candidate": f.candidate,
                                                "split_pairs": f.split_pairs, "group": f.group}
                                            for c, f in figures.items()},
              "verdict": {"adopt": verdict.adopt, "reasons": verdict.reasons, "counted": verdict.counted,
                          "means": verdict.means, "groups": verdict.groups}}
    lines = [f"# Candidate `{shown}` on the development bench", "",
             f"{len(cells)} cells in {seconds / 60:.1f} min (finished stages reused) at `{report['commit']}`.", "",
             f"**Adoption rule (bench/ADOPTION.md): {'ADOPT' if verdict.adopt else 'keep the default'}**", "",
             *[f"- {reason}" for reason in verdict.reasons], "",
             f"**Per counted cell, {headline} − {HEADLINE}**", "", "| cell | group | Δρ | ΔNMAE | Δcoverage |",
             "|---|---|---|---|---|",
             *[f"| {c} | {figures[c].group} | {d['rho']:+.2f} | {d['nmae']:+.2f} | {d['coverage']:+.2f} |"
               for c, d in deltas.items()], "", f"Machine: `{json.dumps(machine())}`"]
    return logged_verdict(name, shown, report, verdict, lines)


def logged_verdict(name: str, shown: str, report: dict, verdict, lines: list[str]) -> dict:
    """A candidate's figures → bench/results/loop/<name>.{json,md}, its verdict appended to adoptions.md."""
    folder = RESULTS / "loop"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(report, indent=2))
    (folder / f"{name}.md").write_text("\n".join(lines) + "\n")
    with (RESULTS / "adoptions.md").open("a") as log:
        log.write(f"\n## `{shown}` — {'ADOPT' if verdict.adopt else 'keep the default'} "
                  f"({machine()['date']}, `{report['commit']}`)\n\n" + "\n".join(f"- {r}" for r in verdict.reasons)
                  + f"\n- figures: [loop/{name}.md](loop/{name}.md)\n")
    print("\n".join(lines))
    return report


def update_readme(rows: dict[str, dict], found: dict[str, dict], report: dict) -> None:
    """The README's results block: the headline and four other estimators' ρ per development cell
    and their means, from this run."""
    readme = REPO / "README.md"
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        raise SystemExit(f"README.md lacks the markers {README_START} … {README_END} around its Results section")
    estimators = [e for e in README_ESTIMATORS if e in found]
    body = [README_START, f"Generated by `python -m bench.loop` at `{report['commit']}` ({machine()['date']}, "
            f"{machine()['cpus']} CPUs, {report['seconds'] / 60:.0f} min with the upstream reused); ρ of each "
            f"estimator per development cell; means over the {len(counted(rows))} cells whose truth splits ≥ "
            f"{MIN_SPLIT_PAIRS} pairs. Every grade: [bench/results/bench.md](bench/results/bench.md); the test "
            "batches: [bench/results/test_batches.md](bench/results/test_batches.md).", "",
            "| cell | split pairs | " + " | ".join(estimators) + " |", "|---|---|" + "---|" * len(estimators)]
    for cell, r in rows.items():
        rhos = [_num((r.get("estimators") or {}).get(e, {}).get("rho"), "{:+.2f}") for e in estimators]
        body.append(f"| {cell} | {r.get('split_pairs', '–')} | " + " | ".join(rhos) + " |")
    body.append("| **mean [CI95]** | | " + " | ".join(
        "–" if found[e]["rho"] is None else "{:+.2f} [{:+.2f}, {:+.2f}]".format(*found[e]["rho"])
        for e in estimators) + " |")
    body.append(README_END)
    head, rest = text.split(README_START, 1)
    readme.write_text(head + "\n".join(body) + rest.split(README_END, 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="*", help="development cells to run (default: all of bench/bench.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a candidate setting (a dotted key of the cell YAML); repeatable")
    parser.add_argument("--headline", metavar="ESTIMATOR",
                        help=f"the rule's verdict on putting this estimator's row first instead of {HEADLINE}")
    args = parser.parse_args()
    development = development_cells()
    outside = [c for c in args.cells if c not in development]
    if outside:
        raise SystemExit(f"not development cells (bench/bench.yaml): {outside}; test cells are read through "
                         "`python -m bench.ledger read BATCH` only")
    cells = args.cells or development
    if args.set and args.headline:
        raise SystemExit("--set and --headline are separate candidates: judge one at a time")
    restored = restore(cells=cells)  # a clean clone's empty root: the bench's upstream comes from bench/store
    print(f"restored {len(restored)} kept upstream stage(s) from bench/store", flush=True)
    if args.headline:
        headline_run(cells, args.headline)
    elif args.set:
        candidate_run(cells, parse_settings(args.set))
    else:
        default_run(cells, whole=set(cells) == set(development))


if __name__ == "__main__":
    main()
