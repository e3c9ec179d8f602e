"""Imagined episodes beside real ones: where ADWM's Ĵ parts from the truth.

For a cell whose flow has run (world model, ground truth), π_e^ε (the cell's first evaluated
policy) is rolled out in imagination with the cell's ADWM settings and one seed, and the
first imagined episodes of each requested ε are printed step by step — the observation π_e
read (a bank row), its action, who answered (the log or the world model), the reward and
termination — beside the first real ground-truth episodes of the same ε. A summary per ε
gives the imagined and real mean return and length and the share of imagined steps a logged
successor answered.

Usage: ``python -m bench.studies.imagined_episodes CELL [--epsilon 0 1] [--episodes 2] [--seed 0]
[--set FIELD=VALUE ...]`` (``--set`` changes ADWM settings, e.g. ``logged_successors=false``).
Prints to stdout; writes nothing.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from adwm_core.cell import parse_assignments
from adwm_core.data import TRAJECTORIES, read_table
from adwm_core.data.behaviour_log import BehaviourLog
from adwm_core.model.world_model import WorldModel
from adwm_core.ope.imagination.diffusion_transition import adwm_transition
from adwm_core.ope.imagination.rollouts import ImaginedRollouts
from adwm_core.ope.imagination.state_bank import StateBank
from bench.common import artifact, cell_config, evaluated_policy

WIDTH = 90


def line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= WIDTH else text[: WIDTH - 1] + "…"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cell")
    parser.add_argument("--epsilon", nargs="+", type=float, default=[0.0])
    parser.add_argument("--episodes", type=int, default=2, help="episodes printed per ε (imagined and real)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE", dest="changes")
    args = parser.parse_args()
    cell = cell_config(args.cell)
    changes = parse_assignments(args.changes)
    trajectories = artifact(cell, "behaviour").file("trajectories")
    model = WorldModel.load(artifact(cell, "world-model").file("members"))
    spec, llm, soft, config = evaluated_policy(cell, cell.adwm.preset)
    config = config.replace(**changes)
    bank = StateBank.from_log(BehaviourLog(read_table(trajectories, TRAJECTORIES)), model)
    imagination = ImaginedRollouts(bank, config, model.diffusion.n_steps)
    run = imagination.run(soft or llm, adwm_transition(model, bank, config), args.epsilon, args.seed)

    real = read_table(artifact(cell, "ground-truth").file("episodes"), TRAJECTORIES).to_pylist()
    real_episodes: dict[float, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in sorted(real, key=lambda r: (r["epsilon"], r["episode"], r["t"])):
        real_episodes[row["epsilon"]][row["episode"]].append(row)
    imagined: dict[int, list] = defaultdict(list)
    for step in run.steps:
        imagined[step.rollout].append(step)

    print(f"{cell.name}: π_e {spec.name}, ADWM {config}\n")
    for epsilon in args.epsilon:
        mine = [r for r in imagined if run.epsilons[r] == epsilon]
        logged = [s.source == "log" for r in mine for s in imagined[r]]
        episodes = list(real_episodes[epsilon].values())
        print(f"=== ε = {epsilon}: imagined return {run.values('reward_sum', epsilon).mean():.3f}, "
              f"length {run.lengths[run.epsilons == epsilon].mean():.1f}, answered by the log {np.mean(logged):.2f} | "
              f"real return {np.mean([sum(s['reward'] for s in e) for e in episodes]):.3f}, "
              f"length {np.mean([len(e) for e in episodes]):.1f} ({len(episodes)} episodes)")
        for r in mine[: args.episodes]:
            print(f"--- imagined rollout {r}")
            for s in imagined[r]:
                print(f"  t={s.t:<2} {s.source:<7} r={s.reward:+.2f}{' done' if s.done else '     '} "
                      f"a={s.action!r}\n        o={line(bank.texts[s.observation])}")
        for e in episodes[: args.episodes]:
            print(f"--- real episode {e[0]['episode']}")
            for s in e:
                print(f"  t={s['t']:<2}       r={s['reward']:+.2f}{' done' if s['done'] else '     '} a={s['action']!r}\n"
                      f"        o={line(s['observation'])}")
        print()


if __name__ == "__main__":
    main()
