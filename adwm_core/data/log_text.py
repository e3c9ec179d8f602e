"""Plain-text logs split into episodes, each with the outcome the text gives it.

A text file holds one transcript or several. A new episode begins

- after a line ``STATUS: OK`` or ``STATUS: FAIL``, which ends the one before and is its success
  (Reflexion's ALFWorld run logs); the lines after it up to the next empty line, where they
  open with "New plan:", "Reflection:" or "Plan:", are a reflection and belong to no episode;
- at a section header: a line that opens with three or more of one mark (``-----``,
  ``#####``, ``=====``, ``*****``), a line of ``#`` alone or an ``Environment #N:`` line, and
  any lines enclosed between two rule lines with no empty line between them (``BEGIN TRIAL 2``).
  Headers belong to no episode; text between two headers in which the agent never speaks (a
  harness's "Environment #3: Success" stub) is no episode either, and is counted;
- at a new task, once the episode holds an agent line: a ``Question:`` or ``Task:`` line, or
  one that opens "Your task is to", with the paragraph it starts (the lines since the last
  empty one, or since the line ``LogSource.outcome_line`` matches);
- where ReAct's numbering goes back (``Thought 1:`` after ``Observation 3:``, or after
  ``Observation 1:``), with the paragraph before it (the question).

In a file whose episodes end at STATUS lines, each STATUS line ends one episode: where the text
it ends holds several tasks (split as above), the ones before the last, none with a STATUS or
outcome line of its own, are the few-shot demonstrations the agent was shown before its task
(EMMA's Reflexion teacher logs: two or three ALFWorld demonstrations, a reflection memory, then
the task, with no line announcing them), left out and counted.

Never are two tasks read as one episode. Where lines run on from the agent's last line into a
new task with no empty line (or outcome line) between, they may end the last answer or open the
new task: the file is refused, with the edit or flag that tells. The outcome of an episode is
its STATUS line; else the line ``LogSource.outcome_line`` (a regular expression whose first
group is a reward or a success flag) matches in it; else the last section header above it,
where that header names one outcome ("BEGIN CORRECT AGENTS": a success; INCORRECT, FAIL,
HALTED: a failure). Each such reading is counted in the import summary.

A file with Python logging records among its first lines (``2024-03-21 20:13:37,532 - INFO -
…``, ``INFO:root:…``, absl's ``I0321 20:13:37.532 …``) is a debug log, not a trajectory log, and
is refused as such.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from ..specs import LogSource
from .log_values import LogFormatError, NotATrajectoryLog, as_number, flag

TRANSCRIPT_KEY = "transcript"  # a text block of turns; where a plain-text file's content is kept
STATUS_LINE = re.compile(r"^\s*STATUS:\s*(OK|FAIL)\s*$")
REFLECTION_LINE = re.compile(r"^\s*(New plan|Reflection|Plan)\s*:", re.IGNORECASE)  # after a STATUS line
HARNESS_LINE = re.compile(r"^\s*(#+|Environment #\d+:)\s*$")
RULE_LINE = re.compile(r"^\s*([-=#*~_])\1\1")
TASK_LINE = re.compile(r"^\s*((question|task)\s*\d*\s*:|your task is to\b)", re.IGNORECASE)
NUMBERED_LABEL = re.compile(r"^\s*(thought|action|observation)\s*(\d+)\s*:", re.IGNORECASE)
LABEL_ORDER = {"thought": 0, "action": 1, "observation": 2}  # within one number of ReAct's cycle
ACTION_LABEL = re.compile(r"^\s*action\s*\d*\s*:", re.IGNORECASE)
SUCCESS_WORDS = re.compile(r"\b(correct|success|successful|succeeded|solved|passed)\b", re.IGNORECASE)
FAILURE_WORDS = re.compile(r"\b(incorrect|wrong|fail|failed|failure|halted|unsolved|unsuccessful)\b", re.IGNORECASE)
LOG_RECORD = re.compile(r"^\s*\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|^(DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:"
                        r"|^[DIWEF]\d{4} \d{2}:\d{2}:\d{2}")
LEAST_LOG_RECORDS = 3
OPENING_LINES = 5  # a debug log has a logging record among its first non-empty lines (a banner may come first)

BEGUN_BY = {"task": "a new task", "numbering": "ReAct's numbering restarts"}
SPLIT_AT = {"task": "episodes begun in text at a new task (a 'Question:', 'Task:' or 'Your task is to' line)",
            "numbering": "episodes begun in text where ReAct's numbering restarts",
            "header": "episodes in text ended at a section header (a rule of -, =, # or *)"}
STUBS = "text blocks between section headers in which the agent never speaks (placeholders), dropped"
FROM_SECTION = "episodes whose success is read from their section header (CORRECT / INCORRECT / FAIL / HALTED)"
FROM_OUTCOME_LINE = "episodes whose outcome is read from the line --outcome-line matches"
FROM_SUCCESS_LINE = "episodes whose success is whether a line --success-line matches"
MATCHED_SUCCESS_LINE = "episodes with a line --success-line matches (successes)"
DEMONSTRATIONS = "few-shot demonstrations left out (from 'Here are … examples' to 'Here is the task')"
UNANNOUNCED = ("few-shot demonstrations left out (tasks before the one a STATUS line ends, none with a STATUS "
               "or outcome line of its own)")
DEMO_START = re.compile(r"\bhere (?:are|is) (?:(?:two|three|four|five|some|a few|the|\d+) )?(?:few-shot )?"
                        r"(?:examples?|demonstrations?)\s*[:.]?\s*$", re.IGNORECASE)  # the line ends announcing them
DEMO_END = re.compile(r"^\s*(?:here is (?:the|your) (?:task|question)|\(?end of examples\)?|now,? it'?s your turn)"
                      r"\b", re.IGNORECASE)


@dataclass
class _Episode:
    """An episode being read: its (line number, text) rows and what is known of it."""

    rows: list[tuple[int, str]] = field(default_factory=list)
    section: bool | None = None  # the outcome its section header names
    agent_spoke: bool = False
    last_label: tuple[int, int] = (0, -1)  # (number, place in thought → action → observation) of the last one
    ended_at: int = 1  # the line of its STATUS, for an episode without a line of its own

    def text(self) -> str:
        return "\n".join(row for _, row in self.rows)


def text_episodes(path: str, text: str, source: LogSource) -> tuple[str, list[tuple[int, dict]], Counter]:
    """The layout, the episodes of a text file as (first line, record) and the readings to count
    (the module's rule)."""
    lines = text.splitlines()
    _refuse_debug_log(path, lines)
    headers, readings = _header_lines(lines), Counter()
    demos, blocks = demonstration_lines(lines, path)
    readings[DEMONSTRATIONS] += blocks
    has_status = any(STATUS_LINE.match(row) for i, row in enumerate(lines) if i not in demos)
    done: list[tuple[_Episode, bool | None, bool]] = []  # each episode with its STATUS, and whether a stub
    current, section, state = _Episode(), None, None  # state after a STATUS line: status | reflection
    splits: list[str] = []  # the boundaries met since the last STATUS line or header, in order

    def close(status: bool | None = None, at_header: bool = False) -> None:
        nonlocal current
        if status is not None or current.agent_spoke or (not at_header and current.text().strip()):
            done.append((current, status, False))
            readings[SPLIT_AT["header"]] += at_header and current.agent_spoke
        elif current.text().strip():
            done.append((current, None, True))
        current = _Episode(section=section)

    def drop_demonstrations() -> None:
        """Before a STATUS line closes the episode: the tasks split off since the last STATUS line
        or header are demonstrations shown before it, where none gives an outcome of its own."""
        shown = done[len(done) - len(splits):] if splits else []
        if shown and all(not stub and status is None and episode.agent_spoke
                         and not any(_outcome_match(row, source) for _, row in episode.rows)
                         for episode, status, stub in shown):
            del done[len(done) - len(splits):]
            readings[UNANNOUNCED] += len(shown)
            for boundary in splits:  # no episode begins there after all
                readings[SPLIT_AT[boundary]] -= 1

    for index, row in enumerate(lines):
        number, status = index + 1, STATUS_LINE.match(row)
        if index in demos:
            continue
        if status:
            current.ended_at = number
            drop_demonstrations()
            close(status.group(1) == "OK")
            state, splits = "status", []
        elif state == "status" and REFLECTION_LINE.match(row):
            state = "reflection"  # it runs to the next empty line
        elif state == "reflection":
            state = None if not row.strip() else state
        elif index in headers:
            section = _section_outcome(row) if RULE_LINE.match(row) else None
            close(at_header=True)
            splits = []
        else:
            boundary = _boundary(current, row, source)
            if boundary is not None:
                start = _paragraph_start(current, source)
                if _runs_on(current, start, source):
                    raise LogFormatError(
                        f"{path}:{number}: an episode begins here ({BEGUN_BY[boundary]}), but the lines above it, from "
                        f"line {current.rows[start][0]}, follow the agent's last line with no empty line between: "
                        "they may end the last answer or open this task. Put an empty line where this task's text "
                        "begins, or name the line that ends each episode with --outcome-line REGEX")
                moved, current.rows = current.rows[start:], current.rows[:start]
                close()
                current.rows = moved
                readings[SPLIT_AT[boundary]] += 1
                splits.append(boundary)
            if current.rows or row.strip():
                current.rows.append((number, row))
                state = None
            _note_turn_line(current, row, source)
    if current.text().strip():
        if has_status:
            raise LogFormatError(f"{path}:{current.rows[0][0]}: a transcript after the last STATUS line has no STATUS "
                                 "of its own; end it with 'STATUS: OK' or 'STATUS: FAIL', or cut it")
        close()
    if any(not stub for _, _, stub in done):  # else no block has an agent line: each is kept, to be refused
        readings[STUBS] += sum(stub for _, _, stub in done)
        done = [entry for entry in done if not entry[2]]
    records = [(episode.rows[0][0] if episode.rows else episode.ended_at,
                _record(path, episode, status, source, readings)) for episode, status, _ in done]
    return _layout(len(records), has_status, readings), records, readings


def _record(path: str, episode: _Episode, status: bool | None, source: LogSource, readings: Counter) -> dict:
    record: dict = {TRANSCRIPT_KEY: episode.text()}
    if status is not None:
        record["success"] = status
    record.update(outcome_of(path, episode.rows, source, readings, given="success" in record))
    if "success" not in record and "reward" not in record and episode.section is not None:
        record["success"] = episode.section
        readings[FROM_SECTION] += 1
    return record


def outcome_of(path: str, rows: list[tuple[int, str]], source: LogSource, readings: Counter, given: bool = False
               ) -> dict:
    """An episode's outcome from its (line, text) ``rows``: the line ``outcome_line`` matches (its
    first group a reward or a flag), else, where nothing gives one (``given``: a STATUS line did),
    whether a line ``success_line`` matches."""
    found = next(((line, match) for line, row in rows if (match := _outcome_match(row, source))), None)
    if found is not None:
        line, match = found
        value = match.group(1)
        reward, success = as_number(value)[0], flag(value)
        if reward is None and success is None:
            raise LogFormatError(f"{path}:{line}: --outcome-line {source.outcome_line!r} matches this line, but its "
                                 f"first group, {value!r}, is no reward nor true/false (correct/incorrect, "
                                 "success/fail); make the group catch the number or the flag, or mark the line "
                                 "that means a success with --success-line REGEX")
        readings[FROM_OUTCOME_LINE] += 1
        return {"reward": reward} if reward is not None else {"success": success}
    if source.success_line is None or given:
        return {}
    matched = any(re.search(source.success_line, row) for _, row in rows)
    readings[FROM_SUCCESS_LINE] += 1
    readings[MATCHED_SUCCESS_LINE] += matched
    return {"success": matched}


def demonstration_lines(lines: list[str], path: str) -> tuple[set[int], int]:
    """The indices of the lines that are few-shot demonstrations (from a line that announces
    examples, "Here are two examples.", to the line that hands over the task, "Here is the
    task:", both included) and how many such blocks; a block never handed over is refused."""
    inside, blocks, i = set(), 0, 0
    while i < len(lines):
        if not DEMO_START.search(lines[i]):
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if DEMO_END.match(lines[j])), None)
        if end is None:
            raise LogFormatError(f"{path}:{i + 1}: few-shot demonstrations begin here ({lines[i].strip()[:60]!r}), "
                                 "but no line after them hands over the logged task ('Here is the task:', '(END OF "
                                 "EXAMPLES)'): they would be read as episodes. Write 'Here is the task:' above the "
                                 "task the agent played, or cut the demonstrations")
        inside.update(range(i, end + 1))
        blocks, i = blocks + 1, end + 1
    return inside, blocks


def without_demonstrations(text: str, where: str) -> tuple[str, int]:
    """``text`` with its few-shot demonstration blocks taken out (``demonstration_lines``), and their number."""
    lines = text.splitlines()
    demos, blocks = demonstration_lines(lines, where)
    return ("\n".join(row for i, row in enumerate(lines) if i not in demos), blocks) if blocks else (text, 0)


def _layout(episodes: int, has_status: bool, readings: Counter) -> str:
    split = [name for name, what in (("section headers", SPLIT_AT["header"]), ("new tasks", SPLIT_AT["task"]),
                                     ("restarted numbering", SPLIT_AT["numbering"])) if readings[what]]
    if has_status and not split:
        return "text transcripts, each ending at a STATUS line"
    if episodes <= 1 and not split:
        return "text transcript"
    return "text transcripts, split at " + ", ".join((["STATUS lines"] if has_status else []) + split)


def _refuse_debug_log(path: str, lines: list[str]) -> None:
    first_lines = [row for row in lines if row.strip()][:OPENING_LINES]
    opening = next((row for row in first_lines if LOG_RECORD.match(row)), None)
    records = sum(1 for row in lines if LOG_RECORD.match(row))
    if opening is not None and records >= LEAST_LOG_RECORDS:
        raise NotATrajectoryLog(
            f"{path}: not a trajectory log: a debug log, {records} of its lines are logging records "
            f"({opening.strip()[:70]!r}…) with prompts and program state between them. Write the agent's episodes "
            "out — JSONL turns with an outcome, or a transcript whose agent lines start with '> ' and end at "
            "'STATUS: OK|FAIL' — and import that",
            reason=f"a debug log ({records} Python logging records), not a trajectory log")


def _header_lines(lines: list[str]) -> set[int]:
    """The indices of header lines: rules, harness lines, and lines enclosed between two rules
    with no empty line between."""
    headers = {i for i, row in enumerate(lines) if RULE_LINE.match(row) or HARNESS_LINE.match(row)}
    for i in sorted(i for i in headers if RULE_LINE.match(lines[i])):
        j = i + 1
        while j < len(lines) and lines[j].strip() and j not in headers:
            j += 1
        if j < len(lines) and j in headers and RULE_LINE.match(lines[j]):
            headers.update(range(i + 1, j))
    return headers


def _section_outcome(row: str) -> bool | None:
    success, failure = SUCCESS_WORDS.search(row), FAILURE_WORDS.search(row)
    return None if bool(success) == bool(failure) else bool(success)


def _is_agent_line(row: str, source: LogSource) -> bool:
    return row.startswith(source.agent_prefix) or row.rstrip() == source.agent_prefix.rstrip() \
        or ACTION_LABEL.match(row) is not None


def _note_turn_line(episode: _Episode, row: str, source: LogSource) -> None:
    episode.agent_spoke = episode.agent_spoke or _is_agent_line(row, source)
    label = NUMBERED_LABEL.match(row)
    if label is not None:
        episode.last_label = _place(label)


def _boundary(episode: _Episode, row: str, source: LogSource) -> str | None:
    """The boundary ``row`` opens (task | numbering), where the episode already holds an agent line."""
    if not episode.agent_spoke:
        return None
    if TASK_LINE.match(row):
        return "task"
    label = NUMBERED_LABEL.match(row)
    if label is not None and _place(label) < episode.last_label:  # "Thought 1:" after "Observation 3:"
        return "numbering"
    return None


def _place(label: re.Match) -> tuple[int, int]:
    return int(label.group(2)), LABEL_ORDER[label.group(1).lower()]


def _paragraph_start(episode: _Episode, source: LogSource) -> int:
    """Where the paragraph that ends ``episode`` so far begins (the opening of the task that
    begins at the next line): the index of the first row after the last empty, agent, numbered
    or outcome row; the episode's length where the task's line follows such a row at once."""
    start = len(episode.rows)
    while start and not _ends_paragraph(episode.rows[start - 1][1], source):
        start -= 1
    return start


def _ends_paragraph(row: str, source: LogSource) -> bool:
    return not row.strip() or _is_agent_line(row, source) or NUMBERED_LABEL.match(row) is not None \
        or _outcome_match(row, source) is not None


def _runs_on(episode: _Episode, start: int, source: LogSource) -> bool:
    """Whether the paragraph from ``start`` follows the agent's (or a numbered) line with no
    empty or outcome line between: it may be that line's answer or the next task's opening."""
    above = episode.rows[start - 1][1] if start else ""
    return start < len(episode.rows) and bool(above.strip()) and _outcome_match(above, source) is None


def _outcome_match(row: str, source: LogSource) -> re.Match | None:
    return None if source.outcome_line is None else re.search(source.outcome_line, row)
