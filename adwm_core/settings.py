"""The training stages' settings — world model (:class:`TrainConfig`, ``LossWeights``) and ψ
adapter (:class:`PsiConfig`) — in the one style of every stage's settings: frozen pydantic
models, modes as ``Literal``, bounds as field constraints, presets that fill what is left
unset, and no torch, so a cell config is checked before anything heavy loads. The
estimators' settings live in ope/settings.py (ADWM) and ope/classical/settings.py, outside the
world model's code fingerprint: a change to how π_e is scored never retrains a world model.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator
from typing_extensions import Self

from .validated import Settings

Prediction = Literal["eps", "z0"]  # the score network's output: ε (the paper) or z_0
ActionInput = Literal["ids", "text"]  # e(a) from an id table (the paper) or from the action's text
OutcomeInput = Literal["next_latent", "action"]  # reward/termination heads on (z_{t+1}, h̄_t) or (e(a_t), h̄_t)
Selection = Literal["heads_on_true", "fidelity"]  # the held-out key the kept checkpoint minimises


def filled_from_preset(data: Any, presets: dict[str, dict[str, Any]], what: str, skip: tuple[str, ...] = ()) -> Any:
    """Raw settings with every field left unset (or ``None``) taken from their ``preset``; a nested
    setting given in part (a dict where the preset has one) keeps the preset's other fields."""
    if not isinstance(data, dict):
        return data
    name = data.get("preset", "default")
    if name not in presets:
        raise ValueError(f"{what}: preset={name!r}; choose from {tuple(presets)}")
    preset = {k: v for k, v in presets[name].items() if k not in skip}
    unset = {k: v for k, v in preset.items() if data.get(k) is None}
    in_part = {k: {**v, **data[k]} for k, v in preset.items() if isinstance(v, dict) and isinstance(data.get(k), dict)}
    return {**data, **unset, **in_part}


class LossWeights(Settings):
    """The weights of Eq. wm-loss (DSM weighs 1)."""

    idm: float = 0.1
    bc: float = 0.1
    div: float = 0.05
    reward: float = 10.0
    done: float = 1.0


WORLD_MODEL_PRESETS = {
    "paper": {"prediction": "eps", "action_input": "ids", "outcome_input": "next_latent", "window": 8,
              "epochs": 50, "steps": None, "transitions": None, "selection": "heads_on_true", "word_match": False},
    "default": {"prediction": "z0", "action_input": "text", "outcome_input": "action", "window": 32,
                "epochs": None, "steps": None, "transitions": 50_000, "selection": "fidelity", "word_match": True},
}
BUDGETS = ("epochs", "steps", "transitions")  # one of them bounds world-model training
EVALUATION_ROUNDS = 50  # held-out evaluations over a budget in optimiser steps or transitions


def architecture_problems(action_input: str | None, word_match: bool | None, react_actions: bool) -> list[str]:
    """What is inconsistent in a world model's action reading: the one statement of these rules,
    for the training settings and for a saved model's config (model/world_model.py)."""
    bad = []
    if word_match and action_input != "text":
        bad.append(f"word_match=True needs action_input='text' (it marks the words of text actions), "
                   f"got action_input={action_input!r}")
    if react_actions and action_input == "text":
        bad.append("react_actions=True with action_input='text' (text actions read whole action strings; "
                   "the ReAct-type vocabulary is for action_input='ids')")
    return bad


class TrainConfig(Settings):
    """World-model training settings. Unset fields take the value of ``preset``
    (``WORLD_MODEL_PRESETS``); the budget is one of ``epochs``, ``steps`` (optimiser steps) or
    ``transitions`` (logged transitions drawn in all, whatever the episodes' length: training
    time is about proportional to it), and setting one drops the preset's others."""

    preset: Literal["paper", "default"] = "default"
    prediction: Prediction | None = None  # model/world_model.py
    action_input: ActionInput | None = None
    outcome_input: OutcomeInput | None = None
    window: int | None = Field(default=None, gt=0)  # transitions a window holds (cut to the longest logged episode)
    epochs: int | None = Field(default=None, gt=0)
    steps: int | None = Field(default=None, gt=0)
    transitions: int | None = Field(default=None, gt=0)
    selection: Selection | None = None
    word_match: bool | None = None  # text actions mark their words found in the observation (model/encoders.py)
    batch_size: int = Field(default=64, gt=0)
    lr: float = Field(default=3e-4, gt=0)
    final_lr_fraction: float = 0.1
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    success_upsample: int = Field(default=5, gt=0)
    heldout_fraction: float = Field(default=0.1, gt=0, lt=1)
    p_uncond: float = 0.1
    weights: LossWeights = LossWeights()
    reward_target: Literal["step", "to_go"] = "step"  # see data/windows.py: reward_scale
    react_actions: bool = False  # key actions by ReAct type (CellConfig: where the env declares them)
    seed: int = 0
    device: str = "auto"
    # K world models: member 0 on the training episodes, members 1..K−1 each on a bootstrap
    # resample of them; ADWM's interval then spans the members (ope/imagination/estimates.py)
    members: int = Field(default=1, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _from_preset(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = {name: data[name] for name in BUDGETS if data.get(name) is not None}
            if len(given) > 1:
                raise ValueError(f"world-model training config: {', '.join(f'{k}={v}' for k, v in given.items())}; "
                                 "give one training budget")
            if data.get("word_match") is None and data.get("action_input") not in (None, "text"):
                data = {**data, "word_match": False}  # the preset's word marks belong to text actions
            explicit_budget = any(data.get(name) is not None for name in BUDGETS)
        else:
            explicit_budget = False
        return filled_from_preset(data, WORLD_MODEL_PRESETS, "world-model training config",
                       BUDGETS if explicit_budget else ())

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        bad = architecture_problems(self.action_input, self.word_match, self.react_actions)
        if bad:
            raise ValueError(f"world-model training config: {'; '.join(bad)}")
        return self

    @property
    def rounds(self) -> int:
        """Held-out evaluations: one per epoch, else ``EVALUATION_ROUNDS`` (at most one per step)."""
        if self.epochs is not None:
            return self.epochs
        return min(EVALUATION_ROUNDS, self.steps) if self.steps is not None else EVALUATION_ROUNDS


class PsiConfig(Settings):
    """ψ-adapter training (app:psi-train)."""

    epochs: int = Field(default=20, gt=0)
    batch_size: int = Field(default=8, gt=1)
    lr: float = Field(default=1e-4, gt=0)
    temperature: float = Field(default=0.1, gt=0)
    mse_weight: float = Field(default=0.1, ge=0)
    heldout_fraction: float = Field(default=0.2, gt=0, lt=1)
    seed: int = 0
    device: str = "auto"
