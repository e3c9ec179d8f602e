"""Trust diagnostics written beside every estimate (the optional columns of the estimates
contract) and the plain verdicts the report and the closing screen print from them.

- Importance-sampling family (IS, PDIS, WIS, WPDIS, DR, WDR): the trajectory weights
  w_i = ρ_i,0:T (ope/classical/estimators.py) give the effective sample size
  ESS = (Σ_i w_i)² / Σ_i w_i² ∈ [1, N] (Kong 1992) and the share of the weight carried by the
  top trajectory, max_i w_i / Σ_i w_i; both in log space, exact however large the ratios.
- ADWM and kNN-WM: the share of imagined steps answered by a logged transition of the very
  (state, action) pair (``log_share``; transitions.SOURCES), and how far the other steps' pairs
  are from the log (``off_log_distance``, imagination/transitions.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import logsumexp

IMPORTANCE_WEIGHTED = ("IS", "PDIS", "WIS", "WPDIS", "DR", "WDR")
EXTRAPOLATION_SHARE = 0.5  # a model estimate is "mostly extrapolation" when this share of its steps was never logged
FEW_TRAJECTORIES = 10.0  # an importance-weighted estimate "rests on few trajectories" below this ESS


def weight_diagnostics(log_weights: np.ndarray) -> dict[str, float]:
    """``{"ess", "top_weight_share"}`` of the trajectory weights given as log w_i."""
    total = logsumexp(log_weights)
    return {"ess": float(np.exp(2 * total - logsumexp(2 * log_weights))),
            "top_weight_share": float(np.exp(log_weights.max() - total))}


def verdicts(rows: Sequence[dict]) -> list[str]:
    """Plain lines for the estimates that are mostly extrapolation (share of imagined steps never
    logged ≥ ``EXTRAPOLATION_SHARE``, mean over points and seeds) or rest on few trajectories
    (ESS < ``FEW_TRAJECTORIES`` at some point); estimators saying the same are named together."""
    by_estimator: dict[str, list[dict]] = {}
    for row in rows:
        by_estimator.setdefault(row["estimator"], []).append(row)
    named: dict[str, list[str]] = {}
    for name, mine in sorted(by_estimator.items()):
        shares = [r["log_share"] for r in mine if r.get("log_share") is not None]
        if shares and 1 - np.mean(shares) >= EXTRAPOLATION_SHARE:
            distances = [r["off_log_distance"] for r in mine if r.get("off_log_distance") is not None]
            far = (f" (their pairs {np.nanmean(distances):.2f} from the nearest logged one, 0 = alike, 1 = nothing alike)"
                   if distances and not np.isnan(distances).all() else "")
            named.setdefault(f"{1 - np.mean(shares):.0%} of π_e's imagined steps were never logged{far}: the value is "
                             "a model's guess", []).append(name)
        ess = [r["ess"] for r in mine if r.get("ess") is not None]
        if ess and np.min(ess) < FEW_TRAJECTORIES:
            low = float(np.min(ess))
            named.setdefault(f"ESS {low:.1f} at the worst point: the estimate "
                             + ("is one trajectory" if low < 1.5 else f"rests on about {low:.0f} trajectories"),
                             []).append(name)
    return [f"{', '.join(names)}: {message}" for message, names in named.items()]
