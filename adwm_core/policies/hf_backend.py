"""transformers backend: batched greedy generation with the KV cache, and batched scoring.

On a GPU the model runs in bfloat16 when the device supports it, else float16;
on CPU in float32 (bf16 matmuls are slow on CPUs without AMX and cost accuracy
in log-probs that importance ratios multiply).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .base import LanguageModel
from .scoring import context_limit, score_actions


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
    ) -> None:
        auto_device, auto_dtype = default_device_and_dtype()
        self.device = device or auto_device
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "left"  # generation continues every row from its last column
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or auto_dtype).to(self.device).eval()
        self.max_context = context_limit(self.model.config, max_context)

    @torch.no_grad()
    def mean_input_embeddings(self, texts: Sequence[str]) -> np.ndarray:
        encoded = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        encoded = [ids or [self.tokenizer.eos_token_id] for ids in encoded]
        flat = torch.tensor([i for ids in encoded for i in ids], device=self.device)
        offsets = torch.tensor(np.cumsum([0] + [len(ids) for ids in encoded[:-1]]), device=self.device)
        weight = self.model.get_input_embeddings().weight
        return torch.nn.functional.embedding_bag(flat, weight, offsets, mode="mean").float().cpu().numpy()

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        out: list[str] = [""] * len(prompts)
        order = np.argsort([len(p) for p in prompts])  # similar lengths share a batch: less padding
        for lo in range(0, len(prompts), self.batch_size):
            rows = order[lo : lo + self.batch_size]
            batch = self.tokenizer(
                [prompts[i] for i in rows], return_tensors="pt", padding=True, add_special_tokens=False
            ).to(self.device)
            with torch.no_grad():
                generated = self.model.generate(
                    **batch,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    use_cache=True,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
            texts = self.tokenizer.batch_decode(generated[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
            for i, text in zip(rows, texts):
                out[i] = text
        return out

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return score_actions(self.model, self.tokenizer, prompts, continuations, batch_size=self.batch_size,
                             max_context=self.max_context)
