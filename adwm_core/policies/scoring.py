"""Action log-probabilities of text policies (appendix 'Behavior log-probability extraction').

log π(a|h) is the sum of the LLM's token log-probabilities over the action
span of ``prompt + action``. The span starts where the tokenisation of
``prompt + action`` stops agreeing with that of ``prompt`` (longest common
token prefix): when BPE merges characters across the boundary, the merged
token belongs to the span, instead of the span being shifted by one token.

ε-mixing is done at probability level, Eq. (eps-mix):
    π^ε(a|h) = (1-ε)·π(a|h) + ε·1[a ∈ A(h)]/|A(h)|,
in log space with ``logaddexp`` so no ratio underflows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .prefix_cache import PrefixStore


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token-id sequences."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def action_span(tokenizer, prompt: str, action: str) -> tuple[list[int], int]:
    """Token ids of ``prompt + action`` and the index of the first action token.

    The index is the longest common token prefix of ``prompt`` and
    ``prompt + action`` (at least one token is scored; at least one precedes it).
    """
    if not action:
        raise ValueError("cannot score an empty action")
    full = tokenizer(prompt + action, add_special_tokens=False)["input_ids"]
    head = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    start = min(common_prefix_length(head, full), len(full) - 1)
    if start == 0:
        raise ValueError(f"prompt {prompt!r} is too short: no token precedes the action {action!r} to predict it")
    return list(full), start


def fit_context(ids: list[int], start: int, limit: int) -> tuple[list[int], int]:
    """``(ids, start)`` of :func:`action_span` with the oldest prompt tokens dropped until
    prompt + action fit ``limit`` tokens: prompts are budgeted for the generated answer, and
    a logged action may be longer (a WebShop query); the action span itself is never cut."""
    excess = len(ids) - limit
    if excess <= 0:
        return ids, start
    if excess >= start:
        raise ValueError(f"an action of {len(ids) - start} tokens does not fit a {limit}-token context")
    return ids[excess:], start - excess


def context_limit(config, cap: int | None = None) -> int:
    """min(positions a causal LM with this transformers ``config`` takes, ``cap``); 2048
    positions when the config names none (neither ``max_position_embeddings`` nor ``n_positions``)."""
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 2048
    return min(limit, cap) if cap else limit


def eps_mix_logprob(logprob, epsilon: float, admissible, n_admissible) -> np.ndarray:
    """log π^ε(a|h) = log((1-ε)·exp(logprob) + ε·1[a∈A]/|A|), Eq. (eps-mix), computed stably.

    Arguments broadcast. ``logprob`` may be -inf (π gives the action no mass);
    the result is -inf only when both terms vanish.
    """
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    logprob = np.asarray(logprob, dtype=np.float64)
    admissible = np.asarray(admissible, dtype=bool)
    n_admissible = np.asarray(n_admissible, dtype=np.float64)
    if np.any(admissible & (n_admissible < 1)):
        raise ValueError("an admissible action needs an admissible set of at least one action")
    log_keep = math.log1p(-epsilon) if epsilon < 1.0 else -np.inf
    log_explore = math.log(epsilon) if epsilon > 0.0 else -np.inf
    uniform = np.where(admissible, log_explore - np.log(np.maximum(n_admissible, 1.0)), -np.inf)
    return np.logaddexp(logprob + log_keep, uniform)


def score_actions(model, tokenizer, prompts: Sequence[str], actions: Sequence[str], batch_size: int = 8,
                  max_context: int | None = None, store: PrefixStore | None = None,
                  on_batch: Callable[[int], None] | None = None):
    """log π(a_i | prompt_i) over each action span, and the span lengths in tokens.

    Forward passes of a causal LM (transformers) over the tokens ``store`` does not already hold
    (:func:`~.prefix_cache.read_new_tokens`; without a store every token is read), ``batch_size``
    items at a time in :func:`~.prefix_cache.interleaved_batches` so an episode's steps reuse each
    other's prompt; the sums are accumulated in float64; a prompt + action longer than the context
    loses its oldest prompt tokens (:func:`fit_context`); ``on_batch(n)`` is told of every batch of
    n items scored. Returns ``(logprobs, n_tokens)`` as numpy arrays.
    """
    from .prefix_cache import PrefixStore, interleaved_batches, read_new_tokens

    if len(prompts) != len(actions):
        raise ValueError(f"{len(prompts)} prompts but {len(actions)} actions")
    store = store if store is not None else PrefixStore(0)
    limit = context_limit(model.config, max_context)
    spans = [fit_context(*action_span(tokenizer, p, a), limit) for p, a in zip(prompts, actions)]
    store.tokens_asked += sum(len(ids) for ids, _ in spans)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    logprobs = np.empty(len(spans), dtype=np.float64)
    n_tokens = np.array([len(ids) - start for ids, start in spans], dtype=np.int64)
    for rows in interleaved_batches(len(spans), batch_size):
        ids = [np.asarray(spans[i][0], dtype=np.int64) for i in rows]
        starts = [spans[i][1] for i in rows]
        # token j is predicted at position j-1: the reused prefix stops before the span's first
        # prediction, and positions start-1 … len-1 are kept (the last predicts nothing)
        kept = read_new_tokens(model, ids, [start - 1 for start in starts], store, pad,
                               keep=[len(row) - start + 1 for row, start in zip(ids, starts)])
        for i, row, start, token_logp in zip(rows, ids, starts, kept):
            logprobs[i] = math.fsum(token_logp[np.arange(len(row) - start), row[start:]].tolist())
        if on_batch is not None:
            on_batch(len(rows))
    return logprobs, n_tokens
