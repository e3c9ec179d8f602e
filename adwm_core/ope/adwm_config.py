"""ADWM's inference settings (``AdwmConfig``) and the presets that fill them; no torch, so a
cell config can be checked without loading the model stack."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ..data import behaviour_rows

READINGS = ("soft_tokens", "retrieval", "none")
GUIDANCE = ("success_bank", "likelihood", "none", "auto")  # auto: success_bank where the log holds a success
UNKNOWN_ACTIONS = ("null", "unk")  # see WorldModel.action_ids
VALUE_ESTIMATES = ("reward_sum", "success_similarity")


PRESETS = {"paper": {"reading": "soft_tokens", "guidance": "success_bank", "logged_successors": False},
           "default": {"reading": "retrieval", "guidance": "auto", "logged_successors": True}}


@dataclass(frozen=True)
class AdwmConfig:
    """Inference settings; defaults from app:ope-rollout, except where ``preset`` fills a field
    left ``None`` (``PRESETS``): the ``default`` preset reads imagined states by ``retrieval`` —
    π_e reads the behaviour observation the world model judges its action against (a world
    model with text actions reads a_t in that observation) — the ``paper`` preset by ψ's soft
    tokens. Guidance: the paper's success bank; the default's ``auto`` is the success bank where
    a behaviour episode succeeded and no continuation guidance where none did (logs of agents
    that never succeed still get ``reward_sum``; ``success_similarity`` needs the bank). The
    default answers a (state, action) pair the log holds by a logged successor
    (``logged_successors``), the paper always by the diffusion model."""

    preset: str = "default"
    reading: str | None = None
    guidance: str | None = None
    logged_successors: bool | None = None  # logged (state, a_t) pairs answered from the log, not the diffusion model
    n_rollouts: int = 32
    horizon: int = 30  # H_max
    cfg_scale: float = 1.0  # λ, ω = 1 + λ
    alpha: float = 1.0
    eta_max: float = 0.5
    lookahead: int = 2  # h, look-ahead steps of the likelihood guidance
    lookahead_denoise: int = 5  # DDIM levels of each look-ahead transition
    guided_steps: int | None = None  # continuation guidance on the last this-many denoising steps (None: all)
    unknown_actions: str = "null"  # an action outside the vocabulary whose ⟨unk⟩ never trained: ∅, or "unk"
    gamma: float = 1.0  # discount of reward_sum (1: on the scale of undiscounted returns)
    snap: bool = False  # replace each imagined z_{t+1} by the latent of its nearest behaviour observation
    reference: bool = True  # also score π_e in the logged-successor reference world model (ope/reference.py)
    done_threshold: float = 0.5
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    n_bootstrap: int = 1000
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"ADWM config: preset={self.preset!r} (choose from {tuple(PRESETS)})")
        for name, value in PRESETS[self.preset].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        bad = []
        if self.reading not in READINGS:
            bad.append(f"reading={self.reading!r} (choose from {READINGS})")
        if self.unknown_actions not in UNKNOWN_ACTIONS:
            bad.append(f"unknown_actions={self.unknown_actions!r} (choose from {UNKNOWN_ACTIONS})")
        if not isinstance(self.logged_successors, bool):
            bad.append(f"logged_successors={self.logged_successors!r} (true or false)")
        if self.guidance not in GUIDANCE:
            bad.append(f"guidance={self.guidance!r} (choose from {GUIDANCE})")
        if self.guidance == "likelihood" and self.reading != "soft_tokens":
            bad.append(f"guidance='likelihood' with reading={self.reading!r} (the gradient of log π_e flows through "
                       "ψ's soft tokens: use reading='soft_tokens' or guidance='success_bank')")
        if self.guided_steps is not None and self.guided_steps < 0:
            bad.append(f"guided_steps={self.guided_steps} (must be ≥ 0, or None for all)")
        for name in ("n_rollouts", "horizon", "n_bootstrap", "lookahead", "lookahead_denoise"):
            if getattr(self, name) < 1:
                bad.append(f"{name}={getattr(self, name)} (must be ≥ 1)")
        for name in ("cfg_scale", "alpha", "eta_max"):
            if getattr(self, name) < 0:
                bad.append(f"{name}={getattr(self, name)} (must be ≥ 0)")
        if not 0 < self.gamma <= 1:
            bad.append(f"gamma={self.gamma} (must lie in (0, 1])")
        if not 0 < self.done_threshold < 1 or not 0 < self.confidence < 1:
            bad.append("done_threshold and confidence must lie in (0, 1)")
        if not self.seeds:
            bad.append("seeds=() (give at least one)")
        if bad:
            raise ValueError(f"ADWM config: {'; '.join(bad)}")

    def check_behaviour(self, trajectories: pa.Table) -> None:
        """Success-bank guidance (set explicitly; ``auto`` does without) reads the last observations
        of successful behaviour episodes: refuse a pool without one before the world model is
        trained on it."""
        steps = behaviour_rows(trajectories)
        if self.guidance == "success_bank" and not any(steps["success"].to_pylist()):
            episodes = len(set(steps["episode"].to_pylist()))
            raise ValueError(f"none of the {episodes} behaviour episodes succeeded, and success-bank guidance "
                             "(adwm.guidance) needs successful ones: use a stronger behaviour pool or more "
                             "episodes (for a local cell, pick checkpoints with bench/local_families.py), "
                             "or set adwm.guidance to 'auto' (unguided where no episode succeeded) or 'none'")
