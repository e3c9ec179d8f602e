"""Reading only what is new: key/value states of recent token sequences, reused across calls.

An episode's prompt at step t+1 repeats its prompt at step t up to the newest observation, and
every prompt of an environment opens with the same instruction. A causal LM's key/value states
of a token depend only on the tokens before it, so the states of the longest token prefix a new
sequence shares with a sequence read before are those of the earlier read: only the tokens past
it need a forward pass. :class:`PrefixStore` keeps the states of recently read sequences (least
recently used out first, within a byte budget); :func:`ragged_batch` lays a batch out as
``[pad | reused | pad | new]`` per row, so rows that reuse different lengths share one forward
pass: the reused columns come from the store, masked padding separates them from each row's new
tokens, and position ids follow the mask (``cumsum - 1``), as transformers' ``generate`` derives
them. Masked columns carry exactly zero attention, so each row's states and logits are those of
reading it alone, to float rounding.

Models whose layers keep anything but full-attention key/value states (sliding windows,
recurrent layers) cannot be served from a prefix: :func:`reusable` says no for them, and their
store holds nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers.cache_utils import Cache, DynamicLayer

DEFAULT_BYTES = 2 * 2**30  # a CPU machine's share for one model's reused states


@dataclass(frozen=True)
class CachedSequence:
    """One read sequence: its token ids and each layer's (keys, values), shaped (heads, tokens, head_dim)."""

    ids: np.ndarray
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]

    @property
    def nbytes(self) -> int:
        return sum(k.element_size() * k.nelement() + v.element_size() * v.nelement() for k, v in self.layers)


class PrefixStore:
    """Key/value states of recently read sequences within ``max_bytes`` (0: keep nothing), with
    counts of the prompt tokens its model was asked to read and of those it had to read.

    The stored token ids also lie as rows of one matrix, padded with −1 (no token's id), so that
    a sequence's common prefix with every stored one is one comparison of arrays; each row's last
    use is stamped, so that of equally long prefixes the least recently used serves, as a walk
    over the entries from the oldest would choose."""

    def __init__(self, max_bytes: int = DEFAULT_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"a prefix store's budget is a number of bytes >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, CachedSequence] = OrderedDict()  # by row, least recently used first
        self._ids = np.full((0, 0), -1, dtype=np.int64)
        self._lengths = np.zeros(0, dtype=np.int64)  # per row: its sequence's length, -1 where the row is free
        self._last_used = np.zeros(0, dtype=np.int64)
        self._clock = 0
        self.bytes = 0
        self.tokens_asked = 0
        self.tokens_read = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _common_prefixes(self, ids: np.ndarray) -> np.ndarray:
        """Per row, the length of its sequence's longest common prefix with ``ids`` (0 for a free row)."""
        width = min(len(ids), self._ids.shape[1])
        if width == 0:
            return np.zeros(len(self._ids), dtype=np.int64)
        differs = self._ids[:, :width] != np.asarray(ids)[:width]
        return np.where(differs.any(1), differs.argmax(1), width)

    def _use(self, row: int) -> None:
        self._last_used[row], self._clock = self._clock, self._clock + 1

    def _drop(self, row: int) -> None:
        self.bytes -= self._entries.pop(row).nbytes
        self._ids[row], self._lengths[row] = -1, -1

    def _free_row(self, length: int) -> int:
        """A free row of the matrix at least ``length`` wide, the matrix grown where it has none."""
        rows, width = self._ids.shape
        if length > width:
            self._ids = np.pad(self._ids, ((0, 0), (0, max(length, 2 * width) - width)), constant_values=-1)
        free = np.flatnonzero(self._lengths < 0)
        if len(free):
            return int(free[0])
        grown = max(2 * rows, 16)
        self._ids = np.pad(self._ids, ((0, grown - rows), (0, 0)), constant_values=-1)
        self._lengths = np.pad(self._lengths, (0, grown - rows), constant_values=-1)
        self._last_used = np.pad(self._last_used, (0, grown - rows))
        return rows

    def match(self, ids: np.ndarray, limit: int) -> tuple[CachedSequence | None, int]:
        """The stored sequence sharing the longest prefix with ``ids``, and that length capped at ``limit``."""
        lengths = self._common_prefixes(ids)
        length = int(lengths.max(initial=0))
        if length == 0:
            return None, 0
        longest = np.flatnonzero(lengths == length)
        row = int(longest[np.argmin(self._last_used[longest])])
        self._entries.move_to_end(row)
        self._use(row)
        length = min(length, limit)
        return (self._entries[row], length) if length > 0 else (None, 0)

    def add(self, entry: CachedSequence) -> None:
        """Keep ``entry``, dropping stored sequences it extends and then the least recently used."""
        size = entry.nbytes
        if size > self.max_bytes:
            return
        for row in np.flatnonzero(self._common_prefixes(entry.ids) == self._lengths):
            self._drop(int(row))
        while self.bytes + size > self.max_bytes:
            self._drop(next(iter(self._entries)))
        row = self._free_row(len(entry.ids))
        self._ids[row, :len(entry.ids)], self._lengths[row] = entry.ids, len(entry.ids)
        self._entries[row] = entry
        self._use(row)
        self.bytes += size


def reusable(config) -> bool:
    """Whether every layer of a transformers model with this ``config`` keeps plain full-attention states."""
    text = config.get_text_config(decoder=True)
    layer_types = getattr(text, "layer_types", None) or ()
    return getattr(text, "sliding_window", None) is None and all(kind == "full_attention" for kind in layer_types)


def reserved_layers(config) -> int | None:
    """The layers of a :class:`ReservedLayer` cache for a model with this ``config``; None where its
    states cannot be reused (the model keeps its own cache)."""
    return config.get_text_config(decoder=True).num_hidden_layers if reusable(config) else None


class ReservedLayer(DynamicLayer):
    """One layer's keys and values in a buffer sized once for the whole call (reused columns, new
    tokens and the tokens still to generate): a decoding step writes its column in place, where a
    growing cache would copy every earlier column (``torch.cat``) at every step."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity, self.length = capacity, 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.allocate(key_states, value_states.shape[-1])

    def allocate(self, like: torch.Tensor, value_dim: int) -> None:
        rows, heads, _, key_dim = like.shape
        self.dtype, self.device = like.dtype, like.device
        self._keys = torch.zeros((rows, heads, self.capacity, key_dim), dtype=like.dtype, device=like.device)
        self._values = torch.zeros((rows, heads, self.capacity, value_dim), dtype=like.dtype, device=like.device)
        self.is_initialized = True
        self._show()

    def _show(self) -> None:
        self.keys, self.values = self._keys[:, :, :self.length], self._values[:, :, :self.length]

    def reuse(self, row: int, end: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Row ``row``'s stored states (heads, tokens, dim) as its columns up to ``end``, which the
        layer then holds for every row."""
        self._keys[row, :, end - keys.shape[1]:end], self._values[row, :, end - keys.shape[1]:end] = keys, values
        self.length = end
        self._show()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"a reserved cache of {self.capacity} columns was asked for {end}")
        self._keys[:, :, self.length:end], self._values[:, :, self.length:end] = key_states, value_states
        self.length = end
        self._show()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length


@dataclass
class RaggedBatch:
    """Rows laid out as ``[pad | reused | pad | new]``: the full ids and mask, and a cache holding the
    reused columns ``[0, reused)`` with room for every column the call will add."""

    input_ids: torch.Tensor  # (rows, reused + new)
    attention_mask: torch.Tensor
    cache: Cache | None
    reused: int

    @property
    def new_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.reused:]

    @property
    def position_ids(self) -> torch.Tensor:
        """Positions of the new columns: each row's count of unmasked columns before them."""
        positions = self.attention_mask.long().cumsum(-1) - 1
        return positions.masked_fill(self.attention_mask == 0, 0)[:, self.reused:]


Match = tuple[CachedSequence | None, int]  # a stored sequence and how many of its first tokens a row reuses


def ragged_batch(rows: Sequence[np.ndarray], matches: Sequence[Match], pad_id: int, device, n_layers: int | None,
                 room: int = 0) -> RaggedBatch:
    """The batch of token-id ``rows``, row i reusing the first ``matches[i][1]`` tokens' states of
    the stored ``matches[i][0]``; its cache (``n_layers`` layers) has room for ``room`` more columns
    past the batch (the tokens a generation adds). ``n_layers=None`` (a model whose states cannot
    be reused, so no row reuses any) leaves the cache to the model."""
    reused = max(length for _, length in matches)
    width = reused + max(len(ids) - length for ids, (_, length) in zip(rows, matches))
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, (ids, (_, length)) in enumerate(zip(rows, matches)):
        tokens = torch.as_tensor(ids, dtype=torch.long)
        input_ids[row, reused - length:reused], mask[row, reused - length:reused] = tokens[:length], 1
        input_ids[row, width - (len(ids) - length):], mask[row, width - (len(ids) - length):] = tokens[length:], 1
    if n_layers is None:
        return RaggedBatch(input_ids.to(device), mask.to(device), None, reused)
    layers = [ReservedLayer(width + room) for _ in range(n_layers)]
    if reused:
        donor = next(entry for entry, _ in matches if entry is not None).layers
        for index, (layer, (keys, values)) in enumerate(zip(layers, donor)):
            layer.allocate(keys.new_empty((len(rows), keys.shape[0], 0, keys.shape[2])), values.shape[2])
            for row, (entry, length) in enumerate(matches):
                if length:
                    layer.reuse(row, reused, *(part[:, :length] for part in entry.layers[index]))
    return RaggedBatch(input_ids.to(device), mask.to(device), Cache(layers=layers), reused)


def similar_lengths(counts: Sequence[int], max_tokens: int, spread: float = 1.25) -> list[list[int]]:
    """Groups of indices into ``counts``, ascending, each padded to its largest count wasting at most
    about ``spread - 1`` of its columns and holding at most ``max_tokens`` padded tokens (one forward pass)."""
    groups: list[list[int]] = []
    for i in np.argsort(counts, kind="stable"):
        group = groups[-1] if groups else None
        if group and counts[i] <= spread * counts[group[0]] + 8 and (len(group) + 1) * counts[i] <= max_tokens:
            group.append(int(i))
        else:
            groups.append([int(i)])
    return groups


def read_new_tokens(model, rows: Sequence[np.ndarray], limits: Sequence[int], store: PrefixStore, pad_id: int,
                    keep: Sequence[int], max_tokens: int = 4096) -> list[torch.Tensor | None]:
    """Forward passes over each row's tokens past its longest stored prefix (at most ``limits[i]``
    tokens of it), rows with similar counts of new tokens together so that little is padding; each
    row's states are stored, and the log-probabilities (float64, ``(keep[i], vocab)``) at its last
    ``keep[i]`` positions returned (None where ``keep[i]`` is 0)."""
    matches = [store.match(ids, limit) for ids, limit in zip(rows, limits)]
    counts = [len(ids) - length for ids, (_, length) in zip(rows, matches)]
    store.tokens_read += sum(counts)
    device = next(model.parameters()).device
    n_layers = reserved_layers(model.config)
    found: list[torch.Tensor | None] = [None] * len(rows)
    for group in similar_lengths(counts, max_tokens):
        group = [i for i in group if counts[i] > 0]
        if not group:
            continue
        batch = ragged_batch([rows[i] for i in group], [matches[i] for i in group], pad_id, device, n_layers)
        kept = max(max(keep[i] for i in group), 1)
        with torch.no_grad():
            out = model(input_ids=batch.new_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                        past_key_values=batch.cache, use_cache=True, logits_to_keep=kept)
        keep_rows(store, batch, [rows[i] for i in group])
        if any(keep[i] for i in group):
            logprobs = torch.log_softmax(out.logits.float(), dim=-1).double().cpu()
            for k, i in enumerate(group):
                found[i] = logprobs[k, kept - keep[i]:] if keep[i] else None
    return found


def keep_rows(store: PrefixStore, batch: RaggedBatch, rows: Sequence[np.ndarray]) -> None:
    """Store each row's states over its own columns of ``batch`` (the prompt's, not the columns a
    generation added after them); a store with no budget skips the copy."""
    if store.max_bytes == 0:
        return
    width = batch.input_ids.shape[1]
    layers = [(layer.keys[:, :, :width], layer.values[:, :, :width]) for layer in batch.cache.layers]
    for row, ids in enumerate(rows):
        columns = torch.nonzero(batch.attention_mask[row]).flatten().to(layers[0][0].device)
        store.add(CachedSequence(np.asarray(ids), tuple(
            (keys[row].index_select(1, columns), values[row].index_select(1, columns)) for keys, values in layers)))


def interleaved_batches(n: int, batch_size: int) -> list[list[int]]:
    """Batches over items ``0..n-1`` that cut the list into ``batch_size`` runs and take the k-th item of
    every run into batch k: consecutive items (an episode's steps) fall in consecutive batches, so
    each finds its predecessor's states stored."""
    runs = np.array_split(np.arange(n), min(batch_size, n)) if n else []
    return [[int(run[k]) for run in runs if k < len(run)] for k in range(max((len(r) for r in runs), default=0))]
