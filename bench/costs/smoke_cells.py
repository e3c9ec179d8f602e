"""The seven seed cells in smoke mode on this machine: wall time, stage wall times, peak memory
and the report of each (issue: seed cells run end to end with stand-in models).

Each cell runs as ``python -m flows.ope_cell <cell> --smoke`` (Prefect's embedded API, MLflow
on SQLite), one after another, in one fresh artifact root, so no stage is reused (cells not named keep
their last recorded run in the table, with its date); the stand-in
model is converted once beforehand (SmolLM2-135M-Instruct from the offline wheel, or
``--stand-in``). Peak memory is the largest resident set of the flow's process tree (the
flow, its in-process vLLM engines, Prefect's embedded server, engine subprocesses), sampled
twice a second. Stage times come from the stages' MLflow runs; stages on independent
branches overlap. Smoke numbers grade nothing — stand-in models, a few episodes — and are
never results: they show the path runs and what it costs.

Writes ``bench/results/smoke_cells.{json,md}`` and each report to ``bench/results/smoke_reports/``.
Usage: ``python -m bench.costs.smoke_cells [CELL ...] [--stand-in DIR] [--home DIR] [--table-only]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from bench.common import REPO, RESULTS, machine, stage_timings

SEED_CELLS = ("hotpotqa-dpo", "hotpotqa-prm", "hotpotqa-cross", "scienceworld-eto", "alfworld-iter1",
              "alfworld-iter3", "webshop-iter1")
SAMPLE_S = 0.5


def peak_rss(process: subprocess.Popen, peak: list[int]) -> None:
    """Keep ``peak[0]`` at the largest summed RSS of ``process`` and its descendants until it exits."""
    root = psutil.Process(process.pid)
    while process.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            peak[0] = max(peak[0], sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:  # a child exited between listing and reading
            pass
        time.sleep(SAMPLE_S)


def run_smoke(cell: str, env: dict, log_dir: str) -> dict:
    """One smoke run; its exit code, wall seconds, peak RSS and log file."""
    log = os.path.join(log_dir, f"{cell}.log")
    command = [sys.executable, "-m", "flows.ope_cell", cell, "--smoke", "--stand-in", env["ADWM_STAND_IN"]]
    started, peak = time.perf_counter(), [0]
    with open(log, "w") as out:
        process = subprocess.Popen(command, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        sampler = threading.Thread(target=peak_rss, args=(process, peak), daemon=True)
        sampler.start()
        code = process.wait()
        sampler.join()
    return {"cell": cell, "exit_code": code, "wall_s": time.perf_counter() - started,
            "peak_rss_gib": peak[0] / 2**30, "log": log}


def headline(report_dir: str) -> dict:
    """What the report says: each estimator's ρ and NMAE, and the report's path."""
    with open(os.path.join(report_dir, "results.json")) as f:
        rows = json.load(f)
    return {"report": os.path.join(report_dir, "report.md"),
            "estimators": {r["estimator"]: {"rho": r["rho"], "nmae": r["nmae"]} for r in rows}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cells", nargs="*", default=list(SEED_CELLS))
    parser.add_argument("--stand-in", help="model folder every policy maps to (default SmolLM2-135M-Instruct)")
    parser.add_argument("--home", help="artifact root (default: a new temporary folder)")
    parser.add_argument("--table-only", action="store_true", help="rewrite the table from smoke_cells.json")
    args = parser.parse_args()
    if args.table_only:
        recorded = json.loads((RESULTS / "smoke_cells.json").read_text())
        write(recorded["runs"], recorded["machine"], recorded["stand_in"])
        return
    home = args.home or tempfile.mkdtemp(prefix="adwm-smoke-bench-")
    env = dict(os.environ, ADWM_HOME=home, PREFECT_HOME=os.path.join(home, "prefect"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="90")
    env.pop("MLFLOW_TRACKING_URI", None)
    os.makedirs(env["PREFECT_HOME"], exist_ok=True)
    if args.stand_in is None:
        from adwm_core.policies.local_models import smollm2_dir

        os.environ["ADWM_HOME"] = home
        args.stand_in = smollm2_dir()
    env["ADWM_STAND_IN"] = args.stand_in
    runs = []
    for cell in args.cells:
        run = run_smoke(cell, env, home)
        if run["exit_code"] == 0:
            run["flow_s"], run["stages"] = stage_timings(home, f"{cell}-smoke")
            reports = sorted(os.scandir(os.path.join(home, "cells", f"{cell}-smoke", "report")),
                             key=lambda e: e.stat().st_mtime)
            run.update(headline(reports[-1].path))
        run["date"], run["artifact_root"] = time.strftime("%Y-%m-%d"), home
        print(f"{cell}: exit {run['exit_code']}, {run['wall_s'] / 60:.1f} min, peak {run['peak_rss_gib']:.1f} GiB",
              flush=True)
        runs.append(run)
    write(merged(runs), machine(), args.stand_in)


def merged(runs: list[dict]) -> list[dict]:
    """``runs`` with the earlier recorded runs of cells not run now, in seed-cell order."""
    previous = RESULTS / "smoke_cells.json"
    kept = json.loads(previous.read_text())["runs"] if previous.exists() else []
    by_cell = {r["cell"]: r for r in kept} | {r["cell"]: r for r in runs}
    order = list(SEED_CELLS) + sorted(set(by_cell) - set(SEED_CELLS))
    return [by_cell[c] for c in order if c in by_cell]


def write(runs: list[dict], host: dict, stand_in: str) -> None:
    """smoke_cells.json, the table in smoke_cells.md, and each report copied to smoke_reports/."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "smoke_cells.json").write_text(json.dumps({"machine": host, "stand_in": stand_in, "runs": runs},
                                                         indent=2))
    copies = RESULTS / "smoke_reports"
    copies.mkdir(exist_ok=True)
    for run in runs:
        if "report" in run and os.path.exists(run["report"]):
            shutil.copyfile(run["report"], copies / f"{run['cell']}.md")
    stage_names = list(dict.fromkeys(s["stage"].split(" [")[0] for r in runs for s in r.get("stages", [])))
    lines = [
        f"# The seed cells in smoke mode ({host['cpus']} CPUs, {host['processor']}, {host['date']})",
        "",
        f"`python -m flows.ope_cell <cell> --smoke`, one after another from an empty artifact root; every model "
        f"stands in as `{os.path.basename(stand_in.rstrip('/'))}` on the cell's own backend (vLLM), counts scaled "
        "down by `adwm_core/smoke.py: SMOKE_SETTINGS`, official-format data written from offline sources. "
        "Peak memory: the flow's whole process tree (the flow with its in-process vLLM engine, Prefect's "
        "embedded server, the environment processes). Stage wall times in seconds, one per π_e where the "
        "stage runs per π_e (hotpotqa-cross: DPO / PRM); stages on independent branches overlap and "
        "share the one engine, so they add up to more than the wall time.",
        "",
        "| cell | date | exit | wall min | peak RSS GiB | " + " | ".join(stage_names) + " |",
        "|---|---|---|---|---|" + "---|" * len(stage_names),
    ]
    for run in runs:
        seconds: dict[str, list[str]] = {}
        for stage in run.get("stages", []):
            seconds.setdefault(stage["stage"].split(" [")[0], []).append(f"{stage['seconds']:.0f}")
        lines.append(f"| {run['cell']} | {run['date']} | {run['exit_code']} | {run['wall_s'] / 60:.1f} | "
                     f"{run['peak_rss_gib']:.1f} | " + " | ".join(" / ".join(seconds.get(s, ["–"]))
                                                                  for s in stage_names) + " |")
    lines += ["", "Reports, copied to [smoke_reports/](smoke_reports/): ρ of each estimator over the cell's "
              "(π_e, ε) points. The stand-in scores nearly nothing, so ground truth is often the same at every "
              "point and ρ is undefined (–); these figures grade nothing.", ""]
    for run in runs:
        if "report" not in run:
            lines.append(f"- {run['cell']}: no report (exit {run['exit_code']}; log `{run['log']}`)")
            continue
        rhos = ", ".join(f"{name} {row['rho']:+.2f}" if row["rho"] == row["rho"] else f"{name} –"
                         for name, row in run["estimators"].items())
        lines.append(f"- [{run['cell']}](smoke_reports/{run['cell']}.md): {rhos}")
    (RESULTS / "smoke_cells.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
