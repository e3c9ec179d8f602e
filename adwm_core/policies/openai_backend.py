"""An agent behind an OpenAI-compatible HTTP endpoint (vLLM's ``vllm serve``, SGLang, TGI, a
hosted API), reached the way agent harnesses reach one: a ``base_url`` and a model name.

Two modes:

- ``completions`` (default): the prompt is rendered here with the model's own tokenizer
  (its chat template included) and sent as token ids, so the endpoint continues exactly the
  sequence the in-process backends would; action log-probs are read from the prompt tokens'
  log-probabilities (``echo`` + ``logprobs``), summed over the action span found as in
  :func:`scoring.action_span`;
- ``chat``: the instruction and history go as system and user messages and the endpoint
  applies its template; chat endpoints cannot score a given action, so :meth:`score` raises
  :class:`LogprobsUnavailable` and the importance-sampling estimators report themselves not
  applicable.

The tokenizer (``tokenizer``, default: the model name) fits prompts to the context; it must be
a local folder or in the Hugging Face cache. Requests run ``concurrency`` at a time; the
``openai`` client retries 429, 5xx and connection errors with exponential backoff
(``max_retries``) and gives up on a request after ``timeout`` seconds. The API key is read
from the environment variable ``api_key_env`` (local servers accept any key).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..endpoints import check_tokenizer
from .base import LanguageModel, LogprobsUnavailable
from .scoring import action_span, fit_context

MODES = ("completions", "chat")


class OpenAICompatibleLM(LanguageModel):
    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        mode: str = "completions",
        tokenizer: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        max_retries: int = 5,
        timeout: float = 120.0,
        max_context: int | None = 2048,
    ) -> None:
        import openai
        from transformers import AutoTokenizer

        if mode not in MODES:
            raise ValueError(f"openai backend: mode {mode!r} is not one of {MODES}")
        if concurrency < 1:
            raise ValueError(f"openai backend: concurrency must be at least 1, got {concurrency}")
        self.model, self.mode, self.concurrency = model, mode, concurrency
        self.chat = mode == "chat"
        check_tokenizer(tokenizer or model, "options.tokenizer (--agent-tokenizer)")  # no hub retries offline
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer or model)
        except (OSError, ValueError) as error:
            raise FileNotFoundError(
                f"openai backend: no tokenizer for {tokenizer or model!r} on this machine ({error}); it fits prompts "
                "to the context and finds action spans: set the policy's options.tokenizer (--agent-tokenizer) to a "
                "local folder or a hub name in the Hugging Face cache") from None
        self.client = openai.OpenAI(base_url=base_url, api_key=os.environ.get(api_key_env) or "EMPTY",
                                    max_retries=max_retries, timeout=timeout)
        served = self._served_context(openai)
        self.max_context = min(filter(None, (max_context, served)), default=2048)
        # scoring asks for one generated token after the prompt (servers refuse max_tokens=0), so
        # prompt + action get one position less than the server's length
        self.score_context = min(self.max_context, served - 1) if served else self.max_context

    def _served_context(self, openai) -> int | None:
        """The model's context length as the server reports it (vLLM: ``max_model_len``); an
        unreachable server or an unknown model is an error here, before any episode."""
        try:
            models = self.client.models.list().data
        except openai.APIConnectionError as error:
            raise ConnectionError(f"openai backend: no OpenAI-compatible server answers at {self.client.base_url} "
                                  f"({error}); start it (e.g. `vllm serve <model>`) or fix base_url") from None
        except openai.APIStatusError as error:  # 401 without the right key, 404 without /models, …
            raise ConnectionError(f"openai backend: the server at {self.client.base_url} answered GET /models with "
                                  f"status {error.status_code} ({error.message}); check base_url and the API key "
                                  "variable (api_key_env)") from None
        ids = [m.id for m in models]
        if self.model not in ids:
            raise ValueError(f"openai backend: the server at {self.client.base_url} serves {ids}, not {self.model!r}")
        entry = next(m for m in models if m.id == self.model)
        return (entry.model_extra or {}).get("max_model_len")

    def _map(self, request: Callable, items: Sequence) -> list:
        """``request(item)`` for every item, ``concurrency`` in flight, results in input order; the
        first failure cancels every request not yet started and is raised."""
        if not items:
            return []
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(items)))
        futures = [pool.submit(request, item) for item in items]
        try:
            return [future.result() for future in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy continuations of rendered prompts (completions mode)."""
        if self.chat:
            raise TypeError("openai backend in chat mode generates from messages: call generate_chat")

        def complete(ids: list[int]) -> str:
            reply = self.client.completions.create(model=self.model, prompt=ids, max_tokens=max_new_tokens,
                                                   temperature=0.0)
            return reply.choices[0].text

        # tokenised here, not in the request threads: a fast tokenizer is not safe to share across threads
        return self._map(complete, [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts])

    def generate_chat(self, conversations: Sequence[list[dict]], max_new_tokens: int) -> list[str]:
        """Greedy replies to message lists (chat mode)."""
        def reply(messages: list[dict]) -> str:
            answer = self.client.chat.completions.create(model=self.model, messages=messages,
                                                         max_tokens=max_new_tokens, temperature=0.0)
            return answer.choices[0].message.content or ""

        return self._map(reply, conversations)

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        if self.chat:
            raise LogprobsUnavailable(f"{self.model} is reached through a chat endpoint, which cannot score a given "
                                      "action; use mode 'completions' on a server that echoes prompt log-probs")
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        spans = [fit_context(*action_span(self.tokenizer, p, c), self.score_context)
                 for p, c in zip(prompts, continuations)]

        def span_logprob(span: tuple[list[int], int]) -> float:
            ids, start = span
            reply = self.client.completions.create(model=self.model, prompt=ids, max_tokens=1, temperature=0.0,
                                                   echo=True, logprobs=0)
            found = reply.choices[0].logprobs
            values = None if found is None else found.token_logprobs
            if values is None or len(values) < len(ids) or any(v is None for v in values[start:len(ids)]):
                raise RuntimeError(f"the server at {self.client.base_url} returned no prompt log-probs for "
                                   f"{self.model} (completions with echo + logprobs): serve it with vLLM, or use "
                                   "mode 'chat', where the importance-sampling estimators sit out")
            return math.fsum(values[start:len(ids)])

        logprobs = np.array(self._map(span_logprob, spans), dtype=np.float64)
        return logprobs, np.array([len(ids) - start for ids, start in spans], dtype=np.int64)
