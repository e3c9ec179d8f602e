"""Values read out of log records: a key or a dotted path (``history.history``, ``meta.reward``),
flags and numbers as evaluators write them, and which episode keys hold the outcome.

A path is first tried as one key (a key may hold a dot), then step by step through nested
objects; a step that is an integer indexes a list (``turns.0.reward``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..specs import LogSource

REWARD_KEYS = ("reward", "score")
SUCCESS_KEYS = ("success", "won", "result")
MISSING = object()  # no value at a path (None is a value: JSON null)


class LogFormatError(ValueError):
    """Logs that cannot be read; the message names file, line (or episode) and field of every
    problem, and what to do about it."""


class NotATrajectoryLog(LogFormatError):
    """A file that holds no trajectories at all (a debug log): refused when named, skipped and
    named with the reason in a folder."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


FLAG_SPELLINGS = {True: True, False: False, "true": True, "false": False, "1": True, "0": False, "yes": True,
                  "no": False, "success": True, "succeeded": True, "won": True, "win": True, "fail": False,
                  "failed": False, "failure": False, "lost": False, "correct": True, "incorrect": False}


def lookup(value: Any, path: str, default: Any = None) -> Any:
    """The value of ``value`` at ``path`` (a key, else a dotted path), or ``default``."""
    if isinstance(value, Mapping) and path in value:
        return value[path]
    if "." not in path:
        return default
    for step in path.split("."):
        if isinstance(value, Mapping) and step in value:
            value = value[step]
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return default
    return value


def has(value: Any, path: str) -> bool:
    return lookup(value, path, MISSING) is not MISSING


def flag(value: Any) -> bool | None:
    """A flag as evaluators write it — true/false, 1/0 (AgentGym's ``"success": 1``), yes/no,
    success/fail, correct/incorrect (ReAct's "Answer is CORRECT"), as strings in any case — as a
    bool; None for anything else."""
    key = value.strip().lower() if isinstance(value, str) else value
    if isinstance(key, float) and key.is_integer():
        key = int(key)
    return FLAG_SPELLINGS.get(key) if isinstance(key, (bool, int, str)) else None


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def as_number(value: Any) -> tuple[float | None, str | None]:
    """A reward as a float and how it was read (``None``: as a number; ``"bool"``, ``"string"``),
    or (None, None) when it is no number."""
    if finite(value):
        return float(value), None
    if isinstance(value, bool):
        return float(value), "bool"
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None, None
        return (number, "string") if math.isfinite(number) else (None, None)
    return None, None


@dataclass(frozen=True)
class OutcomeKeys:
    """The episode-level keys (or paths) the outcome is read from (None: no such key in the logs)."""

    reward: str | None
    success: str | None


def outcome_keys(values: Sequence[Any], source: LogSource) -> tuple[OutcomeKeys, list[str]]:
    """The reward and success keys of the logs' episodes ``values``, and the ambiguities found:
    two present candidates that disagree on some episode."""
    records = [v for v in values if isinstance(v, Mapping)]
    chosen, ambiguities = {}, []
    for role, candidates, read in (("reward", REWARD_KEYS, lambda v: as_number(v)[0]), ("success", SUCCESS_KEYS, flag)):
        if role in source.fields:
            chosen[role] = source.fields[role]
            continue
        present = [key for key in candidates if any(key in r for r in records)]
        clash = next(((r, a, b) for r in records for a in present for b in present
                      if a < b and a in r and b in r and read(r[a]) != read(r[b])), None)
        if clash is not None:
            record, a, b = clash
            ambiguities.append(f"both {a!r} and {b!r} could be the episode's {role}, and they differ (e.g. {a}="
                               f"{record[a]!r:.40}, {b}={record[b]!r:.40}); pick one with --fields {role}={a} or "
                               f"--fields {role}={b} (in Python fields={{'{role}': '{a}'}}, in a cell "
                               f"behaviour.logs.fields.{role})")
        chosen[role] = present[0] if present else None
    return OutcomeKeys(chosen["reward"], chosen["success"]), ambiguities


def is_score_key(key: str) -> bool:
    """A key whose values are a running score by the trajectories contract (``score``), not a
    reward per step."""
    return key.rsplit(".", 1)[-1].lower().endswith("score")


def decreasing(values: Sequence[float]) -> int | None:
    """The index where ``values`` first go down, or None where they never do."""
    return next((i for i in range(1, len(values)) if values[i] < values[i - 1] - 1e-12), None)
