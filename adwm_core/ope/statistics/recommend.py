"""One recommended estimate per agent and point, chosen by a rule that reads only the logs and the
bench's past errors, never the evaluated cell's ground truth; its interval and paired verdicts
calibrated on those errors.

The bench (``BenchCalibration``) holds, per development cell, each estimator's Ĵ and the ground
truth J at every point, the return range [lo, hi] (the environment's declared one, else the
horizon times its step range), the scale S (the width of a declared range, else the span of the
logged episodes' returns: read without the truth, so every cell, the bench's and the user's, gets
its scale by the same rule) and the share of π_e's imagined steps the log answered. For a cell
with estimates Ĵ_e(p), that share s, range [lo, hi] and scale S:

- **similar cells** B: the bench cells on the same side of ``ANSWERED_SPLIT`` as s (all of them
  where fewer than ``MIN_SIMILAR`` are), the evaluated cell itself left out where the bench holds it;
- **admissible** estimators: those whose ranking the bench measured (DM, one value for every
  point, ranks nothing), finite, inside [lo, hi] at every point (give or take ``RANGE_SLACK`` of
  its width) and not degenerate (importance weights whose effective sample size is under
  ``MIN_ESS`` episodes);
- **the choice**: the admissible estimator with the highest mean Spearman ρ over B (ties: the
  smaller calibrated error quantile), one estimator for every point of the cell, so the ranking it
  gives is that estimator's;
- **the error unit** u: where at least two of the world-model and Q estimators
  (``SPREAD_ESTIMATORS``) read the cell, how far they disagree, plus ``SPREAD_FLOOR`` S:
  u(p) = max_m Ĵ_m(p) − min_m Ĵ_m(p) + f S at a point, and for a pair (a, b)
  u(a, b) = max_m (Ĵ_m(a) − Ĵ_m(b)) − min_m (Ĵ_m(a) − Ĵ_m(b)) + f S; elsewhere u = S. The bench
  measured the errors in the same unit (normalised conformal prediction: where the models agree
  the error was small, where they part it was large);
- **the interval**, conditioned on what predicts the error and in one unit for every cell:
  Ĵ(p) ± q σ(p) S, clipped to [lo, hi], with σ(p) = (g(p) + f)^γ (1 − a)^k (``ErrorModel``), g(p)
  the disagreement of ``SPREAD_ESTIMATORS`` at p over S (1 where fewer than two read it) and a the
  share of π_e's imagined steps the log answered (0 where unknown). On every bench cell but the
  evaluated one, each model of ``ERROR_MODELS`` gets q, the (1 − α) quantile of |Ĵ − J| / (σ S)
  with each cell weighing one (its points 1/n each: points of one cell share its biases, so the
  cells, not the points, are the exchangeable units); the model kept is the one whose intervals
  are narrowest on those cells (``fit_interval``). What it promises is marginal over cells and
  approximate: with 18 cells no finite-sample guarantee at 95 % exists, so the bench reports the
  coverage it measured on cells the fit never saw (bench/results/recommended.md);
- **verdicts**: for a pair (a, b) with d = Ĵ_a − Ĵ_b, the band d ± t u(a, b); "a is better" where
  it excludes 0, else "cannot tell". t is calibrated on the signs the bench got right, not on the
  size of its errors (an estimator that overstates every difference still orders the pairs): over
  B's pairs (``VERDICT_PAIRS``: all, or those the truth splits) of weight w (``VERDICT_WEIGHTS``:
  one each, or each cell's n pairs 1/n, rescaled to a mean of 1) sorted by |d| / u, the lowest
  score at which (Σw wrong + 1) / (Σw decided + 1) ≤ ``VERDICT_ERROR_RATE`` among the pairs at or
  above it (a wrong verdict: the sign of d is not that of J_a − J_b), t halfway to the next lower
  score. "Cannot tell" comes with the live episodes per point that would likely decide it:
  k = ⌈(z_{1−α/2} + z_{0.8})² (σ_a² + σ_b²) / d²⌉ (σ_p the spread of the returns at p, as ADWM's
  imagined rollouts of p give it: 80 % power at level α).
- **live episodes** (``with_live``): K live returns per point sharpen the recommended estimate under
  the same calibration. Its calibrated error is read as a normal prior of sd τ = max(q u, q_S S) / z
  (z = z_{1−α/2}); the live mean ḡ as a reading of variance s² = σ̂² / K · (t_{ν, 1−α/2} / z)²,
  σ̂² the within-point variance pooled over the cell's points (ν = Σ (K_p − 1) degrees of freedom:
  a point whose K returns all agree still gets width, and a few returns per point borrow strength
  from the others; where every point's returns agree, the variance one more return at the range's
  far end would give); the estimate is (Ĵ/τ² + ḡ/s²) / (1/τ² + 1/s²), ± z / √(1/τ² + 1/s²), unless
  |Ĵ − ḡ| > ``PRIOR_CONTRADICTED`` √(τ² + s²): the live returns contradict the offline estimate
  (the bench's errors are heavy-tailed and shared across a cell), which is then dropped and the
  point reads ḡ ± z s. With ``LIVE_PRIOR_TEST`` "cell", the priors are also tested together (the
  bench's errors are shared across a cell): where X = Σ_p (Ĵ_p − ḡ_p)² / (τ_p² + s_p²) over the P
  played points exceeds the χ²_P quantile at the per-point test's level, 2 Φ(−``PRIOR_CONTRADICTED``),
  the reading is the live returns alone (``live_only``). What the offline estimate was worth is
  said in live episodes: K (s² / σ² − 1), σ the combination's sd. ``live_only`` reads the same
  returns with no offline estimate, the row a user and the bench set beside the combination.
  Verdicts alike, the prior of a difference of sd τ₂ = max(q₂ u(a, b), q₂_S S) / z, q₂ the
  conformal quantile of |(Ĵ_a − Ĵ_b) − (J_a − J_b)| / u(a, b) over B's pairs (q₂_S: of the same
  over S), and s_a² + s_b²: the combined difference d' of sd σ'. "a is better" where |d'| / σ' > t',
  t' calibrated like t on the signs the bench got right (``live_sign_threshold``): on each of B's
  cells, its own reading from the others, K live returns per point drawn ``LIVE_CALIBRATION_DRAWS``
  times as N(J, s_J²) (s_J the sample s.d. of the ground truth's returns there: ``return_sd``),
  folded in alike (a cell recording it at only some points is left out); t' = z where no cell of B
  records it, and inf (no verdict from the combination) where no threshold holds the rate. A
  verdict the logs gave (itself calibrated at that rate) stands unless the combined band d' ± t' σ'
  excludes 0 on the other side.
- **other estimators' intervals**: one whose own intervals held J at fewer than ``INTERVAL_FLOOR``
  of the bench's points is not printed (``withheld``); its Ĵ is.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property, lru_cache
from itertools import combinations

import numpy as np
from scipy import stats

from .metrics import spearman
from .verdicts import CANNOT_TELL, Verdict

ANSWERED_SPLIT = 0.5  # cells whose log answered at least half of π_e's imagined steps, and the others
MIN_SIMILAR = 5  # fewer bench cells on the evaluated cell's side: calibrate on all of them
MIN_ESS = 1.5  # importance weights carried by about one episode are degenerate
POWER = 0.8  # the live-episode count of "cannot tell" aims at this power
RANGE_SLACK = 0.05  # of the range's width: a model's sum of rewards may overshoot a bound a little (ADWM −1.046 at J = −1)
MIN_SPLIT_PAIRS = 3  # a bench cell whose truth splits fewer pairs ranks noise: its ρ is left out of the choice (bench/ADOPTION.md)
INTERVAL_FLOOR = 0.80  # an estimator's own interval that held J less often on the bench is not printed
SPREAD_ESTIMATORS = ("ADWM:reward_sum", "FQE", "kNN-WM:reward_sum")  # their disagreement is the error unit
SPREAD_FLOOR = 0.03  # of S, added to the disagreement: models that agree are not taken for exact
VERDICT_ERROR_RATE = 0.05  # the share of the bench's verdicts the calibrated band lets be wrong
VERDICT_PAIRS = "all"  # the bench pairs that calibrate t: "all", or "split" (those the truth splits)
VERDICT_WEIGHTS = "pairs"  # "pairs": each weighs one; "cells": each cell's pairs weigh one cell's share
LIVE_ONLY = "the live episodes alone"  # the source of ``live_only``'s reading
PAIRS_SHOWN = ("all", "agents")  # Recommendation.lines: every verdict, or the agents' pairs at the same ε first
MIN_INTERVAL_CELLS = 10  # fewer bench cells reading the estimator: its interval is the whole range
LIVE_CALIBRATION_DRAWS = 10
# |prior − live| beyond this many sd of their difference: the live returns contradict the offline estimate,
# which is dropped (a synthetic bench with a shared bias of 10 calibrated errors: coverage 0.94–0.96, the
# live returns alone 0.94–0.96; at 1.0 the prior was dropped where right too, at z = 1.96 kept where wrong)
PRIOR_CONTRADICTED = 1.5  # simulated live draws per bench cell when calibrating the live verdicts' t'
LIVE_PRIOR_TEST = "point"  # "point": each point's prior tested alone; "cell": also all the cell's at once
SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_calibration.json")  # bench/loop.py writes it


def point_key(policy: str, epsilon: float) -> str:
    """A point's name in the bench file and in the recommendation, as the report labels it."""
    return f"{policy} ε={float(epsilon):g}"


def reads_spread(estimates: Mapping[str, Mapping[str, float]]) -> bool:
    """Whether at least two of ``SPREAD_ESTIMATORS`` read every point finitely (the error unit is
    then their disagreement; else the scale S)."""
    points = {p for values in estimates.values() for p in values}
    return sum(name in estimates and all(math.isfinite(estimates[name].get(p, math.nan)) for p in points)
               for name in SPREAD_ESTIMATORS) >= 2


def error_unit(estimates: Mapping[str, Mapping[str, float]], scale: float, by_spread: bool,
               a: str, b: str | None = None) -> float:
    """u(a), or u(a, b) for a pair (module docstring); NaN where ``by_spread`` asks for a
    disagreement fewer than two of ``SPREAD_ESTIMATORS`` can give."""
    if not by_spread:
        return scale
    readings = [values[a] - (values[b] if b is not None else 0.0)
                for values in (estimates[name] for name in SPREAD_ESTIMATORS if name in estimates)
                if a in values and (b is None or b in values)]
    readings = [r for r in readings if math.isfinite(r)]
    return max(readings) - min(readings) + SPREAD_FLOOR * scale if len(readings) >= 2 else math.nan


@dataclass(frozen=True)
class BenchCell:
    """One development cell as the bench measured it."""

    name: str
    group: str  # the environment
    low: float  # the return range
    high: float
    scale: float  # what errors are measured in (module docstring)
    answered: float  # the share of π_e's imagined steps the log answered (mean over points)
    truth: dict[str, float]  # point → J
    estimates: dict[str, dict[str, float]]  # estimator → point → Ĵ
    coverage: dict[str, float] = field(default_factory=dict)  # estimator → share of points its own intervals held J
    truth_stderr: dict[str, float] = field(default_factory=dict)  # point → the standard error of J
    return_sd: dict[str, float] = field(default_factory=dict)  # point → the sample s.d. of the ground truth's returns

    def read(self, estimator: str) -> list[str]:
        """The points the estimator read finitely."""
        values = self.estimates.get(estimator, {})
        return [p for p in self.truth if p in values and math.isfinite(values[p])]

    def normalised_errors(self, estimator: str, by_spread: bool = False) -> list[float]:
        """|Ĵ − J| / u at every point the estimator read (u: ``error_unit``)."""
        values = self.estimates.get(estimator, {})
        scores = [abs(values[p] - self.truth[p]) / error_unit(self.estimates, self.scale, by_spread, p)
                  for p in self.read(estimator)]
        return [score for score in scores if not math.isnan(score)]

    def pair_scores(self, estimator: str, by_spread: bool = False) -> list[tuple[float, bool, float, bool]]:
        """Over every pair (a, b) of points the estimator read: |d| / u(a, b), whether the sign of
        d = Ĵ_a − Ĵ_b is that of J_a − J_b, |d − (J_a − J_b)| / u(a, b), and whether the truth
        splits the pair (``splits``)."""
        values, found = self.estimates.get(estimator, {}), []
        for a, b in combinations(self.read(estimator), 2):
            unit = error_unit(self.estimates, self.scale, by_spread, a, b)
            d, truth = values[a] - values[b], self.truth[a] - self.truth[b]
            if not math.isnan(unit):
                found.append((abs(d) / unit, d * truth > 0, abs(d - truth) / unit, self.splits(a, b)))
        return found

    def splits(self, a: str, b: str) -> bool:
        """Whether the truth tells points a and b apart: |J_a − J_b| > 1.96 √(SE_a² + SE_b²) (SE 0
        where the record has none)."""
        se = self.truth_stderr
        return abs(self.truth[a] - self.truth[b]) > 1.96 * math.hypot(se.get(a, 0.0), se.get(b, 0.0))

    @cached_property
    def split_pairs(self) -> int:
        """How many pairs of points the truth splits (``splits``)."""
        return sum(self.splits(a, b) for a, b in combinations(self.truth, 2))

    def rho(self, estimator: str) -> float:
        values, read = self.estimates.get(estimator, {}), self.read(estimator)
        return spearman([values[p] for p in read], [self.truth[p] for p in read]) if len(read) >= 3 else float("nan")


@dataclass(frozen=True)
class BenchCalibration:
    """The bench's measured errors, as ``python -m bench.loop`` writes them (``commit``: the code
    the cells ran at)."""

    cells: tuple[BenchCell, ...]
    commit: str = ""

    @classmethod
    def load(cls, path: str) -> "BenchCalibration":
        with open(path) as f:
            raw = json.load(f)
        try:
            return cls(tuple(BenchCell(**cell) for cell in raw["cells"]), raw.get("commit", ""))
        except (KeyError, TypeError) as error:
            raise ValueError(f"{path}: not a bench calibration file ({error}); `python -m bench.loop` writes it") from None

    @classmethod
    def shipped(cls) -> "BenchCalibration":
        """The bench this package ships (``SHIPPED``), read once per version of the file (its
        calibrations, such as the live verdicts' t', are then computed once); an empty one where none
        was written."""
        if not os.path.exists(SHIPPED):
            return cls(())
        found = os.stat(SHIPPED)
        return _read_once(SHIPPED, found.st_ino, found.st_mtime_ns, found.st_ctime_ns, found.st_size)

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump({"commit": self.commit, "cells": [asdict(c) for c in self.cells]}, f, indent=1)

    @cached_property
    def rhos(self) -> dict[tuple[str, str], float]:
        """(cell, estimator) → the estimator's ρ on the cell (computed once); NaN where the cell's
        truth splits fewer than ``MIN_SPLIT_PAIRS`` pairs (it ranks noise)."""
        return {(c.name, e): c.rho(e) if c.split_pairs >= MIN_SPLIT_PAIRS else math.nan
                for c in self.cells for e in c.estimates}

    def interval_coverage(self, leave_out: str | None = None) -> dict[str, float]:
        """Estimator → the mean over the bench's cells (but ``leave_out``, the evaluated cell where
        the bench holds it) of the share of points its own intervals held J."""
        found: dict[str, list[float]] = {}
        for cell in self.cells:
            if cell.name == leave_out:
                continue
            for name, share in cell.coverage.items():
                if math.isfinite(share):
                    found.setdefault(name, []).append(share)
        return {name: float(np.mean(shares)) for name, shares in found.items()}

    @cached_property
    def _live_thresholds(self) -> dict[tuple, float]:
        return {}

    def live_threshold(self, cells: Sequence[str], live_count: int, alpha: float) -> float:
        """t' of the live verdicts calibrated on ``cells`` (``live_sign_threshold``), computed once."""
        key = (tuple(sorted(cells)), live_count, alpha)
        if key not in self._live_thresholds:
            self._live_thresholds[key] = live_sign_threshold(self, cells, live_count, alpha)
        return self._live_thresholds[key]

    def similar(self, answered: float, leave_out: str | None = None) -> list[BenchCell]:
        """The bench cells whose log answered π_e as much as this one's (module docstring); a cell
        whose share is unknown (NaN) counts on either side."""
        others = [c for c in self.cells if c.name != leave_out]
        if math.isnan(answered):
            return others
        side = [c for c in others if math.isnan(c.answered) or
                (c.answered >= ANSWERED_SPLIT) == (answered >= ANSWERED_SPLIT)]
        return side if len(side) >= MIN_SIMILAR else others


@lru_cache(maxsize=2)
def _read_once(path: str, inode: int, modified_ns: int, changed_ns: int, size: int) -> BenchCalibration:
    """``BenchCalibration.load(path)``, kept while the file's inode, times and size stay."""
    return BenchCalibration.load(path)


def withheld(estimator: str, coverage: Mapping[str, float]) -> str | None:
    """Why ``estimator``'s own interval is not printed (``coverage``: the bench's, by estimator), or
    None where it held J at no fewer than ``INTERVAL_FLOOR`` of the bench's points."""
    share = coverage.get(estimator)
    if share is None:
        return "interval withheld: the bench never measured its coverage"
    if share < INTERVAL_FLOOR:
        return f"interval withheld: it held J at {share:.2f} of the bench's points"
    return None


@dataclass(frozen=True)
class ErrorModel:
    """How an estimate's error scales with what the logs show, in units of S (module docstring,
    "the interval"): σ = (g + f)^γ (1 − a)^k."""

    floor: float  # f: of S, added to the disagreement (models that agree are not taken for exact)
    spread_power: float  # γ
    answered_power: float  # k

    def sigma(self, spread: float, answered: float) -> float:
        answered = 0.0 if math.isnan(answered) else min(max(answered, 0.0), 1.0)
        return (spread + self.floor) ** self.spread_power * (1.0 - answered) ** self.answered_power

    def describe(self) -> str:
        parts = [f"(disagreement/S + {self.floor:g})^{self.spread_power:g}" if self.spread_power else "",
                 f"(1 − answered)^{self.answered_power:g}" if self.answered_power else ""]
        return " × ".join(["S", *(part for part in parts if part)])


ERROR_MODELS = tuple(ErrorModel(f, g, k) for f in (0.02, 0.05, 0.1, 0.2, 0.5, 1.0) for g in (0.0, 0.5, 1.0)
                     for k in (0.0, 1.0, 2.0) if g or f == 1.0)  # γ = 0 needs no floor: one of them


def point_spread(estimates: Mapping[str, Mapping[str, float]], scale: float, point: str) -> float:
    """g(p): how far ``SPREAD_ESTIMATORS`` disagree at ``point``, over S; 1 where fewer than two read it."""
    readings = [values[point] for values in (estimates[name] for name in SPREAD_ESTIMATORS if name in estimates)
                if math.isfinite(values.get(point, math.nan))]
    return (max(readings) - min(readings)) / scale if len(readings) >= 2 else 1.0


def cell_weighted_quantile(scores_by_cell: Sequence[Sequence[float]], level: float) -> float:
    """The smallest score at or below which the points weigh at least ``level`` of the whole, each
    cell weighing one (its n points 1/n each); inf where no cell holds a score."""
    scored = [(s, 1.0 / len(scores)) for scores in scores_by_cell if scores for s in scores]
    if not scored:
        return math.inf
    scored.sort()
    total, running = float(len([1 for scores in scores_by_cell if scores])), 0.0
    for score, weight in scored:
        running += weight
        if running >= level * total - 1e-12:
            return float(score)
    return float(scored[-1][0])


@dataclass(frozen=True)
class IntervalFit:
    """The error model and its quantile q, fitted on ``cells`` bench cells (``fit_interval``)."""

    model: ErrorModel
    quantile: float
    cells: int

    def half_width(self, spread: float, answered: float, scale: float) -> float:
        return self.quantile * self.model.sigma(spread, answered) * scale


def fit_interval(cells: Sequence[BenchCell], estimator: str, alpha: float) -> IntervalFit | None:
    """Of ``ERROR_MODELS``, the one whose intervals at level 1 − α are narrowest on ``cells``
    (their mean half-width over the range, each cell weighing one), with its cell-weighted
    quantile (module docstring, "the interval"); None where fewer than ``MIN_INTERVAL_CELLS`` read
    ``estimator`` (the interval is then the whole range)."""
    found = []
    for cell in cells:
        values, width = cell.estimates.get(estimator, {}), (cell.high - cell.low) / cell.scale
        points = [(point_spread(cell.estimates, cell.scale, p), abs(values[p] - cell.truth[p]) / cell.scale)
                  for p in cell.read(estimator)]
        if points:
            found.append((cell.answered, width, points))
    if len(found) < MIN_INTERVAL_CELLS:
        return None

    def fitted(model: ErrorModel) -> tuple[float, IntervalFit]:
        q = cell_weighted_quantile([[error / model.sigma(g, a) if model.sigma(g, a) > 0 else math.inf
                                     for g, error in points] for a, _, points in found], 1 - alpha)
        narrowness = float(np.mean([np.mean([min(q * model.sigma(g, a), width) / width for g, _ in points])
                                    for a, width, points in found]))
        return narrowness, IntervalFit(model, q, len(found))

    return min((fitted(model) for model in ERROR_MODELS), key=lambda pair: pair[0])[1]


def conformal_quantile(scores: Sequence[float], alpha: float) -> float:
    """The ⌈(n + 1)(1 − α)⌉-th smallest of n scores (split conformal); inf where that exceeds n."""
    ordered = np.sort(np.asarray(scores, float))
    rank = math.ceil((len(ordered) + 1) * (1 - alpha))
    return float(ordered[rank - 1]) if rank <= len(ordered) else math.inf


def sign_threshold(scores: Sequence[tuple[float, bool]], rate: float, weights: Sequence[float] | None = None) -> float:
    """The verdicts' t (module docstring) from the bench's pairs (|d| / u, sign right), each of
    weight w (None: 1; weights are rescaled to a mean of 1, so one pair's worth stays 1): the
    lowest score whose pairs at or above it were wrong at (Σw wrong + 1) / (Σw decided + 1) ≤
    ``rate``, halfway to the next lower one; inf where no score is."""
    weights = np.ones(len(scores)) if weights is None else np.asarray(weights, float) / np.mean(weights)
    order = sorted(range(len(scores)), key=lambda i: -scores[i][0])
    threshold, wrong, decided = math.inf, 0.0, 0.0
    for rank, i in enumerate(order):
        score, right = scores[i]
        wrong, decided = wrong + weights[i] * (not right), decided + weights[i]
        if (wrong + 1) / (decided + 1) <= rate:
            lower = scores[order[rank + 1]][0] if rank + 1 < len(order) else 0.0
            threshold = (score + lower) / 2
    return threshold


def verdict_threshold(pairs_by_cell: Sequence[Sequence[tuple[float, bool, float, bool]]]) -> float:
    """The logs' verdicts' t from each bench cell's ``BenchCell.pair_scores``, calibrated as
    ``VERDICT_PAIRS`` and ``VERDICT_WEIGHTS`` say (``sign_threshold`` at ``VERDICT_ERROR_RATE``)."""
    scores, weights = [], []
    for pairs in pairs_by_cell:
        found = [(size, right) for size, right, _, split in pairs if split or VERDICT_PAIRS == "all"]
        scores += found
        weights += [1.0 / len(found) if VERDICT_WEIGHTS == "cells" else 1.0 for _ in found]
    return sign_threshold(scores, VERDICT_ERROR_RATE, weights or None)


def live_episodes_to_decide(difference: float, variance: float, alpha: float) -> int | None:
    """k = ⌈(z_{1−α/2} + z_power)² (σ_a² + σ_b²) / d²⌉ live episodes per point, ``variance`` = σ_a² + σ_b²
    (None: d = 0 or the variance unknown)."""
    if difference == 0 or not math.isfinite(variance) or not math.isfinite(difference):
        return None
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(POWER)
    return max(2, math.ceil(z ** 2 * variance / difference ** 2))


@dataclass(frozen=True)
class Recommendation:
    """The recommended estimate of every point, its source and what the rule read."""

    source: str  # the estimator chosen, or why none was
    values: dict[str, float]  # point → Ĵ
    low: dict[str, float]
    high: dict[str, float]
    verdicts: list[Verdict]
    answered: float
    bench_cells: list[str]  # the cells calibrating it
    bench_rho: float  # the chosen estimator's mean ρ over them
    half_widths: dict[str, float]  # point → q u(p), before clipping to the range
    alpha: float = 0.05
    bench_commit: str = ""  # the code the bench's cells ran at
    excluded: dict[str, str] = field(default_factory=dict)  # estimator → why it was not eligible
    unit: str = "the scale S"  # what the errors were measured in (module docstring)
    alike: bool = False  # the bench cells are those on this cell's side of ``ANSWERED_SPLIT`` (else all of them)
    live: int = 0  # live episodes per point folded in (``with_live``)
    return_range: tuple[float, float] = (-math.inf, math.inf)
    live_threshold: float = math.nan  # t' of the verdicts with live episodes (``with_live``)
    live_worth: dict[str, float] = field(default_factory=dict)  # point → live episodes the offline estimate is worth

    def record(self) -> dict:
        """The reading as JSON-ready data (the report's ``curves["recommended"]``), with its printed lines."""
        found = asdict(self)
        found["verdicts"] = [{**asdict(v), "better": v.better} for v in self.verdicts]
        return {**found, "lines": self.lines()}

    @classmethod
    def from_record(cls, record: Mapping) -> "Recommendation":
        """The reading ``record`` wrote."""
        found = {k: v for k, v in record.items() if k != "lines"}
        found["verdicts"] = [Verdict(**{k: v for k, v in verdict.items() if k != "better"})
                             for verdict in record["verdicts"]]
        found["return_range"] = tuple(record["return_range"])
        return cls(**found)

    def lines(self, pairs: str = "all") -> list[str]:
        """The reading in words. ``pairs``: ``all`` lists every verdict; ``agents`` lists the pairs of
        agents at the same ε, and of the other pairs only those decided, counting the rest."""
        if pairs not in PAIRS_SHOWN:
            raise ValueError(f"pairs must be one of {', '.join(PAIRS_SHOWN)}, got {pairs!r}")
        if not self.values:
            return [f"Recommended: none ({self.source})"]
        if self.source == LIVE_ONLY:
            head = (f"Live only, beside it: the same {self.live} live episodes per point with no offline estimate "
                    f"(each point's mean ± a t-interval at {1 - self.alpha:.0%} from the variance pooled over the "
                    "points; a verdict where a difference's band excludes 0)")
            return [head, *self._rows_and_verdicts(pairs)]
        alike = ("" if not self.alike else
                 f" whose log answered π_e {'as much as' if self.answered >= ANSWERED_SPLIT else 'as little as'} this "
                 f"one's ({self.answered:.0%} of imagined steps)")
        live = f" + {self.live} live episodes per point" if self.live else ""
        head = (f"Recommended: {self.source}{live} (mean ρ {self.bench_rho:+.2f} on {len(self.bench_cells)} bench cells{alike}, "
                f"measured at {self.bench_commit or 'an unrecorded commit'}); "
                + ("intervals from the bench's errors and the live episodes" if self.live
                   else "intervals from the bench's errors")
                + f" at {1 - self.alpha:.0%}, in units of {self.unit}; verdicts at the band where "
                f"{VERDICT_ERROR_RATE:.0%} of the bench's decided pairs were wrong (the bench's pairs, no guarantee)"
                + ("" if not self.live else
                   f" (with the live episodes: where |d'| > {self.live_threshold:.2f} σ', calibrated on the bench with "
                   f"{self.live} simulated live returns per point)" if math.isfinite(self.live_threshold) else
                   " (with the live episodes: at the normal band, the bench records no spread of returns)"
                   if math.isnan(self.live_threshold) else
                   " (with the live episodes: none from their combination, no threshold held that rate on the bench)"))
        worth = ([f"  the offline estimate is worth about {float(np.median(list(self.live_worth.values()))):.1f} live "
                  f"episodes per point here (median over points: the combination's variance is that of "
                  f"{self.live} + that many live episodes alone)"] if self.live_worth else [])
        return [head, *worth, *self._rows_and_verdicts(pairs),
                *(f"  not eligible: {name} ({why})" for name, why in self.excluded.items())]

    def _rows_and_verdicts(self, pairs: str) -> list[str]:
        rows = [f"  {p}: {v:+.4f} [{self.low[p]:+.4f}, {self.high[p]:+.4f}]" for p, v in self.values.items()]
        across = [v for v in self.verdicts if v.a.rsplit(" ε=", 1)[-1] == v.b.rsplit(" ε=", 1)[-1]]
        within = [v for v in self.verdicts if v not in across]
        untold = [v for v in within if v.better is None] if pairs == "agents" else []
        undecided = (CANNOT_TELL if not self.live else "cannot tell from these live episodes"
                     if self.source == LIVE_ONLY else "cannot tell, even with the live episodes")
        said = {v: f"  {v.line(undecided)}" for v in self.verdicts}
        verdicts = ([said[v] for v in self.verdicts] if not across or not within else
                    ["  agents against each other at the same ε:", *(said[v] for v in across),
                     "  the other pairs of points:", *(said[v] for v in within if v not in untold),
                     *([f"  cannot tell the other {len(untold)} pair(s) apart (`--pairs all` lists each, with the "
                        "live episodes that would likely decide it)"] if untold else [])])
        return [*rows, *verdicts]


def eligibility(estimates: Mapping[str, Mapping[str, float]], min_ess: Mapping[str, float],
                low: float, high: float, measured: set[str]) -> dict[str, str]:
    """Estimator → why it may not be recommended here (module docstring); eligible ones absent."""
    slack = RANGE_SLACK * (high - low)
    reasons = {}
    for name, values in estimates.items():
        bad = [p for p, v in values.items() if not math.isfinite(v)]
        outside = [p for p, v in values.items() if math.isfinite(v) and not low - slack <= v <= high + slack]
        if name not in measured:
            reasons[name] = "the bench has no ranking of it (not measured, or one value for every point: DM)"
        elif bad:
            reasons[name] = f"no finite value at {', '.join(bad)}"
        elif outside:
            reasons[name] = f"outside the return range [{low:g}, {high:g}] at {', '.join(outside)}"
        elif min_ess.get(name, math.inf) < MIN_ESS:
            reasons[name] = f"its weights rest on about one episode (ESS {min_ess[name]:.2f} < {MIN_ESS})"
    return reasons


def recommend(estimates: Mapping[str, Mapping[str, float]], *, return_range: tuple[float, float], answered: float,
              scale: float | None = None,
              bench: BenchCalibration, return_variance: Mapping[str, float] = {},
              min_ess: Mapping[str, float] = {}, alpha: float = 0.05, cell: str | None = None) -> Recommendation:
    """The recommended estimate of a cell from its estimators' values (estimator → point → Ĵ), the
    return range, the share of π_e's imagined steps the log answered, the scale errors are measured
    in (None: the range's width) and the bench (``return_variance``: point → the returns' variance there; ``min_ess``: estimator → its
    smallest effective sample size); no ground truth of the cell is read (``cell`` names it only
    to leave it out of the bench)."""
    low, high = return_range
    if not high > low:
        raise ValueError(f"the return range must be an interval, got [{low}, {high}]")
    scale = high - low if scale is None else scale
    if not scale > 0:
        raise ValueError(f"the scale errors are measured in must be positive, got {scale}")
    similar = bench.similar(answered, leave_out=cell)
    measured = {name for c in similar for name in c.estimates if math.isfinite(bench.rhos.get((c.name, name), math.nan))}
    excluded = eligibility(estimates, min_ess, low, high, measured)
    eligible = [name for name in estimates if name not in excluded]
    if not similar or not eligible:
        why = "the bench holds no cell" if not similar else "no estimator is eligible"
        return Recommendation(why, {}, {}, {}, [], answered, [c.name for c in similar], math.nan, {}, alpha,
                              bench.commit, excluded)
    by_spread = reads_spread(estimates)

    def trust(name: str) -> tuple[float, float]:
        rhos = [r for r in (bench.rhos.get((c.name, name), math.nan) for c in similar) if math.isfinite(r)]
        errors = [e for c in similar for e in c.normalised_errors(name, by_spread)]
        return (float(np.mean(rhos)) if rhos else -math.inf, -conformal_quantile(errors, alpha))

    trusted = {name: trust(name) for name in eligible}
    chosen = max(trusted, key=trusted.get)
    width = high - low
    pairs_by_cell = [c.pair_scores(chosen, by_spread) for c in similar]
    pairs = [score for found in pairs_by_cell for score in found]
    t = verdict_threshold(pairs_by_cell)
    q2 = conformal_quantile([error for _, _, error, _ in pairs], alpha)
    # the pairs' prior (``with_live``) in units of S as well: models that agree can share one bias
    q2_scale = (conformal_quantile([e for c in similar for _, _, e, _ in c.pair_scores(chosen)], alpha)
                if by_spread else q2) * scale
    values = dict(estimates[chosen])
    fit = fit_interval([c for c in bench.cells if c.name != cell], chosen, alpha)
    half_widths = {p: width if fit is None else min(fit.half_width(point_spread(estimates, scale, p), answered, scale),
                                                    width) for p in values}
    verdicts = []
    for a, b in combinations(values, 2):
        d, unit = values[a] - values[b], error_unit(estimates, scale, by_spread, a, b)
        band = min(t * unit, width)
        undecided = d - band <= 0 <= d + band
        variance = return_variance.get(a, math.nan) + return_variance.get(b, math.nan)
        verdicts.append(Verdict(a, b, d, d - band, d + band,
                                           live_episodes_to_decide(d, variance, alpha) if undecided else None,
                                           min(max(q2 * unit, q2_scale), width)))
    unit = (f"the return range (fewer than {MIN_INTERVAL_CELLS} bench cells read it)" if fit is None else
            f"{fit.model.describe()}, fitted on {fit.cells} bench cells")
    return Recommendation(chosen, values, {p: max(low, v - half_widths[p]) for p, v in values.items()},
                          {p: min(high, v + half_widths[p]) for p, v in values.items()}, verdicts, answered,
                          [c.name for c in similar], trusted[chosen][0], half_widths, alpha, bench.commit, excluded,
                          unit, len(similar) < sum(c.name != cell for c in bench.cells), 0, (low, high))


def _live_readings(live: Mapping[str, Sequence[float]], return_range: tuple[float, float],
                   z: float) -> dict[str, tuple[float, float]]:
    """Each point's live mean ḡ and its variance s² (module docstring): the pooled within-point
    variance over the point's K returns, times (t_ν / z)²; where every return agrees with its
    point's others, the variance one more return at the range's far end would give."""
    few = {p: len(returns) for p, returns in live.items() if len(returns) < 2}
    if few:
        raise ValueError(f"at least 2 live episodes per point are needed to fold them in, got {few}")
    dof = sum(len(returns) - 1 for returns in live.values())
    pooled = sum(float(np.var(returns)) * len(returns) for returns in live.values()) / dof
    if pooled == 0:
        pooled = ((return_range[1] - return_range[0]) / 2) ** 2 / (dof + 1)
    inflation = (stats.t.ppf(1 - stats.norm.sf(z), dof) / z) ** 2
    return {p: (float(np.mean(returns)), pooled / len(returns) * inflation) for p, returns in live.items()}


def _combined(prior: float, prior_sd: float, reading: float, variance: float) -> tuple[float, float]:
    """Precision-weighted mean of a prior (sd ``prior_sd``: inf reads nothing) and a reading, and its
    sd; the reading alone where the two disagree by more than ``PRIOR_CONTRADICTED`` times the sd of
    their difference (the bench's errors are heavy-tailed and shared across a cell, so a prior the
    live returns contradict is dropped rather than averaged in, and the combination reads no worse
    than they do alone)."""
    prior_precision = prior_sd ** -2.0 if math.isfinite(prior_sd) else 0.0
    if prior_precision and abs(prior - reading) > PRIOR_CONTRADICTED * math.sqrt(prior_sd ** 2 + variance):
        prior_precision = 0.0
    precision = prior_precision + 1 / variance
    return (prior * prior_precision + reading / variance) / precision, precision ** -0.5


def cell_contradicts(reading: Recommendation, read: Mapping[str, tuple[float, float]], z: float) -> bool:
    """Whether the live readings (point → ḡ, s²) contradict the offline estimate over all the
    played points at once: X = Σ_p (Ĵ_p − ḡ_p)² / (τ_p² + s_p²) > the χ²_P quantile at level
    2 Φ(−``PRIOR_CONTRADICTED``) (module docstring)."""
    terms = [(reading.values[p] - mean) ** 2 / ((reading.half_widths[p] / z) ** 2 + variance)
             for p, (mean, variance) in read.items() if math.isfinite(reading.half_widths.get(p, math.nan))]
    level = 2 * stats.norm.sf(PRIOR_CONTRADICTED)
    return bool(terms) and bool(sum(terms) > stats.chi2.ppf(1 - level, len(terms)))


def _live_difference(verdict: Verdict, read: Mapping[str, tuple[float, float]], z: float) -> tuple[float, float]:
    """A pair's combined difference d' and its sd σ': the logs' d (prior sd τ₂ = q₂ u / z) and the
    live means' difference, of variance s_a² + s_b² (module docstring)."""
    return _combined(verdict.difference, verdict.prior_half_width / z, read[verdict.a][0] - read[verdict.b][0],
                     read[verdict.a][1] + read[verdict.b][1])


def simulated_live_returns(cell: BenchCell, count: int, rng: np.random.Generator) -> dict[str, list[float]]:
    """``count`` live returns per point of a bench cell, drawn as N(J, s_J²) (s_J: ``return_sd``)."""
    return {p: (j + cell.return_sd[p] * rng.standard_normal(count)).tolist() for p, j in cell.truth.items()}


def live_sign_threshold(bench: BenchCalibration, cells: Sequence[str], live_count: int, alpha: float) -> float:
    """The live verdicts' t' (module docstring): over the named bench cells that record ``return_sd``,
    each read from the others (``recommend``), ``live_count`` live returns per point drawn as
    N(J, s_J²) ``LIVE_CALIBRATION_DRAWS`` times (seed 0) and folded in, the pairs' (|d'| / σ', sign
    right) fed to ``sign_threshold``; NaN where no named cell records ``return_sd``."""
    named = set(cells)
    calibrating = BenchCalibration(tuple(c for c in bench.cells if c.name in named), bench.commit)
    drawn = [c for c in calibrating.cells if c.return_sd and all(p in c.return_sd for p in c.truth)]
    if not drawn:
        return math.nan
    rng, z, scores = np.random.default_rng(0), float(stats.norm.ppf(1 - alpha / 2)), []
    for cell in drawn:
        reading = recommend(cell.estimates, return_range=(cell.low, cell.high), answered=cell.answered,
                            scale=cell.scale, bench=calibrating, alpha=alpha, cell=cell.name)
        for _ in range(LIVE_CALIBRATION_DRAWS if reading.values else 0):
            live = simulated_live_returns(cell, live_count, rng)
            read = _live_readings(live, reading.return_range, z)
            for verdict in reading.verdicts:
                d, sd = _live_difference(verdict, read, z)
                scores.append((abs(d) / sd, d * (cell.truth[verdict.a] - cell.truth[verdict.b]) > 0))
    return sign_threshold(scores, VERDICT_ERROR_RATE)


def with_live(reading: Recommendation, live: Mapping[str, Sequence[float]],
              bench: BenchCalibration | None = None) -> Recommendation:
    """The recommended estimate sharpened by live returns (point → its K live episodes' returns)
    under the same calibration (module docstring): ``bench`` the one the reading was calibrated on
    (None: the shipped one), its cells ``reading.bench_cells`` calibrating the verdicts' t'; points
    without live returns keep their reading."""
    played = {p: live[p] for p in reading.values if len(live.get(p, ())) > 0}
    if not played:
        return reading
    z = float(stats.norm.ppf(1 - reading.alpha / 2))
    count = min(len(returns) for returns in played.values())
    calibrated = (bench or BenchCalibration.shipped()).live_threshold(reading.bench_cells, count, reading.alpha)
    threshold = z if math.isnan(calibrated) else calibrated
    low, high = reading.return_range
    read = _live_readings(played, reading.return_range, z)
    if LIVE_PRIOR_TEST == "cell" and cell_contradicts(reading, read, z):
        return live_only(reading, live)
    values, lows, highs = dict(reading.values), dict(reading.low), dict(reading.high)
    worth = {}
    for p, (mean, variance) in read.items():
        value, sd = _combined(reading.values[p], reading.half_widths[p] / z, mean, variance)
        values[p], lows[p], highs[p] = value, max(low, value - z * sd), min(high, value + z * sd)
        worth[p] = len(played[p]) * (variance / sd ** 2 - 1)  # K' − K: the live episodes of the combination's variance
    verdicts = []
    for old in reading.verdicts:
        if old.a not in read or old.b not in read:
            verdicts.append(old)
            continue
        d, sd = _live_difference(old, read, z)
        lo_d, hi_d = d - threshold * sd, d + threshold * sd
        if old.better is not None and not (lo_d > 0 or hi_d < 0):  # the logs' verdict stands where the live returns do not overturn it
            verdicts.append(old)
            continue
        spread = len(live[old.a]) * (read[old.a][1] + read[old.b][1])  # σ_a² + σ_b², as the live returns give it
        verdicts.append(Verdict(old.a, old.b, d, lo_d, hi_d,
                                           live_episodes_to_decide(d, spread, reading.alpha) if lo_d <= 0 <= hi_d
                                           else None, old.prior_half_width))
    return replace(reading, values=values, low=lows, high=highs, verdicts=verdicts, live=count,
                   live_threshold=calibrated, live_worth=worth)


def live_only(reading: Recommendation, live: Mapping[str, Sequence[float]]) -> Recommendation:
    """The same live returns read with no offline estimate, beside ``with_live``: each point's live
    mean ± z s (s as ``with_live`` reads it) and a verdict on a pair where its live difference's
    band ± z √(s_a² + s_b²) excludes 0; points without live returns have no reading."""
    played = {p: live[p] for p in reading.values if len(live.get(p, ())) > 0}
    if not played:
        raise ValueError(f"no live returns at any of the reading's points {sorted(reading.values)}")
    z = float(stats.norm.ppf(1 - reading.alpha / 2))
    low, high = reading.return_range
    read = _live_readings(played, reading.return_range, z)
    values = {p: mean for p, (mean, _) in read.items()}
    verdicts = []
    for a, b in combinations(values, 2):
        d, sd = values[a] - values[b], math.sqrt(read[a][1] + read[b][1])
        undecided = d - z * sd <= 0 <= d + z * sd
        spread = len(played[a]) * (read[a][1] + read[b][1])
        verdicts.append(Verdict(a, b, d, d - z * sd, d + z * sd,
                                           live_episodes_to_decide(d, spread, reading.alpha) if undecided else None))
    count = min(len(returns) for returns in played.values())
    return replace(reading, source=LIVE_ONLY, values=values,
                   low={p: max(low, m - z * math.sqrt(v)) for p, (m, v) in read.items()},
                   high={p: min(high, m + z * math.sqrt(v)) for p, (m, v) in read.items()}, verdicts=verdicts,
                   half_widths={p: z * math.sqrt(v) for p, (_, v) in read.items()}, live=count,
                   live_threshold=z, live_worth={}, excluded={})
