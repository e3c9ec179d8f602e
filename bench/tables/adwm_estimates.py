"""The ADWM estimator on the default local cell: Ĵ against ground truth, and its cost on this machine.

Cell: TextWorld-Express Simon Says (held-out training variations, horizon 12), behaviour
pool = the tiny GPT-2 family iter0/iter1/iter2 × prompts p0/p1 (``python -m bench.costs.world_model_training``
trains the world model and π_e's ψ adapter, reused here), π_e = iter2 over ε ∈ {0, .25, .5, .75, 1}.

1. Ground truth: π_e^ε in the environment (``--gt-episodes`` per ε, shared seeds).
2. Ĵ of both value estimates (reward_sum, success_similarity), 5 seeds × 32 rollouts per ε,
   for the default configuration (soft tokens + success-bank guidance), the retrieval reading,
   the paper's ablations (no CFG, no continuation guidance, no ψ) and the likelihood guidance
   (Eq. final_score) on its last ``--likelihood-steps`` denoising steps (2 seeds: it costs a
   look-ahead of LLM generations and backward passes per denoising step); Spearman ρ against
   the ground-truth mean return.
3. Cost of one cell-seed, 5 ε × 32 rollouts × 30 steps × 50 denoising steps (termination
   disabled so every rollout runs 30 steps), split into world-model, LLM and guidance time;
   the likelihood guidance on all 50 steps is timed on a slice and scaled to the cell-seed.

Writes ``bench/results/adwm_estimates.{json,md}``.
Usage: ``python -m bench.tables.adwm_estimates [--gt-episodes N] [--likelihood-steps K]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from adwm_core.specs import EPSILONS, PolicySpec
from adwm_core.policies.loading import ModelCache
from adwm_core.collection import ground_truth_rollouts
from adwm_core.data import GROUND_TRUTH, TRAJECTORIES, read_table
from adwm_core.data.behaviour_log import BehaviourLog
from adwm_core.data.actions import NULL
from adwm_core.data.windows import episode_arrays
from adwm_core.model.psi import PsiAdapter
from adwm_core.model.world_model import WorldModel
from adwm_core.ope.imagination.diffusion_transition import DiffusionTransition, adwm_transition
from adwm_core.ope.imagination.rollouts import ImaginedRollouts
from adwm_core.ope.settings import AdwmConfig
from adwm_core.ope.imagination.state_bank import StateBank
from adwm_core.ope.imagination.estimates import adwm_estimates
from adwm_core.ope.statistics.metrics import spearman
from adwm_core.paths import local_cache_dir
from adwm_core.policies.soft_prompt import SoftPromptPolicy
from bench.common import RESULTS, default_behaviour, default_env, machine, tiny_family

CELL_HORIZON = 12
PRESET = "carry_over"  # the world model answers off-log pairs (no FQE hand-over), over 5 seeds
VARIANTS = {
    "ADWM (soft tokens, success bank)": AdwmConfig(preset=PRESET, reading="soft_tokens"),
    "retrieval reading": AdwmConfig(preset=PRESET, reading="retrieval"),
    "no CFG (λ = 0)": AdwmConfig(preset=PRESET, reading="soft_tokens", cfg_scale=0.0),
    "no continuation guidance": AdwmConfig(preset=PRESET, reading="soft_tokens", guidance="none"),
    "no ψ (π_e sees no observation)": AdwmConfig(preset=PRESET, reading="none"),
}


def ground_truth(policy: PolicySpec, n_episodes: int) -> list[dict]:
    folder = local_cache_dir("bench", "adwm")
    summary = os.path.join(folder, f"gt-{n_episodes}.parquet")
    if not os.path.exists(summary):
        ground_truth_rollouts(default_env(), policy, n_episodes, os.path.join(folder, f"gt-{n_episodes}-episodes.parquet"),
                              summary, cell="bench")
    return sorted(read_table(summary, GROUND_TRUTH).to_pylist(), key=lambda r: r["epsilon"])


def estimates(model, trajectories, reader, llm, config: AdwmConfig) -> dict:
    started = time.perf_counter()
    table, runs = adwm_estimates(model, trajectories, reader if config.reading == "soft_tokens" else llm,
                                  cell="bench", label="tiny-iter2@p0", epsilons=EPSILONS, config=config)
    rows = table.to_pylist()
    out = {"seconds": time.perf_counter() - started, "config": config.model_dump(mode="json"), "estimates": {}}
    for name in ("reward_sum", "success_similarity"):
        per_seed = np.array([[next(r["value"] for r in rows if r["estimator"] == f"ADWM:{name}"
                                   and r["epsilon"] == eps and r["seed"] == seed) for eps in EPSILONS]
                             for seed in config.seeds])
        out["estimates"][name] = {"mean": per_seed.mean(0).tolist(), "sd": per_seed.std(0).tolist(),
                                  "per_seed": per_seed.tolist()}
    out["mean_length"] = float(np.mean([run.lengths.mean() for run in runs]))
    return out


@torch.no_grad()
def one_step_fidelity(model: WorldModel, table, bank: StateBank) -> dict:
    """The world model's one-step outcome on every logged behaviour transition, given the real
    history and action (CFG as in ADWM, no continuation guidance): does the sampled next latent
    read as the logged reward's sign and the logged termination?"""
    sampler = DiffusionTransition(model, bank, AdwmConfig(reading="retrieval", guidance="none"))
    data = episode_arrays(BehaviourLog(table), model.config.actions, model.config.reward)
    generator = torch.Generator().manual_seed(0)
    reward, logged_reward, done, logged_done = [], [], [], []
    for e, length in enumerate(data.lengths):
        z = model.encode_texts([data.texts[i] for i in data.observations[e, :length]])
        actions = torch.as_tensor(data.actions[e, :length])
        previous = torch.cat([torch.tensor([NULL]), actions[:-1]])
        h = model.history(z[None], previous[None])[0]
        noise = torch.randn((sampler.diffusion.n_steps + 1, length, model.config.d_z), generator=generator)
        conditions = model.conditions(actions, [data.texts[i] for i in data.observations[e, :length]])
        z_next = sampler.sample(h, conditions, noise)
        reward.append(model.config.reward.decode(model.predicted_reward(z_next, h, conditions)).numpy())
        done.append(model.done_probability(z_next, h, conditions).numpy() >= 0.5)
        logged_reward.append(model.config.reward.decode(data.reward_targets[e, :length]))
        logged_done.append(data.done[e, :length])
    reward, logged_reward = np.concatenate(reward), np.concatenate(logged_reward)
    done, logged_done = np.concatenate(done), np.concatenate(logged_done).astype(bool)
    failing = logged_reward < 0
    return {"transitions": int(len(reward)), "reward_mae": float(np.abs(reward - logged_reward).mean()),
            "negative_reward_recall": float((reward[failing] < 0).mean()) if failing.any() else None,
            "done_recall": float(done[logged_done].mean()), "not_done_recall": float((~done[~logged_done]).mean())}


def cell_seed_cost(model, bank, reader, config: AdwmConfig, n_epsilons: int, n_rollouts: int, horizon: int) -> dict:
    """One seed with termination disabled: every rollout takes ``horizon`` steps."""
    config = config.replace(n_rollouts=n_rollouts, horizon=horizon, done_threshold=1 - 1e-12)
    started = time.perf_counter()
    run = ImaginedRollouts(bank, config, model.diffusion.n_steps).run(reader, adwm_transition(model, bank, config),
                                                                  EPSILONS[:n_epsilons], seed=0)
    seconds = time.perf_counter() - started
    steps = int(run.lengths.sum())
    return {"wall_s": seconds, "imagined_steps": steps, "steps_per_s": steps / seconds, "split_s": run.seconds,
            "n_epsilons": n_epsilons, "n_rollouts": n_rollouts, "horizon": horizon}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gt-episodes", type=int, default=200, help="ground-truth episodes per ε")
    parser.add_argument("--likelihood-steps", type=int, default=10,
                        help="denoising steps the likelihood guidance acts on in the estimates table")
    args = parser.parse_args()
    family = tiny_family()
    folder = local_cache_dir("bench", "world-model")
    wm_path, psi_path = os.path.join(folder, "wm-step"), os.path.join(folder, "psi")
    if not all(os.path.exists(os.path.join(p, "config.json")) for p in (wm_path, psi_path)):
        raise SystemExit("run python -m bench.costs.world_model_training first: it trains the world model and ψ reused here")
    default_behaviour(240, family)
    trajectories = os.path.join(folder, "behaviour-240.parquet")
    policy = PolicySpec("tiny-iter2", family["iter2"])
    truth = ground_truth(policy, args.gt_episodes)
    truth_values = [r["mean_return"] for r in truth]
    print("ground truth", truth_values, flush=True)

    model = WorldModel.load(wm_path)
    llm = ModelCache().policy(policy, default_env().name)
    reader = SoftPromptPolicy(llm, PsiAdapter.load(psi_path))
    variants = dict(VARIANTS)
    variants[f"likelihood guidance (last {args.likelihood_steps} of 50 steps, 2 seeds)"] = AdwmConfig(
        reading="soft_tokens", guidance="likelihood", guided_steps=args.likelihood_steps, seeds=(0, 1))
    results = {}
    for label, config in variants.items():
        result = estimates(model, trajectories, reader, llm, config.replace(horizon=CELL_HORIZON))
        for estimate in result["estimates"].values():
            estimate["rho"] = spearman(estimate["mean"], truth_values)
            estimate["rho_per_seed"] = [spearman(v, truth_values) for v in estimate["per_seed"]]
        results[label] = result
        print(label, {k: round(v["rho"], 2) for k, v in result["estimates"].items()}, f"{result['seconds']:.0f} s",
              flush=True)

    table = read_table(trajectories, TRAJECTORIES)
    bank = StateBank.from_log(BehaviourLog(table), model)
    fidelity = one_step_fidelity(model, table, bank)
    print("one-step fidelity", fidelity, flush=True)
    cost = {"default": cell_seed_cost(model, bank, reader, AdwmConfig(reading="soft_tokens"), 5, 32, 30),
            "retrieval": cell_seed_cost(model, bank, llm, AdwmConfig(reading="retrieval"), 5, 32, 30)}
    sliced = cell_seed_cost(model, bank, reader, AdwmConfig(reading="soft_tokens", guidance="likelihood"), 1, 32, 3)
    cost["likelihood_slice"] = sliced
    cost["likelihood_scaled_wall_s"] = sliced["wall_s"] / sliced["imagined_steps"] * 5 * 32 * 30
    print(json.dumps(cost, indent=1), flush=True)

    host = machine()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "adwm_estimates.json").write_text(json.dumps(
        {"machine": host, "ground_truth": truth, "variants": results, "fidelity": fidelity, "cost": cost}, indent=2))
    (RESULTS / "adwm_estimates.md").write_text(report(host, truth, results, fidelity, cost))
    print((RESULTS / "adwm_estimates.md").read_text())


def report(host: dict, truth: list[dict], results: dict, fidelity: dict, cost: dict) -> str:
    device = host.get("gpu", f"{host['cpus']} CPUs, {host['processor']}")
    eps_header = " | ".join(f"ε = {e:g}" for e in EPSILONS)
    lines = [
        f"# ADWM on the default local cell ({device}, {host['date']})",
        "",
        "π_e = tiny-iter2@p0 on textworld-express/simonsays (horizon 12); world model and ψ from "
        "`python -m bench.costs.world_model_training` (240 behaviour episodes); 5 seeds × 32 rollouts per ε, H_max = 12.",
        "",
        f"| | {eps_header} | Spearman ρ (mean Ĵ) | ρ per seed |",
        "|---|" + "---|" * (len(EPSILONS) + 2),
        "| ground truth mean return | " + " | ".join(f"{r['mean_return']:.3f} ± {r['stderr']:.3f}" for r in truth)
        + " | | |",
        "| ground truth success rate | " + " | ".join(f"{r['success_rate']:.3f}" for r in truth) + " | | |",
    ]
    for label, result in results.items():
        for name, estimate in result["estimates"].items():
            cells = " | ".join(f"{m:.3f} ± {s:.3f}" for m, s in zip(estimate["mean"], estimate["sd"]))
            seeds = ", ".join(f"{r:+.2f}" for r in estimate["rho_per_seed"])
            lines.append(f"| {label}: {name} | {cells} | {estimate['rho']:+.2f} | {seeds} |")
    lines += [
        "",
        f"Ground truth: {truth[0]['n_episodes']} episodes per ε. Ĵ: mean over seeds ± s.d. across seeds. "
        "Wall time of each row (5 seeds, all ε): " + ", ".join(
            f"{label} {r['seconds']:.0f} s (mean imagined length {r['mean_length']:.1f})" for label, r in results.items())
        + ".",
        "",
        f"One-step fidelity of the world model on the {fidelity['transitions']} logged behaviour transitions "
        "(real history and action, one sampled next latent): reward MAE "
        f"{fidelity['reward_mae']:.3f}; transitions with a negative logged reward read negative "
        f"{fidelity['negative_reward_recall']:.0%}; terminal transitions read terminal "
        f"{fidelity['done_recall']:.0%}, non-terminal ones non-terminal {fidelity['not_done_recall']:.0%}.",
        "",
        "## Cost of one cell-seed (5 ε × 32 rollouts × 30 steps × 50 denoising steps, no early termination)",
        "",
        "| configuration | wall s | imagined steps/s | world model s | LLM s | guidance s |",
        "|---|---|---|---|---|---|",
    ]
    for label, key in (("soft tokens + success bank (default)", "default"), ("retrieval + success bank", "retrieval")):
        c = cost[key]
        lines.append(f"| {label} | {c['wall_s']:.1f} | {c['steps_per_s']:.1f} | {c['split_s']['world_model']:.1f} | "
                     f"{c['split_s']['policy']:.1f} | {c['split_s']['guidance']:.1f} |")
    s = cost["likelihood_slice"]
    lines += [
        f"| soft tokens + likelihood guidance, all 50 steps (scaled from {s['imagined_steps']} imagined steps) | "
        f"{cost['likelihood_scaled_wall_s']:.0f} | {s['steps_per_s']:.2f} | | | |",
        "",
        "Guidance: the continuation-guidance gradients (success bank: world-model arithmetic only; likelihood: "
        "the look-ahead's LLM generations and backward passes, "
        f"{s['split_s']['guidance']:.0f} of {s['wall_s']:.0f} s in the slice); world model: sampling and heads; "
        "LLM: π_e choosing actions.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
