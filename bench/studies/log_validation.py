"""Validation inside the log: which estimator a cell's own log says to trust (the candidate
proposed in docs/notebook.md, 2026-12-01, after Cief, Kveton and Kompan, AAAI 2025).

Per cell, each behaviour group g — a pool model at one prompt variant — is held out in turn. The
other groups are the fold's log; g at ε = 0 is its one π_e (the behaviour ran greedy, so g's
logged mean return J_g is that π_e's value); every estimator runs on the fold as on the cell
(:func:`fold_config`: the cell's settings, its log less g, one point). An estimator's level score
is the mean over folds of |Ĵ_g − J_g| / S, S the cell's scale, and :func:`choose` takes the
estimator with the smallest score that the bench ranks (ties: its mean ρ on the other cells).
Its order score is what the product is graded on, the order: the share of pairs of held-out
groups (g, h) whose J the log splits that Ĵ orders as J does (:func:`order_score`), and
:func:`choose_by_order` takes the highest (ties: the level score, then the bench's ρ). Either
choice reads the cell's log and nothing of its own points or their ground truth; grading it
against J comes after, from the shipped bench's figures of the cell, under bench/ADOPTION.md
(the chosen estimator's ρ, NMAE and own-interval coverage against the headline's), each choice
judged on its own.

Caveat, written before any run: the held-out groups lie on the log's support and a cell's π_e
need not, so the score may favour the estimators that do well there. Cost: per group, the fold's
log-probs, a world model and every estimator at one ε (about the cell's estimator cost per group).

`python -m bench.studies.log_validation [CELL ...] [--resume]` (default: the development cells; each
cell's upstream is built first where it is not; ``--resume`` keeps the cells the saved result holds)
→ bench/results/log_validation.{md,json}
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from itertools import combinations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from adwm_core import pipeline
from adwm_core.cell import Behaviour, CellConfig, Evaluation
from adwm_core.data import ESTIMATES, TRAJECTORIES, read_table, write_table
from adwm_core.data.io import atomic_open
from adwm_core.ope.statistics.metrics import normalised_absolute_error, spearman
from adwm_core.ope.statistics.recommend import BenchCalibration, BenchCell
from adwm_core.paths import local_cache_dir
from adwm_core.provenance import source_version
from adwm_core.specs import LogSource, PolicySpec
from adwm_core.stages.report import return_range_and_scale
from bench.adoption import HEADLINE, CellFigures, decide
from bench.common import RESULTS, cell_config, development_cells, machine

SAVED = RESULTS / "log_validation.json"
FOLD_EPSILON = 0.0  # the behaviour ran greedy: a held-out group is its π_e at ε = 0


def group_values(trajectories: pa.Table) -> dict[str, float]:
    """Each behaviour group (the ``policy`` column) → its logged mean return (the mean over its
    episodes of their rewards' sum)."""
    episodes = trajectories.group_by(["policy", "episode"]).aggregate([("reward", "sum")])
    groups = episodes.group_by("policy").aggregate([("reward_sum", "mean")])
    return dict(sorted(zip(groups["policy"].to_pylist(), groups["reward_sum_mean"].to_pylist())))


def group_member(config: CellConfig, group: str) -> PolicySpec:
    """The pool member (model at its prompt variant) that logged ``group``."""
    members = {spec.with_variant(v).name: spec.with_variant(v)
               for spec in config.behaviour.pool for v in config.behaviour.variants}
    if group not in members:
        raise ValueError(f"{config.name}: the log's group {group!r} is no member of the pool {sorted(members)}")
    return members[group]


def fold_config(config: CellConfig, member: PolicySpec, log: str) -> CellConfig:
    """The cell with ``log`` (its behaviour log less ``member``'s episodes) imported as its behaviour
    data, ``member`` at ε = 0 its one π_e, and no ground truth (the fold's truth is the log's)."""
    behaviour = Behaviour(pool=config.behaviour.pool, variants=config.behaviour.variants,
                          logs=LogSource(log, "parquet"))
    return config.model_copy(update={"behaviour": behaviour, "ground_truth": None,
                                     "evaluation": Evaluation(policies=(member,), epsilons=(FOLD_EPSILON,))})


def fold_log(trajectories: pa.Table, group: str, path: str) -> str:
    """``trajectories`` less ``group``'s episodes, written to ``path`` (kept where it holds them already)."""
    kept = trajectories.filter(pc.not_equal(trajectories["policy"], group))
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_table(kept, path, TRAJECTORIES)
    elif not read_table(path, TRAJECTORIES).equals(kept):
        raise RuntimeError(f"{path} holds another fold's log; remove it to cut the log again")
    return path


def fold_estimates(fold: CellConfig) -> dict[str, float]:
    """Every estimator's seed-mean Ĵ of the fold's π_e at ε = 0 (its ADWM and baselines stages run first)."""
    (member,) = fold.evaluation.policies
    pipeline.run_all(fold, ("adwm", "baselines"))
    values: dict[str, list[float]] = {}
    for stage in ("adwm", "baselines"):
        table = read_table(pipeline.locate(fold, stage, member).file("estimates"), ESTIMATES)
        for row in table.to_pylist():
            values.setdefault(row["estimator"], []).append(row["value"])
    return {name: float(np.mean(v)) for name, v in values.items()}


def fold_scores(config: CellConfig) -> dict:
    """Per held-out group its J_g and every estimator's Ĵ_g, and per estimator the mean score
    |Ĵ_g − J_g| / S over the groups (infinite where a fold's Ĵ is not finite). The folds' logs
    are kept beside the cell's behaviour data, named by its key."""
    behaviour = pipeline.run_all(config, ("behaviour",))
    trajectories = read_table(behaviour.file("trajectories"), TRAJECTORIES)
    _, scale = return_range_and_scale(config, trajectories)
    if not scale:
        raise ValueError(f"{config.name}: no scale to measure errors in (no declared range, returns do not spread)")
    folds = {}
    for group, truth in group_values(trajectories).items():
        log = fold_log(trajectories, group, f"{local_cache_dir('folds', config.name, behaviour.key[:16])}/{group}.parquet")
        folds[group] = {"truth": truth, "estimates": fold_estimates(fold_config(config, group_member(config, group), log))}
    estimators = set.intersection(*(set(f["estimates"]) for f in folds.values()))
    scores = {name: float(np.mean([abs(f["estimates"][name] - f["truth"]) / scale for f in folds.values()]))
              for name in sorted(estimators)}
    return {"scale": scale, "folds": folds, "scores": {n: s if math.isfinite(s) else math.inf for n, s in scores.items()},
            "order": {name: order_score(folds, name) for name in sorted(estimators)}}


def order_score(folds: Mapping[str, Mapping], estimator: str) -> float:
    """The share of pairs of held-out groups whose truths differ that ``estimator``'s Ĵ orders as
    their J (a pair Ĵ ties or reads non-finite counts as wrong); NaN where no pair's truths differ."""
    split = [(f, g) for f, g in combinations(folds.values(), 2) if f["truth"] != g["truth"]]
    if not split:
        return math.nan
    right = [(f["estimates"][estimator] - g["estimates"][estimator]) * (f["truth"] - g["truth"]) > 0 for f, g in split]
    return float(np.mean(right))


def choose(scores: Mapping[str, float], bench_rho: Mapping[str, float]) -> str | None:
    """The estimator with the smallest finite fold score among those the bench ranks (ties: the
    higher mean ρ on the bench); None where there is none. Reads the folds' scores and the bench
    alone: nothing of the cell's own points."""
    ranked = [name for name, score in scores.items()
              if math.isfinite(score) and math.isfinite(bench_rho.get(name, math.nan))]
    return min(ranked, key=lambda name: (scores[name], -bench_rho[name]), default=None)


def choose_by_order(order: Mapping[str, float], scores: Mapping[str, float],
                    bench_rho: Mapping[str, float]) -> str | None:
    """The estimator whose Ĵ ordered the most split pairs of held-out groups right, among those the
    bench ranks with a finite level score (ties: the smaller level score, then the higher mean ρ on
    the bench); None where no pair is split or none qualifies."""
    ranked = [name for name, share in order.items() if math.isfinite(share)
              and math.isfinite(scores.get(name, math.inf)) and math.isfinite(bench_rho.get(name, math.nan))]
    return min(ranked, key=lambda name: (-order[name], scores[name], -bench_rho[name]), default=None)


def bench_mean_rho(bench: BenchCalibration, estimators: Sequence[str], leave_out: str) -> dict[str, float]:
    """Estimator → its mean ρ over the bench's cells but ``leave_out`` that rank it (absent: none does)."""
    found = {}
    for name in estimators:
        rhos = [r for c in bench.cells if c.name != leave_out
                if math.isfinite(r := bench.rhos.get((c.name, name), math.nan))]
        if rhos:
            found[name] = float(np.mean(rhos))
    return found


def graded(cell: BenchCell, chosen: str | None) -> dict[str, float] | None:
    """The chosen estimator's ρ, NMAE and own-interval coverage on the cell, read from the bench
    after the choice (None where nothing was chosen or the bench lacks it)."""
    if chosen is None or chosen not in cell.estimates:
        return None
    read = cell.read(chosen)
    values = [cell.estimates[chosen][p] for p in read]
    return {"rho": cell.rho(chosen),
            "nmae": normalised_absolute_error(values, [cell.truth[p] for p in read]) if len(read) >= 2 else math.nan,
            "coverage": cell.coverage.get(chosen, math.nan)}


def score_agreement(scored: Mapping, cell: BenchCell) -> dict[str, float]:
    """How well each fold score orders the estimators as their ρ on the cell's own points does (the
    Spearman correlation over the estimators both rank: −level score, order score): a diagnostic
    of the instrument, read after the choice and from the cell's ground truth, never by it."""
    rho = {name: cell.rho(name) for name in cell.estimates}
    found = {}
    for label, key, sign in (("level", "scores", -1.0), ("order", "order", 1.0)):
        paired = [(sign * score, rho[name]) for name, score in scored[key].items()
                  if math.isfinite(score) and math.isfinite(rho.get(name, math.nan))]
        found[label] = spearman(*zip(*paired)) if len(paired) >= 3 else math.nan
    return found


def study(cells: Sequence[str], bench: BenchCalibration, save: Callable[[dict], None] | None = None,
          kept: Mapping[str, dict] | None = None) -> dict:
    """Each cell's fold scores and choice (the bench's mean ρ for ties left the cell out), and the
    choice graded against the headline under bench/ADOPTION.md; ``save`` gets the result so far
    after each cell (a run of hours can be read before it ends). A cell in ``kept`` (a saved run's
    cells) is taken as it was scored there, with the commit it was folded at, and not folded again."""
    found, result = {}, {}
    for name in cells:
        if name in (kept or {}):
            found[name] = kept[name]
            print(f"{name}: kept from the saved run (folded at {kept[name].get('commit', 'an earlier commit')})")
        else:
            scored = fold_scores(cell_config(name))
            rho = bench_mean_rho(bench, scored["scores"], leave_out=name)
            chosen = choose(scored["scores"], rho)
            ordered = choose_by_order(scored["order"], scored["scores"], rho)
            found[name] = {**scored, "chosen": chosen, "chosen_by_order": ordered, "commit": source_version()}
            print(f"{name}: chose {chosen} by the level, {ordered} by the order", flush=True)
        result = graded_result({"machine": machine(), "bench_commit": bench.commit, "cells": found}, bench)
        if save is not None:
            save(result)
    return result


def graded_result(result: dict, bench: BenchCalibration) -> dict:
    """``result`` (its cells' fold scores and choices) with each choice graded on the bench's
    figures of the cell against the headline, the fold scores' agreement with the cell's ρ, and the
    rule's verdict on each choice, all by today's code (so a run's saved choices can be graded again)."""
    figures, by_order, graded_cells = {}, {}, {}
    by_name = {c.name: c for c in bench.cells}
    for name, scored in result["cells"].items():
        if name in by_name:
            cell = by_name[name]
            default = graded(cell, HEADLINE)
            figures[name] = CellFigures(cell.group, cell.split_pairs, default, graded(cell, scored["chosen"]))
            by_order[name] = CellFigures(cell.group, cell.split_pairs, default, graded(cell, scored["chosen_by_order"]))
            graded_cells[name] = {"default": default, "candidate": figures[name].candidate,
                                  "by_order": by_order[name].candidate, "agreement": score_agreement(scored, cell)}
    return {**result, "graded": graded_cells, "verdict": _verdict(figures), "verdict_by_order": _verdict(by_order)}


def _verdict(figures: Mapping[str, CellFigures]) -> dict:
    verdict = decide(dict(figures))
    return {"adopt": verdict.adopt, "reasons": verdict.reasons, "counted": verdict.counted, "means": verdict.means}


def markdown(result: dict) -> str:
    lines = ["# Validation inside the log: the estimator each cell's own log chose", "",
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"Bench figures at `{result['bench_commit']}`; machine `{json.dumps(result['machine'])}`.", "",
             "| cell | groups | chosen | its fold score | headline's fold score | ρ chosen / headline | "
             "NMAE chosen / headline | chosen by the order | its order score / headline's | ρ | "
             "scores vs the cell's ρ: level / order |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, cell in result["cells"].items():
        grades = result["graded"].get(name, {})
        default, candidate, ordered, agreement = (grades.get(k) or {} for k in ("default", "candidate", "by_order",
                                                                                "agreement"))
        scores, order = cell["scores"], cell.get("order", {})
        lines.append(f"| {name} | {len(cell['folds'])} | {cell['chosen']} | {scores.get(cell['chosen'], math.nan):.3f} | "
                     f"{scores.get(HEADLINE, math.nan):.3f} | {candidate.get('rho', math.nan):+.2f} / "
                     f"{default.get('rho', math.nan):+.2f} | {candidate.get('nmae', math.nan):.2f} / "
                     f"{default.get('nmae', math.nan):.2f} | {cell.get('chosen_by_order')} | "
                     f"{order.get(cell.get('chosen_by_order'), math.nan):.2f} / {order.get(HEADLINE, math.nan):.2f} | "
                     f"{ordered.get('rho', math.nan):+.2f} | {agreement.get('level', math.nan):+.2f} / "
                     f"{agreement.get('order', math.nan):+.2f} |")
    agreements = [g["agreement"] for g in result["graded"].values() if g.get("agreement")]
    if agreements:
        lines += ["", "Scores vs the cell's ρ: the Spearman correlation, over the estimators, of the fold score "
                  "(−level; order) with each estimator's ρ on the cell's own points, read after the choice. Means: "
                  f"level {np.nanmean([a['level'] for a in agreements]):+.2f}, order "
                  f"{np.nanmean([a['order'] for a in agreements]):+.2f} over {len(agreements)} cells."]
    for key, title in (("verdict", "chosen by the level"), ("verdict_by_order", "chosen by the order")):
        verdict = result.get(key)
        if verdict:
            lines += ["", f"**The rule's verdict, {title}: {'adopt' if verdict['adopt'] else 'keep the default'}** — "
                      + "; ".join(verdict["reasons"])]
    return "\n".join(lines + [""])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="*", help="cells to validate (default: every development cell)")
    parser.add_argument("--resume", action="store_true", help="keep the cells the saved result holds (graded again "
                        "by today's code) and fold only the others: a study of hours over several sessions")
    args = parser.parse_args(argv)
    bench, kept = BenchCalibration.shipped(), None
    if args.resume:
        if not SAVED.exists():
            raise SystemExit(f"--resume: no saved result at {SAVED}; run the study without --resume")
        saved = json.loads(SAVED.read_text())
        if saved["bench_commit"] != bench.commit:
            raise SystemExit(f"log_validation.json was graded on the bench at {saved['bench_commit']}, the shipped "
                             f"calibration is at {bench.commit}: run the study without --resume")
        kept = saved["cells"]
    print(markdown(study(args.cells or development_cells(), bench, save=_write, kept=kept)))


def _write(result: dict) -> None:
    """The result so far, each file written whole and then moved (a stopped run leaves the last
    cell's, which ``--resume`` reads)."""
    for path, text in ((SAVED, json.dumps(result, indent=1, default=float)),
                       (SAVED.with_suffix(".md"), markdown(result))):
        with atomic_open(str(path), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
