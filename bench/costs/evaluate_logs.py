"""`adwm evaluate` on the shipped example, end to end, from an empty artifact root: the JSONL logs
of examples/ and SmolLM2-135M-Instruct served by vLLM's OpenAI server on loopback as the agent
(the README's worked example). Writes the wall times and the printed estimates to
bench/results/evaluate_logs.{json,md}. The logs come from local-simonsays, whose environment runs
here: ``--ground-truth N`` then plays each agent N episodes per ε in that cell's environment and
grades what `adwm evaluate` printed (Spearman ρ over ε, |Ĵ−J|/range).

``--two-agents``: a second agent beside SmolLM2, local-simonsays' own π_e (its tiny GPT-2
checkpoint iter2, restored from bench/store), both loaded in process (transformers: one endpoint
serves one model), so the report leads with the recommended estimate and its verdict between the
two agents (→ bench/results/evaluate_two_agents.{json,md}). ``--live K``: K live episodes per point
folded in, and read alone beside them.

    python -m bench.costs.evaluate_logs [--two-agents] [--live K] [--ground-truth 100] [--set KEY=VALUE ...]
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

from adwm_core.data import ESTIMATES, read_table
from adwm_core.ope.statistics.metrics import normalised_absolute_error, spearman
from adwm_core.policies.local_models import smollm2_dir
from adwm_core.policies.serving import serve_vllm
from adwm_core.specs import PolicySpec
from adwm_core.collection import ground_truth_rollouts
from tasks.report import ESTIMATES_FILE
from adwm_core import pipeline
from bench.common import REPO, RESULTS, cell_config, machine
from bench.store import restore
from bench.versions import artifact_root

LOGS = "examples/simonsays-logs.jsonl"
AGENT = "smollm2-agent"
# the settings of local-simonsays, the cell the logs were exported from
SETTINGS = ["adwm.horizon=12", "baselines.seeds=[0]"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--ground-truth", type=int, default=0, metavar="N", help="episodes per ε to grade with")
    parser.add_argument("--two-agents", action="store_true",
                        help="SmolLM2 and local-simonsays' π_e (tiny iter2), both in process")
    parser.add_argument("--live", type=int, default=0, metavar="K", help="K live episodes per point folded in")
    args = parser.parse_args()
    if args.two_agents:
        return two_agents(args)
    settings = SETTINGS + args.extra
    with tempfile.TemporaryDirectory(prefix="adwm-evaluate-bench-") as home:
        started = time.perf_counter()
        with serve_vllm(smollm2_dir(), served_name=AGENT) as base_url:
            served = time.perf_counter() - started
            printed_all, wall, estimates = evaluate(["--agent-base-url", base_url, "--agent-model", AGENT,
                                                     "--agent-tokenizer", smollm2_dir()], settings, home)
            agent = PolicySpec(AGENT, AGENT, "openai", options={"base_url": base_url, "tokenizer": smollm2_dir()})
            grades = (grade(estimates, [agent], args.ground_truth, Path(home) / "ground-truth")[AGENT]
                      if args.ground_truth else None)
    printed = printed_all[printed_all.index("Ĵ [95 %"):].split("\nreport ")[0].strip().splitlines()
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
        lines += [f"Graded against {args.ground_truth} episodes per ε of the agent in local-simonsays' environment "
                  "(ρ: Spearman over ε; NMAE: |Ĵ−J| averaged over ε, divided by the range of J):", "",
                  *grade_table(grades)]
    (RESULTS / "evaluate_logs.md").write_text("\n".join(lines))
    print("\n".join(lines))


def evaluate(agent_arguments: list[str], settings: list[str], home: str):
    """`adwm evaluate` on the example logs with ``agent_arguments`` and ``settings`` (``--set``), artifacts
    under ``home``: what it printed, its wall seconds and the report's estimates."""
    environment = {**os.environ, "ADWM_HOME": home, "PREFECT_HOME": f"{home}/prefect"}
    environment.pop("MLFLOW_TRACKING_URI", None)
    command = [sys.executable, "-m", "flows.cli", "evaluate", "--logs", LOGS, "--env", "textworld-express",
               "--task", "simonsays", *agent_arguments, *(a for s in settings for a in ("--set", s))]
    began = time.perf_counter()
    run = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True)
    wall = time.perf_counter() - began
    if run.returncode:
        sys.exit(f"adwm evaluate failed ({run.returncode}):\n{run.stderr[-4000:]}")
    return run.stdout, wall, read_table(str(report_folder(run.stdout) / ESTIMATES_FILE), ESTIMATES)


def report_folder(printed: str) -> Path:
    """The report's folder, from the ``report   PATH`` line `adwm evaluate` ends with."""
    return Path(printed.split("\nreport   ", 1)[1].split()[0]).parent


def grade_table(graded: dict) -> list[str]:
    """One agent's grades as a table: J and each estimator's Ĵ per ε, its ρ and NMAE (an estimator's
    rows under a bound, ``E@bound``, repeat its Ĵ and are left out)."""
    truth = graded["ground_truth"]
    return ["| | " + " | ".join(f"ε={float(e):g}" for e in truth) + " | ρ | NMAE |", "|---|" + "---|" * (len(truth) + 2),
            "| ground truth J | " + " | ".join(f"{v:.3f}" for v in truth.values()) + " | | |",
            *[f"| {name} | " + " | ".join(f"{v:.3f}" for v in row["estimates"]) + f" | {row['rho']:+.2f} | "
              f"{row['nmae']:.3f} |" for name, row in graded["estimators"].items() if "@" not in name], ""]


def grade(estimates, agents: list[PolicySpec], episodes: int, folder: Path) -> dict:
    """Per agent (by label): its ground truth in local-simonsays' environment and each printed
    estimator's ρ over ε and NMAE."""
    cell = cell_config("local-simonsays")
    grades = {}
    for agent in agents:
        played = folder / agent.label
        summary = ground_truth_rollouts(cell.env, agent, episodes, str(played / "trajectories.parquet"),
                                        str(played / "summary.parquet"), cell="evaluate-logs-bench",
                                        epsilons=cell.evaluation.epsilons).to_pylist()
        truth = {row["epsilon"]: row["mean_return"] for row in summary}
        graded = {}
        rows = [r for r in estimates.to_pylist() if r["seed"] == 0 and r["policy"].startswith(agent.label)]
        for name in sorted({r["estimator"] for r in rows}):
            by_epsilon = {r["epsilon"]: r["value"] for r in rows if r["estimator"] == name}
            values = [by_epsilon[e] for e in truth]
            graded[name] = {"estimates": values, "rho": spearman(values, list(truth.values())),
                            "nmae": normalised_absolute_error(np.array(values), list(truth.values()))}
        grades[agent.label] = {"ground_truth": truth, "estimators": graded}
    return grades


def two_agents(args: argparse.Namespace) -> None:
    """SmolLM2 and local-simonsays' π_e scored together from the example logs (see the module's docstring)."""
    settings = SETTINGS + args.extra
    with tempfile.TemporaryDirectory(prefix="adwm-evaluate-bench-") as home:
        with artifact_root(home):
            restore(cells=["local-simonsays"])
            family = pipeline.locate(cell_config("local-simonsays"), "policies").path
        tiny = os.path.join(family, "family", "iter2")
        agents = [PolicySpec(os.path.basename(path), path, "transformers") for path in (smollm2_dir(), tiny)]
        printed_all, wall, estimates = evaluate(
            ["--agent-backend", "transformers", *(a for agent in agents for a in ("--agent-model", agent.model)),
             *(["--live", str(args.live)] if args.live else [])], settings, home)
        grades = grade(estimates, agents, args.ground_truth, Path(home) / "ground-truth") if args.ground_truth else {}
    printed = [line for line in printed_all.split("\nreport ")[0].strip().splitlines() if "it/s]" not in line]
    result = {"machine": machine(), "logs": LOGS, "agents": [a.label for a in agents], "settings": settings,
              "live": args.live, "ground_truth_episodes": args.ground_truth, "evaluate_wall_s": round(wall, 1),
              "printed": printed, "graded": grades}
    (RESULTS / "evaluate_two_agents.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    (RESULTS / "evaluate_two_agents.md").write_text(two_agents_markdown(result))
    print(two_agents_markdown(result))


def two_agents_markdown(result: dict) -> str:
    live, episodes = result["live"], result["ground_truth_episodes"]
    lines = [f"# `adwm evaluate` on the shipped example with two agents ({result['machine']['cpus']} CPUs, "
             f"{result['machine']['date']})", "",
             f"Logs `{LOGS}` (240 episodes of local-simonsays' behaviour pool); agents "
             f"{' and '.join(result['agents'])} "
             "(SmolLM2-135M-Instruct, and local-simonsays' own π_e, a tiny GPT-2 checkpoint the log never saw act), "
             f"both in process; settings {', '.join(result['settings'])}"
             + (f"; `--live {live}`" if live else "") + "; an empty artifact root.", "",
             f"`adwm evaluate` wall time: **{result['evaluate_wall_s'] / 60:.1f} min**. What it printed:", "",
             "```", *result["printed"], "```", ""]
    for label, graded in result["graded"].items():
        lines += [f"**{label}**, graded against {episodes} episodes per ε in local-simonsays' environment "
                  "(ρ: Spearman over ε; NMAE: |Ĵ−J| averaged over ε, divided by the range of J):", "",
                  *grade_table(graded)]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
