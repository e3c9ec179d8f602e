"""The bench's measured errors, shipped with the package for the recommended estimate
(adwm_core/ope/statistics/bench_calibration.json, read by ope/statistics/recommend.py; issue 73).

`python -m bench.calibrate`: per development cell with a finished report under today's code, each
estimator's seed-mean Ĵ and the ground truth J at every point, the environment's declared return
range and the share of π_e's imagined steps the log answered (the bench loop runs it after a
default run). `python -m bench.calibrate --from-main-results`: the same from the curves of
bench/results/main_results.json, the only per-point figures committed before the loop's first run
(their commit is recorded, and the recommended estimate names it).
Test cells never enter it: their figures come through the ledger alone.
"""

from __future__ import annotations

import argparse
import json
import math

from adwm_core.ope.statistics.recommend import SHIPPED, BenchCalibration, BenchCell, point_key
from adwm_core.report import HEADLINE, RECOMMENDED, on_the_return_scale
from adwm_core.stages.report import declared_return_range
from bench.common import RESULTS, artifact, cell_config, development_cells


def bench_cell(name: str, curves: dict) -> BenchCell | None:
    """A cell's record from its report's curves (None: no ground truth in them)."""
    if curves.get("ground_truth") is None:
        return None
    config = cell_config(name)
    labels = [point_key(p, e) for p, e in zip(curves["policy"], curves["epsilon"])]
    low, high = declared_return_range(config)
    answered = curves.get("diagnostics", {}).get(HEADLINE, {}).get("log_share", math.nan)
    return BenchCell(name, config.env.name, low, high, answered, dict(zip(labels, curves["ground_truth"])),
                     {estimator: dict(zip(labels, values)) for estimator, values in curves["estimators"].items()
                      if estimator != RECOMMENDED and on_the_return_scale(estimator)})


def from_reports(cells: list[str]) -> tuple[BenchCell, ...]:
    """The records of the cells whose report is finished under today's code."""
    found = []
    for name in cells:
        report = artifact(name, "report", required=False)
        if report is not None:
            with open(report.file("curves")) as f:
                found.append(bench_cell(name, json.load(f)))
    return tuple(c for c in found if c is not None)


def from_main_results() -> tuple[tuple[BenchCell, ...], str]:
    """The development cells' records in bench/results/main_results.json, and their commit."""
    results = json.loads((RESULTS / "main_results.json").read_text())
    development = set(development_cells())
    cells = [bench_cell(c["cell"], c["curves"]) for c in results["cells"] if c["cell"] in development]
    commits = sorted({c["commit"] for c in results["cells"] if c["cell"] in development})
    return tuple(c for c in cells if c is not None), ",".join(commits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-main-results", action="store_true",
                        help="from bench/results/main_results.json's curves instead of today's reports")
    args = parser.parse_args()
    if args.from_main_results:
        cells, commit = from_main_results()
    else:
        from adwm_core.provenance import source_version

        cells, commit = from_reports(development_cells()), source_version()
    if not cells:
        raise SystemExit("no development cell has a finished report under today's code: run `python -m bench.loop`")
    BenchCalibration(cells, commit).save(SHIPPED)
    print(f"{SHIPPED}: {len(cells)} cells ({', '.join(c.name for c in cells)}) at {commit}")


if __name__ == "__main__":
    main()
