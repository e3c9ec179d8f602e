"""Tables of steps in CSV or TSV files: a row per action, a header naming the columns.

The columns are read by name, in any order and any case (log_steps.ROW_NAMES: ``Step``,
``Observation``, ``Action``, ``Reasoning``, ``Reward``, ``Done``, …; ``fields`` maps others,
``--fields observation=Room action=Command``). Numbers are read as numbers (``Reward``, ``Score``,
``Max Score``; the counters ``Step``, ``Moves``, ``Turn`` as integers), an empty cell as no value.
A file is one episode unless it holds an episode column (log_steps.STEP_EPISODE_KEYS) or its step
counter goes back (a run played on after each end), as for any step rows.

**A summary beside each file.** A JSON object with the file's stem beside it (``run_00.csv`` and
``run_00.json``) is that episode's summary: its keys are the episode's (``task``, ``done``, a
success flag …), read with the table and never as logs of their own.

**BALROG.** A leaderboard run of BALROG (balrog-ai/BALROG) writes one such pair per episode, the
summary holding ``progression`` and ``episode_return``. Its evaluator writes each row's
``Observation`` after the row's action was taken (the observation the step returned; the first
action's own observation is not logged), and counts an episode a success where its
``progression`` reaches 1. Such pairs are read so, each reading counted, unless
``--step-observation`` or ``--fields success=…`` say otherwise. Whether the ``Reward`` column is a
reward per step or the game's running score (BALROG's TextWorld logs the score) is the rows' to
tell (log_episode.step_rewards).
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..specs import LogSource
from .log_steps import grouped_steps, row_key
from .log_values import LogFormatError

NUMBERS = ("reward", "score", "max_score")
COUNTS = ("t", "moves", "turn")
BALROG_SUMMARY = ("progression", "episode_return")  # the keys of a BALROG episode summary
BALROG_AFTER = ("BALROG episodes: each row's Observation read as the answer to its Action, as BALROG writes it (the "
                "first action's own observation is not logged)")
BALROG_SUCCESS = "BALROG episodes whose success is their summary's progression reaching 1"


def is_table(path: str, source: LogSource) -> bool:
    name = path.lower().removesuffix(".gz")
    return name.endswith((".csv", ".tsv")) or (source.format == "csv" and os.path.basename(path) == os.path.basename(
        source.path.rstrip("/")))


def sidecar_of(name: str, names: set[str]) -> str | None:
    """The summary JSON beside table ``name`` among ``names`` (same folder, same stem), if any."""
    stem = name[:-3] if name.lower().endswith(".gz") else name
    stem = os.path.splitext(stem)[0]
    return next((c for c in (stem + ".json", stem + ".json.gz") if c in names), None)


def table_records(fs, path: str, source: LogSource, summary_path: str | None, record_type, readings: Counter
                  ) -> tuple[str, list]:
    """The layout and the episode records of one table (and its summary)."""
    with fs.open(path, "rb", compression="infer") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise LogFormatError(f"{path}: not UTF-8 text (byte {error.start}); save the table as UTF-8") from None
    lines = text.splitlines()
    if not text.strip():
        raise LogFormatError(f"{path}: the file is empty")
    delimiter = "\t" if path.lower().removesuffix(".gz").endswith(".tsv") or lines[0].count("\t") > lines[0].count(
        ",") else ","
    csv.field_size_limit(min(sys.maxsize, 1 << 30))  # an observation may be a long page
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)  # quoted cells keep their lines
    named = {role: source.fields[role] for role in ("observation", "action") if role in source.fields}
    header = reader.fieldnames or []
    columns = {row_key(c): c for c in header}
    missing = [role for role in ("observation", "action") if named.get(role, role) not in
               (header if role in named else columns)]
    if missing:
        raise LogFormatError(f"{path}: a table of steps needs a column for each step's {' and '.join(missing)} (its "
                             f"columns: {', '.join(header)}); name the column with --fields "
                             + " ".join(f"{role}=COLUMN" for role in missing))
    records, line = [], 1
    for row in reader:
        values = _row(row, named)
        short = [role for role in ("observation", "action") if not isinstance(values.get(role), str)]
        if short:
            raise LogFormatError(f"{path}:{line + 1}: a row without its {' and '.join(short)} (the file ends inside "
                                 f"it, or a quote is not closed: it has {sum(v is not None for k, v in row.items() if k)}"
                                 f" of {len(header)} cells); cut the row, or close its quote")
        records.append(record_type(path, line + 1, values))
        line = reader.line_num
    if not records:
        raise LogFormatError(f"{path}: a header and no row: the table holds no step")
    summary = _summary(fs, summary_path) if summary_path else None
    balrog = summary is not None and all(k in summary for k in BALROG_SUMMARY)
    if balrog and source.step_observation is None:
        _answers_after(records)
        readings[BALROG_AFTER] += 1
    grouped = grouped_steps(records, source, one_run=True)
    for record in grouped:
        for key, value in (summary or {}).items():
            record.value.setdefault(key, value)
        if balrog and "success" not in source.fields and isinstance(summary.get("progression"), (int, float)):
            record.value["success"] = summary["progression"] >= 1.0
            readings[BALROG_SUCCESS] += 1
    kind = "TSV" if delimiter == "\t" else "CSV"
    if balrog:
        return f"{kind}, one episode per file, its BALROG summary (JSON) beside it", grouped
    beside = ", its JSON summary beside it" if summary is not None else ""
    return (f"{kind}, one episode per file{beside}" if len(grouped) == 1
            else f"{kind} of one run, split where its step counter goes back{beside}"), grouped


def _row(row: Mapping[str, Any], named: Mapping[str, str]) -> dict:
    """A table row as a step row: keys as the reader names them, numbers read, empty cells left out."""
    out: dict = {}
    for column, cell in row.items():
        key = row_key(column) if column is not None else None
        if key is None or cell is None or (cell == "" and key not in ("observation", "action")):
            continue
        out[key if key not in out else column] = _number(key, cell)
    for role, column in named.items():  # --fields observation=COLUMN: the column is the step's
        if row.get(column) not in (None, ""):
            out[role] = row[column]
    return out


def _number(key: str, cell: str) -> Any:
    try:
        if key in COUNTS:
            return int(cell)
        if key in NUMBERS:
            return float(cell)
    except ValueError:
        return cell
    return cell


def _summary(fs, path: str) -> dict:
    with fs.open(path, "rb", compression="infer") as f:
        try:
            value = json.loads(f.read().decode("utf-8-sig"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise LogFormatError(f"{path}: the JSON summary beside a table does not parse ({error}); fix it, or move "
                                 "it away from the table") from None
    if not isinstance(value, Mapping):
        raise LogFormatError(f"{path}: the JSON beside a table of the same name is its episode's summary, an object; "
                             f"this is a {type(value).__name__}")
    return dict(value)


def _answers_after(records: list) -> None:
    """BALROG's rows: each row's observation is its action's answer; the observation the action was
    taken on is the row before's (none for the first)."""
    before = ""
    for record in records:
        answer = record.value.get("observation", "")
        record.value["next_observation"], record.value["observation"] = answer, before
        before = answer
