"""Observation and history encoders of the world model (app:wm-arch, Table wm-arch; d_z = 64).

- :class:`ObservationEncoder` f_θ: hash-token ids → token embeddings (32,768 × 128) + learned
  positions (128) → 4-layer Transformer encoder (width 128, 4 heads, feed-forward 512) →
  masked mean → 2-layer SiLU MLP 128 → 256 → d_z. 5.053 M parameters.
- :class:`HistoryEncoder` h̄: (z_t, e(a_t)) → linear to 128 → learned positions (64 steps) →
  causal 4-layer Transformer (subsequent-token mask) → LayerNorm. 0.814 M parameters.
- :class:`ActionEmbedding`: |A| × d_a table (|A| ≤ 256, d_a = 32), index 0 = ∅ (no action,
  the classifier-free-guidance null token) — |A|·d_a parameters.
- :class:`ActionTextEncoder` (beyond the paper, ``action_input="text"``): e(a_t | o_t) read from
  the action's words *against the observation it is taken in* — f_θ's hash-token embeddings
  (shared, so "eat grape" and "Simon says, 'eat grape'" meet in one space) → one Transformer
  decoder layer whose cross-attention reads f_θ's token states of o_t → masked mean → SiLU MLP →
  d_a. Whether an action fits its state (the command named, an object in the room) becomes a
  matter of attention between words, which carries to states and actions never logged
  together. Without an observation (the actions inside h̄, FQE's features) the layer attends to
  one learned "no observation" state; ∅ is a learned vector. With ``word_match`` each action
  token also adds a learned vector for "this word occurs in the observation" (the exact-match
  feature of reading comprehension), so "the action repeats the command" needs no attention
  learnt from a few hundred transitions.
"""

from __future__ import annotations

import torch
from torch import nn

WIDTH = 128
HEADS = 4
FEED_FORWARD = 512
LAYERS = 4


def _transformer(width: int = WIDTH, layers: int = LAYERS) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(
        width, HEADS, FEED_FORWARD, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    )
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


class ObservationEncoder(nn.Module):
    def __init__(self, d_z: int = 64, vocab_size: int = 32768, max_length: int = 128) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, WIDTH, padding_idx=0)
        self.positions = nn.Embedding(max_length, WIDTH)
        self.transformer = _transformer()
        self.project = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.SiLU(), nn.Linear(2 * WIDTH, d_z))

    def token_states(self, ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` ids and padding mask → ``(B, L, 128)`` contextual token states."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.transformer(self.tokens(ids) + self.positions(positions), src_key_padding_mask=padding)

    def pool(self, states: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        """Masked mean of the token states → MLP → ``(B, d_z)``."""
        keep = (~padding).unsqueeze(-1).to(states.dtype)
        return self.project((states * keep).sum(1) / keep.sum(1).clamp_min(1.0))

    def forward(self, ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` ids and padding mask → ``(B, d_z)``."""
        return self.pool(self.token_states(ids, padding), padding)


class ActionEmbedding(nn.Embedding):
    """e(a) for the action vocabulary's ids (0 = ∅, data/actions.py)."""

    def __init__(self, n_actions: int = 256, d_a: int = 32) -> None:
        super().__init__(n_actions, d_a)


class HistoryEncoder(nn.Module):
    def __init__(self, d_z: int = 64, d_a: int = 32, max_steps: int = 64) -> None:
        super().__init__()
        self.inp = nn.Linear(d_z + d_a, WIDTH)
        self.positions = nn.Embedding(max_steps, WIDTH)
        self.transformer = _transformer()
        self.norm = nn.LayerNorm(WIDTH)

    def forward(self, z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """``(B, T, d_z)`` latents and ``(B, T, d_a)`` action embeddings → ``(B, T, 128)``;
        output t sees steps ≤ t only."""
        steps = z.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(steps, device=z.device)
        x = self.inp(torch.cat([z, a], dim=-1)) + self.positions(torch.arange(steps, device=z.device))
        return self.norm(self.transformer(x, mask=mask, is_causal=True))


class ActionTextEncoder(nn.Module):
    """e(a | o) from token embeddings of the action text and token states of the observation."""

    def __init__(self, d_a: int = 32, max_length: int = 16, word_match: bool = False) -> None:
        super().__init__()
        self.positions = nn.Embedding(max_length, WIDTH)
        self.match = nn.Embedding(2, WIDTH, padding_idx=0) if word_match else None  # unmatched words add 0
        layer = nn.TransformerDecoderLayer(WIDTH, HEADS, FEED_FORWARD, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, 1)
        self.no_observation = nn.Parameter(torch.zeros(1, 1, WIDTH))
        self.project = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.SiLU(), nn.Linear(WIDTH, d_a))
        self.null = nn.Parameter(torch.zeros(d_a))

    def forward(self, tokens: torch.Tensor, padding: torch.Tensor, observation: torch.Tensor | None = None,
                observation_padding: torch.Tensor | None = None, matched: torch.Tensor | None = None) -> torch.Tensor:
        """``(A, L, 128)`` token embeddings and padding of the actions, ``(A, W, 128)`` token states
        and padding of their observations (``None``: no observation), and with ``word_match``
        ``(A, L)`` whether each action token occurs in its observation → ``(A, d_a)``."""
        if observation is None:
            observation = self.no_observation.expand(len(tokens), 1, -1)
            observation_padding = torch.zeros(len(tokens), 1, dtype=torch.bool, device=tokens.device)
        x = tokens + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        if self.match is not None:
            x = x + self.match(matched.long())
        x = self.decoder(x, observation, tgt_key_padding_mask=padding, memory_key_padding_mask=observation_padding)
        keep = (~padding).unsqueeze(-1).to(x.dtype)
        return self.project((x * keep).sum(1) / keep.sum(1).clamp_min(1.0))
