"""The ADWM estimator: π_e^ε acts in imagined rollouts of the world model (Sec. 4.2, Alg. ope-rollout).

Every rollout of every ε level advances in one batch. Rollout i starts from the first
observation of a behaviour episode drawn uniformly, z_0 = LN(f_θ(o_0)), with that episode's
task; at step t

1. π_e reads the imagined state z_t (``reading``):
   - ``soft_tokens`` (the paper): every observation of the history is G_ψ(z) as n_soft soft
     tokens in π_e's input embeddings (policies/soft_prompt.py; transformers backend);
   - ``retrieval`` (beyond the paper): the text of the behaviour-pool observation nearest to
     z_t in latent space (cosine), as ordinary text — any backend, vLLM and remote APIs too;
   - ``none`` (the no-ψ ablation): no observation at all — task, own past actions and the
     admissible list only;
2. π_e^ε acts: with probability ε a uniformly drawn action of the admissible list of the
   behaviour observation nearest to z_t — the list the environment showed in the state the
   imagination is closest to, so exploring stays inside actions the world model has seen in
   such states (the world model has no admissible-set head) — otherwise π_e's own greedy
   action, mapped to the same list (exactly what ``PolicyAgent`` does in the environment);
3. where ``logged_successors`` is on (the default preset; beyond the paper) and the behaviour
   log took a_t in the observation π_e reads, one of those logged transitions answers
   (z_{t+1} = f_θ(o'), its logged reward and termination: the empirical transition, drawn
   uniformly, ope/logged.py); everywhere else z_{t+1} is sampled by the reverse diffusion
   process conditioned on (h̄_t, a_t) with classifier-free guidance
   ε̂ = (1+λ) ε_θ(·, a_t) − λ ε_θ(·, ∅) and, at every denoising step, continuation guidance
   g_k = α η_k ∇_ẑ J(ẑ) (``guidance``): ``likelihood``, J = Σ_{u=t+1}^{t+h} log π_e(â_u | h̃_u)
   along an h-step greedy look-ahead (Eq. final_score, :class:`LookaheadLikelihood`), or
   ``success_bank``, J = max_b cos(ẑ, b) (Alg. ope-rollout; ``auto``, the default preset's: the
   success bank where the log holds a success, else none);
4. off the log, the reward and termination heads read (z_{t+1}, h̄_t) — or (e(a_t), h̄_t), by
   the world model's ``outcome_input``; the rollout stops at P(done) ≥ 0.5 or after H_max
   steps. With ``snap`` (beyond the paper), z_{t+1} is then replaced by the latent of the
   behaviour observation nearest to it, so the history the world model reads next stays on
   states it was trained on.

Settings: ``AdwmConfig`` (adwm_core/settings.py); the state bank: state_bank.py; the look-ahead of
the likelihood guidance: lookahead.py; scoring: evaluate.py; the ADWM stage: stages/adwm.py.

Ablations of the paper's figure: no-CFG ``cfg_scale=0``, no-continuation ``guidance="none"``,
no-ψ ``reading="none"``.

Value estimates per ε level, each with a percentile-bootstrap interval over rollouts:
``reward_sum`` = mean_i Σ_t γ^t r̂_t (Eq. mc_estimator; a head supervised on terminal steps
only is read at the terminating step only) and ``success_similarity`` = mean_i max_t
max_b cos(z_{t+1}, b) over the success bank (latents of the last observations of
successful behaviour episodes; Alg. ope-rollout). A seed fixes every random draw: start
observations, ε flips, exploratory actions and diffusion noise; rollout i of every ε level
shares them (common random numbers, as ground truth shares episode seeds across ε).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from ..data.actions import NULL
from ..diffusion.guidance import eta_schedule, gradient_guidance, nearest_cosine, success_bank_guidance
from ..diffusion.process import Guidance, classifier_free
from ..envs.runner import Decision
from ..model.world_model import WorldModel, on_latent_manifold
from ..policies.prompts import History
from ..policies.soft_prompt import SoftPromptPolicy
from ..settings import AdwmConfig
from .lookahead import LookaheadLikelihood
from .state_bank import StateBank

class Policy(Protocol):
    def act(self, histories: Sequence[History]) -> list[Decision]: ...


@dataclass(frozen=True)
class ImaginedStep:
    """One step of one imagined rollout, as imagination took it."""

    rollout: int
    t: int
    observation: int  # the bank row π_e read
    action: str
    logged: bool  # answered by a logged successor (``logged_successors``), not the world model
    reward: float
    done: bool


@dataclass
class Rollouts:
    """Per-rollout outcomes of one seed, rollout r = e · n_rollouts + i at ε level e."""

    epsilons: np.ndarray  # (R,)
    reward_sum: np.ndarray  # (R,)
    success_similarity: np.ndarray  # (R,)
    lengths: np.ndarray  # (R,) imagined steps taken
    seconds: dict[str, float] = field(default_factory=dict)  # world_model, policy
    steps: list[ImaginedStep] = field(default_factory=list)

    def values(self, name: str, epsilon: float) -> np.ndarray:
        return getattr(self, name)[self.epsilons == epsilon]


class ImaginedRollouts:
    """Batched guided rollouts of π_e^ε in a trained world model."""

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

    def check_policy(self, policy: Policy | SoftPromptPolicy) -> None:
        """The soft-token reading needs a :class:`SoftPromptPolicy`; the text readings any ``act(histories)``."""
        if (self.config.reading == "soft_tokens") != isinstance(policy, SoftPromptPolicy):
            raise TypeError(f"reading={self.config.reading!r} with a {type(policy).__name__}: the soft-token reading "
                            "scores a SoftPromptPolicy (an LLM policy with its ψ adapter), the text readings any "
                            "policy with act(histories)")

    @torch.no_grad()
    def run(self, policy: Policy | SoftPromptPolicy, epsilons: Sequence[float], seed: int) -> Rollouts:
        self.check_policy(policy)
        c, model, bank = self.config, self.model, self.bank
        n, d = c.n_rollouts, model.config.d_z
        eps_of = np.repeat(np.asarray(epsilons, float), n)
        base = np.arange(len(eps_of)) % n  # the rollout index whose random numbers row r uses
        rng, generator = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
        starts = bank.starts[rng.integers(len(bank.starts), size=n)][base]
        tasks = [bank.task_descriptions[i] for i in starts]
        z = torch.zeros(len(eps_of), c.horizon + 1, d)
        z[:, 0] = bank.latents[starts]
        previous = torch.full((len(eps_of), c.horizon + 1), NULL, dtype=torch.long)  # a_{t−1} beside z_t
        turns: list[list[tuple[str, str]]] = [[] for _ in eps_of]
        reward_sum = np.zeros(len(eps_of))
        similarity = np.full(len(eps_of), -np.inf if len(bank.success) else np.nan)  # NaN: no success bank
        lengths, alive = np.zeros(len(eps_of), np.int64), np.ones(len(eps_of), bool)
        seconds = {"world_model": 0.0, "policy": 0.0, "guidance": 0.0}
        steps: list[ImaginedStep] = []
        for t in range(c.horizon):
            flips, picks = rng.random(n), rng.random(n)  # drawn every step for every rollout index
            noise = torch.randn((self.diffusion.n_steps + 1, n, d), generator=generator)
            rows = np.flatnonzero(alive)
            if len(rows) == 0:
                break
            started = time.perf_counter()
            read = bank.nearest(z[rows, t])
            seconds["world_model"] += time.perf_counter() - started
            started = time.perf_counter()
            histories = [History(tasks[r], tuple(turns[r]), self._observed(i), bank.admissible[i])
                         for r, i in zip(rows, read)]
            actions = self._act(policy, histories, z[rows, : t + 1], flips[base[rows]] < eps_of[rows],
                                picks[base[rows]])
            seconds["policy"] += time.perf_counter() - started
            started = time.perf_counter()
            ids = self.action_ids(actions)
            z_next, reward, done, logged = self.advance(policy, histories, actions, ids, read, z[rows, : t + 1],
                                                        previous[rows, : t + 1], noise[:, base[rows]], seconds)
            if c.snap:
                z_next = bank.latents[bank.nearest(z_next)]
            seconds["world_model"] += time.perf_counter() - started
            z[rows, t + 1], previous[rows, t + 1] = z_next, ids
            reward_sum[rows] += c.gamma ** t * reward
            if len(bank.success):
                similarity[rows] = np.maximum(similarity[rows], nearest_cosine(z_next, bank.success).numpy())
            for r, i, a, on_log, r_hat, ends in zip(rows, read, actions, logged, reward, done):
                turns[r].append((self._observed(i), a))
                steps.append(ImaginedStep(int(r), t, int(i), a, bool(on_log), float(r_hat), bool(ends)))
            lengths[rows] += 1
            alive[rows[done]] = False
        seconds["world_model"] -= seconds["guidance"]  # guidance ran inside the transitions
        return Rollouts(eps_of, reward_sum, similarity, lengths, seconds, steps)

    def advance(self, policy: Policy | SoftPromptPolicy, histories: list[History], actions: list[str],
                ids: torch.Tensor, read: np.ndarray, past: torch.Tensor, previous: torch.Tensor,
                noise: torch.Tensor, seconds: dict[str, float]) -> tuple[torch.Tensor, np.ndarray, np.ndarray, np.ndarray]:
        """One imagined transition of the alive rollouts: (z_{t+1}, the reward r̂_t counted in
        ``reward_sum`` — on the environment's scale —, whether the episode ends, and whether a
        logged successor answered: where ``logged_successors`` and the log holds (read row, a_t);
        elsewhere :meth:`off_log` does). ``past``/``previous``: z_{0..t} and a_{−1..t−1};
        ``noise``: the diffusion noise of each rollout, whose first draw also picks among logged
        successors."""
        logged = self.bank.transitions
        chosen = (logged.draw(read, actions, past.shape[1] - 1, uniforms(noise)) if self.config.logged_successors
                  else np.full(len(actions), -1))
        z_next = torch.empty(len(actions), self.model.config.d_z)
        reward, done = np.zeros(len(actions)), np.zeros(len(actions), bool)
        on = chosen >= 0
        z_next[on], reward[on], done[on] = logged.next_latents[chosen[on]], logged.rewards[chosen[on]], logged.done[chosen[on]]
        off = np.flatnonzero(~on)
        if len(off):
            z_next[off], reward[off], done[off] = self.off_log(
                policy, [histories[j] for j in off], [actions[j] for j in off], ids[off], read[off], past[off],
                previous[off], noise[:, off], seconds)
        return z_next, reward, done, on

    def off_log(self, policy: Policy | SoftPromptPolicy, histories: list[History], actions: list[str],
                ids: torch.Tensor, read: np.ndarray, past: torch.Tensor, previous: torch.Tensor,
                noise: torch.Tensor, seconds: dict[str, float]) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """The world model's answer (arguments and result as :meth:`advance`): z_{t+1} by the
        guided reverse process, r̂_t and termination by the heads (a terminal-only reward head
        read at the terminating step only)."""
        c, model = self.config, self.model
        conditions = model.conditions(ids, [self.bank.texts[i] for i in read])
        h = model.history(past, previous)[:, -1]
        guidance = self.success_guidance
        if self.guided and c.guidance == "likelihood":
            lookahead = LookaheadLikelihood(self, policy, histories, actions, past, previous, ids)
            guidance = gradient_guidance(self.diffusion, lookahead, c.alpha, self.eta,
                                         chunk=policy.policy.lm.batch_size)
        z_next = self.transition(h, conditions, noise, _timed(guidance, seconds))
        scale = model.config.reward
        reward = scale.decode(model.predicted_reward(z_next, h, conditions)).numpy()
        done = model.done_probability(z_next, h, conditions).numpy() >= c.done_threshold
        return z_next, np.where(done, reward, 0.0) if scale.terminal_only else reward, done

    def _observed(self, row: int) -> str:
        """The observation text π_e is shown for bank row ``row``: its text under the retrieval
        reading; nothing under ``none``, and under ``soft_tokens`` (which reads latents)."""
        return self.bank.texts[row] if self.config.reading == "retrieval" else ""

    def _act(self, policy: Policy | SoftPromptPolicy, histories: list[History], latents: torch.Tensor,
             explore: np.ndarray, picks: np.ndarray) -> list[str]:
        """π_e^ε's actions: ε-exploration from the histories' admissible lists, else π_e's own."""
        actions: list[str | None] = [None] * len(histories)
        ask = []
        for j, history in enumerate(histories):
            if explore[j] and history.admissible:
                actions[j] = history.admissible[int(picks[j] * len(history.admissible))]
            else:
                ask.append(j)
        if ask:
            asked = [histories[j] for j in ask]
            decisions = (policy.act(asked, latents[ask]) if isinstance(policy, SoftPromptPolicy)
                         else policy.act(asked))
            for j, decision in zip(ask, decisions):
                actions[j] = decision.action
        return actions

    def action_ids(self, actions: Sequence[str]) -> torch.Tensor:
        """The ids the world model is conditioned on (``unknown_actions``: see WorldModel.action_ids)."""
        return self.model.action_ids(actions, unknown_as_null=self.config.unknown_actions == "null")

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

    def transition(self, h: torch.Tensor, actions: torch.Tensor, noise: torch.Tensor,
                   guidance: Guidance | None = None) -> torch.Tensor:
        """z_{t+1} ~ the guided reverse process given (h̄_t, a_t); ``actions`` as ids or conditions."""
        return self.diffusion.sample(self.eps_model(h, actions), tuple(noise.shape[1:]), guidance=guidance,
                                     noise=noise, project=on_latent_manifold)


def uniforms(noise: torch.Tensor) -> np.ndarray:
    """One uniform draw in [0, 1) per rollout, Φ of its first diffusion noise: shared across ε
    levels, as every draw of the rollouts is."""
    return torch.special.ndtr(noise[0, :, 0]).numpy()


def _timed(guidance: Guidance | None, seconds: dict[str, float]) -> Guidance | None:
    """``guidance`` adding its wall time to ``seconds["guidance"]``."""
    if guidance is None:
        return None

    def timed(z_k: torch.Tensor, k: int, eps: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        try:
            return guidance(z_k, k, eps)
        finally:
            seconds["guidance"] += time.perf_counter() - started

    return timed
