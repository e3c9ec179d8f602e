"""The ``adwm`` command: the library's subcommands (adwm_core/cli.py) and ``adwm evaluate``,
which runs its stages in this process, or the tracked evaluate-logs flow where a Prefect server
is configured (Prefect and MLflow live here, not in adwm_core)."""

from __future__ import annotations

import argparse
import os
import sys

from adwm_core import cli as core

# adwm_core/policies/openai_backend.py's MODES, written here so that `adwm --help` loads no numpy
# (tests/test_cli.py holds the two equal); the evaluation's own imports load in _evaluate, after
# the arguments are checked
AGENT_MODES = ("completions", "chat")
# adwm_core/ope/statistics/recommend.py's PAIRS_SHOWN, written here for the same reason (tests/test_cli.py)
PAIRS_SHOWN = ("agents", "all")

EVALUATE_HELP = """\
Score your agent from your own logs: import the behaviour logs, train the environment's world
model on them (reused when the same logs and settings come again), and estimate your agent's
value Ĵ at each ε (π_e^ε: your agent, a uniformly random admissible action with probability ε)
by ADWM's imagined rollouts and by every classical estimator the logs can feed; prints first the
recommended estimate (one estimator chosen by the bench's measured errors, its interval and
verdicts calibrated on them), then Ĵ per estimator and ε, with its 95 % interval where that kind
held the truth at 0.80 or more of the bench's points. No environment is run: without ground
truth the estimates are ungraded.

  adwm evaluate --logs trajectories.jsonl --env webshop \\
      --agent-base-url http://127.0.0.1:8000/v1 --agent-model my-agent

Logs: a file or folder of episodes — JSONL, JSON (an array, an object of episodes, a wrapper
around a list), text transcripts, chat exports (Markdown), CSV or TSV tables of steps, each maybe
.gz —, a Hugging Face dataset saved with save_to_disk or in the local cache, or Parquet
(trajectories or a table of steps); a local file of another suffix needs --format; check how
they are read first with `adwm import LOGS --env ENV` (docs/your-logs.md). The agent: a model
behind an OpenAI-compatible endpoint (vLLM's server and most others), or with --agent-backend
a Hugging Face folder loaded in this process. Artifacts go to $ADWM_HOME/cells/<name>/. The
stages run in this process; where Prefect's settings name a server ($PREFECT_API_URL, or the
active profile's, e.g. after `prefect config set PREFECT_API_URL=...`) or with --tracked, they
run as the tracked flow evaluate-logs instead, in the Prefect UI and logged to MLflow."""


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    evaluate = sub.add_parser("evaluate", help="estimate your agents' values from your own behaviour logs",
                              description=EVALUATE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    evaluate.add_argument("--logs", required=True, help="behaviour logs: a file or folder of JSONL, JSON, text "
                          "transcripts, chat exports or CSV/TSV tables (maybe .gz), a dataset folder or name, Parquet "
                          "(see `adwm import`)")
    core.add_log_arguments(evaluate)
    evaluate.add_argument("--agent-model", action="append", default=[],
                          help="an agent: its model name at the endpoint, or a model folder with --agent-backend; "
                          "repeat it to score and rank several agents on one world model (default: $ADWM_AGENT_MODEL)")
    evaluate.add_argument("--agent-base-url", default=os.environ.get("ADWM_AGENT_BASE_URL"),
                          help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (…/v1/completions and "
                          "…/v1/chat/completions are read as …/v1; API key from $OPENAI_API_KEY; "
                          "default: $ADWM_AGENT_BASE_URL)")
    evaluate.add_argument("--agent-backend", choices=("transformers", "vllm"),
                          help="load --agent-model in this process instead of reaching an endpoint")
    evaluate.add_argument("--agent-tokenizer", help="tokenizer folder or cached hub name of an endpoint's model "
                          "(default: the model name)")
    evaluate.add_argument("--agent-mode", choices=AGENT_MODES,
                          help="completions (default; log-probs, so importance sampling runs) or chat")
    evaluate.add_argument("--concurrency", type=int, default=8, help="requests in flight to the endpoint (default 8)")
    evaluate.add_argument("--max-retries", type=int, default=5,
                          help="retries of a failed request (429, 5xx, connection), with backoff (default 5)")
    evaluate.add_argument("--timeout", type=float, default=120.0, help="seconds before a request is given up "
                          "(default 120)")
    evaluate.add_argument("--limit", type=int, metavar="N",
                          help="only the first N episodes of the logs: a quick try (its own cell, <name>-firstN)")
    evaluate.add_argument("--name", help="cell name for artifacts and tracking (default: logs-<file stem>)")
    evaluate.add_argument("--epsilons", default="0,0.25,0.5,0.75,1", help="ε levels (default 0,0.25,0.5,0.75,1)")
    evaluate.add_argument("--seed", type=int, default=0,
                          help="shift every seed of the run by this much: world model, ψ, ADWM's and the baselines' "
                          "seed lists (default 0: the recipe's own seeds; --set overrides it key by key)")
    evaluate.add_argument("--pairs", choices=PAIRS_SHOWN, default="agents",
                          help="which verdicts the recommended estimate lists: agents (default: the agents' pairs "
                          "at the same ε, and of the other pairs only those decided) or all (every pair; the report "
                          "lists all)")
    evaluate.add_argument("--output-path", help="write one JSON there: the estimates, the full config, library "
                          "versions and the commit")
    evaluate.add_argument("--log-samples", metavar="PATH", help="write ADWM's imagined episodes there as JSONL in the "
                          "logs' import format (each step: the observation read, the action, the imagined reward "
                          "and what answered it)")
    evaluate.add_argument("--live", type=int, default=0, metavar="K",
                          help="play K live episodes per agent and ε in the environment, and top ADWM up with them "
                          "(prediction-powered: PPI++); refused before any stage where the environment cannot run")
    evaluate.add_argument("--live-logs", metavar="FILE", help="live episodes of the agents played elsewhere (any "
                          "format --logs reads, each episode's 'policy' the agent's label; ε 0 unless they say), "
                          "instead of --live")
    evaluate.add_argument("--tracked", action="store_true",
                          help="run as the tracked Prefect flow evaluate-logs (in the Prefect UI, logged to MLflow); "
                          "the default where Prefect's settings name a server ($PREFECT_API_URL or the active "
                          "profile's), else the stages run in this process")
    evaluate.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                          help="a cell setting, e.g. --set world_model.steps=500 (repeatable; YAML values)")


def _evaluate(args: argparse.Namespace) -> int:
    models = args.agent_model or ([os.environ["ADWM_AGENT_MODEL"]] if os.environ.get("ADWM_AGENT_MODEL") else [])
    if not models:
        raise ValueError("name the agent: --agent-model <name at the endpoint or model folder> (repeatable), "
                         "or set $ADWM_AGENT_MODEL")
    base_url, mode = args.agent_base_url, args.agent_mode
    if base_url and args.agent_backend:
        raise ValueError("give --agent-base-url (an endpoint) or --agent-backend (a local folder), not both "
                         "(unset $ADWM_AGENT_BASE_URL to load a local folder)")
    if not base_url and not args.agent_backend:
        raise ValueError("say where the agent runs: --agent-base-url http://…/v1 (or $ADWM_AGENT_BASE_URL), or "
                         "--agent-backend transformers with --agent-model a model folder")
    for flag, path in (("--output-path", args.output_path), ("--log-samples", args.log_samples)):
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder and not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
            raise ValueError(f"{flag} {path}: no writable folder {folder} to write it in; create it or choose another "
                             "path (checked before any stage runs)")
    from adwm_core.endpoints import check_endpoint, check_tokenizer, endpoint

    if base_url:  # the agent's side first, in seconds: the endpoint answers, its tokenizer is at hand
        base_url, mode = endpoint(base_url, mode)
        check_endpoint(base_url)
        for model in dict.fromkeys([args.agent_tokenizer] if args.agent_tokenizer else models):
            check_tokenizer(model)  # it fits prompts to the context in either mode

    import json  # the evaluation's tools load once the agent and its endpoint are named

    import fsspec

    from adwm_core.api import agent, check_live, evaluation_cell, live_top_up, recommended_with_live, seed_overrides
    from adwm_core.cell import parse_assignments
    from adwm_core.data import ESTIMATES, ROLLOUTS, read_table
    from adwm_core.data.logs import inspect_logs
    from adwm_core.ope.answers import RANKED_BY
    from adwm_core.pipeline import stage
    from adwm_core.ope.statistics.recommend import BenchCalibration, withheld
    from adwm_core.ranking import PrintedInterval, rank_agents, ranking_lines
    from adwm_core.report import (cannot_tell_lines, interval_lines, not_applicable_lines, recommended_lines,
                                  topped_up_lines, trust_lines)

    epsilons = [float(e) for e in args.epsilons.split(",")]
    settings = parse_assignments(args.overrides)
    logs = core.log_source(args)
    live = None
    if args.live or args.live_logs:
        agents = [agent(model, base_url, backend=args.agent_backend) for model in models]
        live = check_live(args.env, args.task, args.live, args.live_logs, agents, epsilons)
        if args.live:
            settings.setdefault("ground_truth.episodes", args.live)
    print("\n".join(inspect_logs(logs, cell="import")[1].lines()) + "\n")  # bad logs are refused here, before Prefect
    overrides = {**seed_overrides(args.seed, settings), **settings}
    config = evaluation_cell(logs, args.env, models, base_url=base_url, backend=args.agent_backend,
                             tokenizer=args.agent_tokenizer, mode=mode or "completions", concurrency=args.concurrency,
                             max_retries=args.max_retries, timeout=args.timeout, task=args.task, name=args.name,
                             epsilons=epsilons, overrides=overrides, limit=args.limit)
    folder = _run(args, config, logs, base_url, mode, epsilons, overrides, models)
    files = stage("report").outputs
    with fsspec.open(f"{folder}/{files['curves']}") as f:
        curves = json.load(f)
    estimates = read_table(f"{folder}/{files['estimates']}", ESTIMATES)
    printed = PrintedInterval.of(curves.get("answers", {}).values())
    print("\n" + "\n".join(recommended_lines(curves, args.pairs)))
    if args.live or args.live_logs:
        for alone in (False, True):  # the combination, and beside it the same live episodes alone
            print("\n" + "\n".join(recommended_with_live(curves["recommended"], config, live, alone).lines(args.pairs)))
    coverage = BenchCalibration.shipped().interval_coverage(leave_out=config.name)
    print(f"Ĵ [95 % {'bootstrap interval' if printed.name == 'bootstrap' else f'interval: ADWM {printed.name}, the others bootstrap'}] "
          "per estimator and ε (each estimator's first seed; no ground truth: ungraded; an interval the bench "
          "found to hold J too rarely is withheld)")
    print("\n".join(interval_lines(estimates, coverage)))
    print("\n".join(not_applicable_lines(curves) + trust_lines(curves)))
    epsilon = min(epsilons)
    print("\nwhat the log cannot tell\n" + "\n".join(cannot_tell_lines(curves.get("answers", {}), epsilon)))
    if len(models) > 1:
        rollouts = read_table(f"{folder}/{files['rollouts']}", ROLLOUTS).to_pylist()
        ranked = rank_agents(rollouts, epsilon=epsilon, confidence=config.adwm.confidence,
                             n_resamples=config.adwm.n_bootstrap, printed=printed)
        print("\n" + "\n".join(ranking_lines(*ranked, RANKED_BY, epsilon, printed.name,
                                              withheld(RANKED_BY, coverage))))
    if args.live or args.live_logs:
        print("\n" + "\n".join(topped_up_lines(live_top_up(config, live), config.adwm.confidence)))
    print(f"\nreport   {folder}/{files['report']}\nplot     {folder}/{files['plot']}")
    return 0


def prefect_server_configured() -> str | None:
    """The Prefect API URL this process would use, None where its settings name no server:
    $PREFECT_API_URL, else Prefect's own resolution, so that a URL set with ``prefect config set``
    (the active profile) counts too. Prefect also reads .env, prefect.toml and pyproject.toml's
    [tool.prefect] in the working folder (Prefect 3, prefect/settings/sources.py). Each of those
    files is read as text first; only where one mentions a URL does Prefect (about 1 s of
    imports) resolve the setting."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    profiles = os.environ.get("PREFECT_PROFILES_PATH") or os.path.join(
        os.environ.get("PREFECT_HOME") or os.path.join("~", ".prefect"), "profiles.toml")
    mentions = ((profiles, "PREFECT_API_URL"), (".env", "PREFECT_API_URL"), ("prefect.toml", "url"),
                ("pyproject.toml", "tool.prefect"))
    if not any(word in _text(os.path.expanduser(path)) for path, word in mentions):
        return None
    from prefect.settings import get_current_settings

    return get_current_settings().api.url or None


def _text(path: str) -> str:
    """The file's text, empty where it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError:
        return ""


def _run(args: argparse.Namespace, config, logs, base_url: str | None, mode: str | None, epsilons: list[float],
         overrides: dict, models: list[str]) -> str:
    """The run's report folder: the tracked flow evaluate-logs where a Prefect server is configured
    (``prefect_server_configured``) or ``--tracked`` asks for it, else every stage in this process
    (``pipeline.run_all``, as the Python API runs them: the same keys, no Prefect or MLflow)."""
    if args.tracked or prefect_server_configured():
        from flows.evaluate_logs import evaluate_logs  # Prefect loads here, after the arguments are checked

        state = evaluate_logs(args.logs, args.env, models, agent_base_url=base_url, agent_backend=args.agent_backend,
                              agent_tokenizer=args.agent_tokenizer, agent_mode=mode or "completions",
                              read_as=logs.model_dump(exclude={"path"}), task=args.task, name=args.name,
                              epsilons=epsilons, overrides=overrides, limit=args.limit,
                              agent_concurrency=args.concurrency, agent_max_retries=args.max_retries,
                              agent_timeout=args.timeout, output_path=args.output_path, log_samples=args.log_samples,
                              return_state=True)
        return state.result()  # raises the failed stage's own error
    from adwm_core import pipeline
    from adwm_core.api import evaluation_line, write_outputs
    from adwm_core.progress import TerminalTracker
    from adwm_core.runnable import prepared

    print(evaluation_line(config, args.logs, args.limit, overrides)
          + "\nstages run in this process (no Prefect server configured: set $PREFECT_API_URL or the profile's, "
            "or pass --tracked, for the tracked flow)")
    config = prepared(config)  # the agents' weights, the GPU: checked before any stage, as the flow does
    folder = pipeline.run_all(config, log=print, tracker=TerminalTracker(config.name)).path
    write_outputs(config, folder, args.output_path, args.log_samples)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser, sub = core.build_parser()
    add_evaluate(sub)
    args = parser.parse_args(argv)
    if args.command != "evaluate":
        return core.run(args)
    try:
        return _evaluate(args)
    except (ValueError, FileNotFoundError, ConnectionError) as err:  # a CellConfigError is a ValueError
        print(f"adwm evaluate: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
