"""Imagined rollouts of π_e^ε: one loop for every transition (Sec. 4.2, Alg. ope-rollout).

Every rollout of every ε level advances in one batch. Rollout i starts from the first
observation of a behaviour episode drawn uniformly, z_0 = LN(f_θ(o_0)), with that episode's
task; at step t

1. π_e reads the imagined state z_t (``AdwmConfig.reading``):
   - ``soft_tokens`` (the paper): every observation of the history is G_ψ(z) as n_soft soft
     tokens in π_e's input embeddings (policies/soft_prompt.py; transformers backend);
   - ``retrieval``: the text of the behaviour observation nearest to z_t (cosine), as
     ordinary text — any backend, vLLM and remote APIs too;
   - ``none`` (the no-ψ ablation): no observation — task, own past actions and admissible list;
2. π_e^ε acts: with probability ε a uniformly drawn action of the admissible list of the
   behaviour observation nearest to z_t, otherwise π_e's own action (as ``PolicyAgent`` in the
   environment);
3. the transition answers (transitions.py): z_{t+1}, r̂_t, whether the episode ends; with
   ``snap`` z_{t+1} is replaced by the latent of its nearest behaviour observation.

Value estimates per ε level: ``reward_sum`` = mean_i Σ_t γ^t r̂_t (Eq. mc_estimator) and
``success_similarity`` = mean_i max_t max_b cos(z_{t+1}, b) over the success bank (latents of
the last observations of successful behaviour episodes). A seed fixes every draw — start
observations, ε flips, exploratory actions and diffusion noise; rollout i of every ε level
shares them (common random numbers, as ground truth shares episode seeds across ε).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ...diffusion.guidance import nearest_cosine
from ...policies.base import epsilon_mixed
from ...policies.prompts import History
from ...policies.soft_prompt import SoftPromptPolicy
from ..settings import AdwmConfig
from .state_bank import StateBank
from .transitions import Policy, Query, Transition


@dataclass(frozen=True)
class ImaginedStep:
    """One step of one imagined rollout, as imagination took it."""

    rollout: int
    t: int
    observation: int  # the bank row π_e read
    action: str
    source: str  # what answered (answers.SOURCES)
    reward: float
    done: bool


@dataclass
class Rollouts:
    """Per-rollout outcomes of one seed, rollout r = e · n_rollouts + i at ε level e."""

    epsilons: np.ndarray  # (R,)
    reward_sum: np.ndarray  # (R,)
    success_similarity: np.ndarray  # (R,)
    lengths: np.ndarray  # (R,) imagined steps taken
    starts: np.ndarray  # (R,) the bank row each rollout started from
    seconds: dict[str, float] = field(default_factory=dict)  # transition, policy (and the transition's parts)
    steps: list[ImaginedStep] = field(default_factory=list)

    def values(self, name: str, epsilon: float) -> np.ndarray:
        return getattr(self, name)[self.epsilons == epsilon]


class ImaginedRollouts:
    """Batched rollouts of π_e^ε against a transition, over the behaviour log's state bank."""

    def __init__(self, bank: StateBank, config: AdwmConfig = AdwmConfig(), noise_levels: int = 0) -> None:
        """``noise_levels``: K of a diffusion transition; each step draws K+1 noise vectors per
        rollout whatever the transition, so a seed means the same draws for every estimator row."""
        self.bank, self.config, self.noise_levels = bank, config, noise_levels

    def check_policy(self, policy: Policy | SoftPromptPolicy) -> None:
        """The soft-token reading needs a :class:`SoftPromptPolicy`; the text readings any ``act(histories)``."""
        if (self.config.reading == "soft_tokens") != isinstance(policy, SoftPromptPolicy):
            raise TypeError(f"reading={self.config.reading!r} with a {type(policy).__name__}: the soft-token reading "
                            "scores a SoftPromptPolicy (an LLM policy with its ψ adapter), the text readings any "
                            "policy with act(histories)")

    @torch.no_grad()
    def run(self, policy: Policy | SoftPromptPolicy, transition: Transition, epsilons: Sequence[float],
            seed: int) -> Rollouts:
        """Rollouts of π_e^ε at every ε level, answered by ``transition``."""
        self.check_policy(policy)
        c, bank = self.config, self.bank
        n, d = c.n_rollouts, bank.latents.shape[1]
        eps_of = np.repeat(np.asarray(epsilons, float), n)
        base = np.arange(len(eps_of)) % n  # the rollout index whose random numbers row r uses
        rng, generator = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
        starts = bank.starts[rng.integers(len(bank.starts), size=n)][base]
        tasks = [bank.task_descriptions[i] for i in starts]
        z = torch.zeros(len(eps_of), c.horizon + 1, d)
        z[:, 0] = bank.latents[starts]
        turns: list[list[tuple[str, str]]] = [[] for _ in eps_of]
        reward_sum = np.zeros(len(eps_of))
        similarity = np.full(len(eps_of), -np.inf if len(bank.success) else np.nan)  # NaN: no success bank
        lengths, alive = np.zeros(len(eps_of), np.int64), np.ones(len(eps_of), bool)
        seconds = {"transition": 0.0, "policy": 0.0}
        steps: list[ImaginedStep] = []
        for t in range(c.horizon):
            flips, picks = rng.random(n), rng.random(n)  # drawn every step for every rollout index
            noise = torch.randn((self.noise_levels + 1, n, d), generator=generator)
            rows = np.flatnonzero(alive)
            if len(rows) == 0:
                break
            started = time.perf_counter()
            read = bank.nearest(z[rows, t])
            histories = [History(tasks[r], tuple(turns[r]), self._observed(i), bank.admissible[i])
                         for r, i in zip(rows, read)]
            actions = self._act(policy, histories, z[rows, : t + 1], flips[base[rows]] < eps_of[rows],
                                picks[base[rows]])
            seconds["policy"] += time.perf_counter() - started
            started = time.perf_counter()
            outcome = transition(Query(policy, histories, actions, read, z[rows, : t + 1], noise[:, base[rows]],
                                       eps_of[rows], seconds))
            z_next = bank.latents[bank.nearest(outcome.z_next)] if c.snap else outcome.z_next
            seconds["transition"] += time.perf_counter() - started
            z[rows, t + 1] = z_next
            reward_sum[rows] += c.gamma ** t * outcome.reward
            if len(bank.success):
                similarity[rows] = np.maximum(similarity[rows], nearest_cosine(z_next, bank.success).numpy())
            for r, i, a, source, r_hat, ends in zip(rows, read, actions, outcome.source, outcome.reward, outcome.done):
                turns[r].append((self._observed(i), a))
                steps.append(ImaginedStep(int(r), t, int(i), a, str(source), float(r_hat), bool(ends)))
            lengths[rows] += 1
            alive[rows[outcome.done]] = False
        return Rollouts(eps_of, reward_sum, similarity, lengths, starts, seconds, steps)

    def _observed(self, row: int) -> str:
        """The observation text π_e is shown for bank row ``row``: its text under the retrieval
        reading; nothing under ``none``, and under ``soft_tokens`` (which reads latents)."""
        return self.bank.texts[row] if self.config.reading == "retrieval" else ""

    @staticmethod
    def _act(policy: Policy | SoftPromptPolicy, histories: list[History], latents: torch.Tensor,
             explore: np.ndarray, picks: np.ndarray) -> list[str]:
        """π_e^ε's actions (``epsilon_mixed``, as in the environment) from this step's draws:
        exploration from the histories' admissible lists, else π_e's own."""
        def decide(ask: list[int]):
            asked = [histories[j] for j in ask]
            return policy.act(asked, latents[ask]) if isinstance(policy, SoftPromptPolicy) else policy.act(asked)

        decisions = epsilon_mixed([h.admissible for h in histories], explore=lambda j: bool(explore[j]),
                                  pick=lambda j, n: int(picks[j] * n), decide=decide)
        return [decision.action for decision in decisions]
