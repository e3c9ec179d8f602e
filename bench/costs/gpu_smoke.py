"""One seed cell in smoke mode timed on a GPU against the same cell on the CPU (issue 39).

``--run OUT``: the cell (default hotpotqa-dpo) in smoke mode (adwm_core/smoke.py) with every
policy on the transformers backend, from an empty artifact root, stage by stage in this
process through ``pipeline.run`` — no Prefect or MLflow, so it runs on a bare GPU worker
whose image lacks them — and writes each stage's wall seconds and the device it ran on to
``OUT`` (JSON). Run it twice on the same machine, once with ``CUDA_VISIBLE_DEVICES=`` (the
CPU) and once without (the GPU): the comparison is then of one machine's two devices.
``--table CPU.json GPU.json`` writes ``bench/results/gpu_smoke.{md,json}``.

Why transformers: the seed cells run on vLLM, which a GPU worker without network access
cannot install, so both runs use the backend that is there; the stand-in (``--stand-in``)
is any local model folder. ``--make-stand-in DIR`` writes one small enough to carry to such a
worker: a random-weight Llama (4 layers, width 256, 16 M parameters) with SmolLM2-135M's
tokenizer and chat template (the real weights are too large to carry). Smoke numbers grade
nothing: they show what each stage costs.

Usage: ``python -m bench.costs.gpu_smoke --make-stand-in DIR``;
``python -m bench.costs.gpu_smoke --run OUT --stand-in DIR [--cell CELL]``;
``python -m bench.costs.gpu_smoke --table CPU.json GPU.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.common import RESULTS  # no torch, Prefect or MLflow: the bare worker runs this module
from flows.cells import cell_config_path


def on_transformers(cell_yaml: Path, folder: Path) -> Path:
    """A copy of the cell's YAML with every policy on the transformers backend."""
    raw = yaml.safe_load(cell_yaml.read_text())
    for section, key in (("behaviour", "pool"), ("evaluation", "policies")):
        for policy in (raw.get(section) or {}).get(key) or []:
            policy["backend"] = "transformers"
    path = folder / cell_yaml.name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def make_stand_in(folder: Path) -> None:
    """A random-weight Llama with SmolLM2-135M-Instruct's tokenizer and chat template, in bf16."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from adwm_core.policies.local_models import smollm2_dir

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def device() -> dict:
    import torch

    facts = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
             "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
             "date": time.strftime("%Y-%m-%d")}
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
    return facts


def run(out: Path, cell_yaml: str, stand_in: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["ADWM_HOME"] = str(Path(scratch) / "home")
        from adwm_core import pipeline
        from adwm_core.smoke import smoke_cell

        config, _ = smoke_cell(str(on_transformers(Path(cell_yaml), Path(scratch))), stand_in,
                               data_root=str(Path(scratch) / "data"))
        facts = {"cell": config.name, "stand_in": Path(stand_in).name, "device": device(), "complete": False,
                 "wall_s": 0.0, "stages": []}
        started = time.perf_counter()
        for step in pipeline.plan(config):
            begun = time.perf_counter()
            pipeline.run(config, step.name, step.policy, log=lambda message: None)
            facts["stages"].append({"stage": step.name, "policy": step.policy.label if step.policy else None,
                                    "seconds": time.perf_counter() - begun})
            facts["wall_s"] = time.perf_counter() - started
            out.write_text(json.dumps(facts, indent=2))  # each stage as it ends: a run cut short keeps them
            print(f"{step.name}: {facts['stages'][-1]['seconds']:.1f} s", flush=True)
        facts["complete"] = True
        out.write_text(json.dumps(facts, indent=2))


def table(cpu_path: Path, gpu_path: Path) -> None:
    cpu, gpu = json.loads(cpu_path.read_text()), json.loads(gpu_path.read_text())
    if "gpu" not in gpu["device"] or "gpu" in cpu["device"]:
        raise SystemExit(f"{gpu_path} must be a run that saw a GPU and {cpu_path} one that did not")
    seconds = {"cpu": {(s["stage"], s["policy"]): s["seconds"] for s in cpu["stages"]},
               "gpu": {(s["stage"], s["policy"]): s["seconds"] for s in gpu["stages"]}}
    machine = gpu["device"]
    lines = [f"# A seed cell in smoke mode: GPU against CPU ({machine['gpu']}, {machine['cpus']} CPUs, "
             f"{machine['date']})", "",
             f"`python -m bench.costs.gpu_smoke --run` on one machine, twice from an empty artifact root: with "
             f"`CUDA_VISIBLE_DEVICES=` (torch on {cpu['device']['torch_threads']} CPU threads) and with its GPU. "
             f"Cell `{cpu['cell']}`, every policy the stand-in `{cpu['stand_in']}` on the transformers backend "
             "(vLLM cannot be installed on that worker); counts scaled down by adwm_core/smoke.py. Smoke numbers "
             "grade nothing. The backend runs the stand-in in bf16 on the GPU and in fp32 on the CPU, so its greedy "
             "actions, and with them the episodes, can differ between the two runs.", "",
             "| stage | CPU s | GPU s | CPU / GPU |", "|---|---|---|---|"]
    for key in dict.fromkeys([*seconds["gpu"], *seconds["cpu"]]):
        cpu_s, gpu_s = seconds["cpu"].get(key), seconds["gpu"].get(key)
        name = key[0] if key[1] is None else f"{key[0]} [{key[1]}]"
        ratio = f"{cpu_s / gpu_s:.1f}×" if cpu_s and gpu_s else "–"
        lines.append(f"| {name} | {'–' if cpu_s is None else f'{cpu_s:.1f}'} | "
                     f"{'–' if gpu_s is None else f'{gpu_s:.1f}'} | {ratio} |")
    if cpu["complete"] and gpu["complete"]:
        lines.append(f"| **whole cell** | {cpu['wall_s']:.1f} | {gpu['wall_s']:.1f} | {cpu['wall_s'] / gpu['wall_s']:.1f}× |")
    for name, facts in (("CPU", cpu), ("GPU", gpu)):
        if not facts["complete"]:
            lines.append(f"\nThe {name} run was stopped at its time limit after {facts['wall_s']:.0f} s; the stages "
                         "listed are those it finished.")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "gpu_smoke.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "gpu_smoke.json").write_text(json.dumps({"cpu": cpu, "gpu": gpu}, indent=2))
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, metavar="OUT", help="run the cell and write its stage times here")
    parser.add_argument("--cell", default="hotpotqa-dpo", help="seed cell (deployments/<cell>.yaml)")
    parser.add_argument("--stand-in", help="model folder every policy maps to")
    parser.add_argument("--make-stand-in", type=Path, metavar="DIR", help="write the random-weight stand-in here")
    parser.add_argument("--table", nargs=2, type=Path, metavar=("CPU", "GPU"), help="write the comparison table")
    args = parser.parse_args()
    if args.table:
        return table(*args.table)
    if args.make_stand_in:
        return make_stand_in(args.make_stand_in)
    if not args.run or not args.stand_in:
        parser.error("--run OUT and --stand-in DIR, or --table CPU.json GPU.json")
    if not (Path(args.stand_in) / "config.json").exists():
        parser.error(f"--stand-in {args.stand_in}: no model folder there (config.json missing); "
                     "write one with --make-stand-in DIR")
    try:
        cell_yaml = cell_config_path(args.cell)
    except FileNotFoundError as missing:
        parser.error(f"--cell: {missing}")
    run(args.run, cell_yaml, args.stand_in)


if __name__ == "__main__":
    sys.exit(main())
