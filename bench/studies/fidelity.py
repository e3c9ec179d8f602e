"""World-model fidelity on the local cells, for the paper's recipe and the default one.

For each cell (whose behaviour and ground-truth stages have run) and each world-model preset
(``TrainConfig.preset``), a world model is trained on the cell's behaviour data — the cell's
world-model stage with those settings, through the stage registry, so the flow's own model is
reused where the settings are the cell's — and measured by the instruments of
``adwm_core.ope.instruments.fidelity``:

- teacher-forced one-step fidelity on the held-out behaviour episodes (the training split),
  beside the trivial predictors;
- counterfactual actions: ``--counterfactual N`` logged transitions replayed in the real
  environment under another admissible action (0 skips it);
- replay of the ground-truth episodes of π_e^ε (open loop and teacher-forced): imagined vs
  real return per ε, beside the same replay in the real environment (open loop's ceiling);
- coverage: the share of π_e^ε's live (rewarded) steps whose (observation, action) was logged;
- π_e's agreement on imagined vs real next states (retrieval; ψ's soft tokens under the paper);
- ADWM itself under the same preset (``adwm.preset``: the paper reads imagined states through
  ψ, trained here; the default by retrieval), the cell's other ADWM settings unchanged:
  Spearman ρ of the seed-averaged Ĵ against ground truth and |Ĵ−J|/range of ``reward_sum``,
  beside the logged-successor reference world model (``kNN-WM``) and ADWM with ``snap``.

Writes ``bench/results/fidelity.{md,json}``; rows of cells and presets not measured in this
run are kept. Usage: ``python -m bench.studies.fidelity [CELL ...] [--presets paper default] [--set FIELD=VALUE ...]``
(``--set`` measures a candidate change of the recipe, e.g. ``--presets default --set word_match=true``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from adwm_core import pipeline
from adwm_core.cell import CellConfig, parse_assignments
from adwm_core.data import GROUND_TRUTH, TRAJECTORIES, read_table
from adwm_core.model.world_model import WorldModel
from adwm_core.settings import WORLD_MODEL_PRESETS, TrainConfig
from adwm_core.ope.imagination.estimates import adwm_estimates
from adwm_core.ope.statistics.metrics import spearman
from adwm_core.ope.instruments.fidelity import (TOP_K, counterfactual_fidelity, counterfactual_outcomes, environment_replay,
                                    logged_coverage, one_step_fidelity, open_loop_replay, policy_agreement)
from adwm_core.training.world_model import HISTORY_FILE, split_indices
from bench.common import RESULTS, artifact, cell_config, development_cells, evaluated_policy, machine
from flows.cells import cell_names

OUT = RESULTS / "fidelity"
ESTIMATES = ("ADWM:reward_sum", "ADWM:success_similarity", "kNN-WM:reward_sum", "ADWM:reward_sum snapped")


def preset_config(cell: CellConfig, preset: str, changes: dict | None = None) -> TrainConfig:
    """The cell's world-model settings under ``preset``: the preset decides the recipe, the cell
    its seed, reward target and device (and the ReAct vocabulary where the preset reads ids);
    ``changes`` (``--set``) override fields of the recipe, to measure a candidate change."""
    own = cell.world_model
    react = own.react_actions and {**WORLD_MODEL_PRESETS[preset], **(changes or {})}["action_input"] == "ids"
    return TrainConfig(preset=preset, seed=own.seed, reward_target=own.reward_target, device=own.device,
                       react_actions=react, **(changes or {}))


def variant(preset: str, changes: dict) -> str:
    """The row label of a preset with ``--set`` changes, e.g. ``default+word_match=True``."""
    return preset + "".join(f"+{name}={value}" for name, value in sorted(changes.items()))


def trained(cell: CellConfig) -> tuple[WorldModel, dict, str]:
    """The world model of the cell's world-model stage — computed here (timed) unless finished."""
    computed = []
    started = time.perf_counter()
    model = pipeline.run(cell, "world-model", on_start=lambda _, reused: computed.append(not reused))
    folder = model.file("members")
    with open(os.path.join(folder, HISTORY_FILE)) as f:
        saved = json.load(f)
    return WorldModel.load(folder), {"best_round": saved["best_epoch"], "rounds": len(saved["epochs"]),
                                     "train_seconds": time.perf_counter() - started if computed[0] else float("nan")}, folder


def graded_estimates(cell: CellConfig, evaluated: tuple, model_folder: str, trajectories: str, truth) -> dict:
    """ADWM's (and the reference world model's) ρ and normalised error on the cell's ε family
    (``evaluated``: :func:`evaluated_policy`)."""
    spec, llm, soft, config = evaluated
    rows = []
    for snapped in (False, True):  # the snapped run adds ADWM's rows only, renamed
        table, runs = adwm_estimates(model_folder, trajectories, soft or llm, cell=cell.name, label=spec.name,
                                      epsilons=cell.evaluation.epsilons,
                                      config=config.replace(snap=snapped, reference=not snapped))
        rows += [{**r, "estimator": r["estimator"] + (" snapped" if snapped else "")} for r in table.to_pylist()]
        if not snapped:
            lengths = [run.lengths.mean() for run in runs]
    levels = sorted(truth)
    out = {"reading": config.reading, "truth": [truth[e] for e in levels], "mean_length": float(np.mean(lengths))}
    spread = float(np.ptp(out["truth"]))
    for name in ESTIMATES:
        estimate = [float(np.mean([r["value"] for r in rows if r["estimator"] == name and r["epsilon"] == e]))
                    for e in levels]
        out[name] = {"estimate": estimate, "rho": spearman(estimate, out["truth"])}
        if "reward_sum" in name:
            out[name]["normalised_error"] = (
                float(np.mean(np.abs(np.subtract(estimate, out["truth"])))) / spread if spread else float("nan"))
    return out


def measure(cell_name: str, preset: str, n_counterfactual: int, changes: dict | None = None) -> dict:
    cell = cell_config(cell_name)
    config = preset_config(cell, preset, changes)
    cell = cell.replace(world_model=config)
    behaviour_file = artifact(cell, "behaviour").file("trajectories")
    table = read_table(behaviour_file, TRAJECTORIES)
    truth = read_table(artifact(cell, "ground-truth").file("episodes"), TRAJECTORIES)
    model, training, folder = trained(cell)
    n_episodes = len(set(table["episode"].to_pylist()))
    _, heldout = split_indices(n_episodes, config.heldout_fraction, config.seed)
    lam = cell.adwm.cfg_scale
    row = {"cell": cell_name, "preset": variant(preset, changes or {}), "training": training,
           "coverage": logged_coverage(table, truth),
           "one_step": one_step_fidelity(model, table, heldout, cfg_scale=lam),
           "replay": open_loop_replay(model, table, truth, cfg_scale=lam, done_threshold=cell.adwm.done_threshold),
           "replay_snapped": open_loop_replay(model, table, truth, cfg_scale=lam, snap=True,
                                              done_threshold=cell.adwm.done_threshold),
           "replay_teacher_forced": open_loop_replay(model, table, truth, cfg_scale=lam, teacher_forced=True,
                                                     done_threshold=cell.adwm.done_threshold),
           "replay_environment": environment_replay(cell.env.name, dict(cell.env.options), truth, table)}
    summary = read_table(artifact(cell, "ground-truth").file("summary"), GROUND_TRUTH).to_pylist()
    policy = evaluated_policy(cell, preset)
    row["adwm"] = graded_estimates(cell, policy, folder, behaviour_file, {r["epsilon"]: r["mean_return"] for r in summary})
    _, llm, soft, _ = policy
    row["policy_agreement"] = policy_agreement(model, table, heldout, llm, soft_policy=soft, cfg_scale=lam)
    if n_counterfactual:
        outcomes = counterfactual_outcomes(cell.env.name, dict(cell.env.options), table, n_counterfactual)
        row["counterfactual"] = counterfactual_fidelity(model, table, outcomes, cfg_scale=lam) if outcomes else {}
    return row


def fmt(x) -> str:
    return "–" if x is None or x != x else f"{x:.2f}"


def render(rows: list[dict]) -> str:
    lines = ["# World-model fidelity on the local cells", "",
             "Generated by `python -m bench.studies.fidelity` (see its docstring); instruments in `adwm_core/ope/instruments/fidelity.py`. "
             "`paper` is the paper's world-model recipe, `default` the project's (docs/operations.md, 'World model and ψ adapter'). "
             "One-step: held-out behaviour transitions, real history and logged action, 4 samples each; "
             f"top-1/top-{TOP_K}: the true next observation retrieved among the log's distinct observations; "
             "plausible: the retrieved one was ever logged after that (observation, action). "
             "Outcome figures read the heads as imagination does; trivial predictors beside them.", "",
             "## Teacher-forced one step (held-out transitions)", "",
             f"| cell | preset | n | top-1 | top-{TOP_K} | plausible | reward MAE | reward sign | failure recall | "
             "done acc | done recall | ∅-action top-1 | copy-z_t top-1 | frequent top-1 | constant reward MAE | "
             "constant done acc | heads on true: failure recall | heads on true: done recall |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o = r["one_step"]
        w, null, copy, const, true = o["world_model"], o["null_action"], o["copy_z_t"], o["constant"], o["heads_on_true_next"]
        lines.append(f"| {r['cell']} | {r['preset']} | {int(o['transitions']['n'])} | " + " | ".join(fmt(x) for x in (
            w["top1"], w[f"top{TOP_K}"], w["plausible"], w["reward_mae"], w["reward_sign"], w["failure_recall"],
            w["done_accuracy"], w["done_recall"], null["top1"], copy["top1"], const["top1"], const["reward_mae"],
            const["done_accuracy"], true["failure_recall"], true["done_recall"])) + " |")
    lines += ["", "## Counterfactual actions (real outcome of another admissible action, by replay in the environment)",
              "", "| cell | preset | n | outcome differs (real) | predicted to differ (recall) | logged: reward MAE | "
              "logged: done acc | other: reward MAE | other: failure recall | other: done acc | other: done recall |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r.get("counterfactual")
        if not c:
            continue
        d, lo, ot = c["outcome_differs"], c["logged_action"], c["other_action"]
        lines.append(f"| {r['cell']} | {r['preset']} | {int(d['n'])} | " + " | ".join(fmt(x) for x in (
            d["real"], d["recall"], lo["reward_mae"], lo["done_accuracy"], ot["reward_mae"], ot["failure_recall"],
            ot["done_accuracy"], ot["done_recall"])) + " |")
    lines += ["", "## Replay of the ground-truth episodes (π_e^ε's recorded actions from the real first observation)",
              "", "Open loop: the world model's samples are the states. Teacher-forced: the real states, the "
              "world model's outcomes (its predicted termination still ends the episode). Snapped: open loop, "
              "each sample replaced by its nearest behaviour observation (`adwm.snap`). Environment: the ceiling "
              "of open loop, the same actions played in the real environment, in a logged instance with the same "
              "first observation drawn at random (where the environment draws what comes next, actions chosen "
              "for one draw meet another, and no world model can replay better).", "",
              "| cell | preset | replay | episodes | return MAE | length MAE | ρ of per-ε means | |Ĵ−J|/range | "
              "real return per ε | imagined return per ε |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for kind, p in (("open loop", r["replay"]), ("open loop, snapped", r.get("replay_snapped")),
                        ("teacher-forced", r.get("replay_teacher_forced")),
                        ("environment (ceiling)", r.get("replay_environment"))):
            if p is None:
                continue
            real = " ".join(f"{x['real_return']:.2f}" for x in p["levels"])
            imagined = " ".join(f"{x['imagined_return']:.2f}" for x in p["levels"])
            lines.append(f"| {r['cell']} | {r['preset']} | {kind} | {p['episodes']} | {fmt(p['return_mae'])} | "
                         f"{fmt(p['length_mae'])} | {fmt(p['rho_per_level'])} | {fmt(p['normalised_error'])} | "
                         f"{real} | {imagined} |")
    lines += ["", "## Coverage: π_e^ε's live steps whose (observation, action) the behaviour log holds", "",
              "| cell | steps logged per ε | rewarded steps logged per ε |", "|---|---|---|"]
    for cell in dict.fromkeys(r["cell"] for r in rows):
        c = next((r["coverage"] for r in rows if r["cell"] == cell and r.get("coverage")), None)
        if c:
            lines.append(f"| {cell} | " + " ".join(fmt(x["steps_logged"]) for x in c) + " | "
                         + " ".join(fmt(x["rewarded_steps_logged"]) for x in c) + " |")
    lines += ["", "## Policy agreement (π_e's action on the imagined next state = its action on the real one)", "",
              "Held-out behaviour transitions, one teacher-forced sample each; chance: π_e shown a behaviour "
              "observation drawn at random.", "",
              "| cell | preset | n | retrieval | soft tokens (ψ) | chance |", "|---|---|---|---|---|---|"]
    for r in rows:
        p = r.get("policy_agreement")
        if p:
            lines.append(f"| {r['cell']} | {r['preset']} | {int(p['n'])} | {fmt(p['retrieval'])} | "
                         f"{fmt(p.get('soft_tokens'))} | {fmt(p['chance'])} |")
    lines += ["", "## ADWM under the same preset (π_e's ε family; Ĵ averaged over the cell's seeds)", "",
              "kNN-WM: the logged-successor reference world model (adwm_core/ope/imagination/transitions.py) through the same "
              "rollouts and reading.", "",
              "| cell | preset | reading | reward_sum ρ | success_similarity ρ | reward_sum |Ĵ−J|/range | "
              "kNN-WM ρ | kNN-WM |Ĵ−J|/range | snapped ρ | snapped |Ĵ−J|/range | mean imagined length | "
              "truth per ε | reward_sum per ε | kNN-WM per ε | snapped per ε |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a = r.get("adwm")
        if a is None:
            continue
        s_, m_ = a["ADWM:reward_sum"], a.get("ADWM:success_similarity", {})
        k_, n_ = a.get("kNN-WM:reward_sum", {}), a.get("ADWM:reward_sum snapped", {})
        lines.append(f"| {r['cell']} | {r['preset']} | {a['reading']} | {fmt(s_['rho'])} | {fmt(m_.get('rho'))} | "
                     f"{fmt(s_['normalised_error'])} | {fmt(k_.get('rho'))} | {fmt(k_.get('normalised_error'))} | "
                     f"{fmt(n_.get('rho'))} | {fmt(n_.get('normalised_error'))} | {a['mean_length']:.1f} | "
                     + " | ".join(" ".join(f"{x:.2f}" for x in curve)
                                  for curve in (a["truth"], s_["estimate"], k_.get("estimate", []),
                                                n_.get("estimate", []))) + " |")
    lines += ["", "## Training", "", "| cell | preset | rounds | best round | seconds (–: trained earlier) |", "|---|---|---|---|---|"]
    for r in rows:
        t = r["training"]
        lines.append(f"| {r['cell']} | {r['preset']} | {t['rounds']} | {t['best_round']} | {fmt(t['train_seconds'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="*", help="cells (default: every local-* cell)")
    parser.add_argument("--presets", nargs="+", default=list(WORLD_MODEL_PRESETS), choices=list(WORLD_MODEL_PRESETS))
    parser.add_argument("--counterfactual", type=int, default=100, metavar="N")
    parser.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE", dest="changes",
                        help="world-model fields changed from each preset (TrainConfig, e.g. word_match=true); "
                             "rows are labelled preset+FIELD=VALUE")
    args = parser.parse_args()
    cells = args.cells or development_cells()
    unknown = sorted(set(cells) - set(cell_names()))
    if unknown:
        raise SystemExit(f"unknown cell(s) {unknown}; cells: {', '.join(cell_names())}")
    changes = parse_assignments(args.changes)
    unknown = sorted(set(changes) - set(TrainConfig.model_fields))
    if unknown:
        raise SystemExit(f"--set {unknown}: give FIELD=VALUE with FIELD one of TrainConfig's fields")
    saved = OUT.with_suffix(".json")
    kept = json.loads(saved.read_text())["rows"] if saved.exists() else []
    rows = []
    for cell in cells:
        for preset in args.presets:
            rows.append(measure(cell, preset, args.counterfactual, changes))
            print(json.dumps(rows[-1])[:2000], flush=True)
    done = {(r["cell"], r["preset"]) for r in rows}
    rows = sorted([r for r in kept if (r["cell"], r["preset"]) not in done] + rows,
                  key=lambda r: (r["cell"], list(WORLD_MODEL_PRESETS).index(r["preset"].split("+")[0]), r["preset"]))
    RESULTS.mkdir(exist_ok=True)
    saved.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2))
    OUT.with_suffix(".md").write_text(render(rows))
    print(render(rows))


if __name__ == "__main__":
    sys.exit(main())
