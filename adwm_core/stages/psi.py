"""The ψ stage: an adapter for π_e on the behaviour pool's observations (app:psi-train)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..data import TRAJECTORIES, check_output, read_table
from ..model.world_model import WorldModel
from ..policies.loading import load_language_model
from ..settings import PsiConfig
from ..specs import PolicySpec
from ..training.psi import PsiResult, observation_texts, train_psi_adapter
from ..training.world_model import EpochCallback

if TYPE_CHECKING:
    from ..pipeline import StageRun


def run_psi(trajectories: str, world_model: str, policy: PolicySpec, out_dir: str, config: PsiConfig = PsiConfig(), *,
            on_epoch: EpochCallback | None = None, overwrite: bool = False) -> PsiResult:
    """The ψ stage: an adapter for π_e (a ``PolicySpec``) on the behaviour pool's observations,
    read through the trained world model at ``world_model``. π_e's input embeddings come from its
    weights, loaded with transformers whatever backend π_e acts with."""
    check_output(out_dir, overwrite=overwrite, hint="pass overwrite=True to retrain, or choose another folder")
    texts = observation_texts(read_table(trajectories, TRAJECTORIES))
    model = WorldModel.load(world_model)  # a missing checkpoint fails before the LLM loads
    options = dict(policy.options) if policy.backend == "transformers" else {}
    targets = load_language_model(policy.model, "transformers", **options).mean_input_embeddings(texts)
    return train_psi_adapter(model, texts, targets, out_dir, config, on_epoch=on_epoch, overwrite=overwrite)


def compute(run: StageRun) -> None:
    run_psi(run.input("behaviour", "trajectories"), run.input("world-model", "members"), run.resolved(run.policy),
            run.output("adapter"), run.cell.psi,
            on_epoch=lambda epoch, metrics: run.tracker.metrics({f"psi_{k}": v for k, v in metrics.items()}, step=epoch))
