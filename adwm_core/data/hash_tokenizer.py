"""Stable hash-bucket tokenizer for observation text (app:wm-arch: vocabulary 32,768, 128 tokens).

Words and punctuation marks of the lower-cased text are hashed with BLAKE2b
into ``vocab_size − 2`` buckets (ids 0 and 1 are padding and end-of-text), so
the ids are the same on every machine and in every Python run (unlike
``hash()``, which is salted per process) and need no fitted vocabulary.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import torch

PAD_ID = 0
END_ID = 1
_TOKEN = re.compile(r"\w+|[^\w\s]")


class HashTokenizer:
    def __init__(self, vocab_size: int = 32768, max_length: int = 128) -> None:
        if vocab_size < 3 or max_length < 1:
            raise ValueError("vocab_size must exceed the 2 reserved ids and max_length be positive")
        self.vocab_size = vocab_size
        self.max_length = max_length
        self._ids: dict[str, int] = {}  # each distinct token is hashed once

    def token_id(self, token: str) -> int:
        if token not in self._ids:
            digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
            self._ids[token] = 2 + int.from_bytes(digest, "little") % (self.vocab_size - 2)
        return self._ids[token]

    def encode(self, text: str) -> list[int]:
        """Ids of the first ``max_length − 1`` tokens, then the end-of-text id."""
        tokens = _TOKEN.findall(text.lower())[: self.max_length - 1]
        return [self.token_id(t) for t in tokens] + [END_ID]

    def __call__(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Padded ids ``(B, L)`` and the padding mask (True at padding), L = longest in the batch."""
        if not texts:
            raise ValueError("nothing to tokenise: the list of texts is empty")
        encoded = [self.encode(t) for t in texts]
        width = max(len(ids) for ids in encoded)
        ids = torch.tensor([seq + [PAD_ID] * (width - len(seq)) for seq in encoded], dtype=torch.long)
        return ids, ids == PAD_ID
