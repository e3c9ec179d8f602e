"""An episode record's turns: where they are, and how a list of turns, a list of step rows or a
transcript reads into observation and action turns.

**Where.** The turn list is found under ``conversations``, ``messages``, ``traj``,
``trajectory``, ``history``, ``dialog``, ``dialogue``, ``turns`` or ``transcript``; else by
content, under the one key of any name that holds a list of turns or of step rows (AgentGym's
``transitions``); else one object down (ScienceWorld's ``history: {taskDescription, history:
[...]}``, read as ``history.history``); or at the key or dotted path
``LogSource.fields["conversations"]`` names.

**A list.** Each turn has from/value or role/content (``fields["role"]``, ``fields["text"]``).
Observation roles: human, user, observation, environment, env, tool; action roles: gpt,
assistant, agent, model; ``system`` only first. A list of step rows (``observation`` and
``action``) is read by log_steps.py. A turn's ``tool_calls`` are refused.

**Transcripts.** Turns given as one text block are split: each line that begins with
``LogSource.agent_prefix`` ("> ") is one agent turn, the lines between are the environment's
answer, text before the first is the first observation. Where no line has the prefix, ReAct's
numbered form is read: "Action N: …" the agent's, "Observation N: …" the environment's,
"Thought N: …" a thought.

**Replies without an action.** An agent turn that is empty, or only a thought ("Thought: …",
"think: …", "Plan: …") with no ``Action:`` cue and no ``action`` field, is never an action
(log_episode.py folds it or keeps it as a step).

**Stripped lines.** Lines of an observation that match one of ``LogSource.strip`` whole (a
harness's placeholders, a reflection memory) are taken out of it, and counted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..policies.parsing import has_action_cue
from ..specs import LogSource
from .log_steps import STEP_ROWS_KEY, is_step_list, named_row, step_turns
from .log_text import DEMONSTRATIONS, TRANSCRIPT_KEY, without_demonstrations
from .log_values import has, lookup

TURN_KEYS = ("conversations", "messages", "traj", "trajectory", "history", "dialog", "dialogue", "turns")
OBSERVATION_ROLES = frozenset({"human", "user", "observation", "environment", "env", "tool"})
ACTION_ROLES = frozenset({"gpt", "assistant", "agent", "model"})
SYSTEM_ROLE = "system"
# the labels of a line that holds no action: ReAct's thoughts and ALFWorld's think, plans,
# KnowAgent's action paths, RAFA's critic values
NO_ACTION_LABELS = ("think", "thought", "thoughts", "plan", "reasoning", "reflection", "actionpath", "critic")
THOUGHT = re.compile(rf"^\s*({'|'.join(NO_ACTION_LABELS)})\s*\d*\s*:", re.IGNORECASE)
REACT_LINE = re.compile(r"^\s*(thought|action|observation)\s*\d*\s*:\s?(.*)$", re.IGNORECASE)
NUMBERED_CUE = re.compile(r"^(\s*)action\s*\d+\s*:", re.IGNORECASE | re.MULTILINE)  # ReAct's "Action 3:"
STRIPPED = "observation lines removed by --strip"


class Problems:
    """Every problem found in the logs, each with where it is (file and line, or file and
    episode key) and the field."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def add(self, at: str, where: str, message: str) -> None:
        self.found.append(f"{at}: {where}: {message}")


@dataclass
class Counts:
    """What the import read in a way the user should know of (the summary's lines), and which of
    the reading options it used (an option that changes nothing is refused)."""

    thoughts: int = 0  # agent turns without an action, folded or kept as steps
    preamble_turns: int = 0  # opening turns dropped
    thought_echoes: int = 0  # environment answers to a thought, dropped with it
    bool_rewards: int = 0
    string_rewards: int = 0
    reward_from_success: int = 0
    success_from_reward: int = 0
    reward_beyond_turns: int = 0  # episodes whose reward differs from their turns' sum
    empty_episodes: int = 0  # episodes without a step (no action, or an empty transcript), left out
    turn_keys: Counter = field(default_factory=Counter)  # the key the turns were found under, per episode
    readings: Counter = field(default_factory=Counter)  # further readings, by their summary line
    used: set = field(default_factory=set)  # options that read something: "rewards", "strip:<pattern>", …
    unsure_openings: list = field(default_factory=list)  # where an opening may or may not be a preamble
    unscaled: list = field(default_factory=list)  # (where, peak) of returns above 1 with no maximum nor threshold
    fraction_keys: Counter = field(default_factory=Counter)  # episode keys holding numbers in [0, 1]: success?
    running_success: int = 0  # episodes whose success is a running score reaching 1, nothing declared


@dataclass(frozen=True)
class Turn:
    kind: str  # system | observation | action
    text: str
    where: str  # the field, for errors
    fields: Mapping[str, Any]  # the turn's own keys (action, reward, logprob, …); empty for a transcript's


def is_turn(value: Any) -> bool:
    """A turn of a conversation (from/value or role/content), not an episode."""
    return isinstance(value, Mapping) and ("from" in value or "role" in value) and ("value" in value
                                                                                  or "content" in value)


def is_message_list(value: Any) -> bool:
    """A non-empty list of turns: an episode's messages with no wrapper around them."""
    return isinstance(value, list) and bool(value) and all(is_turn(turn) for turn in value)


def turn_list_keys(value: Mapping) -> list:
    """The keys of ``value`` that hold a list of turns or of step rows: turns found by content."""
    return [key for key, held in value.items() if is_message_list(held) or is_step_list(held)]


def turn_paths(value: Mapping, source: LogSource) -> list[str]:
    """The keys or dotted paths of ``value`` that could hold its turns (one, where it is clear)."""
    named = source.fields.get("conversations")
    if named is not None:
        return [named] if has(value, named) else []
    present = [key for key in (*TURN_KEYS, TRANSCRIPT_KEY) if value.get(key) is not None]
    present += [STEP_ROWS_KEY] if is_step_list(value.get(STEP_ROWS_KEY)) else []
    keys = [key for key in present if value[key] not in ("", [])] or present[:1]  # an empty one: no step
    if not keys:
        keys = turn_list_keys(value)
    if not keys:  # a transcript held as one string under a key of another name ("prompt")
        keys = [key for key, held in value.items() if isinstance(held, str) and looks_like_transcript(held, source)]
    if not keys:  # one object down: {"data": {"messages": [...]}}
        keys = [f"{outer}.{inner}" for outer, nested in value.items() if isinstance(nested, Mapping)
                for inner in TURN_KEYS if isinstance(nested.get(inner), list)]
    return [_nested(value, key) for key in keys]


def looks_like_transcript(text: str, source: LogSource) -> bool:
    """A text block of several turns: an agent line (``agent_prefix``) and a line of another, or
    ReAct's ``Action`` and ``Observation`` lines."""
    rows = [row for row in text.splitlines() if row.strip()]
    agent = [row.startswith(source.agent_prefix) for row in rows]
    if any(agent) and not all(agent):
        return True
    labels = {m.group(1).lower() for row in rows if (m := REACT_LINE.match(row))}
    return {"action", "observation"} <= labels


def _nested(value: Mapping, key: str) -> str:
    """``key``, or the path of the turns one object down where ``key`` holds an object."""
    inner = lookup(value, key)
    if isinstance(inner, Mapping):
        found = [k for k in (*TURN_KEYS, TRANSCRIPT_KEY) if isinstance(inner.get(k), (list, str))]
        if len(found) == 1:
            return f"{key}.{found[0]}"
    return key


def raw_turns(value: Any, source: LogSource) -> list:
    """The record's list of turns or step rows as logged, unparsed ([] where there is none)."""
    paths = turn_paths(value, source) if isinstance(value, Mapping) else []
    found = lookup(value, paths[0]) if len(paths) == 1 else None
    return [t for t in found if isinstance(t, Mapping)] if isinstance(found, list) else []


def turns_of(value: Mapping, source: LogSource, problems: Problems, at: str, counts: Counts,
             first_line: int | None = None) -> tuple[str, list[Turn]] | None:
    """The record's turn key and turns, or None after adding its problems. ``first_line``: the
    record is a transcript of a text file starting at that line (errors name the file's lines)."""
    named = source.fields.get("conversations")
    keys = turn_paths(value, source)
    if not keys:
        shown = named or ", ".join((*TURN_KEYS, TRANSCRIPT_KEY))
        problems.add(at, named or "(episode)", f"no turns under {shown}; name the key with --fields "
                     f"conversations=KEY, a dotted path where they are nested (keys here: "
                     f"{', '.join(map(str, list(value)[:8]))})")
        return None
    if len(keys) > 1:
        problems.add(at, "(episode)", f"both {keys[0]!r} and {keys[1]!r} could hold the turns; pick one with "
                     f"--fields conversations={keys[0]}")
        return None
    key, turns = keys[0], lookup(value, keys[0])
    opening = _opening(value, source, problems, at)
    if isinstance(turns, str):
        turns, blocks = without_demonstrations(turns, f"{at}: {key}")
        counts.readings[DEMONSTRATIONS] += blocks
        read = transcript_turns(turns, key, source, problems, at, opened=bool(opening), first_line=first_line)
        return key, opening + _stripped(read, source, counts)
    if not isinstance(turns, list):
        nested = (f" (keys: {', '.join(map(str, list(turns)[:6]))}); where the turns are nested in it, name them "
                  f"with --fields conversations={key}.KEY") if isinstance(turns, Mapping) else ""
        problems.add(at, key, f"expected a list of turns or a transcript, got {type(turns).__name__}{nested}")
        return None
    wheres = [f"{key}[{i}]" for i in range(len(turns))]
    turns = [named_row(turn, source) for turn in turns]
    if is_step_list(turns):
        turns, rows, reading = step_turns(turns, source, opened=bool(opening))
        wheres = [f"{key}[{row}]" for row in rows]
        counts.readings[reading] += reading is not None
        counts.used.add("step_observation")
    read = []
    for turn, where in zip(turns, wheres):
        if not isinstance(turn, Mapping):
            problems.add(at, where, f"expected a turn object, got {type(turn).__name__}: each turn is an object with "
                         "from/value or role/content (or a step row with observation and action)")
            continue
        parsed = _turn(turn, where, source, problems, at)
        if parsed is not None:
            read.append(parsed)
    return key, opening + _stripped(read, source, counts)


def _turn(turn: Mapping, where: str, source: LogSource, problems: Problems, at: str) -> Turn | None:
    role_key = source.fields.get("role") or ("from" if turn.get("from") is not None else "role")
    text_key = source.fields.get("text") or ("value" if turn.get("value") is not None else "content")
    role, text = lookup(turn, role_key), lookup(turn, text_key)
    for field_key, got, what in ((role_key, role, "role"), (text_key, text, "text")):
        if got is None:
            problems.add(at, f"{where}.{field_key}", f"missing (the turn's {what}); name the key with --fields "
                         f"{what}=KEY")
        elif not isinstance(got, str):
            problems.add(at, f"{where}.{field_key}", f"expected a string, got {type(got).__name__} (--fields "
                         f"{what}=KEY where another key holds the turn's {what})")
    if not (isinstance(role, str) and isinstance(text, str)):
        return None
    role = role.lower()
    kind = ("system" if role == SYSTEM_ROLE else "observation" if role in OBSERVATION_ROLES
            else "action" if role in ACTION_ROLES else None)
    if kind is None:
        problems.add(at, f"{where}.{role_key}", f"unknown role {role!r}; observation roles: "
                     f"{sorted(OBSERVATION_ROLES)}, action roles: {sorted(ACTION_ROLES)}, and 'system' first "
                     "(--fields role=KEY where another key holds the role)")
        return None
    if turn.get("tool_calls") or turn.get("function_call"):
        problems.add(at, f"{where}.tool_calls", "a tool-calling turn: logs of function calls are not read yet; give "
                     "each call as the turn's text (e.g. 'Action: search[...]') or its 'action' field")
        return None
    return Turn(kind, NUMBERED_CUE.sub(r"\1Action:", text) if kind == "action" else text, where, turn)


def _opening(value: Mapping, source: LogSource, problems: Problems, at: str) -> list[Turn]:
    """The first observation where it is kept apart from the turns (``fields["opening"]``)."""
    key = source.fields.get("opening")
    if key is None:
        return []
    text = lookup(value, key)
    if not isinstance(text, str):
        problems.add(at, key, f"the opening observation (--fields opening={key}) is "
                     f"{'missing' if text is None else type(text).__name__}, not text")
        return []
    return [Turn("observation", text, key, {})]


def _stripped(turns: list[Turn], source: LogSource, counts: Counts) -> list[Turn]:
    """``turns`` with the observation lines ``source.strip`` matches taken out (counted per pattern)."""
    if not source.strip:
        return turns
    patterns = [re.compile(pattern) for pattern in source.strip]
    out = []
    for turn in turns:
        if turn.kind != "observation":
            out.append(turn)
            continue
        kept = []
        for row in turn.text.splitlines():
            match = next((p for p in patterns if p.fullmatch(row.strip())), None)
            if match is None:
                kept.append(row)
            else:
                counts.readings[STRIPPED] += 1
                counts.used.add(f"strip:{match.pattern}")
        out.append(Turn(turn.kind, "\n".join(kept), turn.where, turn.fields))
    return out


def transcript_turns(text: str, key: str, source: LogSource, problems: Problems, at: str, opened: bool = False,
                     first_line: int | None = None) -> list[Turn]:
    """A transcript's turns by the module's rule; none after adding a problem when no rule applies.
    ``opened``: the first observation was given apart (``fields["opening"]``), so the transcript
    starts with the agent's line, prefixed or not (the prompt ended with the prefix)."""
    lines = text.splitlines()
    if not text.strip():
        return []  # an empty transcript: an episode without a step
    label = (lambda n: f"line {first_line + n - 1}") if first_line is not None else (lambda n: f"{key} line {n}")
    prefix = source.agent_prefix
    if opened and lines and lines[0].strip() and not _is_agent_line(lines[0], prefix):
        lines[0] = prefix + lines[0].strip()
    if any(_is_agent_line(row, prefix) for row in lines):
        return _prefixed_turns(lines, prefix, label)
    if any((m := REACT_LINE.match(row)) and m.group(1).lower() == "action" for row in lines):
        return _numbered_turns(lines, label)
    problems.add(at, label(1) if first_line is not None else key, f"a transcript in which no line begins with "
                 f"{prefix!r} nor 'Action 1:': which lines are the agent's? name their prefix with --agent-prefix "
                 "PREFIX")
    return []


def _is_agent_line(row: str, prefix: str) -> bool:
    return row.startswith(prefix) or row.rstrip() == prefix.rstrip()


def _prefixed_turns(lines: list[str], prefix: str, label) -> list[Turn]:
    """A line that is the bare prefix is an empty reply where the environment answers on the next
    line (Reflexion's "> " then "Nothing happens."); where empty lines follow it, the agent's text
    is the next non-empty line (ADaPT's joined plans: ">", "", " go to desk 1")."""
    turns, answer, bare, gap = [], [], None, False
    for number, row in enumerate(lines, start=1):
        if bare is not None and not row.strip():
            gap = True
            continue
        if bare is not None:
            turns.append(Turn("action", row.strip() if gap else "", label(bare), {}))
            bare = None
            if gap:
                continue
        if _is_agent_line(row, prefix):
            if "\n".join(answer).strip():
                turns.append(Turn("observation", "\n".join(answer).strip(), label(number), {}))
            answer = []
            if row.rstrip() == prefix.rstrip():
                bare, gap = number, False
            else:
                turns.append(Turn("action", row[len(prefix):].strip(), label(number), {}))
        else:
            answer.append(row)
    if bare is not None:
        turns.append(Turn("action", "", label(bare), {}))
    if "\n".join(answer).strip():
        turns.append(Turn("observation", "\n".join(answer).strip(), label(len(lines)), {}))
    return turns


def _numbered_turns(lines: list[str], label) -> list[Turn]:
    parts: list[list] = [["observation", [], 1]]  # kind, lines, first line number
    for number, row in enumerate(lines, start=1):
        match = REACT_LINE.match(row)
        if match is None:
            parts[-1][1].append(row)
            continue
        name, rest = match.group(1).lower(), match.group(2)
        kind = "observation" if name == "observation" else "action"
        parts.append([kind, [f"Thought: {rest}" if name == "thought" else rest], number])
    return [Turn(kind, "\n".join(rows).strip(), label(number), {}) for kind, rows, number in parts
            if "\n".join(rows).strip()]


def is_thought(turn: Turn) -> bool:
    """An agent turn that holds no action: empty, or one thought line with no ``Action:`` cue (an
    ``action`` field, even "", is an action as logged; a thought followed by more lines is
    ambiguous and refused)."""
    if "action" in turn.fields:
        return False
    text = turn.text.strip()
    return not text or (THOUGHT.match(text) is not None and not has_action_cue(text)
                        and not unlabelled_after_thought(text))


def unlabelled_after_thought(text: str) -> bool:
    """A thought line, then lines that carry no label, and no ``Action:`` cue: the action may be
    any of them."""
    lines = [row for row in text.strip().splitlines() if row.strip()]
    return bool(lines) and THOUGHT.match(lines[0]) is not None and not has_action_cue(text) \
        and any(THOUGHT.match(row) is None for row in lines[1:])
