"""ope-cell: every stage of one cell, independent branches concurrently (DESIGN.md, 'Stages of a cell').

    policies ─┬─> behaviour ─┬─> log-probs ───────────────┬─> baselines ─┐
              │              └─> world model ─┬───────────┘              ├─> report
              │                               └─> ψ ─> ADWM ─────────────┤
              └─> ground truth ──────────────────────────────────────────┘
"""

from __future__ import annotations

import mlflow
from prefect import flow
from prefect.runtime import flow_run

from adwm_core.cell import CellConfig
from flows.cells import cell_config_path
from tasks import adwm, baselines, behaviour, ground_truth, logprobs, policies, psi, report, world_model
from tasks.common import cell_run


@flow(name="ope-cell", log_prints=True)
def ope_cell(cell: str = "local-simonsays") -> str:
    """Run cell ``cell`` (a name under deployments/ or a YAML path); returns the report's folder."""
    config = CellConfig.load(cell_config_path(cell))
    with cell_run(config.name, flow_run.get_name() or config.name) as parent:
        mlflow.log_params({"cell": config.name, "flow_run_id": flow_run.get_id() or "local"})
        mlflow.log_dict(config.model_dump(mode="json"), "cell_config.json")
        config, _ = policies.prepare_policies(config, parent)
        truth = ground_truth.ground_truth.submit(config, parent)
        logged = behaviour.collect(config, parent)
        logps = logprobs.logprobs.submit(config, logged, parent)
        model = world_model.world_model(config, logged, parent)
        adapter = psi.psi.submit(config, logged, model, parent) if config.adwm.reading == "soft_tokens" else None
        imagined = adwm.adwm.submit(config, logged, model, adapter, parent)
        classical = baselines.baselines.submit(config, logged, logps, model, parent)
        # .result() raises a failed stage's own error, after every branch was started
        result = report.report(config, truth.result(), imagined.result(), classical.result(), parent)
    print(f"report: {result.file(report.REPORT)}")
    return result.path


if __name__ == "__main__":
    import sys

    import fsspec

    folder = ope_cell(sys.argv[1] if len(sys.argv) > 1 else "local-simonsays")
    with fsspec.open(f"{folder}/{report.REPORT}", "r") as f:
        print(f.read())
