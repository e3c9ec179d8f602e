"""Off-log answers carried over from the log by what an action does to the episode's own text
(a model-free Monte Carlo transition in the sense of Fonteneau et al. 2010, as kNN-WM is, made
less sparse by matching actions on their relation to the episode instead of their words).

An action's *signature* keeps its verb (first word) and its function words (``FUNCTION_WORDS``)
as they are, and replaces each other word by where the episode's text so far holds it: the
observation the action is taken in (``o``), an earlier observation of the episode (``h``), the
task description (``k``) — any combination, or none (``-``). "take coin" in a room that shows a
coin and "take key" in a room that shows a key have one signature, and so have "go north" in
two rooms that both list a north exit. Nothing here names an environment.

:class:`CarriedOver` answers an off-log (state, action) pair with one logged transition of the
same signature — its reward, termination and successor — drawn uniformly among those of the
same task description and step where the log holds some, else of the same task, else of the
same step, else of any (``within="instance"``: of the same task description only, the same step
first). With the ``template`` level after it, a pair whose signature the log
never took is matched the same way on its *template*, the signature with every tag replaced by
``*`` ("take * from *": the verb and the function words): the log's own record of what that kind
of action earns. A pair no level matches goes to the fallback transition. The answer is not
marked ``logged``: the log never took this very pair.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import lru_cache

import numpy as np

from ...data.actions import normal_action
from .state_bank import StateBank
from .transitions import Outcome, Query, Transition, answered_from_log

FUNCTION_WORDS = frozenset("a an the to in into on onto from with at of for and or up down out off over under by "
                           "is are it its this that".split())
Signature = tuple[str, ...]
LEVELS = ("signature", "template")  # how an off-log action may be matched to logged ones, finest first


@lru_cache(maxsize=65536)
def words(text: str) -> frozenset[str]:
    """The lower-case alphanumeric words of ``text``."""
    return frozenset(re.findall(r"[a-z0-9]+", text.lower()))


def signature(action: str, observation: str, earlier: frozenset[str], task: str) -> Signature:
    """The action's verb and function words, each other word tagged by where the episode holds it
    (``o`` the current observation, ``h`` an earlier one, ``k`` the task; ``-`` nowhere)."""
    tokens = re.findall(r"[a-z0-9]+", normal_action(action))
    if not tokens:
        return ()
    here, in_task = words(observation), words(task)
    tags = [tokens[0]]
    for token in tokens[1:]:
        if token in FUNCTION_WORDS:
            tags.append(token)
        else:
            tags.append("".join(tag for tag, held in (("o", here), ("h", earlier), ("k", in_task)) if token in held)
                        or "-")
    return tuple(tags)


def template(key: Signature) -> Signature:
    """The signature's verb and function words, every tag replaced by ``*``."""
    return tuple(tag if i == 0 or tag in FUNCTION_WORDS else "*" for i, tag in enumerate(key))


class CarriedOver:
    """Off-log pairs answered by a logged transition of the same signature (then, at each further
    level of ``levels``, the same template), from any episode of the log or (``within="instance"``)
    from episodes of the same task description only; ``fallback`` answers the pairs no level matches."""

    def __init__(self, bank: StateBank, fallback: Transition, levels: tuple[str, ...] = ("signature",),
                 within: str = "log") -> None:
        if not levels or any(level not in LEVELS for level in levels):
            raise ValueError(f"carry-over levels {levels!r}: each one of {LEVELS}, finest first")
        if within not in ("log", "instance"):
            raise ValueError(f"carry-over within {within!r}: 'log' (any episode) or 'instance' (the same task)")
        self.bank, self.fallback = bank, fallback
        self.preferences = ("task and step", "task") if within == "instance" else ("task and step", "task", "step", "any")
        logged = bank.transitions
        seen: dict[int, frozenset[str]] = defaultdict(frozenset)  # episode → words of its observations so far
        by_key: dict[Signature, list[int]] = defaultdict(list)
        self.keys = [(lambda key: key) if level == "signature" else template for level in levels]
        for i in np.lexsort((logged.steps, logged.episodes)):  # every episode in order of t
            episode, observation = int(logged.episodes[i]), bank.texts[int(logged.observations[i])]
            key = signature(logged.actions[i], observation, seen[episode], logged.tasks[i])
            for level, key_of in enumerate(self.keys):
                by_key[(level, *key_of(key))].append(int(i))
            seen[episode] = seen[episode] | words(observation)
        self.by_key = {key: np.sort(rows) for key, rows in by_key.items()}
        # task descriptions as codes, so a signature's candidates are matched on their task in one comparison
        self.task_code = {task: code for code, task in enumerate(dict.fromkeys(logged.tasks))}
        self.task_codes = np.array([self.task_code[task] for task in logged.tasks], np.int64)

    def __call__(self, query: Query) -> Outcome:
        logged, t = self.bank.transitions, query.t
        earlier_rows = self.bank.nearest(query.past[:, :t].reshape(-1, query.past.shape[-1])).reshape(len(query.read), t)
        draws = query.uniforms()
        chosen = np.full(len(query.actions), -1, np.int64)
        for j, (history, action, row) in enumerate(zip(query.histories, query.actions, query.read)):
            earlier = frozenset().union(*(words(self.bank.texts[r]) for r in earlier_rows[j]))
            key = signature(action, self.bank.texts[int(row)], earlier, history.task_description)
            candidates = next((found for level, key_of in enumerate(self.keys)
                               if (found := self.by_key.get((level, *key_of(key)))) is not None), None)
            if candidates is None:
                continue
            same_task = self.task_codes[candidates] == self.task_code.get(history.task_description, -1)
            same_step = logged.steps[candidates] == t
            masks = {"task and step": same_task & same_step, "task": same_task, "step": same_step,
                     "any": np.ones_like(same_task)}
            keep = next((masks[p] for p in self.preferences if masks[p].any()), None)
            if keep is None:  # nothing of this instance: the fallback answers
                continue
            candidates = candidates[keep]
            chosen[j] = candidates[min(int(draws[j] * len(candidates)), len(candidates) - 1)]
        return answered_from_log(logged, chosen, query, self.fallback, same_pair=False)
