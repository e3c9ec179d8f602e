"""The world model's action vocabulary (app:wm-arch).

Ids: 0 = ∅ (no action: the classifier-free-guidance null and the action before the
first step), 1 = ⟨unk⟩ (an action outside the vocabulary), then the behaviour pool's
most frequent action strings (ties alphabetical) up to a total of 256. HotpotQA uses
the fixed ReAct vocabulary {⟨unk⟩, search, lookup, finish}: an action maps to its type,
the text before ``[``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

NULL, UNKNOWN = 0, 1
MAX_ACTIONS = 256
REACT_TYPES = ("search", "lookup", "finish")
_REACT = re.compile(r"^\s*(\w+)\s*\[")


def normal_action(action: str) -> str:
    """An action as it is compared: lower case, single spaces."""
    return " ".join(action.lower().split())


@dataclass(frozen=True)
class ActionVocabulary:
    actions: tuple[str, ...]  # the strings behind ids 2, 3, …
    react: bool = False  # map an action to its ReAct type before lookup

    @classmethod
    def from_actions(cls, actions: Iterable[str], cap: int | None = MAX_ACTIONS) -> "ActionVocabulary":
        """The most frequent actions, up to ``cap`` ids in all (``None``: every distinct action)."""
        if cap is not None and cap < 3:
            raise ValueError(f"an action vocabulary needs room for ∅, ⟨unk⟩ and one action; got cap={cap}")
        counts = Counter(normal_action(a) for a in actions)
        ranked = sorted(counts, key=lambda a: (-counts[a], a))
        return cls(tuple(ranked if cap is None else ranked[: cap - 2]))

    @classmethod
    def for_react(cls) -> "ActionVocabulary":
        return cls(REACT_TYPES, react=True)

    def __len__(self) -> int:
        return len(self.actions) + 2

    def key(self, action: str) -> str:
        """What an action is looked up by: its normalised text, or its ReAct type."""
        if self.react:
            match = _REACT.match(action)
            return match.group(1).lower() if match else ""
        return normal_action(action)

    @cached_property
    def _index(self) -> dict[str, int]:
        return {a: i + 2 for i, a in enumerate(self.actions)}

    def ids(self, actions: Sequence[str]) -> list[int]:
        return [self._index.get(self.key(a), UNKNOWN) for a in actions]

    def to_json(self) -> dict:
        return {"actions": list(self.actions), "react": self.react}

    @classmethod
    def from_json(cls, data: dict) -> "ActionVocabulary":
        return cls(tuple(data["actions"]), bool(data["react"]))
