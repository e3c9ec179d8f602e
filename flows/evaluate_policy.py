"""evaluate-policy: score a new agent against a cell's already-trained world model — no
retraining of the world model, no environment episodes; ψ is trained for the new agent
when the cell reads imagined states through soft tokens (seconds on CPU), and its greedy
actions at the logged steps extracted where ADWM hands off-log pairs to FQE (no log-probs). It
imagines ADWM alone: the kNN-WM reference, which the cell's flow scores beside it to grade it,
would double the rollouts (``reference=True`` adds its rows)."""

from __future__ import annotations

import mlflow
from prefect import flow
from prefect.runtime import flow_run

from adwm_core import pipeline
from adwm_core.api import agent as agent_spec
from adwm_core.cell import CellConfig
from adwm_core.specs import PolicySpec
from flows.cells import cell_config_path
from tasks.common import cell_run
from tasks.policies import prepare_policies
from tasks.stages import call

FINISHED = ("behaviour", "world-model")  # the cell's flow made them; evaluate-policy trains nothing of the cell


def scoring_config(cell: str, agent: PolicySpec, reference: bool = False) -> CellConfig:
    """The cell's config as evaluate-policy scores ``agent``: with the kNN-WM reference or without,
    the hand-over's greedy actions from the greedy-action stage (no log-prob is scored: nothing
    here forms an importance weight)."""
    config = CellConfig.load(cell_config_path(cell))
    return config.replace(adwm=config.adwm.replace(reference=reference, handover_actions="greedy")).with_evaluated(agent)


@flow(name="evaluate-policy", log_prints=True)
def evaluate_policy(cell: str, model: str, label: str | None = None, backend: str = "transformers",
                    variant: str = "p0", reference: bool = False) -> str:
    """Ĵ of the agent ``model`` (a Hugging Face folder or name) over the cell's ε family; returns
    the estimates Parquet's path. ``reference``: the kNN-WM reference's rows as well."""
    agent = agent_spec(model, backend=backend, label=label, variant=variant)
    config = scoring_config(cell, agent, reference)
    for stage in FINISHED:
        pipeline.finished(config, stage)  # names the flow that makes it, before any work
    with cell_run(config.name, f"evaluate {agent.name}") as parent:
        mlflow.log_params({"cell": config.name, "agent": agent.model, "flow_run_id": flow_run.get_id() or "local"})
        config = prepare_policies(config, environment=False)
        agent = config.evaluation.policies[0]  # with its GPU share on a GPU worker
        for step in pipeline.plan(config, targets=["adwm"], given=FINISHED):
            estimates = call(step.name, config, parent, step.policy)
    path = estimates.file("estimates")
    print(f"estimates of {agent.name}: {path}")
    return path
