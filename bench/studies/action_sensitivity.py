"""Does a cell's trained world model answer differently to different actions? A diagnosis that
reads only the behaviour data and the world model (no ground truth, no π_e^ε values).

ADWM tells π_e^ε's ε levels apart only through the actions it feeds the world model: if the
predicted next state barely depends on the action, every ε imagines the same futures and Ĵ is
flat in ε. Per local cell (whose stages ``python -m bench.tables.main_results`` has run):

- vocabulary coverage: the share of logged actions, of the admissible actions at logged states
  (what ε-exploration draws from) and of π_e's greedy actions at logged states that the world
  model's action vocabulary knows (the rest map to ⟨unk⟩, which imagination reads as ∅ where
  ⟨unk⟩ never trained: ``adwm.unknown_actions``);
- action sensitivity, on up to ``N_STEPS`` logged transitions within the ADWM horizon: the
  world model's next latent from the logged history under the logged action and under one
  other admissible action conditioned on a different id, with the same noise and the cell's
  CFG scale. Reported: the mean cosine of the two predictions, beside the mean cosine of the
  logged-action prediction with the encoded true next observation, and the mean cosine of the
  true next latents of two random transitions (how alike any two states are). Also the mean
  |Δ predicted reward| and the share of transitions whose predicted termination flips.

Writes ``bench/results/action_sensitivity.{md,json}``. Usage:
``python -m bench.studies.action_sensitivity [CELL ...]``.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch

from adwm_core.cell import CellConfig
from adwm_core.collection import logged_histories
from adwm_core.data import LOGPROBS, TRAJECTORIES, behaviour_rows, read_table
from adwm_core.data.behaviour_log import BehaviourLog
from adwm_core.data.actions import NULL, UNKNOWN
from adwm_core.model.world_model import WorldModel
from adwm_core.ope.imagination.diffusion_transition import DiffusionTransition
from adwm_core.ope.imagination.state_bank import StateBank
from bench.common import RESULTS, artifact, cell_config, development_cells, machine

N_STEPS = 512
SEED = 0


def coverage(model: WorldModel, steps: list, greedy: list[str]) -> dict:
    vocabulary = model.config.actions

    def known(actions: list[str]) -> float:
        return float(np.mean([i != UNKNOWN for i in vocabulary.ids(actions)])) if actions else float("nan")

    admissible = sorted({a for _, h in steps for a in (h.admissible or ())})
    return {"logged": known([row["action"] for row, _ in steps]), "admissible": known(admissible),
            "greedy": known(greedy), "vocabulary_size": len(vocabulary.actions)}


@torch.no_grad()
def sensitivity(cell: CellConfig, model: WorldModel, table, steps: list) -> dict:
    """Cosines and reward/termination differences under the logged vs another admissible action."""
    rng = np.random.default_rng(SEED)
    sampler = DiffusionTransition(model, StateBank.from_log(BehaviourLog(table), model), cell.adwm)

    def ids(actions: list[str]) -> list[int]:  # as the diffusion transition conditions on them
        return sampler.action_ids(actions).tolist()

    chosen = []  # (logged row, its history, the id of another admissible action)
    for row, history in steps:
        if row["t"] >= cell.adwm.horizon or not history.admissible:
            continue
        logged = ids([row["action"]])[0]
        others = [i for i in ids(list(history.admissible)) if i != logged]
        if others:
            chosen.append((row, history, others[rng.integers(len(others))]))
    chosen = [chosen[i] for i in sorted(rng.choice(len(chosen), min(N_STEPS, len(chosen)), replace=False))]
    if not chosen:
        return {"n": 0}
    chosen.sort(key=lambda c: c[0]["t"])
    z_logged, z_other, histories, c_logged, c_other = [], [], [], [], []
    for t in sorted({row["t"] for row, *_ in chosen}):  # one batch per step: histories of t + 1 latents, no padding
        group = [c for c in chosen if c[0]["t"] == t]
        texts = [text for _, history, _ in group for text in [o for o, _ in history.steps] + [history.observation]]
        z = model.encode_texts(texts).reshape(len(group), t + 1, -1)  # one encoder pass for the whole group
        previous = torch.full((len(group), t + 1), NULL, dtype=torch.long)
        for j, (_, history, _) in enumerate(group):
            previous[j, 1:] = torch.as_tensor(ids([a for _, a in history.steps]), dtype=torch.long)
        h = model.history(z, previous)[:, -1]
        noise = torch.randn((sampler.diffusion.n_steps + 1, len(group), model.config.d_z),
                            generator=torch.Generator().manual_seed(SEED + t))
        observed = [history.observation for _, history, _ in group]
        for out, conditions, action_ids in ((z_logged, c_logged, ids([row["action"] for row, *_ in group])),
                                            (z_other, c_other, [o for *_, o in group])):
            conditions.append(model.conditions(torch.as_tensor(action_ids), observed))
            out.append(sampler.sample(h, conditions[-1], noise))
        histories.append(h)
    z_logged, z_other, h = torch.cat(z_logged), torch.cat(z_other), torch.cat(histories)
    c_logged, c_other = torch.cat(c_logged), torch.cat(c_other)
    truth = model.encode_texts([row["next_observation"] for row, *_ in chosen])
    reward_logged, reward_other = (model.config.reward.decode(model.predicted_reward(z_next, h, c))
                                   for z_next, c in ((z_logged, c_logged), (z_other, c_other)))
    done_logged, done_other = (model.done_probability(z_next, h, c) >= cell.adwm.done_threshold
                               for z_next, c in ((z_logged, c_logged), (z_other, c_other)))
    return {"n": len(chosen), "cos_logged_vs_other": cos(z_logged, z_other), "cos_logged_vs_truth": cos(z_logged, truth),
            "cos_random_truths": cos(truth, truth[torch.as_tensor(rng.permutation(len(chosen)))]),
            "mean_abs_reward_change": float((reward_logged - reward_other).abs().mean()),
            "termination_flips": float((done_logged != done_other).float().mean())}


def cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=-1).mean())


def measure(cell_name: str) -> dict:
    cell = cell_config(cell_name)
    model = WorldModel.load(artifact(cell, "world-model").file("members"))
    table = behaviour_rows(read_table(artifact(cell, "behaviour").file("trajectories"), TRAJECTORIES))
    steps = list(logged_histories(table))
    scored = read_table(artifact(cell, "logprobs").file("logprobs"), LOGPROBS)
    greedy = [a for a in scored.column("greedy_action").to_pylist() if a is not None]
    return {"cell": cell_name, "coverage": coverage(model, steps, greedy), **sensitivity(cell, model, table, steps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="*", help="cells (default: every local-* cell)")
    cells = parser.parse_args().cells or development_cells()
    rows = []
    for cell in cells:
        rows.append(measure(cell))
        print(json.dumps(rows[-1]), flush=True)
    lines = ["# World-model action sensitivity on the local cells", "",
             "Generated by `python -m bench.studies.action_sensitivity` (see its docstring). Coverage: share of actions the "
             "world model's vocabulary knows. Cosines of next latents predicted from logged histories: logged action "
             "vs another admissible action (same noise), logged-action prediction vs the true next observation, and "
             "two random true next observations. Near-1 'logged vs other' with 'random truths' well below it: the "
             "world model imagines almost the same next state whatever the action.", "",
             "| cell | vocabulary | logged known | admissible known | π_e greedy known | n | cos logged vs other | "
             "cos logged vs truth | cos random truths | mean abs Δ reward | termination flips |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["coverage"]
        lines.append(f"| {r['cell']} | {c['vocabulary_size']} | {c['logged']:.2f} | {c['admissible']:.2f} | "
                     f"{c['greedy']:.2f} | {r['n']} | " + " | ".join(
                         f"{r[k]:.3f}" if k in r else "–" for k in ("cos_logged_vs_other", "cos_logged_vs_truth",
                                                                   "cos_random_truths", "mean_abs_reward_change",
                                                                   "termination_flips")) + " |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "action_sensitivity.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "action_sensitivity.json").write_text(json.dumps({"machine": machine(), "cells": rows}, indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
