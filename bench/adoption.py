"""The adoption rule of bench/ADOPTION.md, as code: which development cells count, and whether a
candidate setting replaces the default. Written before its first verdict and never changed after
a reading.

Pure functions over figures already measured (per cell: ρ, NMAE, coverage of the headline
estimator under the default and under the candidate, the cell's environment group and how many of
its pairs of points its ground truth splits); ``bench/loop.py`` measures them and calls :func:`decide`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from adwm_core.ope.statistics.intervals import percentile_bootstrap

HEADLINE = "ADWM:reward_sum"  # the estimator whose number the product puts first (2026-11-29)
MIN_SPLIT_PAIRS = 3  # a cell whose ground truth splits fewer of its pairs of points ranks noise
MIN_CELLS = 10  # fewer counted cells: no verdict
SPLIT_Z = 1.96
RESAMPLES, SEED = 2000, 0
RHO_FLOOR_MEAN, RHO_FLOOR_LOW = -0.02, -0.10  # the level route's bound on ranking
COVERAGE_FLOOR = -0.05


def split_pairs(points: Sequence[Mapping]) -> int:
    """How many pairs of ``points`` (each with ``mean_return`` and ``stderr``) the ground truth splits:
    |J_a − J_b| > 1.96 · √(SE_a² + SE_b²)."""
    return sum(abs(a["mean_return"] - b["mean_return"]) > SPLIT_Z * math.hypot(a["stderr"], b["stderr"])
               for a, b in itertools.combinations(points, 2))


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean over cells with its 95 % percentile-bootstrap interval over cells."""
    x = np.asarray(values, float)
    low, high = percentile_bootstrap(lambda resamples: x[resamples].mean(1), len(x), n_resamples=RESAMPLES,
                                     confidence=0.95, seed=SEED)
    return float(x.mean()), float(low), float(high)


@dataclass(frozen=True)
class CellFigures:
    """One development cell's figures for the rule: its environment group, the pairs its truth
    splits, and the headline's ``{"rho", "nmae", "coverage"}`` under the default and the candidate
    (None where that side has no finished row)."""

    group: str
    split_pairs: int
    default: Mapping[str, float] | None
    candidate: Mapping[str, float] | None


@dataclass
class Verdict:
    adopt: bool
    reasons: list[str]
    counted: list[str]
    means: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # Δ figure → (mean, low, high)
    groups: dict[str, dict[str, float]] = field(default_factory=dict)  # group → Δ figure → mean


def counted_cells(cells: Mapping[str, CellFigures]) -> list[str]:
    """The cells the rule counts: truth splits ≥ MIN_SPLIT_PAIRS pairs and both sides measured."""
    return [name for name, c in cells.items() if c.split_pairs >= MIN_SPLIT_PAIRS
            and c.default is not None and c.candidate is not None
            and all(np.isfinite(side[k]) for side in (c.default, c.candidate) for k in ("rho", "nmae", "coverage"))]


def decide(cells: Mapping[str, CellFigures]) -> Verdict:
    """bench/ADOPTION.md's verdict on a candidate against the default."""
    counted = counted_cells(cells)
    if len(counted) < MIN_CELLS:
        return Verdict(False, [f"no verdict: {len(counted)} counted cells, the rule needs {MIN_CELLS}"], counted)
    deltas = {figure: {name: cells[name].candidate[figure] - cells[name].default[figure] for name in counted}
              for figure in ("rho", "nmae", "coverage")}
    means = {figure: mean_interval(list(by_cell.values())) for figure, by_cell in deltas.items()}
    groups: dict[str, dict[str, float]] = {}
    for group in sorted({cells[name].group for name in counted}):
        members = [name for name in counted if cells[name].group == group]
        groups[group] = {figure: float(np.mean([deltas[figure][n] for n in members])) for figure in deltas}
    (rho, rho_low, _), (nmae, _, nmae_high), (coverage, _, _) = means["rho"], means["nmae"], means["coverage"]
    reasons = []
    if rho > 0 and rho_low > 0:
        route, wrong_way = "ranking", [g for g, d in groups.items() if d["rho"] < 0]
        reasons.append(f"better by ranking: mean Δρ {rho:+.3f}, interval above 0 ({rho_low:+.3f})")
    elif nmae < 0 and nmae_high < 0 and rho >= RHO_FLOOR_MEAN and rho_low >= RHO_FLOOR_LOW:
        route, wrong_way = "level", [g for g, d in groups.items() if d["nmae"] > 0]
        reasons.append(f"better by level: mean ΔNMAE {_signed(nmae)}, interval below 0 ({_signed(nmae_high)}), "
                       f"ranking kept (mean Δρ {rho:+.3f}, low end {rho_low:+.3f})")
    else:
        route, wrong_way = None, []
        reasons.append(f"not better: mean Δρ {rho:+.3f} (low end {rho_low:+.3f}), mean ΔNMAE {_signed(nmae)} "
                       f"(high end {_signed(nmae_high)})")
    broad = route is not None and len(wrong_way) <= 1
    if route is not None:
        reasons.append(f"{'broad' if broad else 'not broad'}: the {route} figure goes the wrong way in "
                       f"{len(wrong_way)} environment group(s){': ' + ', '.join(wrong_way) if wrong_way else ''}")
    harmless = coverage >= COVERAGE_FLOOR
    reasons.append(f"coverage {'kept' if harmless else 'harmed'}: mean Δcoverage {coverage:+.3f} "
                   f"(floor {COVERAGE_FLOOR:+.2f})")
    return Verdict(route is not None and broad and harmless, reasons, counted, means, groups)


def _signed(value: float) -> str:
    """A signed figure to three decimals, or in powers of ten where it ran away (an IS level of 1e78)."""
    return f"{value:+.3f}" if abs(value) < 1e4 else f"{value:+.2e}"
