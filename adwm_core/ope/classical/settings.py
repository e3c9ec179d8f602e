"""The COBS baselines' settings (:class:`BaselineConfig`, :class:`FQEConfig`), in the style of
adwm_core/settings.py; a module of their own so that a change to ADWM's settings
(ope/settings.py) leaves the baselines stage's code fingerprint, and its artifacts, alone.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...validated import Settings

EstimatorName = Literal["DM", "FQE", "IS", "PDIS", "WIS", "WPDIS", "DR", "WDR"]  # ope/classical/estimators.py
IntervalName = Literal["hoeffding", "bernstein", "t"]  # ope/statistics/intervals.py: CONCENTRATION


class FQEConfig(Settings):
    """app:fqe-correction's hyper-parameters."""

    hidden: int = Field(default=128, gt=0)
    lr: float = Field(default=3e-4, gt=0)
    batch_size: int = Field(default=64, gt=0)
    epochs: int = Field(default=20, gt=0)
    polyak: float = Field(default=0.99, ge=0, lt=1)
    # φ′ ← φ at the start of every this-many epochs, instead of Polyak averaging (None: Polyak)
    target_every: int | None = Field(default=None, gt=0)
    # LayerNorm before each hidden SiLU and AdamW's decoupled weight decay: Q's output is then bounded
    # by its last layer's weights, and the decay bounds those (Gallici et al. 2024), so Q cannot
    # extrapolate without bound on the actions the log never took at s_{t+1}
    layer_norm: bool = False
    weight_decay: float = Field(default=0.0, ge=0)
    # each Bellman target clipped to the range of the logged returns-to-go (no value outside what the
    # log ever paid from any step)
    clip_targets: bool = False
    # how Q reads an action (ope/classical/logged_steps.py: action_reader): ``vocabulary``, the world model's table
    # row (an action outside its vocabulary reads as ⟨unk⟩, which a text-action world model reads as ∅);
    # ``text``, every action read by its words as the world model reads it in imagination (a
    # text-action world model only), so that Q can tell apart the actions the log never took; ``sentence``,
    # numbered as under ``text`` but read as a pretrained sentence encoder reads the words (all-MiniLM-L6-v2,
    # ope/classical/sentence_features.py), so that Q meets an unlogged action near the logged ones it means alike
    action_reading: Literal["vocabulary", "text", "sentence"] = "vocabulary"
    # FQE's interval: a bootstrap over trajectories refitting Q on this many resamples (the fit's
    # error inside it); 0: the bootstrap of one fitted Q (trajectories resampled, Q fixed)
    refit_resamples: int = Field(default=0, ge=0)


class BaselineConfig(Settings):
    estimators: tuple[EstimatorName, ...] = Field(default=("DM", "FQE", "IS", "PDIS", "WIS", "WPDIS", "DR", "WDR"),
                                                  min_length=1)
    seeds: tuple[int, ...] = Field(default=(0,), min_length=1)  # each seed refits FQE and redraws the bootstrap
    gamma: float = Field(default=0.99, gt=0, le=1)
    n_bootstrap: int = Field(default=1000, ge=1)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    # beside each percentile-bootstrap row, a row <estimator>@<interval> with the same Ĵ and this interval
    intervals: tuple[IntervalName, ...] = ("hoeffding", "bernstein", "t")
    # λ: the importance-weighted estimators again as <estimator>:clipped, every cumulative ratio
    # clipped at λ (Open Bandit Pipeline's lambda_); None: no clipped rows
    clip_weights: float | None = Field(default=None, gt=0)
    fqe: FQEConfig = FQEConfig()
