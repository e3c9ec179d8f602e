"""How long the ``adwm`` command takes to answer what needs only its parser (issue 59: ≤ 1 s), and
to reach its first stage (≤ 3 s in-process).

`python -m bench.costs.command_start [CHECKOUT ...]`: for each checkout (default: this one), the
best of three wall times of ``adwm --help``, ``adwm evaluate --help`` and a refused flag, each a
fresh interpreter running that checkout's ``flows.cli``. Then ``adwm evaluate`` on the shipped
example logs (their first 4 episodes, SmolLM2 as the agent, toy sizes), run once to fill an empty
artifact root and then again with every stage finished: the seconds until it names its first
stage ("<stage>: reusing …") and until it ends, in-process (no Prefect server configured) and as
the tracked flow (``--tracked``: Prefect's temporary server and MLflow). A checkout whose command
has no in-process path runs the flow both times. Name an older checkout beside this one (a
``git worktree``) to get before and after in one run on one machine.
→ bench/results/command_start.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.common import REPO, RESULTS, machine

CALLS = (["--help"], ["evaluate", "--help"], ["evaluate", "--logs", "x.jsonl", "--bogus"])
PROBE = "import sys\nfrom flows.cli import main\nsys.exit(main(sys.argv[1:]))"
EVALUATE = ["evaluate", "--logs", "examples/simonsays-logs.jsonl", "--env", "textworld-express", "--task",
            "simonsays", "--agent-backend", "transformers", "--agent-model", "offline:smollm2-135m-instruct",
            "--limit", "4", "--epsilons", "0,1",
            *(arg for setting in ("world_model.steps=20", "adwm.n_rollouts=4", "adwm.horizon=4", "adwm.seeds=[0]",
                                  "baselines.fqe.epochs=2") for arg in ("--set", setting))]


def best_seconds(checkout: str, argv: list[str], repeats: int = 3) -> float:
    """The best of ``repeats`` wall times of ``adwm <argv>`` from ``checkout``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=checkout, env={"PYTHONPATH": checkout},
                       capture_output=True, timeout=300)
        times.append(time.perf_counter() - started)
    return min(times)


def reused_run(checkout: str, home: str, tracked: bool) -> dict[str, float]:
    """Seconds of a fresh interpreter's ``adwm evaluate`` (``EVALUATE``) over the finished stages
    under ``home``: until its first "<stage>: reusing" line, and until it ends."""
    env = {**os.environ, "PYTHONPATH": checkout, "ADWM_HOME": home, "PREFECT_HOME": f"{home}/prefect",
           "MLFLOW_TRACKING_URI": f"sqlite:///{home}/mlflow.db",
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}  # a loaded machine starts it slowly
    env.pop("PREFECT_API_URL", None)
    started, first, said = time.perf_counter(), None, []
    with subprocess.Popen([sys.executable, "-c", PROBE, *EVALUATE, *(["--tracked"] if tracked else [])], cwd=checkout,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        for line in process.stdout:
            said = [*said[-20:], line]
            if first is None and ": reusing " in line:
                first = time.perf_counter() - started
    if process.returncode:
        raise SystemExit(f"adwm evaluate failed in {checkout} (exit {process.returncode}):\n{''.join(said)}")
    return {"first_stage": first, "total": time.perf_counter() - started}


def evaluate_seconds(checkout: str) -> dict[str, dict[str, float] | None]:
    """``reused_run`` in-process and tracked, after one run filled a fresh artifact root (a
    checkout without ``--tracked`` runs the flow whatever it is asked: no in-process row)."""
    in_process = "--tracked" in subprocess.run([sys.executable, "-c", PROBE, "evaluate", "--help"], cwd=checkout,
                                               env={"PYTHONPATH": checkout}, capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as home:
        reused_run(checkout, home, tracked=in_process)
        return {"in-process": reused_run(checkout, home, tracked=False) if in_process else None,
                "tracked": reused_run(checkout, home, tracked=in_process)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="*", default=[str(REPO)])
    checkouts = parser.parse_args().checkouts
    found = {checkout: {" ".join(argv): best_seconds(checkout, argv) for argv in CALLS} for checkout in checkouts}
    evaluated = {checkout: evaluate_seconds(checkout) for checkout in checkouts}
    lines = ["# How long `adwm` takes to answer from its parser", "",
             "Best of three wall seconds, a fresh interpreter each (`python -m bench.costs.command_start`).", "",
             "| call | " + " | ".join(f"`{c}`" for c in checkouts) + " |", "|---|" + "---|" * len(checkouts)]
    for argv in CALLS:
        call = " ".join(argv)
        lines.append(f"| `adwm {call}` | " + " | ".join(f"{found[c][call]:.2f}" for c in checkouts) + " |")
    lines += ["", "`adwm evaluate` with every stage finished: seconds to its first stage / to its end.", "",
              "| path | " + " | ".join(f"`{c}`" for c in checkouts) + " |", "|---|" + "---|" * len(checkouts)]
    for path in ("in-process", "tracked"):
        lines.append(f"| {path} | " + " | ".join(
            f"{evaluated[c][path]['first_stage']:.1f} / {evaluated[c][path]['total']:.1f}" if evaluated[c][path]
            else "no such path" for c in checkouts) + " |")
    lines += ["", f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "command_start.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "command_start.json").write_text(json.dumps({"machine": machine(), "seconds": found,
                                                            "evaluate_reused": evaluated}, indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
