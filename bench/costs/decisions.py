"""What ADWM's estimate costs in units that hold on any machine: π_e's decisions, their prompt
tokens and environment steps, against evaluating the same points live (issue 59).

`python -m bench.costs.decisions [--root DIR] [--set KEY=VALUE ...] CELL ...`: for each cell, its
stages finished under today's code in $ADWM_HOME, or those under ``DIR/cells/<cell>/<stage>/<key>/``
(another artifact root, stage folders found by name); ``--set`` (``adwm.*`` keys of the cell
YAML) measures a variant of ADWM's settings on the same stages (a row of its own):
- **ADWM**: its imagination under the cell's default is run again (ADWM alone, without the
  kNN-WM reference, every seed) with π_e behind the stage's memo and a counter: the decisions
  imagination asked, the share the memo answered, the calls that reached π_e's LLM and their
  prompt tokens (π_e's prompts, rendered as it renders them, counted by its own tokenizer);
- **live**: the cell's ground-truth episodes at the same points: environment steps, and π_e's
  calls, one per step that did not explore, expected as Σ (1 − ε) over the steps (the episodes
  do not record which steps explored), with their prompt tokens weighted alike.

Ratio: π_e calls of ADWM's estimate over live's for the points as each side runs them
(ADWM: every seed's rollouts; live: the cell's ground-truth episodes); per episode: the same at
equal episode counts. The ratio of calls is the figure that transfers: at the scale users run (7–8B agents on a GPU),
π_e's decisions dominate both sides (the paper's appendix puts ~70 % of its budget LLM-side).
The projection column scales the paper's live ground-truth time, 10–40 min per ε level
(app. "Hardware and compute budget"), by that ratio: a projection, not a measurement; the
one-off world model (30–90 min per environment there) comes on top.
→ bench/results/decisions.{md,json} (cells measured earlier keep their rows).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import pyarrow.compute as pc
import pyarrow.parquet as pq

from adwm_core.data import LOGPROBS, TRAJECTORIES, read_table
from adwm_core.data.behaviour_log import BehaviourLog
from adwm_core.model.world_model import WorldModel
from adwm_core.ope.classical.settings import BaselineConfig
from adwm_core.ope.imagination.driver import fqe_per_member
from adwm_core.ope.imagination.estimates import adwm_estimates
from adwm_core.ope.imagination.memo import MemoisedPolicy
from adwm_core.policies.loading import ModelCache
from adwm_core.policies.prompts import History, episode_histories
from bench.common import RESULTS, cell_config, evaluated_in_root, machine, stage_file
from bench.tables.heldout import parse_settings, slug, variant_path

PAPER_LIVE_MINUTES = (10, 40)  # the paper's ground-truth collection per cell and ε level, vLLM-served 8B π_e


class CountingPolicy:
    """π_e's LLM policy, counting the calls that reach it and their prompt tokens."""

    def __init__(self, policy) -> None:
        self.policy, self.calls, self.prompt_tokens = policy, 0, 0

    def act(self, histories: Sequence[History]):
        self.calls += len(histories)
        self.prompt_tokens += sum(prompt_tokens(self.policy, histories))
        return self.policy.act(histories)

    def __getattr__(self, name: str):
        return getattr(self.policy, name)


def prompt_tokens(policy, histories: Sequence[History]) -> list[int]:
    """Tokens of each history's prompt, rendered by π_e's template and counted by its tokenizer."""
    if not histories:
        return []
    return [len(ids) for ids in policy.lm.tokenizer(policy.prompts(histories))["input_ids"]]


def imagined(root: str | None, cell: str, policy) -> dict:
    """ADWM's decisions under the cell's ADWM settings, ADWM alone (module docstring)."""
    config = cell_config(cell)
    adwm = config.adwm.replace(reference=False)
    log_file, scores = (stage_file(root, cell, "behaviour", "trajectories.parquet"),
                        stage_file(root, cell, "logprobs", "logprobs.parquet"))
    fit_q = fqe_per_member(read_table(scores, LOGPROBS), scores, config.evaluation.epsilons,
                           BaselineConfig(gamma=adwm.gamma, fqe=config.handover_fqe)) if adwm.hands_over_to_fqe else None
    counter = CountingPolicy(policy)
    memo = MemoisedPolicy(counter)
    _, runs = adwm_estimates(WorldModel.load_ensemble(stage_file(root, cell, "world-model", "members")),
                             BehaviourLog(read_table(log_file, TRAJECTORIES), log_file), memo, cell=cell,
                             label="cost", epsilons=config.evaluation.epsilons, config=adwm, fit_q=fit_q)
    return {"episodes_per_point": adwm.n_rollouts * len(runs),  # every member imagines every seed
            "imagined_steps": int(sum(run.lengths.sum() for run in runs)), "decisions": memo.asked,
            "memo_share": memo.hit_rate, "calls": counter.calls, "prompt_tokens": counter.prompt_tokens,
            "environment_steps": 0}


def live(root: str | None, cell: str, policy, label: str) -> dict:
    """The ground truth's cost at the same points, π_e ``label``'s (module docstring)."""
    table = pq.read_table(stage_file(root, cell, "ground-truth", "episodes.parquet"))
    table = table.filter(pc.equal(table["policy"], label))
    rows = table.select(["policy", "epsilon", "episode", "t", "task_description", "observation", "action",
                         "admissible"]).to_pylist()
    episodes: dict = {}
    for row in sorted(rows, key=lambda r: (r["policy"], r["epsilon"], r["episode"], r["t"])):
        episodes.setdefault((row["policy"], row["epsilon"], row["episode"]), []).append(row)
    calls = tokens = 0.0
    for (_, epsilon, _), steps in episodes.items():
        histories = episode_histories(steps[0]["task_description"], [
            (s["observation"], s["action"], tuple(s["admissible"]) if s["admissible"] is not None else None)
            for s in steps])
        calls += (1 - epsilon) * len(histories)
        tokens += (1 - epsilon) * sum(prompt_tokens(policy, histories))
    points = {(p, e) for p, e, _ in episodes}
    return {"episodes_per_point": len(episodes) // len(points), "environment_steps": table.num_rows,
            "calls": calls, "prompt_tokens": tokens}


def measure(root: str | None, cell: str) -> dict:
    config = cell_config(cell)
    spec = evaluated_in_root(root, cell)
    policy = ModelCache().policy(spec, config.env.name)
    found = {"adwm": imagined(root, cell, policy), "live": live(root, cell, policy, spec.name)}
    found["calls_ratio"] = found["adwm"]["calls"] / found["live"]["calls"]
    found["tokens_ratio"] = found["adwm"]["prompt_tokens"] / found["live"]["prompt_tokens"]
    found["projected_minutes_per_epsilon"] = [found["calls_ratio"] * m for m in PAPER_LIVE_MINUTES]
    return {**found, "date": machine()["date"]}


SECTION = "## Cost in π_e decisions, prompt tokens and environment steps"


def section(results: dict) -> list[str]:
    """The cells' costs as a markdown section (also in performance.md)."""
    lines = [SECTION, "", __doc__.split("\n\n", 1)[1].rsplit("→", 1)[0].strip(), "",
             "| cell | measured | episodes per point (ADWM / live) | environment steps (live) | ADWM decisions asked "
             "(memo share) | π_e calls ADWM / live | ratio | per episode | prompt tokens ADWM / live | ratio | "
             "projected ADWM π_e min per ε at 8B |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cell, r in results.items():
        a, b = r["adwm"], r["live"]
        low, high = r["projected_minutes_per_epsilon"]
        per_episode = r["calls_ratio"] * b["episodes_per_point"] / a["episodes_per_point"]
        lines.append(f"| {cell} | {r['date']} | {a['episodes_per_point']} / {b['episodes_per_point']} | "
                     f"{b['environment_steps']} | {a['decisions']} ({a['memo_share']:.0%}) | {a['calls']} / "
                     f"{b['calls']:.0f} | {r['calls_ratio']:.2f} | {per_episode:.2f} | {a['prompt_tokens']} / "
                     f"{b['prompt_tokens']:.0f} | {r['tokens_ratio']:.2f} | {low:.1f}–{high:.1f} |")
    return lines


def write(results: dict) -> None:
    """bench/results/decisions.{md,json}, and the same section in performance.md in place of its last."""
    (RESULTS / "decisions.json").write_text(json.dumps({"machine": machine(), "cells": results}, indent=2))
    lines = ["# " + SECTION.removeprefix("## "), *section(results)[1:], "", f"Machine: `{json.dumps(machine())}`"]
    (RESULTS / "decisions.md").write_text("\n".join(lines) + "\n")
    performance = RESULTS / "performance.md"
    if performance.exists():
        text = performance.read_text().split("\n" + SECTION)[0].rstrip("\n")
        performance.write_text(text + "\n\n" + "\n".join(section(results)) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", help="another artifact root holding cells/<cell>/<stage>/<key>/ "
                                        "(default: the stages finished under today's code in $ADWM_HOME)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an ADWM setting of the cell YAML (adwm.*) to measure instead of the cell's own")
    parser.add_argument("cells", nargs="+")
    args = parser.parse_args()
    settings = parse_settings(args.set)
    if any(not key.startswith("adwm.") for key in settings) or (settings and args.root):
        raise SystemExit(f"--set takes ADWM settings (adwm.*) on the stages in $ADWM_HOME (no --root): {args.set}")
    path = RESULTS / "decisions.json"
    results = json.loads(path.read_text())["cells"] if path.exists() else {}
    for cell in args.cells:
        if settings:
            results[f"{cell} ({slug(settings)})"] = measure(None, variant_path(cell, settings))
        else:
            results[cell] = measure(args.root, cell)
        write(results)


if __name__ == "__main__":
    main()
