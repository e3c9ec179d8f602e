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
from collections.abc import Sequence

import numpy as np


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
                  max_context: int | None = None):
    """log π(a_i | prompt_i) over each action span, and the span lengths in tokens.

    Batched forward passes of a causal LM (transformers), right-padded; the sums
    are accumulated in float64; a prompt + action longer than the context loses its
    oldest prompt tokens (:func:`fit_context`). Returns ``(logprobs, n_tokens)`` as numpy arrays.
    """
    import torch

    if len(prompts) != len(actions):
        raise ValueError(f"{len(prompts)} prompts but {len(actions)} actions")
    limit = context_limit(model.config, max_context)
    spans = [fit_context(*action_span(tokenizer, p, a), limit) for p, a in zip(prompts, actions)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(model.parameters()).device
    logprobs = np.empty(len(spans), dtype=np.float64)
    n_tokens = np.array([len(ids) - start for ids, start in spans], dtype=np.int64)
    for lo in range(0, len(spans), batch_size):
        chunk = spans[lo : lo + batch_size]
        width = max(len(ids) for ids, _ in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, (tokens, _) in enumerate(chunk):
            ids[row, : len(tokens)] = torch.tensor(tokens)
            mask[row, : len(tokens)] = 1
        first = min(start for _, start in chunk) - 1  # token j is predicted at position j-1
        with torch.no_grad():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits[:, first:-1].float()
        token_logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, first + 1 :, None].to(device))[..., 0]
        token_logp = token_logp.double().cpu()
        for row, (tokens, start) in enumerate(chunk):
            logprobs[lo + row] = token_logp[row, start - 1 - first : len(tokens) - 1 - first].sum().item()
    return logprobs, n_tokens
