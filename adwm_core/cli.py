"""Command line: ``adwm envs`` lists environments; ``adwm collect`` runs a real
episode collection and writes the trajectories Parquet; ``adwm import`` reads the user's logs,
checks them and prints how they were read, training nothing; ``adwm export-logs`` writes a
trajectories Parquet's behaviour episodes as JSONL conversations; ``adwm calibrate`` combines
ADWM's imagined episodes with a few live episodes of the same agents (ope/statistics/calibration.py).
``adwm evaluate`` (the whole job on the user's logs and agent) runs a Prefect flow and is added
by flows/cli.py."""

from __future__ import annotations

import argparse
import json
import sys

from pydantic import ValidationError

# what the parser needs, and nothing heavier: each command imports its own tools, so `--help`
# and a malformed argument are answered before numpy, pyarrow or torch load
from .envs import SPLITS, EnvironmentUnavailable, check_env_task, env_names
from .envs.registry import DEFAULT_LOCAL_ENV
from .specs import LOG_FIELDS, OPENING_FIELD, LogSource


def _collect(args: argparse.Namespace) -> int:
    import pyarrow.compute as pc

    from .collection import run_epsilon_family
    from .data import TRAJECTORIES, check_output, write_table
    from .envs.agents import EpsilonGoldAgent
    from .envs.episodes import EpisodeSpec
    from .envs.runner import EpisodeRunner
    from .paths import artifact_path
    from .specs import EnvSpec, check_epsilons

    epsilons = [float(e) for e in args.epsilons.split(",")]
    env_kwargs = json.loads(args.env_kwargs) if args.env_kwargs else {}
    out = args.out or artifact_path("collect", f"{args.env}-{args.task}", "trajectories.parquet")
    check_output(out, overwrite=args.overwrite, hint="pass --overwrite to replace it")
    if args.episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {args.episodes}")
    check_epsilons(epsilons)
    runner = EpisodeRunner(
        args.env, env_kwargs, n_workers=args.workers, envs_per_worker=args.envs_per_worker, max_steps=args.max_steps
    )  # checks the counts; no worker starts yet
    # checks the name, options and task before any worker starts
    instances = EnvSpec(args.env, args.task, env_kwargs, args.split).instances()[: args.episodes]
    specs = [EpisodeSpec(k, task, v, seed=k) for k, (task, v) in enumerate(instances)]
    timings: dict[float, float] = {}
    with runner:
        trajectories, summary = run_epsilon_family(
            runner, specs, EpsilonGoldAgent, epsilons, cell=f"{args.env}-{args.task}", policy="expert", timings=timings
        )
    write_table(trajectories, out, TRAJECTORIES, overwrite=args.overwrite)
    print(f"{args.env}/{args.task} ({args.split}), {len(instances)} episodes per ε, expert ε-greedy agent")
    print(f"{'ε':>5} {'success':>8} {'return':>7} {'steps':>6} {'steps/s':>8}")
    for row in summary.to_pylist():
        eps = row["epsilon"]
        steps = pc.sum(pc.equal(trajectories["epsilon"], eps)).as_py()
        print(
            f"{eps:>5.2f} {row['success_rate']:>8.2f} {row['mean_return']:>7.2f} "
            f"{steps / row['n_episodes']:>6.1f} {steps / timings[eps]:>8.0f}"
        )
    print(f"wrote {trajectories.num_rows} steps to {out}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from .data import TRAJECTORIES, read_table
    from .data.logs import export_jsonl

    n = export_jsonl(read_table(args.trajectories, TRAJECTORIES), args.out, overwrite=args.overwrite)
    print(f"wrote {n} behaviour episodes to {args.out}")
    return 0


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    """How to read the logs: the flags ``adwm import`` and ``adwm evaluate`` share."""
    parser.add_argument("--env", required=True, help="the environment the logs come from (see `adwm envs`)")
    parser.add_argument("--task", default="*", help="task type(s) of the environment, comma-separated (default: all)")
    parser.add_argument("--format", dest="logs_format", choices=("jsonl", "csv", "hf", "parquet"),
                        help="jsonl: a file or folder of JSONL, JSON, text transcripts or chat exports (maybe .gz); "
                             "csv: a CSV or TSV table of steps; hf: a saved or cached dataset; parquet: trajectories "
                             "or a table of steps (default: told by the path's suffix; a local file of another "
                             "suffix is refused until this says)")
    parser.add_argument("--fields", nargs="+", action="extend", default=[], metavar="KEY=SOURCE",
                        help="read KEY from the logs' SOURCE key, e.g. conversations=messages reward=score; KEY one of "
                             f"{', '.join(sorted({*LOG_FIELDS, OPENING_FIELD}))}")
    parser.add_argument("--preamble-turns", type=int, metavar="N", help="turns opening every conversation that are no "
                        "step (default: an instruction answered by a bare acknowledgement is found; 0: none)")
    parser.add_argument("--thoughts", choices=("fold", "step"), default="fold",
                        help="replies without an action: folded "
                        "into the next action's reasoning (default), or kept as think: steps")
    parser.add_argument("--agent-prefix", default="> ", metavar="PREFIX",
                        help="in text transcripts, the prefix of the agent's lines (default '> ')")
    parser.add_argument("--step-observation", choices=("before", "after"),
                        help="step rows: the observation is what the agent saw before the row's action (the default "
                             "reading) or the answer to it")
    parser.add_argument("--reward", dest="rewards", choices=("per-step", "cumulative"),
                        help="rewards per step as given, or a running score read as its differences (default: a "
                             "score that never goes down is read as running)")
    parser.add_argument("--allow-degenerate", action="store_true",
                        help="import logs whose steps nearly all take one action (refused by default)")
    parser.add_argument("--strip", nargs="+", action="extend", default=[], metavar="REGEX",
                        help="remove the observation lines this regular expression matches whole (harness text)")
    parser.add_argument("--outcome-line", metavar="REGEX",
                        help="text logs: the line that holds each episode's outcome, its first group the reward or "
                             "true/false, e.g. \"reward = (\\S+)\"")
    parser.add_argument("--success-line", metavar="REGEX",
                        help="text and chat logs: a line that marks a success (an episode without one is a failure), "
                             "e.g. \"Thank you for shopping\"")
    parser.add_argument("--max-score", type=float, metavar="N",
                        help="the score that finishes the game, for rewards given as points: rewards are read as "
                             "fractions of it, a success where the score reaches it (default: the logs' own Max Score)")
    parser.add_argument("--success-at", type=float, metavar="X",
                        help="an episode without a success flag succeeds where its return reaches X (or where the "
                             "number under --fields success=KEY does)")
    parser.add_argument("--split", help="the split of a dataset with several (default train)")


def log_source(args: argparse.Namespace) -> LogSource:
    """The logs the parsed ``add_log_arguments`` flags describe, their path's format told (a local
    file no reader takes is refused first, in a fraction of a second), their environment and task
    checked."""
    fields = {}
    for pair in args.fields:
        key, sep, value = pair.partition("=")
        if not (sep and key and value):
            raise ValueError(f"--fields {pair!r}: expected KEY=SOURCE, e.g. conversations=messages")
        fields[key] = value
    try:
        source = LogSource(args.logs, args.logs_format, fields=fields, split=args.split,
                         preamble_turns=args.preamble_turns, thoughts=args.thoughts, agent_prefix=args.agent_prefix,
                         step_observation=args.step_observation, rewards=args.rewards,
                         allow_degenerate=args.allow_degenerate, strip=tuple(args.strip),
                         outcome_line=args.outcome_line, success_line=args.success_line, max_score=args.max_score,
                         success_at=args.success_at).checked()
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise ValueError(f"the logs' reading flags: {problems}") from None
    check_env_task(args.env, args.task)
    return source


def _import(args: argparse.Namespace) -> int:
    source = log_source(args)  # a path no reader takes is refused before the readers load
    from .data.logs import inspect_logs

    _, summary = inspect_logs(source, cell="import")
    print("\n".join(summary.lines(args.show_steps)))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    import numpy as np

    from .data.logs import read_logs
    from .ope.statistics.calibration import linear_calibration, live_by_point, prediction_powered, read_imagined

    imagined = read_imagined(args.imagined)
    live = live_by_point(read_logs(LogSource(path=args.live), cell="live"), args.epsilon)
    missing = sorted(set(live) - set(imagined))
    if missing:
        raise ValueError(f"{args.live} holds live episodes of {missing}, but {args.imagined} imagined only "
                         f"{sorted(imagined)}: give each live episode the agent's label as its 'policy', and pass "
                         "--epsilon where the live episodes were played at an ε > 0")
    points = sorted(live)
    adwm = {p: float(np.mean([g for _, g in imagined[p]])) for p in points}
    print(f"{'policy':<24} {'ε':>5} {'ADWM':>9} {'k':>4}  PPI++ (live episodes rectify ADWM)  λ     starts imagined")
    for p in points:
        c = prediction_powered(*zip(*live[p]), *zip(*imagined[p]), confidence=args.confidence)
        print(f"{p[0]:<24} {p[1]:>5.2f} {adwm[p]:>9.3f} {len(live[p]):>4}  {c.value:>9.3f} [{c.low:.3f}, {c.high:.3f}]"
              f"  {c.power:.2f}  {c.matched:.0%}")
        if c.high == c.low:
            print(f"{'':<24} every live episode returned the same: the interval has no width to trust; run more")
    if len(points) >= 3:
        fits = linear_calibration([adwm[p] for p in points], [np.mean([g for _, g in live[p]]) for p in points],
                                  confidence=args.confidence, pointwise=False)
        print(f"\nADWM's estimates mapped onto the live means by a line (slope {fits[0].power:+.3f}; keeps ADWM's ranking)")
        for p, c in zip(points, fits):
            print(f"{p[0]:<24} {p[1]:>5.2f} {c.value:>9.3f} [{c.low:.3f}, {c.high:.3f}]")
    return 0


def build_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The ``adwm`` parser and its subcommands (flows/cli.py adds ``evaluate``)."""
    parser = argparse.ArgumentParser(prog="adwm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("envs", help="list the registered environments")
    collect = sub.add_parser("collect", help="run the expert ε-family in a real environment and store trajectories")
    env_name, task, env_kwargs = DEFAULT_LOCAL_ENV
    collect.add_argument("--env", default=env_name, help=f"environment name (default {env_name})")
    collect.add_argument("--task", default=task, help=f"task type (default {task})")
    collect.add_argument("--env-kwargs", default=json.dumps(env_kwargs), help="JSON options of the environment")
    collect.add_argument("--split", default="train", choices=SPLITS)
    collect.add_argument("--episodes", type=int, default=16, help="episodes per ε level")
    collect.add_argument("--epsilons", default="0,0.25,0.5,0.75,1")
    collect.add_argument("--max-steps", type=int, default=30)
    collect.add_argument("--workers", type=int, default=None, help="worker processes (default: CPU count)")
    collect.add_argument("--envs-per-worker", type=int, default=2)
    collect.add_argument("--out", default=None, help="Parquet path or fsspec URL (default under $ADWM_HOME)")
    collect.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    imports = sub.add_parser("import", help="read your logs, check them and print how they were read (layout, keys, "
                             "counts, the first episode), training nothing")
    imports.add_argument("logs", help="logs file (JSONL, JSON, text, Markdown chat export, CSV/TSV, Parquet; maybe "
                         ".gz), folder of such files, or dataset folder or name")
    add_log_arguments(imports)
    imports.add_argument("--show-steps", type=int, default=3, metavar="N",
                         help="how many steps of the first episode to print (default 3)")
    export = sub.add_parser("export-logs", help="write the behaviour episodes of a trajectories Parquet as JSONL "
                            "conversations (the format `adwm evaluate --logs` reads)")
    export.add_argument("trajectories", help="trajectories Parquet (e.g. a cell's behaviour artifact)")
    export.add_argument("out", help="JSONL path to write")
    export.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    calibrate = sub.add_parser("calibrate", help="combine ADWM's imagined episodes with a few live episodes of the "
                               "same agents: PPI++ per agent, and a line onto the live scale over three or more")
    calibrate.add_argument("imagined", help="imagined episodes JSONL (`adwm evaluate --log-samples`)")
    calibrate.add_argument("live", help="live episodes of the agents, in any format `adwm evaluate --logs` reads, "
                                        "each episode's policy the agent's label")
    calibrate.add_argument("--epsilon", type=float, default=0.0, help="ε of π_e^ε the live episodes played (default 0)")
    calibrate.add_argument("--confidence", type=float, default=0.95)
    return parser, sub


def _envs(args: argparse.Namespace) -> int:
    print("\n".join(env_names()))
    return 0


COMMANDS = {"envs": _envs, "collect": _collect, "import": _import, "export-logs": _export, "calibrate": _calibrate}


def run(args: argparse.Namespace) -> int:
    """Run a parsed core subcommand; expected errors print one line and return 2."""
    try:
        return COMMANDS[args.command](args)
    except (ValueError, KeyError, FileExistsError, FileNotFoundError, EnvironmentUnavailable) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"adwm {args.command}: error: {message}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    parser, _ = build_parser()
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
