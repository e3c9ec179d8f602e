"""`make demo`'s wall time and each stage's share, on this machine, from a fresh artifact root.

Runs the default local cell exactly as `make demo` does (``python -m flows.ope_cell
local-simonsays``: Prefect's embedded API, MLflow on SQLite) with ``ADWM_HOME`` in a new
temporary folder, so no stage is reused, then reads each stage's wall time from its MLflow
run. Stages on independent branches overlap (ground truth beside behaviour collection,
log-probs and ψ beside world-model training, baselines beside ADWM), so the shares add up
to more than 100 %.

Writes ``bench/results/demo.{json,md}``. Usage: ``python -m bench.costs.demo_stages``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from bench.common import REPO, RESULTS, machine, stage_timings


def main() -> None:
    home = tempfile.mkdtemp(prefix="adwm-demo-bench-")
    env = dict(os.environ, ADWM_HOME=home, PREFECT_HOME=os.path.join(home, "prefect"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="90")
    env.pop("MLFLOW_TRACKING_URI", None)
    os.makedirs(env["PREFECT_HOME"])
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "flows.ope_cell", "local-simonsays"], env=env, cwd=REPO, check=True)
    wall = time.perf_counter() - started
    flow_seconds, stages = stage_timings(home, "local-simonsays")
    host = machine()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "demo.json").write_text(json.dumps({"machine": host, "wall_s": wall, "flow_s": flow_seconds,
                                                   "stages": stages, "artifact_root": home}, indent=2))
    lines = [
        f"# `make demo` on this machine ({host['cpus']} CPUs, {host['processor']}, {host['date']})",
        "",
        f"Default local cell `local-simonsays` from an empty artifact root: **{wall / 60:.1f} min** wall time "
        f"(the flow itself {flow_seconds / 60:.1f} min; the rest is Python start-up and Prefect's embedded "
        "server). Stages on independent branches overlap, so shares add up to more than 100 %.",
        "",
        "| stage | starts at s | wall s | share of the flow |",
        "|---|---|---|---|",
        *(f"| {s['stage']} | {s['start']:.0f} | {s['seconds']:.1f} | {s['seconds'] / flow_seconds:.0%} |"
          for s in stages),
    ]
    (RESULTS / "demo.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
