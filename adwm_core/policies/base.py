"""One policy protocol over interchangeable LLM backends.

A backend (:class:`LanguageModel`) does two things on batches of prompts:
greedy generation and scoring of given continuations (sum of the token
log-probabilities over the continuation's span). :class:`LLMPolicy` puts a
prompt template and action parsing on top: ``act`` turns histories into
actions, ``logprob`` gives log π(a|h) of given actions. :class:`PolicyAgent`
runs a policy, ε-mixed (Eq. eps-mix), inside the episode runner.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np

from ..envs.episodes import Decision, EpisodeState
from .parsing import map_to_admissible, parse_action
from .prompts import MAX_NEW_TOKENS, History, PromptTemplate, action_continuation


class LogprobsUnavailable(NotImplementedError):
    """The backend cannot score given actions (e.g. a chat endpoint that returns no log-probs)."""


class LanguageModel(ABC):
    """A causal LM behind one of the backends; ``tokenizer`` is a Hugging Face tokenizer."""

    tokenizer: object
    max_context: int  # prompt + generated tokens
    chat = False  # True: acts on message lists (generate_chat), the endpoint applying its chat template
    on_items: Callable[[int], None] | None = None  # told of each batch of n prompts answered (a stage's progress)

    @abstractmethod
    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy continuation of each prompt, up to the end-of-sequence token or ``max_new_tokens``.

        No stop string: a model may open its answer with a line break, and the
        parser takes the first non-empty line."""

    @abstractmethod
    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """log P(continuation_i | prompt_i) in float64, summed over the span found by
        longest common token prefix, and the span lengths in tokens."""

    def generate_chat(self, conversations: Sequence[list[dict]], max_new_tokens: int) -> list[str]:
        """Greedy replies to system + user message lists (backends with ``chat = True``)."""
        raise NotImplementedError(f"the {type(self).__name__} backend takes rendered prompts, not messages")

    def mean_input_embeddings(self, texts: Sequence[str]) -> np.ndarray:
        """ē = mean over the tokens of ``text`` of the LLM's input embeddings, ``(N, d_llm)`` float32
        (the ψ adapter's target, app:psi-train). Needs the model's weights in this process."""
        raise NotImplementedError(
            f"the {type(self).__name__} backend does not expose input embeddings; train the ψ adapter "
            "with backend='transformers' (or use the retrieval reading of imagined states)"
        )


class LLMPolicy:
    """π(a|h) of an LLM under one prompt template."""

    def __init__(self, lm: LanguageModel, env_name: str, variant: str = "p0", max_new_tokens: int = MAX_NEW_TOKENS) -> None:
        if max_new_tokens >= lm.max_context:
            raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room in a {lm.max_context}-token context")
        self.lm = lm
        self.max_new_tokens = max_new_tokens
        self.template = PromptTemplate(env_name, variant, lm.tokenizer, lm.max_context - max_new_tokens)

    def prompts(self, histories: Sequence[History]) -> list[str]:
        return [self.template.render(h) for h in histories]

    def act(self, histories: Sequence[History]) -> list[Decision]:
        """Greedy actions for a batch of histories: the parsed action, mapped to the admissible
        set when one is known, with the raw generated text as the response."""
        if not histories:
            return []
        if self.lm.chat:
            responses = self.lm.generate_chat([self.template.messages(h) for h in histories], self.max_new_tokens)
        else:
            responses = self.lm.generate(self.prompts(histories), self.max_new_tokens)
        return [
            Decision(map_to_admissible(parse_action(text), h.admissible), text)
            for h, text in zip(histories, responses)
        ]

    def logprob(self, histories: Sequence[History], actions: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """log π(a_i|h_i) (float64) and the action spans' lengths in tokens."""
        if len(histories) != len(actions):
            raise ValueError(f"{len(histories)} histories but {len(actions)} actions")
        if not histories:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        return self.lm.score(self.prompts(histories), [action_continuation(a) for a in actions])


def history_of(state: EpisodeState) -> History:
    """The policy's view of a running episode."""
    steps = tuple((turn.observation, turn.action) for turn in state.turns)
    return History(state.task_description, steps, state.observation, state.admissible)


def epsilon_mixed(
    admissible: Sequence[Sequence[str] | None],
    explore: Callable[[int], bool],
    pick: Callable[[int, int], int],
    decide: Callable[[list[int]], Sequence[Decision]],
) -> list[Decision]:
    """π^ε (Eq. eps-mix) over a batch: where ``explore(i)`` and item i has an admissible list,
    its ``pick(i, n)``-th of n admissible actions; every other item gets π's decision, from one
    ``decide(indices)`` call. The draws are the caller's, so the environment (each episode's
    generator) and imagination (common random numbers) mix ε by the same rule."""
    decisions: list[Decision | None] = [None] * len(admissible)
    ask: list[int] = []
    for i, actions in enumerate(admissible):
        if explore(i) and actions:
            action = actions[pick(i, len(actions))]
            decisions[i] = Decision(action, action)
        else:
            ask.append(i)
    if ask:
        for i, decision in zip(ask, decide(ask)):
            decisions[i] = decision
    return decisions


class PolicyAgent:
    """π^ε for the episode runner: one Bernoulli(ε) flip per step from the episode's
    generator; heads → a uniformly random admissible action, tails → the LLM's action
    (paper appendix 'ε-greedy mixing protocol'). The LLM is called once per batch."""

    needs_admissible = True
    needs_gold = False

    def __init__(self, policy: LLMPolicy, epsilon: float = 0.0) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.policy = policy
        self.epsilon = epsilon

    def act(self, states: Sequence[EpisodeState]) -> list[Decision]:
        return epsilon_mixed(
            [state.admissible for state in states],
            # drawn at every ε, so runs at different ε share flips
            explore=lambda i: states[i].rng.random() < self.epsilon,
            pick=lambda i, n: int(states[i].rng.integers(n)),
            decide=lambda ask: self.policy.act([history_of(states[i]) for i in ask]),
        )
