"""The ``adwm`` command: the library's subcommands (adwm_core/cli.py) and ``adwm evaluate``,
which runs the evaluate-logs flow (Prefect and MLflow live here, not in adwm_core)."""

from __future__ import annotations

import argparse
import sys

import json

import fsspec

from adwm_core import cli as core
from adwm_core.cell import CellConfigError, parse_assignments
from adwm_core.data import ESTIMATES, read_table
from adwm_core.report import interval_lines, not_applicable_lines, trust_lines

EVALUATE_HELP = """\
Score your agent from your own logs: import the behaviour logs, train the environment's world
model on them (reused when the same logs and settings come again), and estimate your agent's
value Ĵ at each ε (π_e^ε: your agent, a uniformly random admissible action with probability ε)
by ADWM's imagined rollouts and by every classical estimator the logs can feed; prints Ĵ with
its 95 % bootstrap interval per estimator and ε. No environment is run: without ground truth
the estimates are ungraded.

  adwm evaluate --logs trajectories.jsonl --env webshop \\
      --agent-base-url http://127.0.0.1:8000/v1 --agent-model my-agent

Logs: JSONL / ShareGPT conversations (one episode a line), a Hugging Face dataset saved with
save_to_disk or in the local cache, or the project's trajectories Parquet (README, "Your own
logs and agent"). The agent: a model behind an OpenAI-compatible endpoint (vLLM's server and
most others), or with --agent-backend a Hugging Face folder loaded in this process. Artifacts
go to $ADWM_HOME/cells/<name>/, tracking to MLflow, the run to Prefect, as for any cell."""


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    evaluate = sub.add_parser("evaluate", help="estimate your agent's value from your own behaviour logs",
                              description=EVALUATE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    evaluate.add_argument("--logs", required=True, help="behaviour logs: JSONL file, dataset folder or name, Parquet")
    evaluate.add_argument("--env", required=True, help="the environment the logs come from (see `adwm envs`)")
    evaluate.add_argument("--agent-model", required=True,
                          help="the agent: its model name at the endpoint, or a model folder with --agent-backend")
    evaluate.add_argument("--agent-base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 "
                          "(API key from $OPENAI_API_KEY)")
    evaluate.add_argument("--agent-backend", choices=("transformers", "vllm"),
                          help="load --agent-model in this process instead of reaching an endpoint")
    evaluate.add_argument("--agent-tokenizer", help="tokenizer folder or cached hub name of an endpoint's model "
                          "(default: the model name)")
    evaluate.add_argument("--agent-mode", choices=("completions", "chat"), default="completions",
                          help="completions (default; log-probs, so importance sampling runs) or chat")
    evaluate.add_argument("--format", dest="logs_format", choices=("jsonl", "hf", "parquet"),
                          help="format of --logs (default: from its suffix)")
    evaluate.add_argument("--preamble-turns", type=int, default=0, metavar="N",
                          help="turns opening every conversation that are no step (AgentTraj-L: 2, the instruction "
                          "and the agent's OK); the first gives the task description")
    evaluate.add_argument("--task", default="*", help="task type(s) of the environment (default: all)")
    evaluate.add_argument("--name", help="cell name for artifacts and tracking (default: logs-<file stem>)")
    evaluate.add_argument("--epsilons", default="0,0.25,0.5,0.75,1", help="ε levels (default 0,0.25,0.5,0.75,1)")
    evaluate.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                          help="a cell setting, e.g. --set world_model.steps=500 (repeatable; YAML values)")


def _evaluate(args: argparse.Namespace) -> int:
    from flows.evaluate_logs import evaluate_logs
    from tasks.report import CURVES, ESTIMATES_FILE, PLOT, REPORT

    if args.agent_base_url and args.agent_backend:
        raise ValueError("give --agent-base-url (an endpoint) or --agent-backend (a local folder), not both")
    if not args.agent_base_url and not args.agent_backend:
        raise ValueError("say where the agent runs: --agent-base-url http://…/v1, or --agent-backend transformers "
                         "with --agent-model a model folder")
    epsilons = [float(e) for e in args.epsilons.split(",")]
    state = evaluate_logs(args.logs, args.env, args.agent_model, agent_base_url=args.agent_base_url,
                          agent_backend=args.agent_backend, agent_tokenizer=args.agent_tokenizer,
                          agent_mode=args.agent_mode, logs_format=args.logs_format,
                          preamble_turns=args.preamble_turns, task=args.task, name=args.name,
                          epsilons=epsilons, overrides=parse_assignments(args.overrides), return_state=True)
    folder = state.result()  # raises the failed stage's own error
    with fsspec.open(f"{folder}/{CURVES}") as f:
        curves = json.load(f)
    print("\nĴ [95 % bootstrap interval] per estimator and ε (seed 0; no ground truth: ungraded)")
    print("\n".join(interval_lines(read_table(f"{folder}/{ESTIMATES_FILE}", ESTIMATES))))
    print("\n".join(not_applicable_lines(curves) + trust_lines(curves)))
    print(f"\nreport   {folder}/{REPORT}\nplot     {folder}/{PLOT}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser, sub = core.build_parser()
    add_evaluate(sub)
    args = parser.parse_args(argv)
    if args.command != "evaluate":
        return core.run(args)
    try:
        return _evaluate(args)
    except (ValueError, FileNotFoundError, ConnectionError, CellConfigError) as err:
        print(f"adwm evaluate: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
