"""Chat sessions exported as Markdown or plain text (an agent framework's session export), one
episode a file.

A turn begins at a line that names its speaker in bold, ``**[user]:** …`` or ``**user:** …``
(brackets escaped or not, the name in any case). The user's turns (``user``, ``human``,
``customer``) and the system's are what the agent was told; any other speaker is the agent.
Inside the agent's turns, a fenced block that opens ``function call: "NAME"`` with ``args: {…}``
is an action, written ``NAME[value]`` (one argument), ``NAME[k=v, …]`` (several) or ``NAME[]``;
a fenced block that opens ``Response from: "NAME"`` with ``response: {…}`` is the tool's answer
(its ``result`` text where it has one; a block cut short by the export is read as far as it
goes). Everything else the agent writes holds no action:

- text the agent wrote before a call is folded into that call's reasoning (its ``response``);
- what the agent was told since its last call (the tool's answer, the user's next message) is the
  observation the next call is taken on, joined in order;
- text the agent wrote after its last call ends no step and is dropped.

Each reading is counted. A session holds no outcome: ``LogSource.success_line`` (a line that
marks a success, e.g. the shop's "Thank you for shopping with us") or ``outcome_line`` gives one.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from ..specs import LogSource
from .log_text import outcome_of

ROLE_LINE = re.compile(r"^\s*\*\*(?:\\?\[(?P<bracketed>[^\]\\\n]{1,60})\\?\]|(?P<plain>[A-Za-z][\w .-]{0,40})):\*\*"
                       r"\s?(?P<rest>.*)$")
USER_ROLES = frozenset({"user", "human", "customer", "system"})
FENCE = re.compile(r"^\s*(```|~~~)")
CALL = re.compile(r"^\s*function[ _]call\s*:\s*\"?(?P<name>[^\"\s]+)\"?\s*$", re.IGNORECASE)
ANSWER = re.compile(r"^\s*response from\s*:\s*\"?(?P<name>[^\"\s]+)\"?\s*$", re.IGNORECASE)
LEAST_TURNS = 2  # role lines that make a file a chat export

CALLS = "function calls read as actions (name[arguments])"
FOLDED = "agent replies without a function call folded into the next call's reasoning"
JOINED = "user messages joined to the tool's answer the next call is taken on"
DROPPED = "agent replies after the last function call, dropped"


def is_chat_export(text: str) -> bool:
    """Whether ``text`` is a chat session: speaker lines (``**[user]:**``), one of them the user's."""
    roles = [_role(m) for row in text.splitlines() if (m := ROLE_LINE.match(row))]
    return len(roles) >= LEAST_TURNS and any(role in USER_ROLES for role in roles)


def _role(match: re.Match) -> str:
    return (match.group("bracketed") or match.group("plain")).strip().lower()


def chat_episode(path: str, text: str, source: LogSource) -> tuple[str, list[tuple[int, dict]], Counter]:
    """The layout, the one episode (its first line, its record) and the readings of a chat session."""
    readings: Counter = Counter()
    events = list(_events(text.splitlines()))
    turns: list[dict] = []
    told: list[str] = []  # what the agent was told since its last call
    prose: list[str] = []  # what the agent wrote since its last call
    answers = 0  # tool answers among ``told``
    for kind, value in events:
        if kind in ("user", "answer"):
            if kind == "user" and answers and turns:
                readings[JOINED] += 1
            answers += kind == "answer"
            told.append(value)
        elif kind == "prose":
            prose.append(value)
        else:  # a call
            turns.append({"from": "human", "value": "\n\n".join(told)})
            turns.append({"from": "gpt", "value": "\n".join([*prose, value["text"]]), "action": value["action"]})
            readings[CALLS] += 1
            readings[FOLDED] += len(prose)
            told, prose, answers = [], [], 0
    if turns and told:
        turns.append({"from": "human", "value": "\n\n".join(told)})
    readings[DROPPED] += len(prose) if turns else 0
    record: dict[str, Any] = {"conversations": turns}
    record.update(outcome_of(path, list(enumerate(text.splitlines(), start=1)), source, readings))
    return "chat session exported as Markdown or text, one episode a file", [(1, record)], readings


def _events(lines: list[str]):
    """(kind, value) in order: ``user`` text, agent ``prose``, a ``call`` ({action, text}), an ``answer``."""
    role, body = None, []
    for row in lines:
        match = ROLE_LINE.match(row)
        if match:
            yield from _turn_events(role, body)
            role, body = _role(match), [match.group("rest")]
        elif role is not None:
            body.append(row)
    yield from _turn_events(role, body)


def _turn_events(role: str | None, body: list[str]):
    if role is None:
        return
    if role in USER_ROLES:
        text = "\n".join(body).strip()
        if text:
            yield "user", text
        return
    outside: list[str] = []
    block: list[str] | None = None
    for row in body:
        if FENCE.match(row):
            if block is None:
                block = []
                continue
            yield from _flush(outside)
            yield _block_event(block)
            block = None
        elif block is not None:
            block.append(row)
        else:
            outside.append(row)
    if block is not None:  # a fence never closed: its lines are text
        outside += block
    yield from _flush(outside)


def _flush(rows: list[str]):
    text = "\n".join(rows).strip()
    rows.clear()
    if text:
        yield "prose", text


def _block_event(block: list[str]) -> tuple[str, Any]:
    head = next((row for row in block if row.strip()), "")
    rest = "\n".join(block[block.index(head) + 1:]) if head else ""
    call, answer = CALL.match(head), ANSWER.match(head)
    if call:
        arguments = _labelled_json(rest, "args")
        return "call", {"action": _action(call.group("name"), arguments), "text": "\n".join(block).strip()}
    if answer:
        return "answer", _answer_text(_labelled_json(rest, "response"), rest)
    return "prose", "\n".join(block).strip()


def _labelled_json(text: str, label: str) -> Any:
    """The JSON after ``label:`` in ``text``, or the raw text after it where it does not parse."""
    body = re.sub(rf"^\s*{label}\s*:\s*", "", text.strip(), flags=re.IGNORECASE)
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return body


def _action(name: str, arguments: Any) -> str:
    if isinstance(arguments, dict):
        values = list(arguments.values())
        if not values:
            return f"{name}[]"
        if len(values) == 1:
            return f"{name}[{_plain(values[0])}]"
        return f"{name}[" + ", ".join(f"{k}={_plain(v)}" for k, v in arguments.items()) + "]"
    return f"{name}[{str(arguments).strip()}]"


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _answer_text(parsed: Any, raw: str) -> str:
    """The tool's answer: its ``result`` text where it has one (read as far as a cut block goes)."""
    if isinstance(parsed, dict):
        result = parsed.get("result")
        return result if isinstance(result, str) else json.dumps(parsed, ensure_ascii=False)
    cut = re.search(r"\"result\"\s*:\s*\"(?P<text>.*)", str(parsed), re.DOTALL)
    if cut is None:
        return str(parsed).strip()
    text = re.sub(r"\"?\s*}?\s*$", "", cut.group("text").rstrip())
    try:
        return json.loads(f'"{text}"')
    except json.JSONDecodeError:
        return text
