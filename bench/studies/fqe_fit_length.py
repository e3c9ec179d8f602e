"""How long FQE must fit before its values stop moving (FQEConfig.epochs), read without ground truth.

`python -m bench.studies.fqe_fit_length [CELL ...]` (default: the development cells): for every π_e of the
cell, FQE is fitted per ε level on the behaviour log (the finished log-prob stage's scores, member 0
of the trained world model's latents, seed 0), as the baselines stage fits it (γ 0.99) and as
ADWM's hand-over fits it (γ 1), once for every fit length E in EPOCHS. Per cell, γ and E: Ĵ per
point and its drift, max over points |Ĵ_E − Ĵ_2E| over the range of the logged returns (a scale
the rule may read: no ground truth in it). The rule (docs/notebook.md, "FQE's fit length"): a length is
converged on a cell where that drift is ≤ DRIFT; FQE's default becomes the smallest length of
EPOCHS[:-1] converged on every development cell under both γ (the last one where none is). ρ and
NMAE against the ground truth are printed beside, for the record; the rule does not read them.
→ bench/results/fqe_fit_length.{md,json}.

``--set KEY=VALUE`` (repeatable; a field of FQEConfig, the value read as YAML) measures FQE with
those settings instead, on the development cells (or those named) only, for the γ of ``--gammas``
and the lengths of ``--epochs`` → bench/results/variants/fqe.<settings>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import yaml

from adwm_core.data import LOGPROBS, TRAJECTORIES, read_table
from adwm_core.data.behaviour_log import BehaviourLog
from adwm_core.model.world_model import WorldModel
from adwm_core.ope.classical.settings import BaselineConfig, FQEConfig
from adwm_core.ope.classical.logged_steps import fitted_q, logged_steps
from adwm_core.ope.statistics.metrics import normalised_absolute_error, spearman
from bench.common import RESULTS, artifact, cell_config, development_cells, ground_truth, machine, slug

EPOCHS = (20, 40, 80, 160)
GAMMAS = (0.99, 1.0)  # the baselines stage's, ADWM's hand-over's
DRIFT = 0.02  # converged: no point's Ĵ moves by more than this share of the logged return range when E doubles


def fit_lengths(cell_name: str, fqe: FQEConfig = FQEConfig(), gammas=GAMMAS, lengths=EPOCHS) -> dict:
    """Ĵ per point for every γ and fit length, the logged return range, and the points' J."""
    cell = cell_config(cell_name)
    trajectories = artifact(cell, "behaviour").file("trajectories")
    log = BehaviourLog(read_table(trajectories, TRAJECTORIES), trajectories)
    model = WorldModel.load_ensemble(artifact(cell, "world-model").file("members"))[0]
    truth = {(p["policy"], float(p["epsilon"])): p["mean_return"] for p in ground_truth(cell_name)}
    points, values, scale = [], {f"{g}/{e}": [] for g in gammas for e in lengths}, 0.0
    for policy in cell.evaluation.policies:
        scores = artifact(cell, "logprobs", policy.label).file("logprobs")
        steps = logged_steps(log, read_table(scores, LOGPROBS), model, scores_name=scores,
                             action_reading=fqe.action_reading)
        returns = (steps.rewards * steps.grid.mask).sum(1)
        scale = max(scale, float(np.ptp(returns)))
        for epsilon in cell.evaluation.epsilons:
            points.append((policy.name, float(epsilon)))
            for gamma in gammas:
                for epochs in lengths:
                    settings = BaselineConfig(gamma=gamma, fqe=fqe.model_copy(update={"epochs": epochs}))
                    values[f"{gamma}/{epochs}"].append(float(fitted_q(steps, model, epsilon, settings, 0)[1][:, 0].mean()))
    return {"points": points, "truth": [truth.get(p) for p in points], "logged_return_range": scale, "values": values,
            "gammas": list(gammas), "epochs": list(lengths)}


def drift(result: dict, gamma: float, epochs: int) -> float:
    """max over points |Ĵ_E − Ĵ_2E| over the logged return range."""
    now, doubled = np.array(result["values"][f"{gamma}/{epochs}"]), np.array(result["values"][f"{gamma}/{2 * epochs}"])
    return float(np.max(np.abs(now - doubled)) / max(result["logged_return_range"], 1e-12))


def chosen_length(results: dict[str, dict]) -> int:
    """The rule: the smallest length converged on every cell under both γ; the longest measured if none is."""
    for epochs in EPOCHS[:-1]:
        if all(drift(r, g, epochs) <= DRIFT for r in results.values() for g in r["gammas"]):
            return epochs
    return EPOCHS[-1]


def report(results: dict[str, dict], seconds: dict[str, float], settings: dict | None = None) -> list[str]:
    title = f"FQE with {json.dumps(settings)}" if settings else "FQE's fit length"
    lines = [f"# {title} (issue 37, the hand-over's Q̂; the FQE baseline)", "",
             f"`python -m bench.studies.fqe_fit_length`: FQE fitted per ε on each cell's log for E epochs (seed 0, member 0's "
             f"latents), γ 0.99 (the baselines stage) and γ 1 (ADWM's hand-over). Drift: max over points |Ĵ_E − Ĵ_2E| "
             f"over the logged return range; converged where ≤ {DRIFT}. The rule reads drift only; ρ / NMAE against "
             "the ground truth are for the record.", "",
             "| cell | γ | " + " | ".join(f"E={e}: drift, ρ / NMAE" for e in EPOCHS) + " | s |",
             "|---|---|" + "---|" * len(EPOCHS) + "---|"]
    for cell, r in results.items():
        truth = r["truth"]
        for gamma in r["gammas"]:
            cells = []
            for epochs in EPOCHS:
                values = r["values"][f"{gamma}/{epochs}"]
                moved = f"{drift(r, gamma, epochs):.3f}" if epochs != EPOCHS[-1] else "–"
                cells.append(f"{moved}, {spearman(values, truth):+.2f} / {normalised_absolute_error(values, truth):.2f}")
            lines.append(f"| {cell} | {gamma} | " + " | ".join(cells) + f" | {seconds[cell]:.0f} |")
    lines += ["", f"Chosen by the rule: **{chosen_length(results)} epochs**." if not settings else
              "The rule's choice is FQE's default settings' only: not applied to a variant.", "",
              f"Machine: `{json.dumps(machine())}`"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="*", help="cells (default: the development cells)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an FQEConfig field")
    parser.add_argument("--gammas", type=float, nargs="+", default=GAMMAS)
    args = parser.parse_args()
    settings = dict((key, yaml.safe_load(value)) for key, value in (item.split("=", 1) for item in args.set))
    fqe = FQEConfig(**settings)
    cells = args.cells or development_cells()
    if settings and any(c not in development_cells() for c in cells):
        raise SystemExit("a variant is measured on development cells only: test cells are never tuned on")
    results, seconds = {}, {}
    for cell in cells:
        started = time.perf_counter()
        results[cell] = fit_lengths(cell, fqe, tuple(args.gammas))
        seconds[cell] = time.perf_counter() - started
        print(cell, json.dumps({k: v for k, v in results[cell].items() if k != "points"}), flush=True)
    lines = report(results, seconds, settings)
    name = f"variants/fqe.{slug(settings)}" if settings else "fqe_fit_length"
    (RESULTS / name).parent.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps({"machine": machine(), "settings": settings, "cells": results,
                                                     "seconds": seconds, "chosen": chosen_length(results)}, indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
