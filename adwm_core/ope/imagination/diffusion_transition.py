"""The ADWM transition: the world model answers π_e's action by guided reverse diffusion (Sec.
4.2, Alg. ope-rollout); the rollout loop around it is rollouts.py, the other transitions
transitions.py.

Given (h̄_t, a_t), z_{t+1} is sampled by the reverse diffusion process with classifier-free
guidance ε̂ = (1+λ) ε_θ(·, a_t) − λ ε_θ(·, ∅) and, at every denoising step, continuation
guidance g_k = α η_k ∇_ẑ J(ẑ) (``AdwmConfig.guidance``): ``likelihood``, J = Σ_{u=t+1}^{t+h}
log π_e(â_u | h̃_u) along an h-step greedy look-ahead (Eq. final_score, :class:`LookaheadLikelihood`), or
``success_bank``, J = max_b cos(ẑ, b) (Alg. ope-rollout; ``auto``, the default preset's: the
success bank where the log holds a success, else none). The reward and termination heads then
read (z_{t+1}, h̄_t) — or (e(a_t), h̄_t), by the world model's ``outcome_input``; the episode
ends at P(done) ≥ 0.5 (a head supervised on terminal steps only is read at the terminating
step only).

The estimator rows: ``ADWM`` = :class:`~.transitions.LoggedSuccessors` around this transition
where ``logged_successors`` is on (the default preset; beyond the paper), this transition
alone in the paper's recipe (:func:`adwm_transition`); ``kNN-WM`` = logged successors around
the nearest logged transition (:func:`reference_transition`).

Ablations of the paper's figure: no-CFG ``cfg_scale=0``, no-continuation ``guidance="none"``,
no-ψ ``reading="none"``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import torch

from ...data.actions import NULL
from ...diffusion.guidance import eta_schedule, gradient_guidance, success_bank_guidance
from ...diffusion.process import Guidance, classifier_free
from ...diffusion.respaced import sample_respaced
from ...model.world_model import WorldModel, on_latent_manifold
from ...policies.prompts import History
from ...policies.soft_prompt import SoftPromptPolicy
from ..answers import DIFFUSION
from ..classical.fqe import FittedQEvaluation
from ..settings import AdwmConfig
from .carry_over import CarriedOver
from .state_bank import StateBank
from .transitions import LoggedSuccessors, NearestLogged, Outcome, Query, Transition
from .value_handover import HandOverToValue


class DiffusionTransition:
    """z_{t+1} ~ the world model's guided reverse process given (h̄_t, a_t); r̂_t and termination
    by its heads."""

    def __init__(self, model: WorldModel, bank: StateBank, config: AdwmConfig = AdwmConfig()) -> None:
        if model.config.reward.target != "step":
            raise ValueError("ADWM's reward_sum adds per-step rewards, but this world model predicts reward-to-go; "
                             "retrain it with TrainConfig(reward_target='step')")
        if config.guidance == "success_bank" and len(bank.success) == 0:
            raise ValueError("success-bank guidance needs successful behaviour episodes, and the pool has none; "
                             "collect more behaviour data or use guidance='none'")
        if config.horizon > model.config.max_steps:
            raise ValueError(f"horizon={config.horizon} exceeds the world model's history length "
                             f"{model.config.max_steps}")
        if config.guidance == "auto":
            config = config.replace(guidance="success_bank" if len(bank.success) else "none")
        self.model, self.bank, self.config = model.eval(), bank, config
        self.diffusion = model.diffusion
        self.eta = eta_schedule(self.diffusion.n_steps, config.eta_max, config.guided_steps)
        self.guided = config.guidance != "none" and config.alpha > 0 and bool(self.eta.any())
        self.success_guidance = None
        if self.guided and config.guidance == "success_bank":
            self.success_guidance = success_bank_guidance(self.diffusion, bank.success, config.alpha, self.eta)

    def __call__(self, query: Query) -> Outcome:
        c, model = self.config, self.model
        ids = self.action_ids(query.actions)
        previous = self.previous_ids(query)
        conditions = model.conditions(ids, [self.bank.texts[i] for i in query.read])
        h = model.history(query.past, previous)[:, -1]
        guidance = self.success_guidance
        if self.guided and c.guidance == "likelihood":
            lookahead = LookaheadLikelihood(self, query.policy, query.histories, query.actions, query.past, previous,
                                            ids)
            guidance = gradient_guidance(self.diffusion, lookahead, c.alpha, self.eta,
                                         chunk=query.policy.policy.lm.batch_size)
        z_next = self.sample(h, conditions, query.noise, _timed(guidance, query.seconds))
        scale = model.config.reward
        reward = scale.decode(model.predicted_reward(z_next, h, conditions)).numpy()
        done = model.done_probability(z_next, h, conditions).numpy() >= c.done_threshold
        return Outcome.answered_by(DIFFUSION, z_next, np.where(done, reward, 0.0) if scale.terminal_only else reward,
                                   done)

    def action_ids(self, actions: list[str]) -> torch.Tensor:
        """The ids the world model is conditioned on (``unknown_actions``: see WorldModel.action_ids)."""
        return self.model.action_ids(actions, unknown_as_null=self.config.unknown_actions == "null")

    def previous_ids(self, query: Query) -> torch.Tensor:
        """(B, t+1) a_{−1..t−1}: ∅ beside z_0, then each rollout's own earlier actions."""
        earlier = torch.full((len(query.actions), query.t + 1), NULL, dtype=torch.long)
        if query.t:  # one vocabulary lookup for every rollout's turns
            earlier[:, 1:] = self.action_ids([a for h in query.histories for _, a in h.steps]).view(-1, query.t)
        return earlier

    def eps_model(self, h: torch.Tensor, actions: torch.Tensor):
        """ε̂(z_k, k) of the world model given (h̄, a) — ``actions`` as ids or conditions
        (``WorldModel.conditions``) — with classifier-free guidance λ."""
        model, scale = self.model, self.config.cfg_scale
        actions = model.as_conditions(actions, len(h))
        if scale == 0:
            return lambda z_k, k: model.eps(z_k, k, h, actions)
        h2, a2 = torch.cat([h, h]), torch.cat([actions, model.as_conditions(None, len(h))])

        def guided(z_k: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            cond, uncond = model.eps(torch.cat([z_k, z_k]), torch.cat([k, k]), h2, a2).chunk(2)
            return classifier_free(cond, uncond, scale)

        return guided

    def sample(self, h: torch.Tensor, actions: torch.Tensor, noise: torch.Tensor,
               guidance: Guidance | None = None) -> torch.Tensor:
        """z_{t+1} given (h̄_t, a_t), ``actions`` as ids or conditions: the K-level guided reverse
        process (``sampler: ancestral``), or DDIM from the same z_K over ``ddim_levels`` levels
        with η = ``ddim_eta`` (``ddim``; diffusion/respaced.py), ε̂ − g_k at each."""
        eps_model = self.eps_model(h, actions)
        if self.config.sampler == "ancestral":
            return self.diffusion.sample(eps_model, tuple(noise.shape[1:]), guidance=guidance, noise=noise,
                                         project=on_latent_manifold)
        if guidance is not None:
            unguided = eps_model

            def eps_model(z_k: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
                eps = unguided(z_k, k)
                return eps - guidance(z_k, int(k[0]), eps)

        return sample_respaced(self.diffusion, eps_model, noise, self.config.ddim_levels, self.config.ddim_eta,
                               project=on_latent_manifold)


class LookaheadLikelihood:
    """J(ẑ_{t+1}) = Σ_{u=t+1}^{t+h} log π_e(â_u | h̃_u) along one greedy look-ahead from ẑ_{t+1}
    (Eq. app_cont_approx): at each u, π_e reads ẑ_u through ψ and acts greedily (â_u, mapped to
    the admissible list of the behaviour observation nearest to ẑ_u); the world model moves on
    to ẑ_{u+1} by deterministic DDIM from z_K = 0 given (h̄_u, â_u). Differentiable in ẑ_{t+1}
    through ψ, the LLM and the world model; the greedy choices themselves are not."""

    def __init__(self, imagination: DiffusionTransition, policy: SoftPromptPolicy, histories: list[History],
                 actions: list[str], past: torch.Tensor, previous: torch.Tensor, action_ids: torch.Tensor) -> None:
        self.imagination, self.policy = imagination, policy
        self.histories = [replace(h, steps=h.steps + ((h.observation, a),)) for h, a in zip(histories, actions)]
        self.past, self.previous, self.action_ids = past, previous, action_ids

    def __call__(self, z_hat: torch.Tensor, rows: slice) -> torch.Tensor:
        imagination, model = self.imagination, self.imagination.model
        bank, c = imagination.bank, imagination.config
        histories = self.histories[rows]
        latents, previous, ids = self.past[rows], self.previous[rows], self.action_ids[rows]
        total = z_hat.new_zeros(len(z_hat))
        for u in range(c.lookahead):
            latents = torch.cat([latents, z_hat[:, None]], 1)
            previous = torch.cat([previous, ids[:, None]], 1)
            nearest = bank.nearest(z_hat.detach())
            admissible = [bank.admissible[i] for i in nearest]
            now = [replace(h, observation="", admissible=listed) for h, listed in zip(histories, admissible)]
            with torch.no_grad():
                greedy = [d.action for d in self.policy.act(now, latents.detach())]
            total = total + self.policy.logprob(now, latents, greedy).to(total.device)
            if u + 1 == c.lookahead:
                return total
            ids = imagination.action_ids(greedy)
            hbar = model.history(latents, previous)[:, -1]
            conditions = model.conditions(ids, [bank.texts[i] for i in nearest])
            z_hat = imagination.diffusion.denoise_deterministic(imagination.eps_model(hbar, conditions),
                                                                torch.zeros_like(z_hat), c.lookahead_denoise,
                                                                project=on_latent_manifold)
            histories = [replace(h, steps=h.steps + (("", a),)) for h, a in zip(now, greedy)]
        return total


def adwm_transition(model: WorldModel, bank: StateBank, config: AdwmConfig,
                    q_by_epsilon: Mapping[float, FittedQEvaluation] | None = None) -> Transition:
    """ADWM's transition: logged successors (``logged_successors``) around what answers the pairs
    the log never took (``off_log``: the diffusion model; logged outcomes carried over by the
    action's signature before it; the hand-over to FQE's ``q_by_epsilon``; or carried-over
    outcomes before that hand-over); or the diffusion model alone (the paper)."""
    diffusion = DiffusionTransition(model, bank, config)
    if not config.logged_successors:
        return diffusion
    unmatched: Transition = diffusion
    if config.hands_over_to_fqe:
        if q_by_epsilon is None:
            raise ValueError(f"off_log={config.off_log!r} hands off-log pairs to FQE: pass its Q-networks per ε "
                             "(q_by_epsilon), or choose AdwmConfig(preset='carry_over') (the model answers them)")
        unmatched = HandOverToValue(model, q_by_epsilon)
    if config.off_log in ("carry_over", "carry_over_fqe"):
        unmatched = CarriedOver(bank, unmatched, config.carry_over_levels, config.carry_over_within)
    return LoggedSuccessors(bank, unmatched)


def reference_transition(bank: StateBank) -> Transition:
    """kNN-WM's transition: logged successors around the nearest logged transition."""
    return LoggedSuccessors(bank, NearestLogged(bank))


def _timed(guidance: Guidance | None, seconds: dict[str, float]) -> Guidance | None:
    """``guidance`` adding its wall time to ``seconds["guidance"]``."""
    if guidance is None:
        return None

    def timed(z_k: torch.Tensor, k: int, eps: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        try:
            return guidance(z_k, k, eps)
        finally:
            seconds["guidance"] = seconds.get("guidance", 0.0) + time.perf_counter() - started

    return timed
