"""Ground truth: π_e^ε in the environment, every ε on the same episodes (one π_e per task);
the wall seconds of each ε level are logged to the stage's MLflow run."""

from __future__ import annotations

from prefect import task
from prefect.tasks import exponential_backoff

from adwm_core.cell import CellConfig
from adwm_core.specs import PolicySpec
from adwm_core.stages.collection import ground_truth_rollouts

from .common import Artifact, Stage, evaluation_slice, log_metrics, stage_progress

STAGE = Stage("ground-truth", lambda cell, policy: {"env": cell.env, "evaluation": evaluation_slice(cell, policy),
                                                    "ground_truth": cell.ground_truth}, per_policy=True)
EPISODES, SUMMARY = "episodes.parquet", "summary.parquet"


@task(name="ground-truth", task_run_name="ground-truth [{policy.label}]", retries=2,
      retry_delay_seconds=exponential_backoff(10))
def ground_truth(cell: CellConfig, policy: PolicySpec, parent_run: str | None) -> Artifact:
    settings = cell.ground_truth

    def build(folder: str) -> None:
        seconds: dict[float, float] = {}
        with stage_progress(cell.name, f"ground-truth episodes of {policy.label}") as progress:
            ground_truth_rollouts(cell.env, policy, settings.episodes, f"{folder}/{EPISODES}", f"{folder}/{SUMMARY}",
                                  cell=cell.name, epsilons=cell.evaluation.epsilons, seed=settings.seed,
                                  progress=progress, timings=seconds)
        log_metrics({f"seconds_eps_{eps:g}": s for eps, s in seconds.items()})

    return STAGE.run(cell, build, parent_run, policy=policy)
