"""An episode record read into trajectory rows: what is no step (an opening instruction and its
acknowledgement, a reply that holds no action), and the outcome of every step.

**Outcome.** The episode's reward is read from ``reward`` or ``score``, its success from
``success``, ``won`` or ``result`` (or the keys or dotted paths ``fields`` names); ``done`` is
whether the environment ended it. Where two keys could hold the same outcome and disagree on
some episode, the logs are refused with the candidates and the ``fields`` setting that picks
one. A boolean reward reads as 1.0/0.0 and a numeric string as its number. Logs with a success
flag and no reward take 1.0/0.0 from it; logs with a reward and no success flag count an
episode a success when its reward reaches 1. Rewards on action turns or step rows (their
``reward`` key, or the key ``fields["reward"]`` names; where no turn and no episode has a
reward, their ``score``) are per step; else the episode's reward is its last step's; where both
are given and the episode's differs from the turns' sum, the difference lands on the last step.

**Running scores.** A per-step value read from a score (``score``, ScienceWorld's running
total) is cumulative where it never goes down in any episode: each step's reward is its
difference from the step before, and the score is kept as the step's ``score``. Where it goes
down, the logs are refused until ``LogSource.rewards`` says which it is (``cumulative`` or
``per-step``); ``rewards`` also reads any per-step reward so. Every such reading is counted.

**Replies without an action.** An agent turn that holds no action (log_turns.is_thought) is,
by default (``LogSource.thoughts = "fold"``), folded into the next action's reasoning (that
step's ``response``), and the environment's answer to it (ALFWorld's "OK.") is dropped:
nothing changed. ``thoughts = "step"`` keeps it as a step of its own, its action ``think: …``.

**Preambles.** ``preamble_turns`` turns open every conversation and are no step; the first
gives the task description where the episode names none. Unset, an opening user turn answered
by a bare acknowledgement ("OK", "Understood", …) is a preamble where the turn after it opens
the task (a "Question:", "Task:", "Instruction:" or "Your task is to" line) and the opening does
not; the acknowledgement is a step where the opening states the task and the turn after it does
not (the environment answered it: "> OK." in RAFA's logs). Either way round, or neither, the
logs are refused until ``--preamble-turns`` says.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..policies.parsing import has_action_cue, parse_action
from ..specs import LogSource
from .log_steps import STEP_EPISODE_KEYS, STEP_ROWS_KEY, row_key
from .log_turns import Counts, Problems, Turn, is_thought, raw_turns, turns_of, unlabelled_after_thought
from .log_values import REWARD_KEYS, OutcomeKeys, as_number, decreasing, finite, flag, has, is_score_key, lookup

ACKNOWLEDGEMENT = re.compile(r"^\s*(ok(ay)?|sure|understood|got it|alright|all right|i understand|i am ready|"
                             r"i'm ready|ready|yes|certainly|of course)\b", re.IGNORECASE)
LONGEST_ACKNOWLEDGEMENT = 200  # characters: a longer reply is an answer, not an acknowledgement
TASK_OPENING = re.compile(r"(^|\[SEP\])\s*(question|task|claim|goal|instruction)\s*\d*\s*:|your task is to\b",
                          re.IGNORECASE | re.MULTILINE)
FIX_VALUE = "; correct it in the logs, or name the key that holds it with --fields"
MAX_LOGGED = "episodes whose rewards are read as fractions of their own {key!r} (a success where the score reaches it)"
MAX_GIVEN = "episodes whose rewards are read as fractions of --max-score {maximum:g} (a success where the score reaches it)"
SUCCESS_AT = "episodes without a success flag, a success where their return reaches --success-at {at:g}"
NOT_SUCCESS = frozenset({*REWARD_KEYS, *STEP_EPISODE_KEYS, "variation", "seed", "t", "done"})  # never a success
SUCCESS_KEY_AT = "episodes whose success is their {key!r} reaching --success-at {at:g}"
CUMULATIVE = "episodes whose per-step {key!r} is a running score, read as its per-step differences"
NO_OPENING = {
    "json": "the episode must open with what the agent saw; where it is kept apart, name it with --fields opening=KEY",
    "text": "the episode must open with what the agent saw (its task, question or room) above its first action; where "
            "ReAct's numbering restarts with no question before it, write the question above its 'Thought 1:'",
    "bare list": "a list of messages must open with what the agent saw (a user turn); give it one, or give the "
                 "episode as an object with its opening under a key named by --fields opening=KEY",
    "chat": "the session must open with what the agent was told (a user turn)",
}
NO_OUTCOME = {
    "json": "missing: no reward nor success on the episode or its turns; name the key with --fields reward=KEY (or "
            "--fields success=KEY; a dotted path where it is nested), or, where the logs hold no outcome at all, add "
            "one to each episode",
    "text": "missing: this text gives the episode no outcome; end each episode with a line 'STATUS: OK' or 'STATUS: "
            "FAIL', put the episodes under section headers that name CORRECT / INCORRECT, or name the line that holds "
            "it with --outcome-line REGEX (its first group a reward or true/false), or the line that marks a success "
            "with --success-line REGEX",
    "chat": "missing: a chat session holds no outcome; mark the line that means a success with --success-line REGEX "
            "(a session without it is a failure), or name the line that holds a reward or true/false with "
            "--outcome-line REGEX",
    "bare list": "missing: a bare list of messages holds no outcome; give each episode as an object with its turns "
                 "and its outcome, e.g. {\"messages\": [...], \"success\": true}",
}


@dataclass(frozen=True)
class StepRewards:
    """Where rewards per step are read from (a turn key or path; None: nowhere), and whether
    they are a running score."""

    key: str | None
    cumulative: bool


def step_rewards(episodes: Sequence[tuple[str, Any]], source: LogSource, keys: OutcomeKeys
                 ) -> tuple[StepRewards, list[tuple[str, str]]]:
    """How the logs' ``episodes`` ((where, record) pairs) give rewards per step, and the problems
    (where, message) of a running score that goes down with no ``rewards`` named (the module's rule)."""
    turn_lists = [(at, raw_turns(value, source)) for at, value in episodes]
    named = source.fields.get("reward")
    if named is not None:
        key = named
    elif any(has(turn, "reward") for _, turns in turn_lists for turn in turns):
        key = "reward"
    elif keys.reward is None and any(has(turn, "score") for _, turns in turn_lists for turn in turns):
        key = "score"
    else:
        key = None
    if source.rewards is not None or key is None:
        return StepRewards(key, source.rewards == "cumulative"), []
    if not is_score_key(key):
        return StepRewards(key, False), _maybe_running(turn_lists, key)
    for at, turns in turn_lists:
        values = [number for turn in turns if (number := as_number(lookup(turn, key))[0]) is not None]
        down = decreasing(values)
        if down is not None:
            return StepRewards(key, False), [(at, f"the per-step {key!r} goes down ({values[down - 1]:g} → "
                                                  f"{values[down]:g}): say whether it is a running score (--reward "
                                                  "cumulative) or a reward per step (--reward per-step)")]
    return StepRewards(key, True), []


def _maybe_running(turn_lists: Sequence[tuple[str, list]], key: str) -> list[tuple[str, str]]:
    """A reward per step that never goes down in any episode, rises from one logged step to the
    next and then stays at a value above 0 may be a running score (BALROG's TextWorld logs the
    game's score as its reward: 0, 1, 2, 2): the two readings differ, so the logs are refused until
    ``--reward`` says which. A constant reward per step (0.1 each) rises nowhere: per step."""
    held = None
    for at, turns in turn_lists:
        values = [number for turn in turns if (number := as_number(lookup(turn, key))[0]) is not None]
        if decreasing(values) is not None:
            return []
        rises = next((i for i in range(1, len(values)) if values[i] > values[i - 1]), None)
        stays = None if rises is None else next(
            (i for i in range(rises + 1, len(values)) if values[i] == values[i - 1] > 0), None)
        if held is None and stays is not None:
            held = (at, values[stays], stays)
    if held is None:
        return []
    at, number, i = held
    return [(at, f"the per-step {key!r} never goes down in any episode and stays at {number:g} from one step to the "
                 f"next (steps {i - 1} and {i}): is it a running score (--reward cumulative: each step's reward the "
                 "difference from the step before) or a reward per step (--reward per-step)?")]


def preamble_length(turns: list[Turn], source: LogSource) -> int | None:
    """How many opening turns are no step (the module's rule); None where it cannot tell."""
    if source.preamble_turns is not None:
        return source.preamble_turns
    start = 1 if turns and turns[0].kind == "system" else 0
    if len(turns) > start + 2 and turns[start].kind == "observation" and turns[start + 1].kind == "action" \
            and "action" not in turns[start + 1].fields:  # a logged action (a function call) is no acknowledgement
        reply = turns[start + 1].text.strip()
        if ACKNOWLEDGEMENT.match(reply) and len(reply) <= LONGEST_ACKNOWLEDGEMENT and not has_action_cue(reply):
            opening, answer = (TASK_OPENING.search(turns[i].text) is not None for i in (start, start + 2))
            if answer and not opening:
                return start + 2
            return 0 if opening and not answer else None
    return 0


def steps_of(value: Mapping, source: LogSource, keys: OutcomeKeys, rewards: StepRewards, counts: Counts,
             problems: Problems, at: str, line: int, origin: str = "json") -> list[dict] | None:
    """The trajectory rows of one episode record (without ``cell`` and ``episode``), or None
    after adding its problems. ``at``: where it is, for errors; ``line``: its line or item
    (the variation where it names none); ``origin``: json | text | bare list."""
    before = len(problems.found)
    found = turns_of(value, source, problems, at, counts, first_line=line if origin == "text" else None)
    if found is None:
        return None
    key, turns = found
    counts.turn_keys[key] += 1
    description = _string(value, "task_description", problems, at)
    start = preamble_length(turns, source)
    if start is None:
        counts.unsure_openings.append(at)
        start = 0
    if start:
        if len(turns) <= start:
            problems.add(at, key, f"{len(turns)} turn(s), all of them the preamble (preamble_turns = {start}); set "
                         "--preamble-turns 0 if they are steps")
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
                problems.add(at, turn.where, "a system turn may only open the conversation; give it another role, "
                             "or leave it out")
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
                problems.add(at, turn.where, "two observation turns in a row: each observation needs the action "
                             "taken on it before the next one (where the first opens every conversation, skip it "
                             "with --preamble-turns N)")
            if steps and "next_observation" not in steps[-1]:
                steps[-1]["next_observation"] = turn.text
            pending = turn
        elif pending is None:
            problems.add(at, turn.where, "an action turn with no observation before it: " + NO_OPENING[origin])
        elif is_thought(turn) and source.thoughts == "fold":
            counts.thoughts += 1
            thoughts.append(turn.text.strip())
            echo = True
        else:
            if kept_thought:  # a thought kept as a step and no answer to it: the state is unchanged
                steps[-1]["next_observation"] = pending.text
            kept_thought = is_thought(turn)
            counts.thoughts += kept_thought
            steps.append(_step(turn, pending.text, thoughts, len(steps), source, rewards, counts, problems, at))
            pending = pending if kept_thought else None
            thoughts, echo = [], False
    if len(problems.found) > before:
        return None
    if not steps:  # nothing happened in it: no transition to learn from
        counts.empty_episodes += 1
        return []
    if "next_observation" not in steps[-1]:
        steps[-1]["next_observation"] = pending.text if pending is not None else ""
    return _finish(value, steps, description or "", source, keys, rewards, counts, problems, at, line, origin)


def _string(value: Mapping, key: str, problems: Problems, at: str, where: str = "") -> str | None:
    return _typed(value, key, _is_str, "a string", problems, at, where)


def _typed(value: Mapping, key: str, check, expected: str, problems: Problems, at: str, where: str = "") -> Any:
    got = lookup(value, key)
    if got is not None and not check(got):
        problems.add(at, f"{where}{key}", f"expected {expected}, got {type(got).__name__} {got!r:.60}{FIX_VALUE}")
        return None
    return got


def _reward(value: Mapping, key: str, counts: Counts, problems: Problems, at: str, where: str = "") -> float | None:
    got = lookup(value, key)
    if got is None:
        return None
    number, reading = as_number(got)
    if number is None:
        problems.add(at, f"{where}{key}", f"expected a finite number (or true/false), got {type(got).__name__} "
                     f"{got!r:.60}{FIX_VALUE}")
        return None
    if reading is not None:
        setattr(counts, f"{reading}_rewards", getattr(counts, f"{reading}_rewards") + 1)
    return number


def _flag(value: Mapping, key: str | None, problems: Problems, at: str, where: str = "") -> bool | None:
    got = None if key is None else lookup(value, key)
    if got is None:
        return None
    read = flag(got)
    if read is None:
        problems.add(at, f"{where}{key}", f"expected true or false (or 1 / 0, success / fail), got "
                     f"{type(got).__name__} {got!r:.60}{FIX_VALUE}")
    return read


def _step(turn: Turn, observation: str, thoughts: list[str], t: int, source: LogSource, rewards: StepRewards,
          counts: Counts, problems: Problems, at: str) -> dict:
    fields, where = turn.fields, f"{turn.where}."
    action = _string(fields, "action", problems, at, where)
    if action is None and unlabelled_after_thought(turn.text):
        problems.add(at, turn.where, "a thought, then lines without a label and no 'Action:' cue: which line is the "
                     "action? give the turn an 'action' field or an 'Action: …' line")
    if action is None:  # an explicit action, even "" (a reply that said nothing), is taken as logged
        text = turn.text.strip()
        if not is_thought(turn):
            action = parse_action(turn.text)
        else:  # a thought kept as a step (thoughts = "step"): its action says so
            action = text if text.lower().startswith("think") else f"think: {text}"
    logprob, success = source.key("logprob"), source.key("success")
    step = {
        "t": t,
        "observation": observation,
        "response": "\n".join([*thoughts, turn.text]),
        "action": action,
        "admissible": _typed(fields, "admissible", lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
                             "a list of strings", problems, at, where),
        "reward": None if rewards.key is None else _reward(fields, rewards.key, counts, problems, at, where),
        "behavior_logprob": _typed(fields, logprob, lambda v: finite(v) and v <= 0.0,
                                   "a finite log-probability (≤ 0)", problems, at, where),
        "action_valid": _flag(fields, "valid", problems, at, where),
        "score": None if rewards.key == "score" else _typed(fields, "score", finite, "a finite number", problems, at,
                                                              where),
        "success": _flag(fields, success, problems, at, where),
    }
    next_observation = _string(fields, "next_observation", problems, at, where)
    if next_observation is not None:
        step["next_observation"] = next_observation
    return step


def _finish(value: Mapping, steps: list[dict], description: str, source: LogSource, keys: OutcomeKeys,
            rewards: StepRewards, counts: Counts, problems: Problems, at: str, line: int, origin: str
            ) -> list[dict] | None:
    """Episode-level fields onto the steps: rewards, success, done, scores, identity columns."""
    before = len(problems.found)
    episode_reward = None if keys.reward is None else _reward(value, keys.reward, counts, problems, at)
    raw_success = None if keys.success is None else lookup(value, keys.success)
    if source.success_at is not None and finite(raw_success):  # a fraction under the success key: its threshold
        success = raw_success >= source.success_at
        counts.used.add("success_at")
        counts.readings[SUCCESS_KEY_AT.format(key=keys.success, at=source.success_at)] += 1
    else:
        success = _flag(value, keys.success, problems, at)
    done = _flag(value, "done", problems, at)
    identity = {key: _typed(value, key, check, expected, problems, at)
                for key, check, expected in (("policy", _is_str, "a string"), ("task", _is_str, "a string"),
                                             ("variation", _is_int, "an integer"), ("seed", _is_int, "an integer"))}
    if success is None:
        success = steps[-1]["success"]
    per_step = any(s["reward"] is not None for s in steps)
    if per_step and source.rewards is not None:
        counts.used.add("rewards")
    if per_step and rewards.cumulative:
        _differences(steps)
        counts.readings[CUMULATIVE.format(key=_logged_key(value, rewards.key))] += 1
    if not per_step:
        if episode_reward is None and success is not None:
            episode_reward, counts.reward_from_success = float(success), counts.reward_from_success + 1
        if episode_reward is None:
            shown = f" (keys here: {', '.join(map(str, _keys_here(value)[:10]))})" if origin == "json" else ""
            problems.add(at, keys.reward or "reward", NO_OUTCOME[origin] + shown)
            return None
        for s in steps:
            s["reward"] = 0.0
        steps[-1]["reward"] = episode_reward
    elif episode_reward is not None and not math.isclose(episode_reward, sum(s["reward"] or 0.0 for s in steps),
                                                         abs_tol=1e-9):
        steps[-1]["reward"] = (steps[-1]["reward"] or 0.0) + episode_reward - sum(s["reward"] or 0.0 for s in steps)
        counts.reward_beyond_turns += 1  # the episode's return is its reward: the rest lands on its last step
    maximum = _maximum(value, source, counts, problems, at)
    if maximum is not None:  # points: read as fractions of the score that finishes the game
        for s in steps:
            s["reward"] = (s["reward"] or 0.0) / maximum
    if success is None and len(problems.found) == before:
        success = _success_from_return(steps, source, maximum, per_step and rewards.cumulative, value, counts, at)
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


def _maximum(value: Mapping, source: LogSource, counts: Counts, problems: Problems, at: str) -> float | None:
    """The score that finishes the episode's game: ``--max-score``, else the episode's own (a
    ``Max Score`` key on it or on its first step row), else None."""
    if source.max_score is not None:
        counts.used.add("max_score")
        counts.readings[MAX_GIVEN.format(maximum=source.max_score)] += 1
        return source.max_score
    key = next((k for k in value if row_key(k) == "max_score"), None)
    if key is None:
        return None
    number, logged = as_number(value[key])[0], _logged_key(value, key)
    if number is None or number <= 0:
        problems.add(at, logged, f"expected the game's maximum score, a number above 0, got {value[key]!r:.40}; "
                     "give it with --max-score N, or leave the key out")
        return None
    counts.readings[MAX_LOGGED.format(key=logged)] += 1
    return number


def _logged_key(value: Mapping, key: str) -> str:
    """``key`` as the logs spell it: where an episode of step rows holds it under the reader's
    name (``max_score``, ``score``), the one key of its first row that the reader reads so
    (TALES's ``Max Score``, ``Score``); else ``key``."""
    rows = value.get(STEP_ROWS_KEY)
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], Mapping):
        return key
    spelled = [k for k in rows[0] if k != key and isinstance(k, str) and row_key(k) == key]
    return spelled[0] if len(spelled) == 1 else key


def _success_from_return(steps: list[dict], source: LogSource, maximum: float | None, running: bool,
                         value: Mapping, counts: Counts, at: str) -> bool:
    """An episode without a success flag succeeds where its return reaches ``--success-at``, else
    its maximum (rewards already read as fractions of it), else 1 — where 1 means something:
    a return above 1 with nothing declared is no success in silence (counted, refused together
    by log_checks), and a running score read so is reported with the flags that declare it."""
    total = sum(s["reward"] or 0.0 for s in steps)
    if source.success_at is not None:
        counts.used.add("success_at")
        counts.readings[SUCCESS_AT.format(at=source.success_at)] += 1
        return total >= source.success_at
    counts.success_from_reward += 1
    if maximum is not None:
        return total >= 1.0 - 1e-9
    peak = max([total, *(s["reward"] or 0.0 for s in steps)])
    if peak > 1.0:
        counts.unscaled.append((at, peak))
        counts.fraction_keys.update(k for k, v in value.items() if k not in NOT_SUCCESS and finite(v)
                                    and 0.0 <= v <= 1.0)
        return False
    if running:
        counts.running_success += 1
    return total >= 1.0


def _keys_here(value: Mapping) -> list:
    """An episode record's keys, and for one of step rows (log_steps.py) the rows' keys."""
    rows = value.get(STEP_ROWS_KEY)
    keys = [key for key in value if key != STEP_ROWS_KEY]
    return list(dict.fromkeys(keys + [key for row in rows for key in row] if isinstance(rows, list) else keys))


def _differences(steps: list[dict]) -> None:
    """Running scores on ``steps`` as rewards per step (a step without one keeps the score)."""
    previous = 0.0
    for s in steps:
        running = previous if s["reward"] is None else s["reward"]
        s["reward"], s["score"], previous = running - previous, running, running


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
    lines = Counter({text: getattr(counts, name) for name, text in what.items() if getattr(counts, name)})
    lines.update({text: n for text, n in counts.readings.items() if n})
    return lines
