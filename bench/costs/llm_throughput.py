"""LLM policies on this machine: collection steps/s and ground-truth wall time per ε.

On the default local environment (TextWorld-Express Simon Says, horizon 12,
held-out training variations):
- trains (once, cached under ``$ADWM_HOME``) the tiny GPT-2 policy family on
  the expert's training trajectories;
- behaviour collection steps/s with the tiny LM and with SmolLM2-135M-Instruct
  (transformers backend; vLLM too when it is installed and ``--vllm`` is given);
- ground-truth rollouts of the strongest tiny checkpoint at every ε: wall
  seconds and the success curve (the local policy family's ground truth).

Writes ``bench/results/llm_throughput.{json,md}``.
Usage: ``python -m bench.costs.llm_throughput [--episodes N] [--vllm]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import pyarrow as pa

from adwm_core.specs import EnvSpec, PolicySpec
from adwm_core.collection import collect_behavior, ground_truth_rollouts
from adwm_core.paths import local_cache_dir
from adwm_core.policies.local_models import smollm2_dir
from bench.common import CHECKPOINTS, RESULTS, default_env, tiny_family
from bench.common import machine as host

def collection_rate(env: EnvSpec, spec: PolicySpec, n_episodes: int, out: str) -> dict:
    start = time.perf_counter()
    table: pa.Table = collect_behavior(env, [spec], n_episodes, out, cell="bench", variants=("p0",), overwrite=True)
    seconds = time.perf_counter() - start  # model loading included, engines started
    return {"policy": spec.label, "backend": spec.backend, "steps": table.num_rows, "seconds": seconds,
            "steps_per_s": table.num_rows / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=32, help="episodes per measurement and per ε")
    parser.add_argument("--vllm", action="store_true", help="also measure SmolLM2 on the vLLM backend")
    args = parser.parse_args()
    env = default_env()
    family = tiny_family()
    scratch = local_cache_dir("bench", "scratch")
    specs = [PolicySpec("tiny-iter2", family["iter2"]), PolicySpec("smollm2", smollm2_dir())]
    if args.vllm:
        specs.append(PolicySpec("smollm2", smollm2_dir(), backend="vllm"))
    collection = []
    for spec in specs:
        row = collection_rate(env, spec, args.episodes, os.path.join(scratch, f"{spec.label}-{spec.backend}.parquet"))
        collection.append(row)
        print(row, flush=True)
    curves = []
    for label in CHECKPOINTS:
        timings: dict[float, float] = {}
        summary = ground_truth_rollouts(
            env, PolicySpec(f"tiny-{label}", family[label]), args.episodes,
            os.path.join(scratch, "gt.parquet"), os.path.join(scratch, "gt_summary.parquet"),
            cell="bench", overwrite=True, timings=timings,
        )
        for row in summary.to_pylist():
            row["seconds"] = timings[row["epsilon"]]
            curves.append(row)
            print(row, flush=True)
    machine = host()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "llm_throughput.json").write_text(
        json.dumps({"machine": machine, "env": env.__dict__ | {"options": dict(env.options)}, "collection": collection,
                    "ground_truth": curves}, indent=2)
    )
    lines = [
        f"# LLM policies on {env.name}/{env.task} ({machine['cpus']} CPUs, {machine['processor']}, {machine['date']})",
        "",
        f"Behaviour collection, {args.episodes} greedy episodes, horizon {env.max_steps} (model loading included):",
        "",
        "| policy | backend | steps | seconds | steps/s |",
        "|---|---|---|---|---|",
        *(f"| {r['policy']} | {r['backend']} | {r['steps']} | {r['seconds']:.1f} | {r['steps_per_s']:.1f} |"
          for r in collection),
        "",
        f"Ground truth of the tiny family π_e^ε, {args.episodes} episodes per ε (held-out training variations, fixed seeds):",
        "",
        "| policy | ε | success rate | ± s.e. | mean return | wall s |",
        "|---|---|---|---|---|---|",
        *(f"| {r['policy']} | {r['epsilon']:.2f} | {r['success_rate']:.3f} | {r['success_stderr']:.3f} | "
          f"{r['mean_return']:.3f} | {r['seconds']:.1f} |" for r in curves),
    ]
    (RESULTS / "llm_throughput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
