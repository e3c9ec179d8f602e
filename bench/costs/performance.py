"""Performance report: scoring a new π_e against an already-trained world model, against
evaluating it live — per local cell, side by side in one run on this machine.

For each cell (whose world model is trained: run its flow first):
- ``evaluate-policy`` on the cell's π_e under a new label, so its ψ adapter and ADWM
  inference are computed afresh against the cell's trained world model: wall time;
- the same π_e live: ground-truth rollouts at the same ε levels and episode counts as the
  cell's ground-truth stage, into a scratch folder: wall time;
each in its own process, whose peak resident memory is read from ``wait4`` (environment
worker processes not included). The headline is their ratio. Then ``evaluate-policy`` once more
for the same agent, every stage of which is now finished: what the command costs before it
computes anything (imports, Prefect and MLflow, checking the stages), a floor under the
ratio that no faster stage lowers. Then π_e's LLM on its own, in a
third process: greedy generation and log-prob scoring of the first ``LLM_SAMPLE`` logged
steps of the cell's behaviour data (the prompts π_e sees at those steps), in tokens/s. From the cell's finished
world-model stage (its training history): training time and transitions/s; from the timings the ADWM
stage evaluate-policy ran keeps in its artifact: imagined steps/s and where its time went. The header names the device (the
GPU when one is present).

``--before REV`` times ``evaluate-policy`` a second time under the code of git revision ``REV``
(a temporary worktree; every stage its code shares with today's is reused), in the same run
and on the same machine, so a speed change is measured against what it replaced; the ADWM
estimates of both runs are compared row by row (same estimator, policy, ε and seed). The
profile table splits the ADWM stage's wall time as its timings record it: π_e's decisions
(asked and memoised), the transition (of which guidance and FQE's fits) and the rest.

Writes ``bench/results/performance.{md,json}``; rows of cells not named are kept from the
file's earlier run when it was on the same machine (each row names the day it was measured).
``--server`` runs one Prefect server for the whole bench (as a deployment has one) instead of
the temporary server each bare ``evaluate-policy`` run starts.
Usage: ``python -m bench.costs.performance [--before REV] [--server] [CELL ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from adwm_core.paths import artifact_path
from bench.common import REPO, RESULTS, artifact, cell_config, evaluated, machine, world_model_histories
from bench.costs.decisions import section as decisions_section
from flows.cells import cell_names

LLM_SAMPLE = 128  # logged steps whose prompts π_e's LLM generates for and scores


def measure(kind: str, cell: str, code: Path | None = None, label: str | None = None) -> dict:
    """Run ``kind`` (``evaluate``, ``live`` or ``llm``) for ``cell`` in a child process — under the
    code checked out at ``code`` when given; ``evaluate`` of the agent labelled ``label`` when
    given (else a new label) — : wall s, peak RSS and the facts the child wrote (a file, not a
    pipe: a full pipe would block the child)."""
    command, env = ["-m", "bench.costs.performance"], None
    if code is not None:  # that revision's bench; one from before bench/ was a package runs by path
        flat = code / "bench" / "performance.py"
        command, env = [str(flat)] if flat.exists() else command, {**os.environ, "PYTHONPATH": str(code)}
    with tempfile.TemporaryDirectory() as scratch:
        facts = os.path.join(scratch, "facts.json")
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, *command, "--child", kind, cell, facts, *([label] if label else [])],
                                   env=env, cwd=code)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{kind} on {cell} failed (exit {os.waitstatus_to_exitcode(status)}); see its output above")
        return {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024, **json.loads(open(facts).read())}


def child(kind: str, cell: str, facts_path: str, label: str | None = None) -> None:
    """One measurement, in this (child) process; writes its facts as JSON to ``facts_path``."""
    from adwm_core import pipeline
    from adwm_core.collection import ground_truth_rollouts
    from adwm_core.api import agent as agent_spec
    from flows.evaluate_policy import evaluate_policy, scoring_config

    config = cell_config(cell)
    policy = evaluated(config)
    if kind == "evaluate":
        label = label or f"perf-{time.time_ns()}"  # a new label: nothing reused but the world model
        evaluate_policy(cell, policy.model, label=label)  # resolves local:<checkpoint> itself
        agent = agent_spec(policy.model, backend="transformers", label=label)
        with open(artifact(scoring_config(cell, agent), "adwm", agent).file("timings")) as f:
            facts = {"epsilons": list(config.evaluation.epsilons), "label": label, "adwm": json.load(f)}
    elif kind == "llm":
        facts = llm_throughput(config.env.name, pipeline.resolved(config, policy),
                               artifact(config, "behaviour").file("trajectories"))
    else:
        with tempfile.TemporaryDirectory() as scratch:
            seconds: dict[float, float] = {}
            ground_truth_rollouts(config.env, pipeline.resolved(config, policy), config.ground_truth.episodes,
                                  f"{scratch}/episodes.parquet", f"{scratch}/summary.parquet", cell=cell,
                                  epsilons=config.evaluation.epsilons, seed=config.ground_truth.seed, timings=seconds)
        facts = {"episodes_per_epsilon": config.ground_truth.episodes, "seconds_per_epsilon": seconds}
    with open(facts_path, "w") as f:
        json.dump(facts, f)


def llm_throughput(env_name: str, spec, trajectories: str) -> dict:
    """π_e's LLM on the prompts of the first LLM_SAMPLE logged steps: new tokens/s of greedy
    generation (one batch, as the rollouts call it) and prompt + action tokens/s of scoring."""
    from adwm_core.policies.loading import ModelCache
    from adwm_core.collection import logged_histories
    from adwm_core.data import TRAJECTORIES, read_table

    steps = list(logged_histories(read_table(trajectories, TRAJECTORIES)))[:LLM_SAMPLE]
    histories, actions = [h for _, h in steps], [row["action"] for row, _ in steps]
    policy = ModelCache().policy(spec, env_name)
    tokenizer = policy.lm.tokenizer

    def count(texts: list[str]) -> int:
        return sum(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])

    prompts = policy.prompts(histories)
    started = time.perf_counter()
    responses = policy.lm.generate(prompts, policy.max_new_tokens)
    generate_s = time.perf_counter() - started
    started = time.perf_counter()
    _, action_tokens = policy.logprob(histories, actions)
    score_s = time.perf_counter() - started
    return {"steps": len(steps), "prompt_tokens": count(prompts), "new_tokens": count(responses),
            "generate_s": generate_s, "score_s": score_s, "action_tokens": int(action_tokens.sum()),
            "new_tokens_per_s": count(responses) / generate_s,
            "scored_tokens_per_s": (count(prompts) + int(action_tokens.sum())) / score_s}


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2)
        return True
    except OSError:
        return False


@contextlib.contextmanager
def prefect_server():
    """A Prefect server on a free loopback port (the artifact root's Prefect home), running for
    the whole bench as a deployment's does: ``evaluate-policy`` then talks to it instead of
    starting a temporary server of its own each time. Stopped afterwards."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/api"
    process = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not _answers(f"{url}/health"):
            if process.poll() is not None:
                raise SystemExit(f"the Prefect server for --server exited ({process.returncode}) before it answered")
            if time.monotonic() > deadline:
                raise SystemExit(f"the Prefect server for --server did not answer at {url}/health within 120 s")
            time.sleep(1)
        previous = os.environ.get("PREFECT_API_URL")
        os.environ["PREFECT_API_URL"] = url  # the children inherit it
        try:
            yield url
        finally:
            if previous is None:
                os.environ.pop("PREFECT_API_URL")
            else:
                os.environ["PREFECT_API_URL"] = previous
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


@contextlib.contextmanager
def checkout(revision: str):
    """A temporary git worktree of ``revision`` (removed afterwards)."""
    known = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
                           capture_output=True)
    if known.returncode != 0:
        raise SystemExit(f"--before {revision!r} names no commit of {REPO}: give a revision `git log` lists")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "code"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(folder), revision], check=True,
                       capture_output=True)
        try:
            yield folder
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(folder)], check=False)


def adwm_folder(cell: str, timings: dict) -> Path:
    """The ADWM stage folder that kept ``timings`` (an evaluate-policy run's, under any code: its
    key is not recomputed here, the folder is found by the timings it wrote)."""
    for path in glob.glob(artifact_path("cells", cell, "adwm", "*", "timings.json")):
        if json.loads(Path(path).read_text()) == timings:
            return Path(path).parent
    raise FileNotFoundError(f"no ADWM stage of {cell} kept the timings {timings}")


def estimates_change(cell: str, before: dict, after: dict) -> dict:
    """Row-by-row change of ADWM's estimates between two evaluate-policy runs: rows compared
    (same estimator, ε and seed), rows bitwise equal and the largest |Ĵ_after − Ĵ_before|."""
    def rows(timings: dict) -> dict:
        table = pq.read_table(adwm_folder(cell, timings) / "estimates.parquet").to_pylist()
        return {(r["estimator"], r["epsilon"], r["seed"]): r["value"] for r in table}

    old, new = rows(before), rows(after)
    common = sorted(set(old) & set(new))
    change = [abs(new[k] - old[k]) for k in common]
    return {"rows": len(common), "bitwise_equal": sum(new[k] == old[k] for k in common),
            "max_abs_change": float(np.max(change)) if change else None,
            "only_before": len(set(old) - set(new)), "only_after": len(set(new) - set(old))}


def profile(adwm: dict) -> dict:
    """Where the ADWM stage's wall time went, from its timings: π_e's decisions, the transition
    (guidance and FQE's fits within it or beside it) and the rest (bank lookups, bookkeeping)."""
    wall = adwm["wall_seconds"]
    parts = {"policy": adwm.get("policy_seconds", 0.0), "transition": adwm.get("transition_seconds", 0.0),
             "fqe fits": adwm.get("fqe_seconds", 0.0)}
    parts["other"] = max(wall - sum(parts.values()), 0.0)
    return {"wall_s": wall, "seconds": parts, "guidance_s": adwm.get("guidance_seconds", 0.0),
            "decisions": adwm.get("decisions"), "memo_hit_rate": adwm.get("decision_memo_hit_rate"),
            "imagined_steps": adwm["imagined_steps"]}


def before_after_lines(rows: list[dict]) -> list[str]:
    """The before/after table of the rows measured with ``--before`` (same run, same machine)."""
    paired = [r for r in rows if "before" in r]
    if not paired:
        return []
    lines = ["", f"## Before and after (`evaluate-policy` under `{paired[0]['before']['revision']}` and under this "
             "code, the same live run as the denominator)", "",
             "| cell | measured | evaluate s before → after | ratio before → after | imagined steps/s before → after "
             "| speed-up | ADWM rows equal bitwise | largest \|ΔĴ\| |", "|---|---|---|---|---|---|---|---|"]
    for r in paired:
        b, change = r["before"], r["before"]["estimates_change"]
        largest = "–" if change["max_abs_change"] is None else f"{change['max_abs_change']:.3g}"
        lines.append(f"| {r['cell']} | {measured_as(r)} | {b['evaluate_policy']['wall_s']:.0f} → "
                     f"{r['evaluate_policy']['wall_s']:.0f} | {b['ratio']:.2f} → {r['ratio']:.2f} | "
                     f"{b['imagined_steps_per_s']:.1f} → {r['imagined_steps_per_s']:.1f} | "
                     f"{r['imagined_steps_per_s'] / b['imagined_steps_per_s']:.1f}× | "
                     f"{change['bitwise_equal']} of {change['rows']} | {largest} |")
    return lines


def profile_lines(rows: list[dict]) -> list[str]:
    """Where the ADWM stage's time went, per cell (and under the earlier code where measured)."""
    lines = ["", "## Where the ADWM stage's time goes", "",
             "Seconds of the stage evaluate-policy ran (its timings): π_e's decisions (every rollout's step in one "
             "call), the transition (log lookups, the denoiser; guidance within it), FQE's fits for the hand-over, "
             "and the rest (bank lookups, bookkeeping; and the kNN-WM reference's own rollouts where the stage ran them, "
             "as evaluate-policy did until it imagined ADWM alone, at 2026-11-26's `reference=False`).", "",
             "| cell | code | stage s | π_e s | decisions asked (share the memo answered) | transition s (guidance) | FQE fits s | "
             "other s | imagined steps |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for code, measured in (("before", r.get("before", {}).get("profile")), ("after", r.get("profile"))):
            if measured is None:
                continue
            s, asked = measured["seconds"], measured["decisions"]
            memo = "–" if asked is None else f"{asked:.0f} ({measured['memo_hit_rate']:.0%})"
            lines.append(f"| {r['cell']} | {code}, {r.get('prefect', 'temporary server')} | "
                         f"{measured['wall_s']:.1f} | {s['policy']:.1f} | {memo} | "
                         f"{s['transition']:.1f} ({measured['guidance_s']:.1f}) | {s['fqe fits']:.1f} | "
                         f"{s['other']:.1f} | {measured['imagined_steps']:.0f} |")
    return lines


def uncertainty_lines() -> list[str]:
    """The cost of ADWM's model uncertainty (issue 38): the world-model ensembles scored by
    ``python -m bench.tables.heldout --set world_model.members=K`` (bench/results/variants), their training
    seconds (every member) beside the single model's of the newest other variant run (same
    recipe, its own day); imagination runs in every member, so the ADWM stage's time grows K-fold."""
    variants = [json.loads(p.read_text()) for p in sorted((RESULTS / "variants").glob("*.json"))]
    ensembles = [v for v in variants if "world_model.members" in v["settings"]]
    single: dict[str, tuple[float, str]] = {}
    for v in sorted((v for v in variants if "world_model.members" not in v["settings"]), key=lambda v: v["machine"]["date"]):
        for cell, result in v["results"].items():
            seconds = result.get("wm_seconds_as_is") or result.get("wm_seconds_variant")
            if seconds:
                single[cell] = (seconds, f"`{v['commit']}`, {v['machine']['date']}")
    if not ensembles:
        return []
    lines = ["", "## The cost of uncertainty", "",
             "World-model ensembles (`world_model.members: K`, ADWM's interval over members and rollouts): training "
             "seconds of all K members, beside one model's under the same recipe (the newest other variant run); "
             "ADWM's imagination runs in every member (K × the stage's transition and π_e time).", "",
             "| K | cell | training s, K members (measured at) | training s, one model (measured at) |", "|---|---|---|---|"]
    for v in ensembles:
        for cell, result in v["results"].items():
            if result.get("wm_seconds_variant") is not None:
                one = single.get(cell)
                lines.append(f"| {v['settings']['world_model.members']} | {cell} | {result['wm_seconds_variant']:.0f} "
                             f"(`{v['commit']}`, {v['machine']['date']}) | " + (f"{one[0]:.0f} ({one[1]}) |" if one else "– |"))
    return lines


def throughput(cell: str, adwm: dict) -> dict:
    """World-model training of the cell's finished world-model stage (all members' seconds, the
    first member's last transitions/s); imagined steps/s of the ADWM stage ``evaluate-policy``
    just ran (``adwm``: the timings it kept)."""
    histories = world_model_histories(cell)  # main() checked that every cell's world model is finished
    return {"world_model_s": sum(h["seconds"] for h in histories), "transitions_per_s": histories[0].get("transitions_per_s"),
            "imagined_steps": adwm["imagined_steps"], "imagined_steps_per_s": adwm["imagined_steps"] / adwm["wall_seconds"],
            "adwm_seconds": {k: v for k, v in adwm.items() if k.endswith("_seconds") and k != "wall_seconds"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="*", help="cells (default: every local-* cell)")
    parser.add_argument("--before", metavar="REV", help="also time evaluate-policy under the code of this git revision")
    parser.add_argument("--server", action="store_true",
                        help="evaluate-policy against one running Prefect server, as deployed (default: each run "
                             "starts Prefect's temporary server, as a bare `python -m flows.evaluate_policy` does)")
    parser.add_argument("--child", nargs="+", metavar="KIND CELL FACTS [LABEL]", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child)
    cells = args.cells or [c for c in cell_names() if c.startswith("local-")]
    for cell in cells:
        artifact(cell_config(cell), "world-model")  # every cell's world model is trained, before any timing
    host = machine()
    mode = "running server" if args.server else "temporary server"  # how evaluate-policy reaches Prefect
    earlier = RESULTS / "performance.json"  # rows of cells not measured now are kept (same machine only)
    kept = json.loads(earlier.read_text()) if earlier.exists() else {"machine": {}, "cells": []}
    same_machine = {k: v for k, v in kept["machine"].items() if k != "date"} == {k: v for k, v in host.items() if k != "date"}
    rows = [{"measured": kept["machine"].get("date"), **r}
            for r in kept["cells"]
            if same_machine and (r["cell"] not in cells or r.get("prefect", "temporary server") != mode)]
    with contextlib.ExitStack() as stack:
        before = stack.enter_context(checkout(args.before)) if args.before else None
        if args.server:
            stack.enter_context(prefect_server())
        for cell in cells:
            evaluate, live, llm = measure("evaluate", cell), measure("live", cell), measure("llm", cell)
            reused = measure("evaluate", cell, label=evaluate["label"])  # every stage finished: the fixed cost
            row = {"cell": cell, "measured": host["date"], "prefect": mode,
                   "evaluate_policy": evaluate, "live": live, "evaluate_reused": reused,
                   "ratio": evaluate["wall_s"] / live["wall_s"], "llm": llm, "profile": profile(evaluate["adwm"]),
                   **throughput(cell, evaluate["adwm"])}
            if before is not None:
                earlier_code = measure("evaluate", cell, before)
                row["before"] = {"revision": args.before, "evaluate_policy": earlier_code,
                                 "ratio": earlier_code["wall_s"] / live["wall_s"], "profile": profile(earlier_code["adwm"]),
                                 "imagined_steps_per_s": earlier_code["adwm"]["imagined_steps"]
                                 / earlier_code["adwm"]["wall_seconds"],
                                 "estimates_change": estimates_change(cell, earlier_code["adwm"], evaluate["adwm"])}
            rows.append(row)
            print(cell, json.dumps(row), flush=True)
    write_report(host, rows)


def measured_as(row: dict) -> str:
    """The day a row was measured, and how its evaluate-policy reached Prefect (rows from before
    ``--server`` existed all started the temporary server)."""
    return f"{row['measured']}, {row.get('prefect', 'temporary server')}"


def reused_cell(row: dict) -> str:
    """The reused run's seconds and their share of the live run's (rows measured before it existed: –)."""
    if "evaluate_reused" not in row:
        return "–"
    reused = row["evaluate_reused"]["wall_s"]
    return f"{reused:.0f} ({reused / row['live']['wall_s']:.2f})"


def write_report(host: dict, rows: list[dict]) -> None:
    """bench/results/performance.{md,json} from the measured ``rows`` (cell order)."""
    order = {cell: i for i, cell in enumerate(cell_names())}
    rows.sort(key=lambda r: order.get(r["cell"], len(order)))
    device = host.get("gpu", f"{host['cpus']} CPUs, {host['processor']}, {host['torch_threads']} torch thread(s) a process")
    lines = [f"# Performance on the local cells ({device})", "",
             "Scoring π_e with `evaluate-policy` against the cell's trained world model (ψ and ADWM computed afresh) "
             "beside evaluating the same π_e live (ground-truth rollouts, same ε levels and episode counts), each "
             "in its own process on this machine, `evaluate-policy` with Prefect's temporary server or against one "
             "running server (`--server`, as deployed), as the measured column says. Ratio < 1: the world model "
             "answers faster than the environment. Reused: `evaluate-policy` run again for the same agent, every "
             "stage already finished — the command's fixed cost (imports, Prefect and MLflow, stage checks), a floor "
             "under the ratio. "
             f"LLM: π_e's model alone, greedy generation for and log-prob scoring of the first {LLM_SAMPLE} logged "
             "behaviour steps' prompts (one batch each), in new and in scored (prompt + action) tokens/s.",
             "", "| cell | measured | evaluate-policy s | live s | ratio | reused s (/ live) | "
             "peak RSS MiB (evaluate / live) | world-model s | "
             "transitions/s | imagined steps/s | LLM new tokens/s | LLM scored tokens/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['cell']} | {measured_as(r)} | "
                     f"{r['evaluate_policy']['wall_s']:.0f} | {r['live']['wall_s']:.0f} | "
                     f"{r['ratio']:.2f} | {reused_cell(r)} | "
                     f"{r['evaluate_policy']['peak_rss_mib']:.0f} / {r['live']['peak_rss_mib']:.0f} | "
                     f"{r['world_model_s']:.0f} | {r['transitions_per_s'] or float('nan'):.0f} | "
                     f"{r['imagined_steps_per_s'] or float('nan'):.1f} | {r['llm']['new_tokens_per_s']:.0f} | "
                     f"{r['llm']['scored_tokens_per_s']:.0f} |")
    lines += before_after_lines(rows) + profile_lines(rows) + uncertainty_lines()
    if (RESULTS / "decisions.json").exists():  # bench.costs.decisions' section, kept across runs of this bench
        lines += ["", *decisions_section(json.loads((RESULTS / "decisions.json").read_text())["cells"])]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "performance.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "performance.json").write_text(json.dumps({"machine": host, "cells": rows}, indent=2))
    print("\n".join(lines))




if __name__ == "__main__":
    sys.exit(main())
