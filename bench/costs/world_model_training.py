"""World-model and ψ-adapter training on the default local cell, on this machine.

The default local cell: TextWorld-Express Simon Says (held-out training variations,
horizon 12), behaviour pool = the tiny GPT-2 family iter0/iter1/iter2 × prompts p0/p1,
π_e = iter2. The script
- collects the behaviour episodes (cached under ``$ADWM_HOME/bench/world-model``);
- trains the world model for 50 epochs (app:wm-train) with step-reward targets and,
  for comparison, reward-to-go targets: transitions/s, wall time, the held-out reward
  MSE and termination BCE beside the constant predictor's;
- trains the ψ adapter for π_e (app:psi-train): top-1 retrieval against 1/B.

Writes ``bench/results/world_model_training.{json,md}``.
Usage: ``python -m bench.costs.world_model_training [--episodes N] [--epochs E] [--device cpu|cuda]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from adwm_core.envs.registry import DEFAULT_LOCAL_ENV
from adwm_core.model.world_model import WorldModel
from adwm_core.paths import local_cache_dir
from adwm_core.policies.loading import load_language_model
from adwm_core.settings import PsiConfig, TrainConfig
from adwm_core.training.psi import observation_texts, train_psi_adapter
from adwm_core.training.world_model import train_world_model
from bench.common import CHECKPOINTS, RESULTS, default_behaviour, machine, tiny_family


def train(table, target: str, epochs: int, device: str) -> dict:
    out = os.path.join(local_cache_dir("bench", "world-model"), f"wm-{target}")
    start = time.perf_counter()
    result = train_world_model(table, out, TrainConfig(epochs=epochs, reward_target=target, device=device),
                               overwrite=True, on_epoch=lambda e, m: print(target, e, round(m["train_total"], 4), flush=True))
    seconds = time.perf_counter() - start
    rates = [epoch["transitions_per_s"] for epoch in result.history]
    return {"target": target, "path": out, "seconds": seconds, "transitions_per_s": sum(rates) / len(rates),
            "best_epoch": result.best_epoch, "best": result.best, "first": result.history[0], "last": result.history[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=240, help="behaviour episodes")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    family = tiny_family()
    table = default_behaviour(args.episodes, family)
    runs = [train(table, target, args.epochs, args.device) for target in ("step", "to_go")]
    texts = observation_texts(table)
    targets = load_language_model(family["iter2"]).mean_input_embeddings(texts)
    start = time.perf_counter()
    psi = train_psi_adapter(WorldModel.load(runs[0]["path"]), texts, targets,
                            os.path.join(local_cache_dir("bench", "world-model"), "psi"),
                            PsiConfig(device=args.device), overwrite=True).final
    psi_seconds = time.perf_counter() - start
    host = machine()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "world_model_training.json").write_text(json.dumps(
        {"machine": host, "episodes": args.episodes, "transitions": table.num_rows, "epochs": args.epochs,
         "world_model": runs, "psi": psi | {"seconds": psi_seconds, "observations": len(texts)}}, indent=2))
    device = host.get("gpu", f"{host['cpus']} CPUs, {host['processor']}") if args.device != "cpu" else "CPU"
    lines = [
        f"# World-model training on the default local cell ({device}, {host['date']})",
        "",
        f"{args.episodes} behaviour episodes ({table.num_rows} transitions) of the tiny family "
        f"{'/'.join(CHECKPOINTS)} × p0/p1 on {DEFAULT_LOCAL_ENV[0]}/{DEFAULT_LOCAL_ENV[1]}; "
        f"{args.epochs} epochs, batch 64, window 8, 10 % of episodes held out.",
        "",
        "| reward target | transitions/s | wall s | best epoch | held-out reward MSE (constant) | "
        "held-out done BCE (constant) | last-epoch held-out reward MSE |",
        "|---|---|---|---|---|---|---|",
        *(f"| {r['target']} | {r['transitions_per_s']:.0f} | {r['seconds']:.0f} | {r['best_epoch']} | "
          f"{r['best']['heldout_reward_mse']:.4f} ({r['best']['heldout_reward_mse_constant']:.4f}) | "
          f"{r['best']['heldout_done_bce']:.4f} ({r['best']['heldout_done_bce_constant']:.4f}) | "
          f"{r['last']['heldout_reward_mse']:.4f} |" for r in runs),
        "",
        "Training loss terms, first → last epoch (step targets): " + ", ".join(
            f"{t} {runs[0]['first'][f'train_{t}']:.3f} → {runs[0]['last'][f'train_{t}']:.3f}"
            for t in ("dsm", "idm", "bc", "div", "reward", "done")),
        "",
        f"ψ adapter for π_e = tiny iter2 (d_llm from its embeddings), {len(texts)} distinct observations, "
        f"20 epochs in {psi_seconds:.1f} s: top-1 retrieval {psi['train_top1']:.3f} on training batches, "
        f"{psi['heldout_top1']:.3f} on held-out batches; random baseline 1/B = {psi['random_top1']:.3f}.",
    ]
    (RESULTS / "world_model_training.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
