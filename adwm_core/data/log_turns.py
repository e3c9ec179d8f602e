"""An episode record read into steps: which keys hold its turns and outcome, how a transcript
splits into turns, and what is no step — an opening instruction and its acknowledgement, a
reply that holds no action.

**Turns.** The turn list is found under ``conversations``, ``messages``, ``traj``,
``trajectory``, ``history``, ``dialog``, ``dialogue``, ``turns`` or ``transcript`` (or the key
``LogSource.fields["conversations"]`` names), each turn with from/value or role/content.
Observation roles: human, user, observation, environment, env, tool; action roles: gpt,
assistant, agent, model; ``system`` only first. An action turn's action is its ``action``
field, else the text after its last ``Action:`` cue, else its first line.

**Outcome.** The episode's reward is read from ``reward`` or ``score``, its success from
``success``, ``won`` or ``result``; ``done`` is whether the environment ended it. Where two
keys could hold the same outcome and disagree on some episode, the logs are refused with the
candidates and the ``fields`` setting that picks one. A boolean reward reads as 1.0/0.0 and a
numeric string as its number. Logs with a success flag and no reward take 1.0/0.0 from it;
logs with a reward and no success flag count an episode a success when its reward reaches 1.
Rewards on action turns (their ``reward`` key, any turn carrying one) are per step; else the
episode's reward is its last step's; where both are given and the episode's differs from the
turns' sum, the difference lands on the last step (the episode's reward is its return). A
turn's ``tool_calls`` are refused. Every such reading is counted in the import summary.

**Replies without an action.** An agent turn that is empty, or only a thought ("Thought: …",
"think: …", "Plan: …") with no ``Action:`` cue and no ``action`` field, is never an action.
By default (``LogSource.thoughts = "fold"``) it is folded into the next action's reasoning
(that step's ``response``), and the environment's answer to it (ALFWorld's "OK.") is dropped:
nothing changed. ``thoughts = "step"`` keeps it as a step of its own, its action ``think: …``.

**Preambles.** ``preamble_turns`` turns open every conversation and are no step; the first
gives the task description where the episode names none. Unset, an opening user turn that the
agent answers with a bare acknowledgement ("OK", "Understood", …) is found and dropped.

**Transcripts.** Turns given as one text block are split: each line that begins with
``LogSource.agent_prefix`` ("> ") is one agent turn, the lines between are the environment's
answer, text before the first is the first observation. Where no line has the prefix, ReAct's
numbered form is read: "Action N: …" the agent's, "Observation N: …" the environment's,
"Thought N: …" a thought.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..policies.parsing import has_action_cue, parse_action
from ..specs import LogSource

TURN_KEYS = ("conversations", "messages", "traj", "trajectory", "history", "dialog", "dialogue", "turns")
TRANSCRIPT_KEY = "transcript"  # a text block of turns; where a plain-text file's content is kept
REWARD_KEYS = ("reward", "score")
SUCCESS_KEYS = ("success", "won", "result")
OBSERVATION_ROLES = frozenset({"human", "user", "observation", "environment", "env", "tool"})
ACTION_ROLES = frozenset({"gpt", "assistant", "agent", "model"})
SYSTEM_ROLE = "system"
# the labels of a line that holds no action: ReAct's thoughts and ALFWorld's think, plans,
# KnowAgent's action paths, RAFA's critic values
NO_ACTION_LABELS = ("think", "thought", "thoughts", "plan", "reasoning", "reflection", "actionpath", "critic")
THOUGHT = re.compile(rf"^\s*({'|'.join(NO_ACTION_LABELS)})\s*\d*\s*:", re.IGNORECASE)
ACKNOWLEDGEMENT = re.compile(r"^\s*(ok(ay)?|sure|understood|got it|alright|all right|i understand|i am ready|"
                             r"i'm ready|ready|yes|certainly|of course)\b", re.IGNORECASE)
LONGEST_ACKNOWLEDGEMENT = 200  # characters: a longer reply is an answer, not an acknowledgement
REACT_LINE = re.compile(r"^\s*(thought|action|observation)\s*\d*\s*:\s?(.*)$", re.IGNORECASE)
NUMBERED_CUE = re.compile(r"^(\s*)action\s*\d+\s*:", re.IGNORECASE | re.MULTILINE)  # ReAct's "Action 3:"
FLAG_SPELLINGS = {True: True, False: False, "true": True, "false": False, "1": True, "0": False, "yes": True,
                  "no": False, "success": True, "succeeded": True, "won": True, "win": True, "fail": False,
                  "failed": False, "failure": False, "lost": False}


def flag(value: Any) -> bool | None:
    """A flag as evaluators write it — true/false, 1/0 (AgentGym's ``"success": 1``), yes/no,
    success/fail, as strings in any case — as a bool; None for anything else."""
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


class Problems:
    """Every problem found in the logs, each with its file, line and field."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def add(self, file: str, line: int, where: str, message: str) -> None:
        self.found.append(f"{file}:{line}: {where}: {message}")


@dataclass
class Counts:
    """What the import read in a way the user should know of (the summary's lines)."""

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


@dataclass(frozen=True)
class OutcomeKeys:
    """The episode-level keys the outcome is read from (None: no such key in the logs)."""

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


@dataclass(frozen=True)
class Turn:
    kind: str  # system | observation | action
    text: str
    where: str  # the field, for errors
    fields: Mapping[str, Any]  # the turn's own keys (action, reward, logprob, …); empty for a transcript's


def turns_of(value: Mapping, source: LogSource, problems: Problems, file: str, line: int
             ) -> tuple[str, list[Turn]] | None:
    """The record's turn key and turns (a transcript split), or None after adding its problems."""
    named = source.fields.get("conversations")
    if named is not None:
        keys = [named] if named in value else []
    else:
        present = [key for key in (*TURN_KEYS, TRANSCRIPT_KEY) if value.get(key) is not None]
        keys = [key for key in present if value[key] not in ("", [])] or present[:1]  # an empty one: no step
    if not keys:
        shown = named or ", ".join((*TURN_KEYS, TRANSCRIPT_KEY))
        problems.add(file, line, named or "(episode)", f"no turns under {shown}; name the key with --fields "
                     f"conversations=KEY (keys here: {', '.join(map(str, list(value)[:8]))})")
        return None
    if len(keys) > 1:
        problems.add(file, line, "(episode)", f"both {keys[0]!r} and {keys[1]!r} could hold the turns; pick one with "
                     f"--fields conversations={keys[0]}")
        return None
    key, turns = keys[0], value[keys[0]]
    opening = _opening(value, source, problems, file, line)
    if isinstance(turns, str):
        return key, opening + transcript_turns(turns, key, source, problems, file, line, opened=bool(opening))
    if not isinstance(turns, list):
        problems.add(file, line, key, f"expected a list of turns or a transcript, got {type(turns).__name__}")
        return None
    read = []
    for i, turn in enumerate(turns):
        where = f"{key}[{i}]"
        if not isinstance(turn, Mapping):
            problems.add(file, line, where, f"expected a turn object, got {type(turn).__name__}")
            continue
        role_key = source.fields.get("role") or ("from" if turn.get("from") is not None else "role")
        text_key = source.fields.get("text") or ("value" if turn.get("value") is not None else "content")
        role, text = turn.get(role_key), turn.get(text_key)
        for field_key, got, what in ((role_key, role, "role"), (text_key, text, "text")):
            if got is None:
                problems.add(file, line, f"{where}.{field_key}", f"missing (the turn's {what}); name the key with "
                             f"--fields {what}=KEY")
            elif not isinstance(got, str):
                problems.add(file, line, f"{where}.{field_key}", f"expected a string, got {type(got).__name__}")
        if not (isinstance(role, str) and isinstance(text, str)):
            continue
        role = role.lower()
        kind = ("system" if role == SYSTEM_ROLE else "observation" if role in OBSERVATION_ROLES
                else "action" if role in ACTION_ROLES else None)
        if kind is None:
            problems.add(file, line, f"{where}.{role_key}", f"unknown role {role!r}; observation roles: "
                         f"{sorted(OBSERVATION_ROLES)}, action roles: {sorted(ACTION_ROLES)}, and 'system' first")
            continue
        if turn.get("tool_calls") or turn.get("function_call"):
            problems.add(file, line, f"{where}.tool_calls", "a tool-calling turn: logs of function calls are not read "
                         "yet; give each call as the turn's text (e.g. 'Action: search[...]') or its 'action' field")
            continue
        read.append(Turn(kind, NUMBERED_CUE.sub(r"\1Action:", text) if kind == "action" else text, where, turn))
    return key, opening + read


def _opening(value: Mapping, source: LogSource, problems: Problems, file: str, line: int) -> list[Turn]:
    """The first observation where it is kept apart from the turns (``fields["opening"]``)."""
    key = source.fields.get("opening")
    if key is None:
        return []
    text = value.get(key)
    if not isinstance(text, str):
        problems.add(file, line, key, f"the opening observation (--fields opening={key}) is "
                     f"{'missing' if text is None else type(text).__name__}, not text")
        return []
    return [Turn("observation", text, key, {})]


def transcript_turns(text: str, key: str, source: LogSource, problems: Problems, file: str, line: int,
                     opened: bool = False) -> list[Turn]:
    """A transcript's turns by the module's rule; none after adding a problem when no rule applies.
    ``opened``: the first observation was given apart (``fields["opening"]``), so the transcript
    starts with the agent's line, prefixed or not (the prompt ended with the prefix)."""
    lines = text.splitlines()
    if not text.strip():
        return []  # an empty transcript: an episode without a step
    prefix = source.agent_prefix
    if opened and lines and lines[0].strip() and not _is_agent_line(lines[0], prefix):
        lines[0] = prefix + lines[0].strip()
    if any(_is_agent_line(row, prefix) for row in lines):
        return _prefixed_turns(lines, prefix, key)
    if any((m := REACT_LINE.match(row)) and m.group(1).lower() == "action" for row in lines):
        return _numbered_turns(lines, key)
    problems.add(file, line, key, f"a transcript in which no line begins with {prefix!r} nor 'Action 1:': which lines "
                 "are the agent's? name their prefix with --agent-prefix PREFIX")
    return []


def _is_agent_line(row: str, prefix: str) -> bool:
    return row.startswith(prefix) or row.rstrip() == prefix.rstrip()


def _prefixed_turns(lines: list[str], prefix: str, key: str) -> list[Turn]:
    """A line that is the bare prefix is an empty reply where the environment answers on the next
    line (Reflexion's "> " then "Nothing happens."); where empty lines follow it, the agent's text
    is the next non-empty line (ADaPT's joined plans: ">", "", " go to desk 1")."""
    turns, answer, bare, gap = [], [], None, False
    for number, row in enumerate(lines, start=1):
        if bare is not None and not row.strip():
            gap = True
            continue
        if bare is not None:
            turns.append(Turn("action", row.strip() if gap else "", f"{key} line {bare}", {}))
            bare = None
            if gap:
                continue
        if _is_agent_line(row, prefix):
            if "\n".join(answer).strip():
                turns.append(Turn("observation", "\n".join(answer).strip(), f"{key} line {number}", {}))
            answer = []
            if row.rstrip() == prefix.rstrip():
                bare, gap = number, False
            else:
                turns.append(Turn("action", row[len(prefix):].strip(), f"{key} line {number}", {}))
        else:
            answer.append(row)
    if bare is not None:
        turns.append(Turn("action", "", f"{key} line {bare}", {}))
    if "\n".join(answer).strip():
        turns.append(Turn("observation", "\n".join(answer).strip(), f"{key} line {len(lines)}", {}))
    return turns


def _numbered_turns(lines: list[str], key: str) -> list[Turn]:
    parts: list[list] = [["observation", [], 1]]  # kind, lines, first line number
    for number, row in enumerate(lines, start=1):
        match = REACT_LINE.match(row)
        if match is None:
            parts[-1][1].append(row)
            continue
        label, rest = match.group(1).lower(), match.group(2)
        kind = "observation" if label == "observation" else "action"
        parts.append([kind, [f"Thought: {rest}" if label == "thought" else rest], number])
    return [Turn(kind, "\n".join(rows).strip(), f"{key} line {number}", {}) for kind, rows, number in parts
            if "\n".join(rows).strip()]


def is_thought(turn: Turn) -> bool:
    """An agent turn that holds no action: empty, or one thought line with no ``Action:`` cue (an
    ``action`` field, even "", is an action as logged; a thought followed by more lines is
    ambiguous and refused)."""
    if "action" in turn.fields:
        return False
    text = turn.text.strip()
    return not text or (THOUGHT.match(text) is not None and not has_action_cue(text)
                        and not _unlabelled_after_thought(text))


def _unlabelled_after_thought(text: str) -> bool:
    """A thought line, then lines that carry no label, and no ``Action:`` cue: the action may be
    any of them."""
    lines = [row for row in text.strip().splitlines() if row.strip()]
    return bool(lines) and THOUGHT.match(lines[0]) is not None and not has_action_cue(text) \
        and any(THOUGHT.match(row) is None for row in lines[1:])


def preamble_length(turns: list[Turn], source: LogSource) -> int:
    """How many opening turns are no step: ``source.preamble_turns``, else an opening user turn
    and its bare acknowledgement (after a system turn, which goes with them)."""
    if source.preamble_turns is not None:
        return source.preamble_turns
    start = 1 if turns and turns[0].kind == "system" else 0
    if len(turns) > start + 2 and turns[start].kind == "observation" and turns[start + 1].kind == "action":
        reply = turns[start + 1].text.strip()
        if ACKNOWLEDGEMENT.match(reply) and len(reply) <= LONGEST_ACKNOWLEDGEMENT and not has_action_cue(reply):
            return start + 2
    return 0


def steps_of(value: Mapping, source: LogSource, keys: OutcomeKeys, counts: Counts, problems: Problems, file: str,
             line: int) -> list[dict] | None:
    """The trajectory rows of one episode record (without ``cell`` and ``episode``), or None
    after adding its problems."""
    before = len(problems.found)
    found = turns_of(value, source, problems, file, line)
    if found is None:
        return None
    key, turns = found
    counts.turn_keys[key] += 1
    description = _string(value, "task_description", problems, file, line)
    start = preamble_length(turns, source)
    if start:
        if len(turns) <= start:
            problems.add(file, line, key, f"{len(turns)} turn(s), all of them the preamble (preamble_turns = {start}); "
                         "set --preamble-turns 0 if they are steps")
            return None
        counts.preamble_turns += start
        if description is None:
            description = turns[0].text
    pending: Turn | None = None  # the observation waiting for its action
    thoughts: list[str] = []  # folded replies waiting for the next action
    echo = False  # the next observation answers a folded reply
    kept_thought = False  # the last step is a thought kept as a step (thoughts = "step")
    steps: list[dict] = []
    for i, turn in enumerate(turns[start:], start=start):
        if turn.kind == "system":
            if i != start:
                problems.add(file, line, turn.where, "a system turn may only open the conversation")
            elif description is None:
                description = turn.text
        elif turn.kind == "observation":
            if echo:
                echo, counts.thought_echoes = False, counts.thought_echoes + 1
                continue
            if kept_thought:  # the environment's answer to a thought kept as a step
                steps[-1]["next_observation"], pending, kept_thought = turn.text, turn, False
                continue
            if pending is not None:
                problems.add(file, line, turn.where, "two observation turns in a row: each observation needs the "
                             "action taken on it before the next one")
            if steps and "next_observation" not in steps[-1]:
                steps[-1]["next_observation"] = turn.text
            pending = turn
        elif pending is None:
            problems.add(file, line, turn.where, "an action turn with no observation before it")
        elif is_thought(turn) and source.thoughts == "fold":
            counts.thoughts += 1
            thoughts.append(turn.text.strip())
            echo = True
        else:
            if kept_thought:  # a thought kept as a step and no answer to it: the state is unchanged
                steps[-1]["next_observation"] = pending.text
            kept_thought = is_thought(turn)
            counts.thoughts += kept_thought
            steps.append(_step(turn, pending.text, thoughts, len(steps), source, counts, problems, file, line))
            pending = pending if kept_thought else None
            thoughts, echo = [], False
    if len(problems.found) > before:
        return None
    if not steps:  # nothing happened in it: no transition to learn from
        counts.empty_episodes += 1
        return []
    if "next_observation" not in steps[-1]:
        steps[-1]["next_observation"] = pending.text if pending is not None else ""
    return _finish(value, steps, description or "", source, keys, counts, problems, file, line)


def _string(value: Mapping, key: str, problems: Problems, file: str, line: int, where: str = "") -> str | None:
    return _typed(value, key, _is_str, "a string", problems, file, line, where)


def _typed(value: Mapping, key: str, check, expected: str, problems: Problems, file: str, line: int,
           where: str = "") -> Any:
    got = value.get(key)
    if got is not None and not check(got):
        problems.add(file, line, f"{where}{key}", f"expected {expected}, got {type(got).__name__} {got!r:.60}")
        return None
    return got


def _reward(value: Mapping, key: str, counts: Counts, problems: Problems, file: str, line: int,
            where: str = "") -> float | None:
    got = value.get(key)
    if got is None:
        return None
    number, reading = as_number(got)
    if number is None:
        problems.add(file, line, f"{where}{key}", f"expected a finite number (or true/false), got "
                     f"{type(got).__name__} {got!r:.60}")
        return None
    if reading is not None:
        setattr(counts, f"{reading}_rewards", getattr(counts, f"{reading}_rewards") + 1)
    return number


def _flag(value: Mapping, key: str | None, problems: Problems, file: str, line: int, where: str = "") -> bool | None:
    got = None if key is None else value.get(key)
    if got is None:
        return None
    read = flag(got)
    if read is None:
        problems.add(file, line, f"{where}{key}", f"expected true or false (or 1 / 0, success / fail), got "
                     f"{type(got).__name__} {got!r:.60}")
    return read


def _step(turn: Turn, observation: str, thoughts: list[str], t: int, source: LogSource, counts: Counts,
          problems: Problems, file: str, line: int) -> dict:
    fields, where = turn.fields, f"{turn.where}."
    action = _string(fields, "action", problems, file, line, where)
    if action is None and _unlabelled_after_thought(turn.text):
        problems.add(file, line, turn.where, "a thought, then lines without a label and no 'Action:' cue: which line "
                     "is the action? give the turn an 'action' field or an 'Action: …' line")
    if action is None:  # an explicit action, even "" (a reply that said nothing), is taken as logged
        text = turn.text.strip()
        if not is_thought(turn):
            action = parse_action(turn.text)
        else:  # a thought kept as a step (thoughts = "step"): its action says so
            action = text if text.lower().startswith("think") else f"think: {text}"
    step = {
        "t": t,
        "observation": observation,
        "response": "\n".join([*thoughts, turn.text]),
        "action": action,
        "admissible": _typed(fields, "admissible", lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
                             "a list of strings", problems, file, line, where),
        "reward": _reward(fields, "reward", counts, problems, file, line, where),
        "behavior_logprob": _typed(fields, source.key("logprob"), lambda v: finite(v) and v <= 0.0,
                                   "a finite log-probability (≤ 0)", problems, file, line, where),
        "action_valid": _flag(fields, "valid", problems, file, line, where),
        "score": _typed(fields, "score", finite, "a finite number", problems, file, line, where),
        "success": _flag(fields, source.key("success"), problems, file, line, where),
    }
    next_observation = _string(fields, "next_observation", problems, file, line, where)
    if next_observation is not None:
        step["next_observation"] = next_observation
    return step


def _finish(value: Mapping, steps: list[dict], description: str, source: LogSource, keys: OutcomeKeys,
            counts: Counts, problems: Problems, file: str, line: int) -> list[dict] | None:
    """Episode-level fields onto the steps: rewards, success, done, scores, identity columns."""
    before = len(problems.found)
    episode_reward = None if keys.reward is None else _reward(value, keys.reward, counts, problems, file, line)
    success = _flag(value, keys.success, problems, file, line)
    done = _flag(value, "done", problems, file, line)
    identity = {key: _typed(value, key, check, expected, problems, file, line)
                for key, check, expected in (("policy", _is_str, "a string"), ("task", _is_str, "a string"),
                                             ("variation", _is_int, "an integer"), ("seed", _is_int, "an integer"))}
    if success is None:
        success = steps[-1]["success"]
    per_step = any(s["reward"] is not None for s in steps)
    if not per_step:
        if episode_reward is None and success is not None:
            episode_reward, counts.reward_from_success = float(success), counts.reward_from_success + 1
        if episode_reward is None:
            problems.add(file, line, keys.reward or "reward", "missing: no reward nor success on the episode or its "
                         "turns; name the key with --fields reward=KEY (or --fields success=KEY), or, where the "
                         "logs hold no outcome at all, add one to each episode")
            return None
        for s in steps:
            s["reward"] = 0.0
        steps[-1]["reward"] = episode_reward
    elif episode_reward is not None and not math.isclose(episode_reward, sum(s["reward"] or 0.0 for s in steps),
                                                         abs_tol=1e-9):
        steps[-1]["reward"] = (steps[-1]["reward"] or 0.0) + episode_reward - sum(s["reward"] or 0.0 for s in steps)
        counts.reward_beyond_turns += 1  # the episode's return is its reward: the rest lands on its last step
    if success is None and len(problems.found) == before:
        success = sum(s["reward"] or 0.0 for s in steps) >= 1.0
        counts.success_from_reward += 1
    if len(problems.found) > before:
        return None
    cumulative = 0.0
    for s in steps:
        s["reward"] = float(s["reward"] or 0.0)
        cumulative += s["reward"]
        s["score"] = float(s["score"]) if s["score"] is not None else cumulative
        s["action_valid"] = True if s["action_valid"] is None else s["action_valid"]
        s["success"] = bool(s["success"]) if s["success"] is not None else False
        s["done"] = False
    steps[-1]["success"] = bool(success)
    steps[-1]["done"] = True if done is None else done
    common = {"source": "behavior", "epsilon": None, "task_description": description,
              "policy": identity["policy"] or "logged", "task": identity["task"] or "logged",
              "variation": identity["variation"] if identity["variation"] is not None else line,
              "seed": identity["seed"] or 0}
    return [{**common, **s} for s in steps]


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def count_lines(counts: Counts, thoughts: str) -> Counter:
    """The counts as the summary's readable lines (those that are not zero)."""
    what = {
        "thoughts": "replies without an action " + ("folded into the next action" if thoughts == "fold"
                                                    else "kept as think: steps"),
        "thought_echoes": "environment answers to those replies dropped",
        "preamble_turns": "preamble turns dropped (instruction and acknowledgement)",
        "bool_rewards": "rewards given as true/false, read as 1.0/0.0",
        "string_rewards": "rewards given as numeric strings, read as numbers",
        "reward_from_success": "episodes without a reward, given 1.0/0.0 from their success flag",
        "success_from_reward": "episodes without a success flag, a success where their reward reaches 1",
        "reward_beyond_turns": "episodes whose reward differs from the sum of their turns' rewards: the "
                               "difference added to the last step",
        "empty_episodes": "episodes without a single action, left out",
    }
    return Counter({text: getattr(counts, name) for name, text in what.items() if getattr(counts, name)})
