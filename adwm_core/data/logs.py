"""Behaviour logs the user brings: read into the trajectories contract, and written back out.

Three formats (``LogSource.format``):

- ``parquet``: the project's own trajectories file (``behavior`` rows are kept);
- ``jsonl``: one episode per line, ShareGPT-style conversations (AgentGym's AgentTraj-L shape);
- ``hf``: a Hugging Face ``datasets`` dataset whose rows are such episodes, saved with
  ``save_to_disk`` (a folder) or in the local datasets cache (a name).

An episode of the conversation formats::

    {"item_id": 7, "policy": "agent-a", "task": "shop", "variation": 3, "seed": 0,
     "task_description": "Buy a red mug under $10",
     "conversations": [
        {"from": "system", "value": "Buy a red mug under $10"},      # optional, first turn only
        {"from": "human", "value": "<observation o_0>"},
        {"from": "gpt", "value": "Thought: …\\nAction: search[red mug]",
         "reward": 0.0, "logprob": -3.2, "admissible": ["…"]},        # extras all optional
        {"from": "human", "value": "<observation o_1>"}, …],
     "reward": 1.0, "success": true, "done": true}

Observation roles: human, user, observation, environment, env, tool; action roles: gpt,
assistant, agent, model; ``system`` only as the first turn (the task description when the
episode names none). An action turn's action is its ``action`` field, else the text after its
last ``Action:`` cue, else its first line (``policies.parsing.parse_action``, the rule the
project's own agents follow); a reply that opens with a ``Thought`` and has no cue is an error.
Rewards are per action turn where any turn carries one (others count 0), else the episode's
reward on its last step. Success is the episode's field, else its last action turn's. The keys the reader looks for are renamed
with ``LogSource.fields`` (e.g. ``{"conversations": "messages", "role": "role", "text":
"content", "reward": "score"}``).

A ``.json`` file holding one JSON array of episodes is read too (numbers are then the items').
Every problem is reported with file, line (1-based; the row for datasets) and field, all
problems of a file in one :class:`LogFormatError`, before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc

from ..policies.parsing import has_action_cue, parse_action
from ..specs import LogSource
from . import TRAJECTORIES, behaviour_rows, check_output, read_table, table_from_rows, write_table
from .io import atomic_open

OBSERVATION_ROLES = frozenset({"human", "user", "observation", "environment", "env", "tool"})
ACTION_ROLES = frozenset({"gpt", "assistant", "agent", "model"})
SYSTEM_ROLE = "system"
MAX_LISTED_PROBLEMS = 20


class LogFormatError(ValueError):
    """Logs that cannot be read; the message names file, line and field of every problem."""


def read_logs(source: LogSource, *, cell: str) -> pa.Table:
    """The behaviour steps of ``source`` as a validated trajectories table (rows of ``cell``)."""
    fmt = source.resolved_format
    if fmt == "parquet":
        table = behaviour_rows(read_table(source.path, TRAJECTORIES))
        if table.num_rows == 0:
            raise LogFormatError(f"{source.path}: no behaviour rows (source = 'behavior')")
        index = table.schema.get_field_index("cell")
        return table.set_column(index, table.schema.field(index), pa.array([cell] * table.num_rows, pa.string()))
    return _conversation_table(_records(source), source, cell)


def import_logs(source: LogSource, out: str, *, cell: str, overwrite: bool = False) -> pa.Table:
    """Read ``source`` (:func:`read_logs`) and write the trajectories Parquet ``out``; an
    existing ``out`` is refused before reading, nothing is written when the logs are malformed."""
    check_output(out, overwrite=overwrite)
    return write_table(read_logs(source, cell=cell), out, TRAJECTORIES, overwrite=overwrite)


def fingerprint(source: LogSource) -> str:
    """SHA-256 of the logs' bytes (every file of a folder), or a cached dataset's fingerprint:
    a cell's import stage is recomputed when its logs change."""
    fs, path = fsspec.core.url_to_fs(source.path)
    digest = hashlib.sha256()
    if fs.isfile(path):
        files = [path]
    elif fs.isdir(path):
        files = sorted(fs.find(path))
    elif source.resolved_format != "hf":
        raise FileNotFoundError(f"{source.path}: no logs file here; check behaviour.logs.path (or --logs)")
    else:
        return _cached_dataset(source)._fingerprint
    for name in files:
        digest.update(os.path.relpath(name, path).encode())
        with fs.open(name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _records(source: LogSource) -> Iterator[tuple[int, Any]]:
    """(line or row number, parsed record) of a JSONL file or a dataset."""
    if source.resolved_format == "hf":
        for row, record in enumerate(_dataset(source), start=1):
            yield row, record
        return
    fs, path = fsspec.core.url_to_fs(source.path)
    if not fs.exists(path):
        raise FileNotFoundError(f"{source.path}: no logs file here; give behaviour.logs.path (or --logs) a JSONL file")
    with fs.open(path, "r", encoding="utf-8") as f:
        if f.read(4096).lstrip().startswith("["):  # one JSON array of episodes (ShareGPT releases): item numbers
            f.seek(0)
            try:
                episodes = json.load(f)
            except json.JSONDecodeError as error:
                raise LogFormatError(f"{source.path}: not valid JSON ({error.msg} at line {error.lineno})") from None
            yield from enumerate(episodes, start=1)
            return
        f.seek(0)
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                yield line, json.loads(text)
            except json.JSONDecodeError as error:
                yield line, _Unreadable(f"not valid JSON ({error.msg} at column {error.colno})")


@dataclass(frozen=True)
class _Unreadable:
    reason: str


def _dataset(source: LogSource):
    import datasets

    if os.path.isdir(source.path):
        loaded = datasets.load_from_disk(source.path)
    else:
        loaded = _cached_dataset(source)
    if isinstance(loaded, datasets.DatasetDict):
        split = source.split or ("train" if "train" in loaded else None)
        if split not in loaded:
            raise LogFormatError(f"{source.path}: dataset has splits {sorted(loaded)}; name one with logs.split")
        loaded = loaded[split]
    return loaded


def _cached_dataset(source: LogSource):
    import datasets

    try:
        return datasets.load_dataset(source.path, split=source.split or "train")
    except Exception as error:  # not found, offline without a cache entry, unreadable
        raise FileNotFoundError(f"{source.path}: neither a logs file, a saved dataset folder nor a dataset in the "
                                f"local Hugging Face cache ({type(error).__name__}: {error})") from None


class _Problems:
    """Problems found in one file, each with its line and field."""

    def __init__(self, path: str) -> None:
        self.path, self.found = path, []

    def add(self, line: int, where: str, message: str) -> None:
        self.found.append(f"{self.path}:{line}: {where}: {message}")

    def raise_any(self) -> None:
        if self.found:
            shown = self.found[:MAX_LISTED_PROBLEMS]
            more = len(self.found) - len(shown)
            raise LogFormatError(f"{len(self.found)} problem(s) in the logs, nothing imported:\n  " + "\n  ".join(shown)
                                 + (f"\n  … and {more} more" if more else ""))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


FLAG_SPELLINGS = {True: True, False: False, "true": True, "false": False, "1": True, "0": False}  # 1 == True, 0 == False


def _flag(value) -> bool | None:
    """A flag as evaluators write it — true/false, 1/0 (AgentGym's ``"success": 1``), or those as
    strings in any case — as a bool; None for anything else."""
    key = value.strip().lower() if isinstance(value, str) else value
    if isinstance(key, float) and key.is_integer():
        key = int(key)
    return FLAG_SPELLINGS.get(key) if isinstance(key, (bool, int, str)) else None


# the value types a log field may have: a check and how an error names it
KINDS = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "strings": (lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v), "a list of strings"),
    "flag": (lambda v: _flag(v) is not None, "true or false (or 1 / 0)"),
    "integer": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "number": (_number, "a finite number"),
    "logprob": (lambda v: _number(v) and v <= 0.0, "a finite log-probability (≤ 0)"),
}


def _typed(record: Mapping, key: str, kind: str, problems: _Problems, line: int, where: str = ""):
    """``record[key]`` if present and of ``kind`` (:data:`KINDS`; else a problem and None); a flag
    as a bool."""
    value = record.get(key)
    check, expected = KINDS[kind]
    if value is not None and not check(value):
        problems.add(line, f"{where}{key}", f"expected {expected}, got {type(value).__name__} {value!r:.60}")
        return None
    return _flag(value) if kind == "flag" and value is not None else value


def _conversation_table(records: Iterable[tuple[int, Any]], source: LogSource, cell: str) -> pa.Table:
    problems = _Problems(source.path)
    episodes = []
    for line, record in records:
        if isinstance(record, _Unreadable):
            problems.add(line, "(line)", record.reason)
        elif not isinstance(record, Mapping):
            problems.add(line, "(line)", f"an episode is a JSON object, got {type(record).__name__}")
        else:
            steps = _episode_steps(record, source, problems, line)
            if steps is not None:
                episodes.append((line, record.get(source.key("episode_id")), steps))
    if not episodes and not problems.found:
        problems.add(0, "(file)", "holds no episode")
    problems.raise_any()
    ids = [i for _, i, _ in episodes]
    if not (all(isinstance(i, int) and not isinstance(i, bool) for i in ids) and len(set(ids)) == len(ids)):
        ids = list(range(len(episodes)))  # string or repeated ids: episodes are numbered in file order
    rows = [{**step, "cell": cell, "episode": episode} for episode, (_, _, steps) in zip(ids, episodes)
            for step in steps]
    return table_from_rows(rows, TRAJECTORIES)


def _episode_steps(record: Mapping, source: LogSource, problems: _Problems, line: int) -> list[dict] | None:
    """The trajectory rows of one episode (without ``cell`` and ``episode``), or None after
    adding its problems."""
    before = len(problems.found)
    conversation_key = source.key("conversations")
    turns = record.get(conversation_key)
    if turns is None:
        problems.add(line, conversation_key, "missing (the episode's turns); name the key with logs.fields.conversations")
        return None
    if not isinstance(turns, list):
        problems.add(line, conversation_key, f"expected a list of turns, got {type(turns).__name__}")
        return None
    description = _typed(record, "task_description", "string", problems, line)
    start = source.preamble_turns
    if start:
        if len(turns) <= start:
            problems.add(line, conversation_key, f"{len(turns)} turn(s), all of them the preamble "
                         f"(logs.preamble_turns = {start})")
            return None
        opening = turns[0]
        if description is None and isinstance(opening, Mapping):
            description = opening.get(source.fields.get("text") or
                                      ("value" if opening.get("value") is not None else "content"))
            if not isinstance(description, str):
                problems.add(line, f"{conversation_key}[0]", "the preamble's first turn has no text to serve as the "
                             "task description")
                return None
    pending: tuple[str, int] | None = None  # the observation waiting for its action
    steps: list[dict] = []
    for i, turn in enumerate(turns[start:], start=start):
        where = f"{conversation_key}[{i}]"
        if not isinstance(turn, Mapping):
            problems.add(line, where, f"expected a turn object, got {type(turn).__name__}")
            continue
        role, text = _role_and_text(turn, source, problems, line, where)
        if role is None:
            continue
        if role == SYSTEM_ROLE:
            if i != start:
                problems.add(line, f"{where}.{_role_key(turn, source)}", "a system turn may only open the conversation")
            elif description is None:
                description = text
        elif role in OBSERVATION_ROLES:
            if pending is not None:
                problems.add(line, where, "two observation turns in a row: each observation needs the action "
                             "taken on it before the next one")
            if steps and "next_observation" not in steps[-1]:
                steps[-1]["next_observation"] = text
            pending = (text, i)
        elif role in ACTION_ROLES:
            if pending is None:
                problems.add(line, where, "an action turn with no observation before it")
                continue
            step = _step(turn, text, pending[0], len(steps), source, problems, line, where)
            steps.append(step)
            pending = None
        else:
            problems.add(line, f"{where}.{_role_key(turn, source)}",
                         f"unknown role {role!r}; observation roles: {sorted(OBSERVATION_ROLES)}, action roles: "
                         f"{sorted(ACTION_ROLES)}, and 'system' first")
    if not steps and len(problems.found) == before:
        problems.add(line, conversation_key, "empty episode: no action turn after an observation")
    if len(problems.found) > before:
        return None
    if "next_observation" not in steps[-1]:
        steps[-1]["next_observation"] = pending[0] if pending is not None else ""
    return _finish(record, steps, description or "", source, problems, line)


def _role_key(turn: Mapping, source: LogSource) -> str:
    named = source.fields.get("role")
    return named if named is not None else ("from" if turn.get("from") is not None else "role")


def _role_and_text(turn: Mapping, source: LogSource, problems: _Problems, line: int,
                   where: str) -> tuple[str | None, str]:
    """A turn's role (lower-cased) and text; ShareGPT's from/value and OpenAI's role/content
    are both read unless ``fields`` names the keys."""
    role_key = _role_key(turn, source)
    named_text = source.fields.get("text")
    text_key = named_text if named_text is not None else ("value" if turn.get("value") is not None else "content")
    for key, what in ((role_key, "role"), (text_key, "text")):
        value = turn.get(key)
        if value is None:
            problems.add(line, f"{where}.{key}", f"missing (the turn's {what}); name the key with logs.fields.{what}")
            return None, ""
        if not isinstance(value, str):
            problems.add(line, f"{where}.{key}", f"expected a string, got {type(value).__name__}")
            return None, ""
    return turn[role_key].lower(), turn[text_key]


def _step(turn: Mapping, text: str, observation: str, t: int, source: LogSource, problems: _Problems, line: int,
          where: str) -> dict:
    prefix = f"{where}."
    action = _typed(turn, "action", "string", problems, line, prefix)
    admissible = _typed(turn, "admissible", "strings", problems, line, prefix)
    if action is None:  # an explicit action, even "" (a reply that said nothing), is taken as logged
        if text.lstrip().lower().startswith("thought") and not has_action_cue(text):
            problems.add(line, f"{where}", "a 'Thought:' and no 'Action:' cue: which line is the action? give the "
                         "turn an 'action' field or an 'Action: …' line")
        action = parse_action(text)
        if not action:
            problems.add(line, f"{where}", "no action in the turn: give it an 'action' field or an 'Action: …' line")
    step = {
        "t": t,
        "observation": observation,
        "response": text,
        "action": action if action is not None else "",
        "admissible": admissible,
        "reward": _typed(turn, source.key("reward"), "number", problems, line, prefix),
        "behavior_logprob": _typed(turn, source.key("logprob"), "logprob", problems, line, prefix),
        "action_valid": _typed(turn, "valid", "flag", problems, line, prefix),
        "score": _typed(turn, "score", "number", problems, line, prefix),
        "success": _typed(turn, source.key("success"), "flag", problems, line, prefix),
    }
    next_observation = _typed(turn, "next_observation", "string", problems, line, prefix)
    if next_observation is not None:
        step["next_observation"] = next_observation
    return step


def _finish(record: Mapping, steps: list[dict], description: str, source: LogSource, problems: _Problems,
            line: int) -> list[dict] | None:
    """Episode-level fields onto the steps: rewards, success, done, scores, identity columns."""
    before = len(problems.found)
    reward_key, success_key = source.key("reward"), source.key("success")
    episode_reward = _typed(record, reward_key, "number", problems, line)
    success = _typed(record, success_key, "flag", problems, line)
    done = _typed(record, "done", "flag", problems, line)
    identity = {key: _typed(record, key, kind, problems, line)
                for key, kind in (("policy", "string"), ("task", "string"), ("variation", "integer"),
                                  ("seed", "integer"))}
    if all(s["reward"] is None for s in steps):
        if episode_reward is None and record.get(reward_key) is None:
            problems.add(line, reward_key, "missing: no reward on the episode nor on any action turn; name the "
                         "key with logs.fields.reward")
        for s in steps:
            s["reward"] = 0.0
        steps[-1]["reward"] = episode_reward
    if success is None:
        success = steps[-1]["success"]
    if success is None and record.get(success_key) is None:
        problems.add(line, success_key, "missing: no success flag on the episode nor on its last action turn; "
                     "name the key with logs.fields.success")
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
    steps[-1]["success"] = success
    steps[-1]["done"] = True if done is None else done
    common = {"source": "behavior", "epsilon": None, "task_description": description,
              "policy": identity["policy"] or "logged", "task": identity["task"] or "logged",
              "variation": identity["variation"] if identity["variation"] is not None else line,
              "seed": identity["seed"] or 0}
    return [{**common, **s} for s in steps]


def export_jsonl(trajectories: pa.Table, path: str, *, overwrite: bool = False) -> int:
    """Write the behaviour episodes of a trajectories table as JSONL conversations (the format
    read above, every column kept so that importing the file gives the same table back);
    returns the number of episodes."""
    check_output(path, overwrite=overwrite)
    table = behaviour_rows(trajectories)
    table = table.take(pc.sort_indices(table, [("episode", "ascending"), ("t", "ascending")]))
    rows = table.to_pylist()
    episodes: dict[int, list[dict]] = {}
    for row in rows:
        episodes.setdefault(row["episode"], []).append(row)
    with atomic_open(path, "w") as f:
        for episode, steps in episodes.items():
            f.write(json.dumps(_episode_record(episode, steps), ensure_ascii=False) + "\n")
    return len(episodes)


def _episode_record(episode: int, steps: list[dict]) -> dict:
    first, last = steps[0], steps[-1]
    turns = []
    for i, s in enumerate(steps):
        turns.append({"from": "human", "value": s["observation"]})
        turn = {"from": "gpt", "value": s["response"], "action": s["action"], "reward": s["reward"],
                "score": s["score"], "valid": s["action_valid"], "success": s["success"]}
        if s["admissible"] is not None:
            turn["admissible"] = list(s["admissible"])
        if s.get("behavior_logprob") is not None:
            turn["logprob"] = s["behavior_logprob"]
        following = steps[i + 1]["observation"] if i + 1 < len(steps) else None
        if following is not None and s["next_observation"] != following:
            turn["next_observation"] = s["next_observation"]
        turns.append(turn)
    turns.append({"from": "human", "value": last["next_observation"]})
    return {"item_id": episode, "policy": first["policy"], "task": first["task"], "variation": first["variation"],
            "seed": first["seed"], "task_description": first["task_description"], "conversations": turns,
            "reward": sum(s["reward"] for s in steps), "success": last["success"], "done": last["done"]}
