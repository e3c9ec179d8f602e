"""The cell report: every estimator graded against ground truth over the ε family.

Per estimator, Ĵ(ε) is the mean over seeds of its estimate at each ε level; against the
ground-truth mean return it gets Spearman ρ (with a percentile-bootstrap interval over ε
levels), the per-seed ρ (mean ± s.d.), regret@1 and the normalised mean absolute error
(|Ĵ − J| / range of J; meaningful for estimators on the return scale —
``ADWM:success_similarity`` is a cosine, ranked but not calibrated).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa

from .ope.metrics import normalised_absolute_error, per_seed_spearman, regret_at_1, spearman_bootstrap

RESULT_COLUMNS = ("estimator", "rho", "rho_ci_low", "rho_ci_high", "rho_seed_mean", "rho_seed_sd", "regret_at_1",
                  "nmae", "n_seeds")


def estimate_curves(estimates: pa.Table, epsilons: list[float]) -> dict[str, np.ndarray]:
    """estimator → ``(n_seeds, n_ε)`` estimates (seeds missing an ε level are left out)."""
    values: dict[str, dict[int, dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    for row in estimates.select(["estimator", "seed", "epsilon", "value"]).to_pylist():
        values[row["estimator"]][row["seed"]][row["epsilon"]] = row["value"]
    return {name: np.array([[by_eps[e] for e in epsilons] for by_eps in seeds.values()
                            if all(e in by_eps for e in epsilons)])
            for name, seeds in sorted(values.items())}


def main_results(ground_truth: pa.Table, estimates: pa.Table, *, seed: int = 0) -> tuple[list[dict], dict]:
    """(one row per estimator, the curves: ε levels, ground truth and each estimator's mean Ĵ)."""
    truth_rows = sorted(ground_truth.to_pylist(), key=lambda r: r["epsilon"])
    epsilons = [r["epsilon"] for r in truth_rows]
    truth = [r["mean_return"] for r in truth_rows]
    rows, curves = [], {"epsilon": epsilons, "ground_truth": truth, "estimators": {}}
    for name, per_seed in estimate_curves(estimates, epsilons).items():
        if len(per_seed) == 0:
            continue
        seed_rhos, _ = per_seed_spearman(per_seed, truth)
        mean = per_seed.mean(0)
        rank = spearman_bootstrap(mean, truth, seed=seed)
        rows.append({
            "estimator": name, "rho": rank.rho, "rho_ci_low": rank.ci_low, "rho_ci_high": rank.ci_high,
            "rho_seed_mean": float(np.nanmean(seed_rhos)) if not np.all(np.isnan(seed_rhos)) else float("nan"),
            "rho_seed_sd": float(np.nanstd(seed_rhos)) if not np.all(np.isnan(seed_rhos)) else float("nan"),
            **_errors(mean, truth),
            "n_seeds": len(per_seed),
        })
        curves["estimators"][name] = mean.tolist()
    return rows, curves


def _errors(estimates: np.ndarray, truth: list[float]) -> dict[str, float]:
    """regret@1 and NMAE; NaN when every policy has the same true value (nothing to normalise by)."""
    if np.ptp(truth) == 0:
        return {"regret_at_1": float("nan"), "nmae": float("nan")}
    return {"regret_at_1": regret_at_1(estimates, truth), "nmae": normalised_absolute_error(estimates, truth)}


def markdown(cell: str, policy: str, rows: list[dict], curves: dict) -> str:
    eps = " | ".join(f"ε={e:g}" for e in curves["epsilon"])
    lines = [f"# {cell}: off-policy estimates of {policy}", "",
             "| estimator | Spearman ρ [95 % CI] | ρ per seed | regret@1 | NMAE |", "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: -np.nan_to_num(r["rho"], nan=-2)):
        lines.append(f"| {r['estimator']} | {r['rho']:+.2f} [{r['rho_ci_low']:+.2f}, {r['rho_ci_high']:+.2f}] | "
                     f"{r['rho_seed_mean']:+.2f} ± {r['rho_seed_sd']:.2f} ({r['n_seeds']}) | "
                     f"{r['regret_at_1']:.2f} | {r['nmae']:.2f} |")
    lines += ["", f"| Ĵ | {eps} |", "|---|" + "---|" * len(curves["epsilon"]),
              "| ground truth | " + " | ".join(f"{v:.3f}" for v in curves["ground_truth"]) + " |"]
    lines += [f"| {name} | " + " | ".join(f"{v:.3g}" for v in values) + " |"
              for name, values in curves["estimators"].items()]
    return "\n".join(lines) + "\n"


def plot(curves: dict, path: str, title: str) -> None:
    """Ĵ over ε, one line per estimator and ground truth, each min–max normalised (ranks are
    what ρ grades; the estimators' scales differ by orders of magnitude)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    def normalised(values) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64)
        return (v - v.min()) / np.ptp(v) if np.ptp(v) > 0 else np.full_like(v, 0.5)

    figure, axes = pyplot.subplots(figsize=(7, 4.5))
    axes.plot(curves["epsilon"], normalised(curves["ground_truth"]), "k-", linewidth=3, label="ground truth")
    for name, values in curves["estimators"].items():
        axes.plot(curves["epsilon"], normalised(values), marker="o", linewidth=1.2, label=name)
    axes.set(xlabel="ε", ylabel="Ĵ, min–max normalised", title=title)
    axes.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
