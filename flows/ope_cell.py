"""ope-cell: every stage of one cell, independent branches concurrently (README, 'Orchestration').

    policies ─┬─> behaviour ─┬─> log-probs ───────────────┬─> baselines ─┐
              │              └─> world model ─┬───────────┘              ├─> report
              │                               └─> ψ ─> ADWM ─────────────┤
              └─> ground truth ──────────────────────────────────────────┘

Stages right of behaviour and world model (and ground truth) run once per π_e of the cell.
Behaviour data is collected live, or imported from the user's logs (``behaviour.logs``;
flows/evaluate_logs.py builds such a cell from the command line).
"""

from __future__ import annotations

import mlflow
import yaml
from prefect import flow
from prefect.runtime import flow_run

from adwm_core.cell import CellConfig
from adwm_core.policies.local_models import smollm2_dir
from adwm_core.smoke import smoke_cell
from flows.cells import cell_config_path
from flows.runners import cell_task_runner
from tasks import adwm, baselines, behaviour, ground_truth, logprobs, policies, psi, report, world_model
from tasks.common import cell_run


@flow(name="ope-cell", log_prints=True, task_runner=cell_task_runner())
def ope_cell(cell: str = "local-simonsays", smoke: bool = False, stand_in: str | None = None) -> str:
    """Run cell ``cell`` (a name under deployments/ or a YAML path); returns the report's folder.
    ``smoke``: the cell as ``<cell>-smoke``, with stand-in models (``stand_in``, default
    SmolLM2-135M-Instruct), on CPU, scaled to minutes (adwm_core/smoke.py)."""
    config, overlay = load_cell(cell, smoke, stand_in)
    if overlay:
        print(f"smoke overlay of {cell}:\n{yaml.safe_dump(overlay, sort_keys=False)}")
    return run_cell(config, smoke_overlay=overlay)


def load_cell(cell: str, smoke: bool = False, stand_in: str | None = None) -> tuple[CellConfig, dict | None]:
    """The cell's config as written, or with the smoke overlay (and the overlay) when ``smoke``."""
    if not smoke:
        if stand_in is not None:
            raise ValueError(f"stand_in={stand_in!r} only applies in smoke mode (smoke=True)")
        return CellConfig.load(cell_config_path(cell)), None
    return smoke_cell(cell_config_path(cell), stand_in or smollm2_dir())


def run_cell(config: CellConfig, smoke_overlay: dict | None = None) -> str:
    """Every stage of ``config``, inside the calling flow run; returns the report's folder."""
    with cell_run(config.name, flow_run.get_name() or config.name) as parent:
        mlflow.log_params({"cell": config.name, "flow_run_id": flow_run.get_id() or "local"})
        mlflow.log_dict(config.model_dump(mode="json"), "cell_config.json")
        if smoke_overlay:
            mlflow.set_tag("smoke", "true")
            mlflow.log_dict(smoke_overlay, "smoke_overlay.json")
        config, _ = policies.prepare_policies(config, parent)
        targets = config.evaluation.policies
        truths = [ground_truth.ground_truth.submit(config, p, parent) for p in targets] if config.ground_truth else []
        logged = behaviour.behaviour_data(config, parent)
        logps = [logprobs.logprobs.submit(config, p, logged, parent) for p in targets]
        model = world_model.world_model(config, logged, parent)
        soft = config.adwm.reading == "soft_tokens"
        adapters = [psi.psi.submit(config, p, logged, model, parent) if soft else None for p in targets]
        imagined = [adwm.adwm.submit(config, p, logged, model, a, parent) for p, a in zip(targets, adapters)]
        classical = [baselines.baselines.submit(config, p, logged, lp, model, parent) for p, lp in zip(targets, logps)]
        # .result() raises a failed stage's own error, after every branch was started
        result = report.report(config, [t.result() for t in truths], [f.result() for f in imagined],
                               [f.result() for f in classical], parent)
    print(f"report: {result.file(report.REPORT)}")
    return result.path


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Run one cell's flow here (README, 'Running it').")
    parser.add_argument("cell", nargs="?", default="local-simonsays", help="a name under deployments/ or a YAML path")
    parser.add_argument("--smoke", action="store_true", help="stand-in models, CPU, minutes (cell <cell>-smoke)")
    parser.add_argument("--stand-in", help="model folder every policy maps to in smoke mode (default SmolLM2-135M)")
    args = parser.parse_args()
    if args.stand_in and not args.smoke:
        parser.error("--stand-in only applies with --smoke")
    state = ope_cell(args.cell, smoke=args.smoke, stand_in=args.stand_in, return_state=True)
    print(report.closing_screen(state.result(), str(state.state_details.flow_run_id)))
