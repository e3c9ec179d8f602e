"""Logs of single steps: records with an ``observation`` and an ``action`` (and whatever else),
one file line, array item, Parquet or dataset row each, or a list of them inside an episode
(ScienceWorld's ``history.history``). They become the turns of a conversation here.

**Which observation a row holds.** By default a row's ``observation`` is what the agent saw
before its action, and the next row's is the answer (or the row's ``next_observation``).
Several projects log the answer to the row's action instead (ScienceWorld's run histories):
``LogSource.step_observation = "after"`` reads them so, the episode opening on its
``fields["opening"]`` text, else an empty one. Rows without ``next_observation`` read with no
convention named are counted in the import summary, with the flag that reads them the other way.

**Keys.** ``fields`` names the row keys as it names an episode's: ``reward`` (per step),
``success`` (the episode's, on its last row), ``logprob``; ``episode_id`` groups rows into
episodes (else the first of ``STEP_EPISODE_KEYS`` every row holds), in order of ``t``. Rows of
one long run with no such key (a game played on after each death) are split where a step
counter (``t``, ``step``, ``moves``, ``turn``) goes back, or before a row whose ``restart`` flag
is true; a run whose counter never goes back is one episode. Top-level rows are read whatever
the case and spacing of their keys (``Observation``, ``Max Score``): ``ROW_NAMES`` maps them,
``Feedback`` (the game's answer) to ``next_observation``, ``Reasoning`` to ``response``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..specs import LOG_FIELDS, LogSource
from .log_values import LogFormatError, has, lookup

STEP_ROWS_KEY = "steps"  # where a record of grouped step rows keeps them
# what groups records of steps into episodes, in order of preference (a per-row ``id`` last)
STEP_EPISODE_KEYS = ("episode", "episode_id", "traj_id", "trajectory_id", "session_id", "run_id", "item_id", "id")
COUNTERS = ("t", "moves", "turn")  # step counters whose going back starts a new episode of a run
RESTART_KEYS = ("restart", "restarted")  # a row flag: the game restarted before this row
# top-level row keys, lower-cased with spaces, '_' and '-' taken out, as the reader reads them
ROW_NAMES = {"observation": "observation", "obs": "observation", "action": "action",
             "nextobservation": "next_observation", "feedback": "next_observation", "response": "response",
             "reasoning": "response", "reward": "reward", "score": "score", "maxscore": "max_score", "done": "done",
             "success": "success", "step": "t", "t": "t", "moves": "moves", "turn": "turn", "restart": "restart",
             "restarted": "restarted"}
EPISODE_COLUMNS = ("task_description", "policy", "task", "variation", "seed", "max_score")  # an episode's first row
TURN_FIELDS = ("admissible", "valid", "score")  # copied from a row onto its action turn as they are
BEFORE_UNNAMED = ("step rows without next_observation, each row's observation read as the one its action was "
                  "taken on (--step-observation after if it is the action's answer)")
AFTER = "step rows whose observation is the answer to the row's action (--step-observation after)"


def is_step_row(value: Any) -> bool:
    """A record of one step: an ``observation`` and an ``action``, whatever else it holds (a
    prompt's messages included), and no turn role."""
    return isinstance(value, Mapping) and "observation" in value and "action" in value \
        and value.get("from") is None and value.get("role") is None


def is_step_list(value: Any) -> bool:
    """A non-empty list of step rows: an episode's steps, one record each."""
    return isinstance(value, list) and bool(value) and all(is_step_row(row) for row in value)


def _keys(source: LogSource | None) -> dict[str, str]:
    return {role: (LOG_FIELDS[role] if source is None else source.key(role)) for role in ("reward", "logprob",
                                                                                        "success")}


def step_turns(rows: Sequence[Mapping], source: LogSource | None = None, *, opened: bool = False
               ) -> tuple[list[dict], list[int], str | None]:
    """The conversation turns of one episode's step rows (in order), the row each turn comes
    from, and how their observations were read (a summary line; None where the rows say so
    themselves). ``opened``: the episode's first observation is given apart
    (``fields["opening"]``), so an "after" reading starts with the agent's turn."""
    keys, after = _keys(source), source is not None and source.step_observation == "after"
    rows = [{k: v for k, v in row.items() if v is not None} for row in rows]
    turns: list[dict] = [] if (opened or not after) else [{"from": "human", "value": ""}]
    origins = [0] * len(turns)
    for i, row in enumerate(rows):
        turn = {"from": "gpt", "value": row.get("response", row["action"]), "action": row["action"]}
        for key in (keys["reward"], keys["logprob"], *TURN_FIELDS):
            if has(row, key):
                turn[key] = lookup(row, key)
        if after:
            turns += [turn, {"from": "human", "value": row["observation"]}]
        else:
            following = rows[i + 1]["observation"] if i + 1 < len(rows) else None
            if "next_observation" in row and following is not None and row["next_observation"] != following:
                turn["next_observation"] = row["next_observation"]
            turns += [{"from": "human", "value": row["observation"]}, turn]
        origins += [i, i]
    if not after and "next_observation" in rows[-1]:
        turns.append({"from": "human", "value": rows[-1]["next_observation"]})
        origins.append(len(rows) - 1)
    if has(rows[-1], keys["success"]):  # the episode's success, on its last action
        next(t for t in reversed(turns) if t["from"] == "gpt")[keys["success"]] = lookup(rows[-1], keys["success"])
    if after:
        return turns, origins, AFTER
    named = source is not None and source.step_observation == "before"
    return turns, origins, None if named or any("next_observation" in row for row in rows) else BEFORE_UNNAMED


def episode_of_steps(steps: list[Mapping], episode_key: str = "episode") -> dict:
    """One episode's step rows (``observation``, ``action``, ``reward``, optional ``response``,
    ``logprob``, ``admissible``, ``valid``, ``next_observation``, ``t``; per episode ``success``,
    ``done`` on its last row and ``task_description``, ``policy``, ``task``, ``variation``,
    ``seed`` on its first) as an episode record of the JSONL format."""
    turns, _, _ = step_turns(steps)
    return {"conversations": turns, **episode_fields(steps, episode_key)}


def episode_fields(steps: Sequence[Mapping], episode_key: str, source: LogSource | None = None) -> dict:
    """What step rows say of their episode: identity columns and the opening (``fields``) from
    the first row, success (its key as ``fields`` names it) and done from the last, the integer
    id as ``item_id``."""
    first, last = steps[0], steps[-1]
    record = {key: first[key] for key in EPISODE_COLUMNS if first.get(key) is not None}
    opening = None if source is None else source.fields.get("opening")
    if opening is not None and lookup(first, opening) is not None:  # the episode's first observation, kept apart
        record[opening] = lookup(first, opening)
    success = _keys(source)["success"]
    for key in (success, "done"):
        if lookup(last, key) is not None:
            record[key] = lookup(last, key)
    identity = first.get(episode_key)
    if isinstance(identity, int) and not isinstance(identity, bool):
        record["item_id"] = identity
    return record


def named_row(value: Any, source: LogSource | None) -> Any:
    """A record with the keys ``fields`` names for a step's observation and action copied under
    those names (``--fields observation=state action=command``); any other value as it is."""
    named = {} if source is None else {r: source.fields[r] for r in ("observation", "action") if r in source.fields}
    if not named or not isinstance(value, Mapping) or not all(has(value, k) for k in named.values()):
        return value
    return {**value, **{role: lookup(value, key) for role, key in named.items()}}


def row_key(name: str) -> str:
    """A top-level row key as the reader names it (``ROW_NAMES``), else as it is."""
    return ROW_NAMES.get("".join(ch for ch in name.lower() if ch not in " _-"), name) if isinstance(name, str) else name


def canonical_row(value: Any) -> Any:
    """A record with its keys named as ``ROW_NAMES`` says, where it is a step row so named
    (``Observation`` and ``Action`` in any case), each value also under its logged key; any
    other value as it is. A key already present under its reader's name is never overwritten."""
    if not isinstance(value, Mapping) or value.get("from") is not None or value.get("role") is not None:
        return value
    renamed = {row_key(k): k for k in value}
    if "observation" not in renamed or "action" not in renamed:
        return value
    out = dict(value)  # the keys as logged stay, so that --fields may name them
    for k, v in value.items():
        out.setdefault(row_key(k), v)
    return out


def grouped_steps(records: list, source: LogSource | None = None, *, one_run: bool = False) -> list | None:
    """``records`` (log_files.Record) of single steps grouped into one record per episode, its
    rows under ``STEP_ROWS_KEY`` — or None where they are not all steps. ``one_run``: the records
    are one file's run (a CSV of one episode), one episode unless a counter goes back."""
    values = [canonical_row(named_row(r.value, source)) for r in records]
    if not is_step_list(values):
        return None
    for record, value in zip(records, values):
        record.value = value
    named = None if source is None else source.fields.get("episode_id")
    key = named or next((k for k in STEP_EPISODE_KEYS if all(k in v for v in values)), None)
    first = records[0]
    runs = None if key is not None else _runs(values, one_run)
    if runs is None and (key is None or not all(has(v, key) for v in values)):
        missing = next(r for r in records if key is None or not has(r.value, key))
        raise LogFormatError(f"{first.file}:{missing.line}: records of single steps (observation, action) but "
                           + (f"this one has no {key!r} (--fields episode_id={key})" if named else
                              f"no key that groups them into episodes: give each one of "
                              f"{', '.join(STEP_EPISODE_KEYS)} (or a step counter, {', '.join(COUNTERS)}, that "
                              "starts again with each episode), or name it with --fields episode_id=KEY"))
    for record in records:
        for column in ("observation", "action"):
            if not isinstance(record.value[column], str):
                raise LogFormatError(f"{record.file}:{record.line}: {column}: expected a string, got "
                                   f"{type(record.value[column]).__name__}; every step needs its {column} text")
        if record.value.get("t") is not None and not isinstance(record.value["t"], int):
            raise LogFormatError(f"{record.file}:{record.line}: t: expected an integer step, got "
                               f"{type(record.value['t']).__name__}; give each row's index in its episode, or "
                               "leave t out to keep the rows' order")
    grouped: dict[Any, list] = {}
    if runs is not None:  # one run, split where a counter goes back
        for run, record in zip(runs, records):
            grouped.setdefault(run, []).append(record)
    else:
        for record in records:
            grouped.setdefault(_hashable(lookup(record.value, key)), []).append(record)
        for rows in grouped.values():
            rows.sort(key=lambda r: r.value.get("t") if r.value.get("t") is not None else 0)  # stable: file order else
    return [type(first)(rows[0].file, rows[0].line, {STEP_ROWS_KEY: [r.value for r in rows],
                                                     **episode_fields([r.value for r in rows], key, source)},
                        key=None if key is None else lookup(rows[0].value, key)) for rows in grouped.values()]


def _runs(values: Sequence[Mapping], one_run: bool) -> list[int] | None:
    """Each row's episode in a run of rows with no episode key: a new one where a step counter
    every row holds goes back, or at a row whose restart flag is true; None where the rows hold
    neither a counter nor a restart flag (and are not ``one_run``)."""
    counters = [c for c in COUNTERS if all(isinstance(v.get(c), int) and not isinstance(v.get(c), bool)
                                           for v in values)]
    restarts = [k for k in RESTART_KEYS if any(k in v for v in values)]
    if not counters and not restarts and not one_run:
        return None
    runs, run = [], 0
    for i, value in enumerate(values):
        if i and (any(value[c] < values[i - 1][c] for c in counters)
                  or any(value.get(k) is True or str(value.get(k)).lower() == "true" for k in restarts)):
            run += 1
        runs.append(run)
    return runs


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value
