"""How long the ``adwm`` command takes to answer what needs only its parser (issue 59: ≤ 1 s).

`python -m bench.costs.command_start [CHECKOUT ...]`: for each checkout (default: this one), the
best of three wall times of ``adwm --help``, ``adwm evaluate --help`` and a refused flag, each a
fresh interpreter running that checkout's ``flows.cli``. Name an older checkout beside this one
(a ``git worktree``) to get before and after in one run on one machine.
→ bench/results/command_start.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bench.common import REPO, RESULTS, machine

CALLS = (["--help"], ["evaluate", "--help"], ["evaluate", "--logs", "x.jsonl", "--bogus"])
PROBE = "import sys\nfrom flows.cli import main\nsys.exit(main(sys.argv[1:]))"


def best_seconds(checkout: str, argv: list[str], repeats: int = 3) -> float:
    """The best of ``repeats`` wall times of ``adwm <argv>`` from ``checkout``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=checkout, env={"PYTHONPATH": checkout},
                       capture_output=True, timeout=300)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="*", default=[str(REPO)])
    checkouts = parser.parse_args().checkouts
    found = {checkout: {" ".join(argv): best_seconds(checkout, argv) for argv in CALLS} for checkout in checkouts}
    lines = ["# How long `adwm` takes to answer from its parser", "",
             "Best of three wall seconds, a fresh interpreter each (`python -m bench.costs.command_start`).", "",
             "| call | " + " | ".join(f"`{c}`" for c in checkouts) + " |", "|---|" + "---|" * len(checkouts)]
    for argv in CALLS:
        call = " ".join(argv)
        lines.append(f"| `adwm {call}` | " + " | ".join(f"{found[c][call]:.2f}" for c in checkouts) + " |")
    lines += ["", f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "command_start.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "command_start.json").write_text(json.dumps({"machine": machine(), "seconds": found}, indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
