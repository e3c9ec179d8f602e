"""What the imported episodes say about how they were read, checked before anything is written.

- **One action for nearly every step.** In logs of ``LEAST_STEPS_CHECKED`` steps or more, an
  action string that is ``DEGENERATE_SHARE`` of the steps or more (or the only one) means the
  agent's lines were not found — RAFA's critic log writes "OK." for every action. Refused, with
  the string and its share, unless ``LogSource.allow_degenerate``.
- **Lines the harness repeats.** A short line (up to ``LONGEST_REPEATED`` characters; a room's
  description is longer) found in the first observation of many episodes (at least
  ``REPEATED_LEAST`` and ``REPEATED_SHARE`` of them) beside other lines, never in the
  environment's answer to an action (where a room's description would recur), and not the
  task's own line ("Your task is to: …"), is likely the harness's ("Here is the task:", a
  memory header, a placeholder): reported with its count and the ``--strip`` pattern that
  removes it, digits read as any.
- **Options that change nothing.** A ``fields`` key no episode, turn or step row holds where it
  is read (a log-probability, role or text on turns and rows, the turns on episodes), or an
  opening named for step rows read with the observation before each action (checked before the
  episodes are read), a ``--strip`` pattern that matches no line,
  ``--step-observation`` without step rows, ``--reward`` without rewards per step,
  ``--outcome-line`` that matches nothing: each is refused, never ignored.
- **Openings it cannot tell.** Episodes whose opening may be an instruction or the first step
  (log_episode.preamble_length) are refused together, with the flag that settles them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..specs import LogSource
from .log_steps import STEP_ROWS_KEY, is_step_list
from .log_text import FROM_OUTCOME_LINE, FROM_SUCCESS_LINE, TASK_LINE
from .log_turns import Counts, Problems, raw_turns
from .log_values import has

LEAST_STEPS_CHECKED = 10
DEGENERATE_SHARE = 0.9
REPEATED_LEAST = 3
REPEATED_SHARE = 0.3
REPEATED_SHOWN = 5
SHORTEST_REPEATED = 3  # characters: shorter lines ("OK.", "--") are not worth a report
LONGEST_REPEATED = 80
REGEX_SPECIAL = re.compile(r"([.^$*+?{}\[\]\\|()])")
TURN_ROLES = frozenset({"logprob", "role", "text"})  # fields read on turns and step rows only
EPISODE_ROLES = frozenset({"conversations"})  # fields read on the episode only


def check_actions(actions: Sequence[str], source: LogSource, problems: Problems) -> None:
    """Refuse logs whose steps nearly all take one action (the module's rule)."""
    if source.allow_degenerate or len(actions) < LEAST_STEPS_CHECKED:
        return
    action, n = Counter(actions).most_common(1)[0]
    if n / len(actions) >= DEGENERATE_SHARE:
        problems.add(source.path, "(actions)", f"one action string, {action!r:.60}, is {n} of {len(actions)} steps "
                     f"({n / len(actions):.0%}): a world model learns nothing of what actions do from it. Check which "
                     "lines are the agent's (--agent-prefix, --fields), or import the logs as they are with "
                     "--allow-degenerate")


def repeated_lines(first_observations: Sequence[str], answers: Sequence[str]) -> Counter:
    """Summary lines for the lines repeated across many episodes' first observations and never
    in an environment's answer (``answers``: the observations after each action), each with the
    number of episodes that hold it."""
    answered = {row.strip() for text in answers for row in text.splitlines()}
    held, shown = Counter(), {}
    for text in first_observations:
        rows = {row.strip() for row in text.splitlines() if row.strip()}
        if len(rows) < 2:
            continue  # a line that is the whole observation is the environment's answer
        patterns = {_pattern(row): row for row in rows - answered if SHORTEST_REPEATED <= len(row) <= LONGEST_REPEATED
                    and not TASK_LINE.match(row)}
        held.update(list(patterns))
        for pattern, row in patterns.items():
            shown.setdefault(pattern, row)
    least = max(REPEATED_LEAST, REPEATED_SHARE * len(first_observations))
    common = [(pattern, n) for pattern, n in held.most_common() if n >= least][:REPEATED_SHOWN]
    return Counter({f"first observations holding the line {shown[pattern]!r} (harness text? --strip '{pattern}' "
                    "removes it)": n for pattern, n in common})


def _pattern(row: str) -> str:
    """A regular expression that matches ``row`` whole, any number in place of its numbers."""
    return re.sub(r"\d+", r"\\d+", REGEX_SPECIAL.sub(r"\\\1", row))


def check_fields(episodes: Sequence[Any], source: LogSource, problems: Problems) -> None:
    """Refuse a ``fields`` key that no episode, turn or step row holds where it is read, and an
    opening named for step rows read as before their actions: either would change nothing, or
    read wrong."""
    def held(role: str, key: str, value: Any) -> bool:
        return (role not in TURN_ROLES and has(value, key)) \
            or (role not in EPISODE_ROLES and any(has(turn, key) for turn in raw_turns(value, source)))

    missing = [(role, key) for role, key in source.fields.items() if not any(held(role, key, v) for v in episodes)]
    keys = [key for value in episodes[:20] for key in value if key != STEP_ROWS_KEY]
    keys += [key for value in episodes[:20] for turn in raw_turns(value, source)[:1] for key in turn]
    shown = ", ".join(map(str, list(dict.fromkeys(keys))[:12]))
    for role, key in missing:
        where = ("turn or step" if role in TURN_ROLES else "episode" if role in EPISODE_ROLES
                 else "episode, turn or step")
        problems.add(source.path, f"--fields {role}={key}", f"no {where} holds {key!r}, so this changes nothing; keys "
                     f"of the episodes and their turns: {shown} (a nested one as a dotted path, a.b)")
    opening = source.fields.get("opening")
    if opening is not None and source.step_observation != "after" \
            and any(is_step_list(raw_turns(value, source)) for value in episodes):
        problems.add(source.path, f"--fields opening={opening}", "step rows read as what the agent saw before each "
                     "action open on the first row's observation, and an opening would stand before it: name one "
                     "only with --step-observation after (each row's observation the answer to its action)")


def check_options(source: LogSource, counts: Counts, file_readings: Counter, problems: Problems) -> None:
    """Refuse reading options that changed nothing, and openings that could not be told."""
    for pattern in source.strip:
        if f"strip:{pattern}" not in counts.used:
            problems.add(source.path, f"--strip {pattern!r}", "matched no observation line, so it changes nothing; "
                         "it must match a whole line (its spaces at either end aside)")
    if source.step_observation is not None and "step_observation" not in counts.used:
        problems.add(source.path, "--step-observation", "these logs hold no step rows (records with an 'observation' "
                     "and an 'action'), so it changes nothing; leave it out")
    if source.rewards is not None and "rewards" not in counts.used:
        problems.add(source.path, "--reward", "no turn or step of these logs holds a reward of its own, so it changes "
                     "nothing; name the key that does with --fields reward=KEY, or leave it out")
    if counts.unscaled:
        where, peak = counts.unscaled[0], max(p for _, p in counts.unscaled)
        candidates = ", ".join(f"--fields success={k}" for k, _ in counts.fraction_keys.most_common(3))
        problems.add(where[0], "(success)", f"{len(counts.unscaled)} episode(s) without a success flag return more "
                     f"than 1 (up to {peak:g}): these rewards are points, and a success where they reach 1 would be "
                     "read in silence. Declare the score that finishes the game with --max-score N (rewards read as "
                     "fractions of it), the return from which an episode succeeds with --success-at X, or the key "
                     "that holds success with --fields success=KEY" + (f" (numbers in [0, 1] here: {candidates}, "
                                                                      "with --success-at 1 for a fraction)"
                                                                      if candidates else ""))
    for option, flag in (("max_score", "--max-score"), ("success_at", "--success-at")):
        if getattr(source, option) is not None and option not in counts.used:
            problems.add(source.path, flag, "every episode's success is given by the logs and no reward is read "
                         "against it, so it changes nothing; leave it out")
    if source.success_line is not None and not file_readings[FROM_SUCCESS_LINE]:
        problems.add(source.path, "--success-line", "no text or chat episode needed it (each has its outcome, or the "
                     "logs are no text), so it changes nothing; leave it out")
    if source.outcome_line is not None and not file_readings[FROM_OUTCOME_LINE]:
        problems.add(source.path, "--outcome-line", f"{source.outcome_line!r} matched no line of a text episode (it "
                     "reads text files only; its first group is the reward or true/false), so it changes nothing")
    if counts.unsure_openings:
        where = counts.unsure_openings
        problems.add(where[0], "(opening)", f"{len(where)} episode(s) open with a user turn the agent answers with "
                     "an acknowledgement ('OK'), and the turns do not tell whether that opening is an instruction "
                     "(no step) or the first observation (the acknowledgement a step): say which with "
                     "--preamble-turns 2 (or 3 after a system turn) or --preamble-turns 0")
