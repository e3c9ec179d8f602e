"""evaluate-policy: score a new agent against a cell's already-trained world model — no
retraining of the world model, no environment episodes; ψ is trained for the new agent
when the cell reads imagined states through soft tokens (seconds on CPU)."""

from __future__ import annotations

import mlflow
from prefect import flow
from prefect.runtime import flow_run

from adwm_core.cell import CellConfig
from flows.cells import cell_config_path
from flows.evaluate_logs import agent_spec
from tasks import adwm, behaviour, policies, psi, world_model
from tasks.common import cell_run


@flow(name="evaluate-policy", log_prints=True)
def evaluate_policy(cell: str, model: str, label: str | None = None, backend: str = "transformers",
                    variant: str = "p0") -> str:
    """Ĵ of the agent ``model`` (a Hugging Face folder or name) over the cell's ε family; returns
    the estimates Parquet's path."""
    config = CellConfig.load(cell_config_path(cell))
    agent = agent_spec(model, backend=backend, label=label, variant=variant)
    config = config.model_copy(update={"evaluation": config.evaluation.model_copy(update={"policies": (agent,)})})
    with cell_run(config.name, f"evaluate {agent.name}") as parent:
        mlflow.log_params({"cell": config.name, "agent": agent.model, "flow_run_id": flow_run.get_id() or "local"})
        config, _ = policies.prepare_policies(config, parent, train=False)
        agent = config.evaluation.policies[0]  # a local: checkpoint resolved to its folder
        logged = behaviour.STAGE.finished(config)
        trained = world_model.STAGE.finished(config, inputs=(logged,))
        adapter = psi.psi(config, agent, logged, trained, parent) if config.adwm.reading == "soft_tokens" else None
        estimates = adwm.adwm(config, agent, logged, trained, adapter, parent)
    path = estimates.file(adwm.FILE)
    print(f"estimates of {agent.name}: {path}")
    return path
