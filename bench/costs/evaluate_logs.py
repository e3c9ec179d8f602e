"""`adwm evaluate` on the shipped example, end to end, from an empty artifact root: the JSONL logs
of examples/ and SmolLM2-135M-Instruct served by vLLM's OpenAI server on loopback as the agent
(the README's worked example). Writes the wall times and the printed estimates to
bench/results/evaluate_logs.{json,md}. The logs come from local-simonsays, whose environment runs
here: ``--ground-truth N`` then plays the agent (same endpoint) N episodes per ε in that cell's
environment and grades what `adwm evaluate` printed (Spearman ρ over ε, |Ĵ−J|/range).

    python -m bench.costs.evaluate_logs [--ground-truth 100] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from adwm_core.data import ESTIMATES, read_table
from adwm_core.ope.statistics.metrics import normalised_absolute_error
from adwm_core.policies.local_models import smollm2_dir
from adwm_core.policies.serving import serve_vllm
from adwm_core.specs import PolicySpec
from adwm_core.collection import ground_truth_rollouts
from tasks.report import ESTIMATES_FILE
from bench.common import REPO, RESULTS, cell_config, machine

LOGS = "examples/simonsays-logs.jsonl"
AGENT = "smollm2-agent"
# the settings of local-simonsays, the cell the logs were exported from
SETTINGS = ["adwm.horizon=12", "baselines.seeds=[0]"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--ground-truth", type=int, default=0, metavar="N", help="episodes per ε to grade with")
    args = parser.parse_args()
    settings = SETTINGS + args.extra
    with tempfile.TemporaryDirectory(prefix="adwm-evaluate-bench-") as home:
        environment = {**os.environ, "ADWM_HOME": home, "PREFECT_HOME": f"{home}/prefect"}
        environment.pop("MLFLOW_TRACKING_URI", None)
        started = time.perf_counter()
        with serve_vllm(smollm2_dir(), served_name=AGENT) as base_url:
            served = time.perf_counter() - started
            command = [sys.executable, "-m", "flows.cli", "evaluate", "--logs", LOGS, "--env", "textworld-express",
                       "--task", "simonsays", "--agent-base-url", base_url, "--agent-model", AGENT,
                       "--agent-tokenizer", smollm2_dir(), *(a for s in settings for a in ("--set", s))]
            began = time.perf_counter()
            run = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True)
            wall = time.perf_counter() - began
            if run.returncode:
                sys.exit(f"adwm evaluate failed ({run.returncode}):\n{run.stderr[-4000:]}")
            report = run.stdout.split("\nreport   ", 1)[1].split()[0]
            estimates = read_table(str(Path(report).parent / ESTIMATES_FILE), ESTIMATES)
            grades = (grade(estimates, base_url, args.ground_truth, Path(home) / "ground-truth")
                      if args.ground_truth else None)
    printed = run.stdout[run.stdout.index("Ĵ [95 %"):].split("\nreport ")[0].strip().splitlines()
    result = {"machine": machine(), "logs": LOGS, "agent": f"SmolLM2-135M-Instruct via vLLM OpenAI server ({AGENT})",
              "settings": settings, "server_start_s": round(served, 1), "evaluate_wall_s": round(wall, 1),
              "printed": printed, "graded": grades}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "evaluate_logs.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    lines = [f"# `adwm evaluate` on the shipped example ({result['machine']['cpus']} CPUs, {result['machine']['date']})",
             "", f"Logs `{LOGS}` (240 episodes of local-simonsays' behaviour pool, no log-probs); agent "
             f"{result['agent']}; settings {', '.join(settings)}; empty artifact root (the world model trained "
             "from scratch).", "",
             f"- vLLM server start-up: **{served:.0f} s**",
             f"- `adwm evaluate` wall time (Python start, Prefect's embedded server, every stage): **{wall / 60:.1f} min**",
             "", "What it printed:", "", "```", *printed, "```", ""]
    if grades:
        truth = grades["ground_truth"]
        lines += [f"Graded against {args.ground_truth} episodes per ε of the agent in local-simonsays' environment "
                  "(ρ: Spearman over ε; NMAE: |Ĵ−J| averaged over ε, divided by the range of J):", "",
                  "| | " + " | ".join(f"ε={e:g}" for e in truth) + " | ρ | NMAE |",
                  "|---|" + "---|" * (len(truth) + 2),
                  "| ground truth J | " + " | ".join(f"{v:.3f}" for v in truth.values()) + " | | |"]
        lines += [f"| {name} | " + " | ".join(f"{v:.3f}" for v in row["estimates"]) +
                  f" | {row['rho']:+.2f} | {row['nmae']:.3f} |" for name, row in grades["estimators"].items()]
        lines.append("")
    (RESULTS / "evaluate_logs.md").write_text("\n".join(lines))
    print("\n".join(lines))


def grade(estimates, base_url: str, episodes: int, folder: Path) -> dict:
    """The agent's ground truth in local-simonsays' environment and each printed estimator's ρ and NMAE."""
    cell = cell_config("local-simonsays")
    agent = PolicySpec(AGENT, AGENT, "openai", options={"base_url": base_url, "tokenizer": smollm2_dir()})
    summary = ground_truth_rollouts(cell.env, agent, episodes, str(folder / "trajectories.parquet"),
                                    str(folder / "summary.parquet"), cell="evaluate-logs-bench",
                                    epsilons=cell.evaluation.epsilons).to_pylist()
    truth = {row["epsilon"]: row["mean_return"] for row in summary}
    graded = {}
    for name in sorted(set(estimates["estimator"].to_pylist())):
        by_epsilon = {r["epsilon"]: r["value"] for r in estimates.to_pylist() if r["estimator"] == name and r["seed"] == 0}
        values = [by_epsilon[e] for e in truth]
        graded[name] = {"estimates": values, "rho": float(spearmanr(values, list(truth.values())).statistic),
                        "nmae": normalised_absolute_error(np.array(values), list(truth.values()))}
    return {"ground_truth": truth, "estimators": graded}


if __name__ == "__main__":
    main()
