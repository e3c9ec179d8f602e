"""π_e reading imagined states as soft tokens (Sec. 4.2 'Latent state and policy interface').

In imagination there is no observation text, only latents z. π_e conditions on
h̃_t = (õ_0, a_0, …, õ_t) with õ = G_ψ(z) ∈ R^{n_soft × d_LLM}: the prompt of
:class:`LLMPolicy` is rendered with a placeholder for every observation, cut there, the
text pieces are tokenised and embedded with π_e's own input embeddings, and each
observation's soft tokens go between them. The placeholder takes the place of
``" " + observation``, so with a byte-level BPE the pieces tokenise exactly as the text
prompt does around an observation (tested: given the observation's own token embeddings,
this policy acts and scores exactly as the text policy).

Needs the model's weights in this process: the transformers backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from ..envs.episodes import Decision
from .base import LLMPolicy
from .parsing import map_to_admissible, parse_action
from .prompts import History, action_continuation
from .scoring import action_span

PLACEHOLDER = "\u27e6observation\u27e7"  # ⟦observation⟧: never produced by an environment
_CUT = " " + PLACEHOLDER  # the prompt renders every observation as "Observation: " + text


class SoftPromptPolicy:
    """An :class:`LLMPolicy` whose observations arrive as input embeddings instead of text.

    ``observations`` arguments hold, per history, one ``(n_i, d_LLM)`` tensor per observation
    (the earlier turns' observations, then the current one); :meth:`act` and :meth:`logprob`
    take latents and read them through the ψ adapter ``adapter``."""

    def __init__(self, policy: LLMPolicy, adapter: torch.nn.Module) -> None:
        model = getattr(policy.lm, "model", None)
        if model is None or not hasattr(model, "get_input_embeddings"):
            raise TypeError(f"the soft-token reading needs π_e's weights in this process (backend 'transformers'); "
                            f"{type(policy.lm).__name__} hides them: use the retrieval reading")
        self.embedding = model.get_input_embeddings()
        if adapter.d_llm != self.embedding.embedding_dim:
            raise ValueError(f"the ψ adapter makes {adapter.d_llm}-dimensional soft tokens but π_e's embeddings have "
                             f"{self.embedding.embedding_dim} dimensions: train ψ for this π_e")
        self.device = next(model.parameters()).device
        self.policy, self.adapter, self.model = policy, adapter.to(self.device), model
        self.tokenizer = policy.lm.tokenizer
        self._ids: dict[str, list[int]] = {}

    def soft_tokens(self, latents: torch.Tensor) -> torch.Tensor:
        """õ = G_ψ(z): ``(..., d_z)`` → ``(..., n_soft, d_LLM)`` in the LLM's dtype and device."""
        return self.adapter(latents.to(self.device)).to(self.embedding.weight.dtype)

    def act(self, histories: Sequence[History], latents: Sequence[torch.Tensor]) -> list[Decision]:
        """Greedy actions given each history's observation latents ``(len(steps) + 1, d_z)``."""
        with torch.no_grad():
            return self.act_embedded(histories, [list(self.soft_tokens(z)) for z in latents])

    def logprob(self, histories: Sequence[History], latents: Sequence[torch.Tensor],
                actions: Sequence[str]) -> torch.Tensor:
        """log π_e(a_i | h̃_i), differentiable with respect to the latents: ``(N,)`` float32."""
        return self.logprob_embedded(histories, [list(self.soft_tokens(z)) for z in latents], actions)

    def act_embedded(self, histories: Sequence[History], observations: Sequence[Sequence[torch.Tensor]]) -> list[Decision]:
        if not histories:
            return []
        prompts = []
        for h, o in zip(histories, observations):
            head, last = self._segments(h, o)
            prompts.append(torch.cat([*head, self._embed(self._tokens(last))]))
        responses = []
        for lo in range(0, len(prompts), self.policy.lm.batch_size):
            embeds, mask = _pad(prompts[lo:lo + self.policy.lm.batch_size], left=True)
            generated = self.model.generate(inputs_embeds=embeds, attention_mask=mask, do_sample=False,
                                            max_new_tokens=self.policy.max_new_tokens,
                                            pad_token_id=self.tokenizer.pad_token_id)
            responses += self.tokenizer.batch_decode(generated, skip_special_tokens=True)
        return [Decision(map_to_admissible(parse_action(text), h.admissible), text)
                for h, text in zip(histories, responses)]

    def logprob_embedded(self, histories: Sequence[History], observations: Sequence[Sequence[torch.Tensor]],
                         actions: Sequence[str]) -> torch.Tensor:
        if not len(histories) == len(observations) == len(actions):
            raise ValueError(f"{len(histories)} histories, {len(observations)} observation lists, {len(actions)} actions")
        out = []
        for lo in range(0, len(histories), self.policy.lm.batch_size):
            rows, targets = [], []
            for h, o, a in zip(*(x[lo:lo + self.policy.lm.batch_size] for x in (histories, observations, actions))):
                head, last = self._segments(h, o)
                ids, start = action_span(self.tokenizer, last, action_continuation(a))
                offset = sum(len(s) for s in head)
                rows.append(torch.cat([*head, self._embed(ids)]))
                targets.append((offset + start, torch.tensor(ids[start:], device=self.device)))
            embeds, mask = _pad(rows, left=False)
            logp = torch.log_softmax(self.model(inputs_embeds=embeds, attention_mask=mask).logits.float(), -1)
            out += [logp[i, first - 1:first - 1 + len(tokens)].gather(-1, tokens[:, None]).sum()
                    for i, (first, tokens) in enumerate(targets)]
        return torch.stack(out)

    def _segments(self, history: History, observations: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], str]:
        """The prompt's input embeddings up to the last observation (text piece, observation,
        text piece, …), and the text after it, which ends with the action cue."""
        pieces = self._pieces(history, observations)
        kept = observations[len(observations) - (len(pieces) - 1):]
        segments = []
        for piece, observation in zip(pieces, kept):
            segments += [self._embed(self._tokens(piece)), observation.to(self.device, self.embedding.weight.dtype)]
        return segments, pieces[-1]

    def _pieces(self, history: History, observations: Sequence[torch.Tensor]) -> list[str]:
        """The prompt's text around the observations, oldest turns dropped until text and
        observation embeddings together fit π_e's prompt budget."""
        if len(observations) != len(history.steps) + 1:
            raise ValueError(f"a history of {len(history.steps)} turns needs {len(history.steps) + 1} observations, "
                             f"got {len(observations)}")
        steps = tuple((PLACEHOLDER, action) for _, action in history.steps)
        budget = self.policy.template.max_prompt_tokens
        while True:
            pieces = self.policy.template.render(replace(history, steps=steps, observation=PLACEHOLDER)).split(_CUT)
            kept = observations[len(observations) - (len(pieces) - 1):]
            if sum(map(len, map(self._tokens, pieces))) + sum(len(o) for o in kept) <= budget or not steps:
                return pieces
            steps = steps[1:]

    def _tokens(self, text: str) -> list[int]:
        if text not in self._ids:
            self._ids[text] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self._ids[text]

    def _embed(self, ids: Sequence[int]) -> torch.Tensor:
        return self.embedding(torch.tensor(list(ids), dtype=torch.long, device=self.device))


def _pad(rows: Sequence[torch.Tensor], *, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ``(L_i, d)`` rows into ``(N, max L, d)`` with zeros and a 0/1 attention mask."""
    width = max(len(r) for r in rows)
    embeds = rows[0].new_zeros((len(rows), width, rows[0].shape[-1]))
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=rows[0].device)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        embeds[i, span], mask[i, span] = row, 1
    return embeds, mask
