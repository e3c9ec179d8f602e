"""Behaviour logs the user brings: read into the trajectories contract, with a summary of how
they were read, and written back out.

Where the records come from — a file or folder of JSONL, JSON, text transcripts or Parquet, a
Hugging Face dataset — is log_files.py (text split into episodes: log_text.py; step rows:
log_steps.py); where a record's turns are and how they read is log_turns.py; how they become
steps with their outcome (thoughts, preambles, running scores) is log_episode.py; what the
episodes say as a whole (one action for every step, harness lines, options that change
nothing) is log_checks.py. An episode of the conversation formats::

    {"item_id": 7, "policy": "agent-a", "task": "shop", "variation": 3, "seed": 0,
     "task_description": "Buy a red mug under $10",
     "conversations": [
        {"from": "system", "value": "Buy a red mug under $10"},      # optional, first turn only
        {"from": "human", "value": "<observation o_0>"},
        {"from": "gpt", "value": "Thought: …\\nAction: search[red mug]",
         "reward": 0.0, "logprob": -3.2, "admissible": ["…"]},        # extras all optional
        {"from": "human", "value": "<observation o_1>"}, …],
     "reward": 1.0, "success": true, "done": true}

Every problem is reported with file, line (1-based; the item of an array, the row of a
dataset) or the episode's key where its layout gives one, and field, all problems of the logs
in one :class:`LogFormatError`, before anything is written; a file that is no trajectory log
(a debug log) is refused as such. Episodes are numbered by their integer ids where every episode has a distinct one,
else in the order read.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import fsspec
import pyarrow as pa
import pyarrow.compute as pc

from ..specs import LogSource
from . import TRAJECTORIES, behaviour_rows, check_output, read_table, table_from_rows, write_table
from .io import atomic_open
from .log_checks import check_actions, check_fields, check_options, repeated_lines
from .log_episode import count_lines, step_rewards, steps_of
from .log_files import LogFormatError, Unreadable, cached_dataset, is_trajectories, read_files
from .log_turns import TURN_KEYS, Counts, Problems
from .log_values import lookup, outcome_keys

MAX_LISTED_PROBLEMS = 20
SUMMARY_FILE = "import.json"  # beside an imported trajectories file

__all__ = ["LogFormatError", "ImportSummary", "read_logs", "import_logs", "fingerprint", "export_jsonl"]


@dataclass
class ImportSummary:
    """How logs were read: the layout found, the keys read, the counts, what was read in a way the
    user should know of, and the first episode as the world model reads it."""

    path: str
    layout: str
    mapping: dict[str, str | None]
    episodes: int
    steps: int
    successes: int
    reward_range: tuple[float, float]
    readings: dict[str, int] = field(default_factory=dict)
    first_episode: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # files of a folder not read, each "name: why"
    warnings: list[str] = field(default_factory=list)  # readings the user should settle with a flag

    def lines(self, shown_steps: int = 3) -> list[str]:
        """The summary as ``adwm import`` prints it, the first episode's first ``shown_steps`` steps."""
        mapping = ", ".join(f"{role} ← {key}" for role, key in self.mapping.items() if key is not None)
        out = [f"logs:      {self.path}", f"layout:    {self.layout}", f"keys:      {mapping}",
               f"episodes:  {self.episodes}   steps: {self.steps}   successes: {self.successes}   "
               f"reward range: [{self.reward_range[0]:g}, {self.reward_range[1]:g}]"]
        out += [f"read:      {n} {what}" for what, n in self.readings.items()] or ["read:      every step as logged"]
        out += [f"skipped:   {entry}" for entry in self.skipped]
        out += [f"warning:   {text}" for text in self.warnings]
        out.append(f"first episode, as the world model reads it ({len(self.first_episode)} step(s)):")
        for step in self.first_episode[:shown_steps]:
            out.append(f"  t={step['t']}  observation: {_short(step['observation'])}")
            out.append(f"       action: {step['action']!r}   reward: {step['reward']:g}")
        if len(self.first_episode) > shown_steps:
            out.append(f"  … {len(self.first_episode) - shown_steps} more")
        return out

    def write(self, path: str) -> None:
        with atomic_open(path, "w") as f:
            json.dump(asdict(self), f, indent=1, ensure_ascii=False)


def _short(text: str, width: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def read_logs(source: LogSource, *, cell: str) -> pa.Table:
    """The behaviour steps of ``source`` as a validated trajectories table (rows of ``cell``)."""
    return inspect_logs(source, cell=cell)[0]


def inspect_logs(source: LogSource, *, cell: str) -> tuple[pa.Table, ImportSummary]:
    """The behaviour steps of ``source`` and how they were read."""
    if source.resolved_format == "parquet" and _is_trajectories(source.path):
        table = behaviour_rows(read_table(source.path, TRAJECTORIES))
        if table.num_rows == 0:
            raise LogFormatError(f"{source.path}: no behaviour rows (source = 'behavior')")
        index = table.schema.get_field_index("cell")
        table = table.set_column(index, table.schema.field(index), pa.array([cell] * table.num_rows, pa.string()))
        return table, _summary(source, table, "ADWM trajectories Parquet", {"trajectories": "as written"}, Counter())
    files = read_files(source)
    problems, counts = Problems(), Counts()
    episodes_read = [(record, _episode_value(record)) for record in files.records]
    values = [value for _, value in episodes_read if isinstance(value, Mapping)]
    keys, ambiguities = outcome_keys(values, source)
    rewards, going_down = step_rewards([(r.at, v) for r, v in episodes_read if isinstance(v, Mapping)], source, keys)
    for message in ambiguities:
        problems.add(source.path, "(outcome)", message)
    for at, message in going_down:
        problems.add(at, "(reward per step)", message)
    check_fields(values, source, problems)
    episodes = []
    for record, value in episodes_read if not problems.found else ():
        if isinstance(value, Unreadable):
            problems.add(record.at, "(line)", value.reason)
        elif not isinstance(value, Mapping):
            problems.add(record.at, "(line)", f"an episode is a JSON object or a list of messages, got "
                         f"{type(value).__name__} {value!r:.40}: this is no episode; remove it")
        else:
            steps = steps_of(value, source, keys, rewards, counts, problems, record.at, record.line, record.kind)
            if steps:
                identity = record.key if record.key is not None else lookup(value, source.key("episode_id"))
                episodes.append((identity, steps))
    if not episodes and not problems.found:
        problems.add(source.path, "(file)", "holds no episode with a step: is it an empty list, or the wrong file?")
    if not problems.found:  # what the episodes say as a whole, once each of them reads
        check_actions([step["action"] for _, steps in episodes for step in steps], source, problems)
        check_options(source, counts, files.readings, problems)
    _raise_any(problems)
    ids = [i for i, _ in episodes]
    if not (all(isinstance(i, int) and not isinstance(i, bool) for i in ids) and len(set(ids)) == len(ids)):
        ids = list(range(len(episodes)))  # string or repeated ids: episodes are numbered in the order read
    rows = [{**step, "cell": cell, "episode": episode} for episode, (_, steps) in zip(ids, episodes) for step in steps]
    table = table_from_rows(rows, TRAJECTORIES)
    mapping = {"conversations": ", ".join(sorted(counts.turn_keys)), "reward": keys.reward,
               "success": keys.success, "thoughts": source.thoughts}
    readings = files.readings + count_lines(counts, source.thoughts)
    readings.update(repeated_lines([steps[0]["observation"] for _, steps in episodes],
                                   [step["next_observation"] for _, steps in episodes for step in steps]))
    summary = _summary(source, table, files.layout, mapping, readings)
    summary.skipped = list(files.skipped)
    if counts.running_success:
        summary.warnings.append(f"{counts.running_success} episode(s) without a success flag read as a success where "
                                "their running score reaches 1, its maximum undeclared: declare the score that "
                                "finishes the game with --max-score N, or the return that is a success with "
                                "--success-at X")
    return table, summary


def _episode_value(record) -> object:
    """The record's episode: a bare list of messages becomes ``{"conversations": [...]}``."""
    return {TURN_KEYS[0]: record.value} if record.kind == "bare list" else record.value


def _is_trajectories(path: str) -> bool:
    import pyarrow.parquet as pq

    fs, fs_path = fsspec.core.url_to_fs(path)
    if not fs.isfile(fs_path):
        return False
    with fs.open(fs_path, "rb") as f:
        try:
            names = pq.read_schema(f).names
        except (pa.ArrowInvalid, OSError) as error:
            raise LogFormatError(f"{path}: not a readable Parquet file ({error})") from None
    return is_trajectories(names)


def _raise_any(problems: Problems) -> None:
    if problems.found:
        shown = problems.found[:MAX_LISTED_PROBLEMS]
        more = len(problems.found) - len(shown)
        raise LogFormatError(f"{len(problems.found)} problem(s) in the logs, nothing imported:\n  " + "\n  ".join(shown)
                             + (f"\n  … and {more} more" if more else ""))


def _summary(source: LogSource, table: pa.Table, layout: str, mapping: dict, readings: Counter) -> ImportSummary:
    successes: dict[int, bool] = {}
    totals: dict[int, float] = {}
    for episode, reward, success in zip(*(table[c].to_pylist() for c in ("episode", "reward", "success"))):
        successes[episode] = success  # rows run in order of t: the episode's last row is its outcome
        totals[episode] = totals.get(episode, 0.0) + reward
    first = table.filter(pc.equal(table["episode"], next(iter(totals))))
    first = first.select(["t", "observation", "action", "reward"])
    return ImportSummary(source.path, layout, mapping, len(totals), table.num_rows, sum(successes.values()),
                         (min(totals.values()), max(totals.values())), {what: n for what, n in readings.items() if n},
                         first.to_pylist())


def import_logs(source: LogSource, out: str, *, cell: str, overwrite: bool = False) -> ImportSummary:
    """Read ``source`` (:func:`inspect_logs`) and write the trajectories Parquet ``out`` and its
    summary beside it (``import.json``); an existing ``out`` is refused before reading, nothing
    is written when the logs are malformed."""
    check_output(out, overwrite=overwrite)
    table, summary = inspect_logs(source, cell=cell)
    write_table(table, out, TRAJECTORIES, overwrite=overwrite)
    summary.write(os.path.join(os.path.dirname(out), SUMMARY_FILE))
    return summary


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
        return cached_dataset(source)._fingerprint
    for name in files:
        digest.update(os.path.relpath(name, path).encode())
        with fs.open(name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


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
