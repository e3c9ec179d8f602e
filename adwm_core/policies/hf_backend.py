"""transformers backend: batched greedy generation with the KV cache, and batched scoring, both
reading only the tokens past the longest prefix they share with a recent call's (:mod:`.prefix_cache`).

On a GPU the model runs in bfloat16 when the device supports it, else float16;
on CPU in float32 (bf16 matmuls are slow on CPUs without AMX and cost accuracy
in log-probs that importance ratios multiply).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import torch
from transformers import AttentionInterface, AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .base import LanguageModel
from .prefix_cache import (DEFAULT_BYTES, PrefixStore, interleaved_batches, keep_rows, ragged_batch, read_new_tokens,
                           reserved_layers, reusable)
from .scoring import context_limit, score_actions


def grouped_query_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                            is_causal=None, **_):
    """transformers' SDPA attention without copying each key/value head for the query heads that share it
    (``enable_gqa``): the same products, and in a decoding step over a long cache a third of the memory
    traffic of SmolLM2's 9 query heads on 3 key/value heads. ``attention_mask`` is the boolean or additive
    4-D mask transformers builds for SDPA; without one, a prompt is read causally."""
    is_causal = query.shape[2] > 1 and attention_mask is None and (is_causal if is_causal is not None else True)
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=is_causal,
        enable_gqa=key.shape[1] != query.shape[1])
    return output.transpose(1, 2).contiguous(), None


GROUPED_QUERY_ATTENTION = "adwm_grouped_query_sdpa"
AttentionInterface.register(GROUPED_QUERY_ATTENTION, grouped_query_attention)
AttentionMaskInterface.register(GROUPED_QUERY_ATTENTION, sdpa_mask)  # the masks SDPA takes


def default_device_and_dtype() -> tuple[str, torch.dtype]:
    if torch.cuda.is_available():
        return "cuda", torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return "cpu", torch.float32


class TransformersLM(LanguageModel):
    def __init__(
        self,
        path: str,
        *,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        batch_size: int = 16,
        max_context: int | None = 2048,
        prefix_cache_bytes: int = DEFAULT_BYTES,
    ) -> None:
        auto_device, auto_dtype = default_device_and_dtype()
        self.device = device or auto_device
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "left"  # generation continues every row from its last column
        config = AutoConfig.from_pretrained(path)
        grouped = getattr(config, "num_key_value_heads", None) not in (None, getattr(config, "num_attention_heads", None))
        self.model = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype or auto_dtype, **({"attn_implementation": GROUPED_QUERY_ATTENTION} if grouped else {})
        ).to(self.device).eval()
        self.max_context = context_limit(self.model.config, max_context)
        # prefix_cache_bytes=0 reads every prompt whole (the same values, to float rounding)
        self.n_layers = reserved_layers(self.model.config)
        self.prefix_store = PrefixStore(prefix_cache_bytes if reusable(self.model.config) else 0)
        self._calls = threading.Lock()  # one call at a time on the store (a cell's stages may share the model)

    @torch.no_grad()
    def mean_input_embeddings(self, texts: Sequence[str]) -> np.ndarray:
        encoded = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        encoded = [ids or [self.tokenizer.eos_token_id] for ids in encoded]
        flat = torch.tensor([i for ids in encoded for i in ids], device=self.device)
        offsets = torch.tensor(np.cumsum([0] + [len(ids) for ids in encoded[:-1]]), device=self.device)
        weight = self.model.get_input_embeddings().weight
        return torch.nn.functional.embedding_bag(flat, weight, offsets, mode="mean").float().cpu().numpy()

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy continuations, ``batch_size`` prompts at a time (consecutive prompts in consecutive
        batches, :func:`~.prefix_cache.interleaved_batches`), each batch reading only what the prefix
        store lacks; the prompts' states are stored for the next call."""
        encoded = [np.asarray(ids, dtype=np.int64)
                   for ids in self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]
        out: list[str] = [""] * len(prompts)
        with self._calls:
            store = self.prefix_store
            store.tokens_asked += sum(len(ids) for ids in encoded)
            for rows in interleaved_batches(len(prompts), self.batch_size):
                ids = [encoded[i] for i in rows]
                if store.max_bytes:  # all but each prompt's last token into the store, in batches of little padding
                    read_new_tokens(self.model, [row[:-1] for row in ids], [len(row) - 1 for row in ids], store,
                                    self.tokenizer.pad_token_id, keep=[0] * len(ids))
                # generation starts from the last prompt token's logits: at least that token is read here
                matches = [store.match(row, len(row) - 1) for row in ids]
                store.tokens_read += sum(len(row) - length for row, (_, length) in zip(ids, matches))
                batch = ragged_batch(ids, matches, self.tokenizer.pad_token_id, self.device, self.n_layers,
                                     room=max_new_tokens)
                with torch.no_grad():
                    generated = self.model.generate(
                        input_ids=batch.input_ids,
                        attention_mask=batch.attention_mask,
                        past_key_values=batch.cache,
                        max_new_tokens=max_new_tokens,
                        do_sample=False,
                        use_cache=True,
                        pad_token_id=self.tokenizer.pad_token_id,
                    )
                width = batch.input_ids.shape[1]
                for i, text in zip(rows, self.tokenizer.batch_decode(generated[:, width:], skip_special_tokens=True)):
                    out[i] = text
                keep_rows(store, batch, ids)
                if self.on_items is not None:
                    self.on_items(len(rows))
        return out

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        with self._calls:
            return score_actions(self.model, self.tokenizer, prompts, continuations, batch_size=self.batch_size,
                                 max_context=self.max_context, store=self.prefix_store, on_batch=self.on_items)
