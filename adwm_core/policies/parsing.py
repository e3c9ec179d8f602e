"""From an LLM's raw response to an environment action.

The response continues the prompt's ``Action:`` cue, so the action is its
first non-empty line; a response that restates ``Action: …`` (or writes a
ReAct ``Thought:`` first) gives the text after the last cue. The parsed text
is then mapped to the admissible set: exact match, then match after
normalisation (case, spacing, quotes, final punctuation), then the nearest
admissible action by ``difflib`` similarity ratio if it reaches ``cutoff``.
Otherwise the parsed text is sent as is and the environment judges it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from .prompts import ACTION_CUE

NEAREST_CUTOFF = 0.6
_CUE = re.compile(re.escape(ACTION_CUE), re.IGNORECASE)


def parse_action(response: str) -> str:
    """The action text written in ``response`` ('' when there is none)."""
    text = response
    cues = list(_CUE.finditer(text))
    if cues:
        text = text[cues[-1].end() :]
    for line in text.splitlines():
        line = line.strip().strip("`\"'").strip()
        if line:
            return line.rstrip(".!")
    return ""


def has_action_cue(response: str) -> bool:
    """Whether ``response`` writes an ``Action:`` cue anywhere."""
    return _CUE.search(response) is not None


def normalise(action: str) -> str:
    return " ".join(action.lower().strip().strip("`\"'").rstrip(".!").split())


def map_to_admissible(action: str, admissible: Sequence[str] | None, cutoff: float = NEAREST_CUTOFF) -> str:
    """``action`` itself, or the admissible action it matches (exact, normalised, then nearest)."""
    if not admissible or action in admissible:
        return action
    by_norm = {normalise(a): a for a in reversed(admissible)}  # first listed wins ties
    key = normalise(action)
    if key in by_norm:
        return by_norm[key]
    nearest = difflib.get_close_matches(key, list(by_norm), n=1, cutoff=cutoff)
    return by_norm[nearest[0]] if nearest else action
