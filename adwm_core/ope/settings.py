"""ADWM's inference settings (:class:`AdwmConfig`), in the style of adwm_core/settings.py. Apart
from the training settings, and from the baselines' (ope/classical/settings.py), so that the code
fingerprints of the world-model and baselines stages do not read them: a change here reruns
the ADWM stage alone.
"""

from __future__ import annotations

from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, model_validator
from typing_extensions import Self

from ..data import behaviour_rows
from ..settings import filled_from_preset
from ..validated import Settings
from .classical.settings import FQEConfig

Reading = Literal["soft_tokens", "retrieval", "none"]  # how π_e reads an imagined state
Guidance = Literal["success_bank", "likelihood", "none", "auto"]  # auto: success_bank where the log holds a success
# what answers a pair the log never took (ope/imagination/diffusion_transition.py: adwm_transition)
OffLog = Literal["diffusion", "carry_over", "fqe", "carry_over_fqe"]
CarryOverLevel = Literal["signature", "template"]  # ope/imagination/carry_over.py: LEVELS
Sampler = Literal["ancestral", "ddim"]  # ope/imagination/diffusion_transition.py: DiffusionTransition.sample
UnknownActions = Literal["null", "unk"]  # see WorldModel.action_ids
# the interval of reward_sum (ope/statistics/bounds.py): the imagined returns' spread, the identified bounds,
# the spread widened by a shared off-log error sized inside the log (ope/imagination/held_out.py), or the
# spread of the default refitted over resampled logs (ope/imagination/refits.py)
Interval = Literal["bootstrap", "bounds", "calibrated", "refits"]


# paper: app:ope-rollout as written; diffusion: the default of 2026-11-24 to -26 (logged pairs from
# the log, the others from the diffusion model); carry_over: the default of 2026-11-26 (off-log
# pairs carried over by their action's signature first, the rest from the diffusion model);
# carry_over_fqe: the default of 2026-11-26 (carried over by signature, the rest handed over to the
# baselines' FQE: docs/notebook.md, "Carry-over, then FQE"), over 3 seeds instead of the paper's 5 (docs/notebook.md, "The
# rollout budget"); default: the same with the hand-over's Q̂ fitted by fitted Q iteration on clipped
# targets (chosen 2026-11-26 on the six development cells: docs/notebook.md, "A hand-over Q̂ that does not run away")
FIVE_SEEDS = (0, 1, 2, 3, 4)
FITTED_Q_ITERATION = {"epochs": 40, "target_every": 2, "clip_targets": True}  # 20 rounds on fixed, clipped targets
# rollouts per seed under the default: half the paper's M = 32 asks π_e about half as often, at the
# default's accuracy on the development cells (docs/notebook.md, "Half the rollouts", issue 59)
DEFAULT_ROLLOUTS = 16
ADWM_PRESETS = {"paper": {"reading": "soft_tokens", "guidance": "success_bank", "logged_successors": False,
                          "off_log": "diffusion", "sampler": "ancestral", "seeds": FIVE_SEEDS},
                "diffusion": {"reading": "retrieval", "guidance": "auto", "logged_successors": True,
                              "off_log": "diffusion", "sampler": "ancestral", "seeds": FIVE_SEEDS},
                "carry_over": {"reading": "retrieval", "guidance": "auto", "logged_successors": True,
                               "off_log": "carry_over", "sampler": "ddim", "seeds": FIVE_SEEDS},
                "carry_over_fqe": {"reading": "retrieval", "guidance": "auto", "logged_successors": True,
                                   "off_log": "carry_over_fqe", "sampler": "ddim", "seeds": (0, 1, 2)},
                "default": {"reading": "retrieval", "guidance": "auto", "logged_successors": True,
                            "off_log": "carry_over_fqe", "sampler": "ddim", "seeds": (0, 1, 2),
                            "handover_fqe": FITTED_Q_ITERATION, "n_rollouts": DEFAULT_ROLLOUTS}}
VALUE_ESTIMATES = ("reward_sum", "success_similarity")


class AdwmConfig(Settings):
    """Inference settings; defaults from app:ope-rollout, except where ``preset`` fills a field
    left unset (``ADWM_PRESETS``): the ``default`` preset reads imagined states by ``retrieval``
    — π_e reads the behaviour observation the world model judges its action against (a world
    model with text actions reads a_t in that observation) — the ``paper`` preset by ψ's soft
    tokens. Guidance: the paper's success bank; the default's ``auto`` is the success bank where
    a behaviour episode succeeded and no continuation guidance where none did (logs of agents
    that never succeed still get ``reward_sum``; ``success_similarity`` needs the bank). The
    default answers a (state, action) pair the log holds by a logged successor
    (``logged_successors``) and one it never took by a logged transition of the same action
    signature (ope/imagination/carry_over.py); where the log holds none the rollout ends with FQE's Q̂ of π_e^ε
    there (``off_log: carry_over_fqe``, ope/imagination/value_handover.py; the stage then reads π_e's greedy actions
    at the logged steps, ``handover_actions``, and fits FQE under ``handover_fqe``).
    Q̂ is fitted by fitted Q iteration on targets clipped to the logged returns-to-go
    (``handover_fqe``); the ``carry_over_fqe`` preset fits it as the FQE baseline is fitted. The
    ``carry_over`` preset answers those last pairs by the diffusion model instead, the
    ``diffusion`` preset every off-log pair, the paper every pair. The default imagines
    ``DEFAULT_ROLLOUTS`` rollouts per seed, the other presets the paper's M = 32."""

    preset: Literal["paper", "diffusion", "carry_over", "carry_over_fqe", "default"] = "default"
    reading: Reading | None = None
    guidance: Guidance | None = None
    logged_successors: bool | None = None  # logged (state, a_t) pairs answered from the log, not the diffusion model
    off_log: OffLog | None = None  # the rest: the diffusion model, carried over by signature first (carry_over.py),
    # carried over by signature and the rest handed over to FQE's Q̂ (carry_over_fqe),
    # or handed over to FQE's Q̂ (value_handover.py; the stage then reads π_e's greedy actions)
    # where the hand-over's FQE reads π_e's greedy action at each logged step: the log-prob stage (a
    # cell's flow runs it for the baselines anyway) or the greedy-action stage, which scores nothing
    # (stages/greedy.py; evaluate-policy)
    handover_actions: Literal["logprobs", "greedy"] = "logprobs"
    # the hand-over's FQE settings (the default preset: FITTED_Q_ITERATION); None: the baselines' (baselines.fqe)
    handover_fqe: FQEConfig | None = None
    carry_over_levels: tuple[CarryOverLevel, ...] = Field(default=("signature",), min_length=1)  # matched in turn
    # where a carried-over answer may come from: any episode of the log (preferring the same task
    # description, then the same step), or only episodes of the same task description (the same instance)
    carry_over_within: Literal["log", "instance"] = "log"
    n_rollouts: int = Field(default=32, ge=1)  # M per seed (app:ope-rollout); the default preset: DEFAULT_ROLLOUTS
    horizon: int = Field(default=30, ge=1)  # H_max
    cfg_scale: float = Field(default=1.0, ge=0)  # λ, ω = 1 + λ
    alpha: float = Field(default=1.0, ge=0)
    eta_max: float = Field(default=0.5, ge=0)
    lookahead: int = Field(default=2, ge=1)  # h, look-ahead steps of the likelihood guidance
    lookahead_denoise: int = Field(default=5, ge=1)  # DDIM levels of each look-ahead transition
    guided_steps: int | None = Field(default=None, ge=0)  # guidance on the last this-many denoising steps (None: all)
    unknown_actions: UnknownActions = "null"  # an action outside the vocabulary whose ⟨unk⟩ never trained: ∅, or "unk"
    gamma: float = Field(default=1.0, gt=0, le=1)  # discount of reward_sum (1: on the scale of undiscounted returns)
    snap: bool = False  # replace each imagined z_{t+1} by the latent of its nearest behaviour observation
    reference: bool = True  # also score π_e in the logged-successor reference world model (ope/imagination/transitions.py)
    done_threshold: float = Field(default=0.5, gt=0, lt=1)
    # how the diffusion model draws z_{t+1}: the K-level reverse process, or few levels with DDIM's η
    sampler: Sampler | None = None
    ddim_levels: int = Field(default=10, ge=1)  # levels of the ddim sampler, from the rollout's own z_K
    ddim_eta: float = Field(default=1.0, ge=0, le=1)  # its η: 1 ancestral over those levels, 0 deterministic DDIM
    seeds: tuple[int, ...] | None = Field(default=None, min_length=1)  # each fixes every draw of one run of M rollouts
    n_bootstrap: int = Field(default=1000, ge=1)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    interval: Interval = "bootstrap"
    held_out_groups: int = Field(default=20, ge=2)  # groups of held-out actions sizing the calibrated interval
    refits: int = Field(default=20, ge=2)  # refits over resampled logs of the interval 'refits'

    @model_validator(mode="before")
    @classmethod
    def _from_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("logged_successors") is False and data.get("off_log") is None:
            data = {**data, "off_log": "diffusion"}  # every pair to the model: the only off-log answer that fits
        return filled_from_preset(data, ADWM_PRESETS, "ADWM config")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.guidance == "likelihood" and self.reading != "soft_tokens":
            raise ValueError(f"ADWM config: guidance='likelihood' with reading={self.reading!r} (the gradient of "
                             "log π_e flows through ψ's soft tokens: use reading='soft_tokens' or "
                             "guidance='success_bank')")
        if self.interval in ("calibrated", "refits") and not self.hands_over_to_fqe:
            what = {"calibrated": "grades the hand-over's answers inside the log",
                    "refits": "refits the hand-over's Q̂ on each resampled log"}[self.interval]
            raise ValueError(f"ADWM config: interval={self.interval!r} {what}, and off_log={self.off_log!r} hands "
                             "nothing over: use off_log='carry_over_fqe' (the default) or another interval")
        if self.off_log != "diffusion" and not self.logged_successors:
            raise ValueError(f"ADWM config: off_log={self.off_log!r} with logged_successors=False (answering the pairs "
                             "the log never took from the log or from FQE answers the logged ones from the log too: "
                             "set logged_successors=True, or off_log='diffusion')")
        return self

    @property
    def hands_over_to_fqe(self) -> bool:
        """Off-log pairs (those no logged outcome answers) end their rollout with FQE's Q̂: the stage
        then fits FQE on π_e's greedy actions at the logged steps (``off_log``: ``fqe`` or ``carry_over_fqe``)."""
        return self.off_log in ("fqe", "carry_over_fqe")

    def check_behaviour(self, trajectories: pa.Table) -> None:
        """Success-bank guidance (set explicitly; ``auto`` does without) reads the last observations
        of successful behaviour episodes: refuse a pool without one before the world model is
        trained on it."""
        steps = behaviour_rows(trajectories)
        if self.guidance == "success_bank" and not any(steps["success"].to_pylist()):
            episodes = len(set(steps["episode"].to_pylist()))
            raise ValueError(f"none of the {episodes} behaviour episodes succeeded, and success-bank guidance "
                             "(adwm.guidance) needs successful ones: use a stronger behaviour pool or more "
                             "episodes (for a local cell, pick checkpoints with bench/tables/local_families.py), "
                             "or set adwm.guidance to 'auto' (unguided where no episode succeeded) or 'none'")
