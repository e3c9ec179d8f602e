"""The README's Python-API example, run as written and timed: the block between the
``python-api-example`` markers of README.md, executed in a child process from an empty artifact
root (every stage computed, the offline SmolLM2 converted), in the repository's root. Writes the
wall time and what the block printed to bench/results/python_api.{json,md}.

    python -m bench.costs.python_api
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

from bench.common import REPO, RESULTS, machine

MARKERS = re.compile(r"<!-- python-api-example -->\s*```python\n(.*?)```\s*<!-- /python-api-example -->", re.S)


def example() -> str:
    found = MARKERS.search((REPO / "README.md").read_text())
    if found is None:
        raise SystemExit("README.md has no python-api-example block between its markers")
    return found.group(1)


def main() -> None:
    code = example()
    with tempfile.TemporaryDirectory(prefix="adwm-python-api-bench-") as home:
        environment = {**os.environ, "ADWM_HOME": home}
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=environment, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        (REPO / "imagined.jsonl").unlink(missing_ok=True)  # the block's log_samples output
    if done.returncode:
        raise SystemExit(f"the README's example failed ({done.returncode}):\n{done.stderr[-4000:]}")
    facts = {"machine": machine(), "wall_seconds": round(seconds, 1), "printed": done.stdout}
    where = facts["machine"]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "python_api.json").write_text(json.dumps(facts, indent=2, ensure_ascii=False))
    (RESULTS / "python_api.md").write_text(
        f"# The README's Python-API example\n\n{where['cpus']} CPUs, {where['processor']}, {where['date']}; from an "
        f"empty artifact root: "
        f"**{seconds / 60:.1f} min** wall.\n\n```python\n{code}```\n\nWhat it printed (stage messages included):\n\n"
        f"```\n{done.stdout}```\n")
    print(f"{seconds / 60:.1f} min; bench/results/python_api.md")


if __name__ == "__main__":
    main()
