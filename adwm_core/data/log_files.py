"""The files behaviour logs come in, read into episode records whatever their layout.

A logs path is a file, a folder of files (read in name order, recursively) or a saved
Hugging Face dataset. Each file's layout is told by its content, never by a flag:

- JSONL, one episode per line;
- a JSON array of episodes;
- a JSON object whose values are episodes (the key becomes the episode's id);
- a JSON object with one key holding a list of episodes (``{"episodes": [...]}``), or episodes
  under one key beside others (``{"config": {...}, "results": [...]}``);
- one JSON episode;
- JSONL or a JSON array of *steps* (records with ``observation`` and ``action`` and no turn
  list), grouped into episodes by log_steps.py;
- a Parquet file: the project's trajectories, or a table of steps (``STEP_COLUMNS``);
- a JSON object of groups of episodes keyed by id (``{task type: {id: episode}}``): the group
  becomes the episode's ``task`` where it names none, ``group/id`` its id;
- JSON lists of messages with no wrapper: one (a file that is a list of turns), a JSON array of
  them, or JSONL of them, each an episode;
- plain text: one transcript or several, split into episodes by log_text.py; a chat session
  exported as Markdown or text (``**[user]:**`` turns, fenced function calls), one episode,
  by log_chat.py;
- a CSV or TSV table of steps, one episode a file, with the JSON summary beside it where there
  is one (log_tables.py).

A folder's files are read by their suffix (``LOG_SUFFIXES``); every file it does not read — a
hidden one, one of another suffix — is named in the summary with the reason.

Any file may be gzip-compressed (``.gz``); a UTF-8 byte-order mark is skipped. A record keeps
where it came from (file, line or item) for every error about it.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from ..specs import LOG_SUFFIXES as SUFFIXES
from ..specs import LogSource, unknown_suffix
from .log_chat import chat_episode, is_chat_export
from .log_steps import grouped_steps
from .log_tables import is_table, sidecar_of, table_records
from .log_text import TRANSCRIPT_KEY, text_episodes
from .log_turns import TURN_KEYS, is_message_list, turn_list_keys
from .log_values import LogFormatError, NotATrajectoryLog, has

LOG_SUFFIXES = tuple(SUFFIXES)
STEP_COLUMNS = ("episode", "observation", "action", "reward", "success")  # a table of steps needs these
BARE_LISTS = "episodes given as bare lists of messages"


@dataclass(frozen=True)
class Unreadable:
    """A line that is no JSON value, kept so that its problem is reported with the others."""

    reason: str


@dataclass
class Record:
    """One episode as read: its value, its file and line (item, row), the id its layout gives, and
    its kind: ``json``, ``text`` (a transcript of a text file, ``line`` its first) or ``bare list``."""

    file: str
    line: int
    value: Any
    key: Any = None
    kind: str = "json"

    @property
    def at(self) -> str:
        """Where it is, for errors: the episode's key where its layout gives one, else its line."""
        return f"{self.file}:{self.line}" if self.key is None else f"{self.file}: episode {self.key!r}"


@dataclass
class LogFiles:
    """The records of every file of a logs path, and each file's layout."""

    records: list[Record] = field(default_factory=list)
    layouts: dict[str, str] = field(default_factory=dict)  # file → layout
    readings: Counter = field(default_factory=Counter)  # what the layouts read in a way to know of
    skipped: list[str] = field(default_factory=list)  # "name: why" for every file of a folder not read

    @property
    def layout(self) -> str:
        kinds = sorted(set(self.layouts.values()))
        return kinds[0] if len(kinds) == 1 else "mixed: " + "; ".join(kinds)


def read_files(source: LogSource) -> LogFiles:
    """The records of ``source`` (a file, a folder of files, or a saved or cached dataset)."""
    if source.resolved_format == "hf":
        return _dataset_records(source)
    fs, path = fsspec.core.url_to_fs(source.path)
    if not fs.exists(path):
        raise FileNotFoundError(f"{source.path}: no logs file or folder here; check behaviour.logs.path (or the "
                                "LOGS argument)")
    read = LogFiles()
    if fs.isfile(path):
        files, summaries = [path], {}
        if is_table(path, source):
            beside = sidecar_of(path, set(fs.ls(os.path.dirname(path) or ".", detail=False)))
            summaries = {path: beside} if beside else {}
    else:
        files, summaries = _folder_files(fs, path, source.path, read.skipped)
    in_folder = not fs.isfile(path)
    for name in files:
        try:
            if is_table(name, source):
                layout, records = table_records(fs, name, source, summaries.get(name), Record, read.readings)
            else:
                layout, records = _file_records(fs, name, source, read.readings, in_folder)
        except NotATrajectoryLog as error:
            if not in_folder:
                raise
            read.skipped.append(f"{os.path.relpath(name, path)}: {error.reason}")
            continue
        read.layouts[name] = layout
        read.records.extend(records)
    if in_folder and not read.records:
        raise LogFormatError(f"{source.path}: the folder holds no logs file it could read; skipped: "
                             + "; ".join(read.skipped[:10]))
    read.readings[BARE_LISTS] += sum(r.kind == "bare list" for r in read.records)
    return read


def _folder_files(fs, path: str, shown: str, skipped: list[str]) -> tuple[list[str], dict[str, str]]:
    """A folder's logs files in name order and each table's summary beside it; ``skipped`` gets
    every other file, named with the reason (a hidden folder once, with its count)."""
    names = sorted(fs.find(path))
    files, hidden = [], Counter()
    for name in names:
        relative = os.path.relpath(name, path)
        parts = relative.split(os.sep)
        top_hidden = next((os.sep.join(parts[:i + 1]) for i, part in enumerate(parts) if part.startswith(".")), None)
        if top_hidden is not None:
            hidden[top_hidden] += 1
        elif os.path.basename(relative).lower().removesuffix(".gz").endswith(LOG_SUFFIXES):
            files.append(name)
        else:
            skipped.append(f"{relative}: {unknown_suffix(relative)}, not a logs file (read: {', '.join(LOG_SUFFIXES)}; "
                           "another suffix is read only as the one file named, with --format)")
    skipped[:0] = [f"{entry}: hidden" + (f" ({n} files)" if n > 1 else "") for entry, n in hidden.items()]
    present = set(files)
    tables = [name for name in files if name.lower().removesuffix(".gz").endswith((".csv", ".tsv"))]
    summaries = {name: beside for name in tables if (beside := sidecar_of(name, present))}
    read_with_tables = set(summaries.values())
    orphans = [name for name in files if tables and name.lower().removesuffix(".gz").endswith(".json")
               and name not in read_with_tables]  # beside tables, a JSON of no table is a run's summary
    skipped += [f"{os.path.relpath(name, path)}: a JSON beside tables that is no table's summary (a run's "
                "summary?); name it alone to read it as logs" for name in orphans]
    files = [name for name in files if name not in read_with_tables and name not in orphans]
    if not files:
        if fs.exists(os.path.join(path, "dataset_info.json")) or fs.exists(os.path.join(path, "state.json")):
            raise LogFormatError(f"{shown}: a saved Hugging Face dataset; read it with format 'hf' (--format hf)")
        raise LogFormatError(f"{shown}: the folder holds no logs file ({', '.join(LOG_SUFFIXES)}, each may be .gz)"
                             + ("; skipped: " + "; ".join(skipped[:10]) if skipped else ""))
    return files, summaries


def _file_records(fs, path: str, source: LogSource, readings: Counter, in_folder: bool = False
                  ) -> tuple[str, list[Record]]:
    if path.lower().removesuffix(".gz").endswith(".parquet"):
        return _parquet_records(fs, path, source)
    with fs.open(path, "rb", compression="infer") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark is skipped
    except UnicodeDecodeError as error:
        raise LogFormatError(f"{path}: not UTF-8 text (byte {error.start}); save the logs as UTF-8") from None
    if not text.strip():
        raise LogFormatError(f"{path}: the file is empty")
    if in_folder and path.lower().removesuffix(".gz").endswith((".md", ".markdown")) and not is_chat_export(text):
        raise NotATrajectoryLog(f"{path}: Markdown that is no chat session", reason="Markdown that is no chat "
                                "session (a README?); name it alone to read it as a text log")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as error:
        return _lines_or_transcript(path, text, error, source, readings)
    return _json_records(path, whole, source)


def _lines_or_transcript(path: str, text: str, whole_error: json.JSONDecodeError, source: LogSource,
                         readings: Counter) -> tuple[str, list[Record]]:
    """JSONL where any of the first lines is a JSON object or list; else broken JSON, or text."""
    lines = text.splitlines()
    if not any(_is_json_record(line) for line in [row for row in lines if row.strip()][:20]):
        if is_chat_export(text):
            layout, episodes, read = chat_episode(path, text, source)
            readings.update(read)
            return layout, [Record(path, line, value, kind="chat") for line, value in episodes]
        if text.lstrip()[0] in "[{":  # JSON that does not parse: say where
            raise LogFormatError(f"{path}: not valid JSON ({whole_error.msg} at line {whole_error.lineno}, column "
                                 f"{whole_error.colno})") from None
        layout, episodes, read = text_episodes(path, text, source)
        readings.update(read)
        return layout, [Record(path, line, value, kind="text") for line, value in episodes]
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(Record(path, number, json.loads(line)))
        except json.JSONDecodeError as error:
            records.append(Record(path, number, Unreadable(f"not valid JSON ({error.msg} at column {error.colno})")))
    return _grouped_steps("JSONL, one episode per line", "JSONL, one step per line", records, source)


def _is_json_record(line: str) -> bool:
    try:
        return isinstance(json.loads(line), (Mapping, list))
    except json.JSONDecodeError:
        return False


def _json_records(path: str, whole: Any, source: LogSource) -> tuple[str, list[Record]]:
    if isinstance(whole, list):
        if is_message_list(whole):
            return "one bare list of messages", [Record(path, 1, whole, kind="bare list")]
        return _grouped_steps("JSON array of episodes", "JSON array of steps",
                              [Record(path, i, value) for i, value in enumerate(whole, start=1)], source)
    if not isinstance(whole, Mapping):
        raise LogFormatError(f"{path}: a JSON {type(whole).__name__}, not episodes; give JSONL, a JSON array of "
                             "episodes, or a JSON object of episodes")
    if _is_episode(whole, source):
        return "one JSON episode", [Record(path, 1, whole)]
    if len(whole) == 1 and isinstance(next(iter(whole.values())), list) \
            and not is_message_list(next(iter(whole.values()))):
        (key, values), = whole.items()
        return _grouped_steps(f"JSON object {{{key!r}: [episodes]}}", f"JSON object {{{key!r}: [steps]}}",
                              [Record(path, i, value) for i, value in enumerate(values, start=1)], source)
    lists = [key for key, value in whole.items() if isinstance(value, list) and value
             and all(isinstance(e, Mapping) and (_is_episode(e, source) or turn_list_keys(e)) for e in value)]
    if len(lists) == 1:  # episodes under one key, beside other keys (a run's config, its scores)
        return f"JSON object, episodes under {lists[0]!r}", [
            Record(path, i, value) for i, value in enumerate(whole[lists[0]], start=1)]
    values = list(whole.values())
    if values and all(isinstance(v, Mapping) and not _is_episode(v, source) for v in values) \
            and all(isinstance(e, Mapping) and _is_episode(e, source) for v in values for e in v.values()):
        records = [Record(path, 0, {"task": group, **episode} if "task" not in episode else episode,
                          key=f"{group}/{key}")
                   for group, episodes in whole.items() for key, episode in episodes.items()]
        for i, record in enumerate(records, start=1):
            record.line = i
        return "JSON object of groups of episodes keyed by id", records
    if values and all(isinstance(value, (Mapping, list)) for value in values):
        return "JSON object of episodes keyed by id", [
            Record(path, i, value, key=key, kind="bare list" if is_message_list(value) else "json")
            for i, (key, value) in enumerate(whole.items(), start=1)]
    return "one JSON episode", [Record(path, 1, whole)]  # its turn key unnamed yet: log_turns says which to name


def _is_episode(value: Mapping, source: LogSource | None = None) -> bool:
    named = None if source is None else source.fields.get("conversations")
    return any(key in value for key in (*TURN_KEYS, TRANSCRIPT_KEY)) or (named is not None and has(value, named))


def _grouped_steps(episodes: str, steps: str, records: list[Record], source: LogSource | None = None
                   ) -> tuple[str, list[Record]]:
    """``records`` as they are (a list of messages marked a bare list), or — where every one is a
    step — one record per episode (log_steps.py)."""
    grouped = grouped_steps(records, source)
    if grouped is not None:
        return steps, grouped
    for record in records:
        if is_message_list(record.value):
            record.kind = "bare list"
    return episodes, records


def _parquet_records(fs, path: str, source: LogSource) -> tuple[str, list[Record]]:
    """A table of steps; the project's trajectories (in a folder, say) by their behaviour rows."""
    with fs.open(path, "rb", compression="infer") as f:
        try:
            table = pq.read_table(f)
        except (pa.ArrowInvalid, OSError) as error:
            raise LogFormatError(f"{path}: not a readable Parquet file ({error})") from None
    layout = "Parquet, one step per row"
    if is_trajectories(table.column_names):
        table = table.filter(pa.compute.equal(table["source"], "behavior")).rename_columns(
            [TRAJECTORY_NAMES.get(c, c) for c in table.column_names])
        layout = "ADWM trajectories Parquet (behaviour rows)"
    missing = [c for c in STEP_COLUMNS if c not in table.column_names]
    if missing:
        raise LogFormatError(f"{path}: a Parquet table of steps needs the column(s) {missing} (it has "
                             f"{table.column_names}): one row per action, as LoggedEpisodes.from_dataframe reads")
    records = [Record(path, row, values) for row, values in enumerate(table.to_pylist(), start=1)]
    return _grouped_steps(layout, layout, records, source)


def is_trajectories(columns: list[str]) -> bool:
    """Columns of the project's own trajectories contract (data/schemas.py), not a table of steps."""
    return "source" in columns and "next_observation" in columns


TRAJECTORY_NAMES = {"behavior_logprob": "logprob", "action_valid": "valid"}  # trajectories → step-table columns


def _dataset_records(source: LogSource) -> LogFiles:
    import datasets

    if os.path.isdir(source.path):
        loaded = datasets.load_from_disk(source.path)
    else:
        loaded = cached_dataset(source)
    if isinstance(loaded, datasets.DatasetDict):
        split = source.split or ("train" if "train" in loaded else None)
        if split not in loaded:
            raise LogFormatError(f"{source.path}: dataset has splits {sorted(loaded)}; name one with logs.split")
        loaded = loaded[split]
    layout, records = _grouped_steps("Hugging Face dataset of episodes", "Hugging Face dataset of steps",
                                     [Record(source.path, row, value) for row, value in enumerate(loaded, start=1)],
                                     source)
    return LogFiles(records, {source.path: layout}, Counter({BARE_LISTS: sum(r.kind == "bare list"
                                                                            for r in records)}))


def cached_dataset(source: LogSource):
    if os.path.exists(source.path):  # a path on this machine is never looked up on a hub
        raise LogFormatError(f"{source.path}: a file on this machine, and --format hf reads a folder saved with "
                             "save_to_disk or a dataset name in the local Hugging Face cache; read the file with "
                             "--format jsonl, csv or parquet")
    import datasets

    try:
        return datasets.load_dataset(source.path, split=source.split or "train")
    except Exception as error:  # not found, offline without a cache entry, unreadable
        raise FileNotFoundError(f"{source.path}: neither a logs file, a saved dataset folder nor a dataset in the "
                                f"local Hugging Face cache ({type(error).__name__}: {error})") from None

