"""ReAct-style prompts: the task, the interaction so far, then a cue for the next action.

Every environment family has two instruction phrasings, ``p0`` and ``p1``,
with the same content (paper appendix 'Behavior-policy data'). The history is
rendered as alternating ``Observation:`` / ``Action:`` lines and the prompt
ends with the cue ``Action:``, so the model's continuation *is* the action and
log π(a|h) is the probability of ``" " + a + "\\n"`` after the prompt (the
newline closes the action, making π a distribution over whole commands).

Prompts fit the model's context: whole turns are dropped from the oldest;
if the newest observation alone is too long, it is cut on a token boundary,
from its start (its newest text stays) or, for the environments in
``KEEP_OBSERVATION_START``, from its end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ACTION_CUE = "Action:"
ACTION_END = "\n"
MAX_NEW_TOKENS = 24  # room kept for the answer

_GAME = {
    "p0": (
        "You are an agent playing a text-based game. Read the task and what has happened so far, "
        "then reply with the next command to type. Write only the command."
    ),
    "p1": (
        "Solve the task in this text adventure one command at a time. Given the observations and "
        "the commands already issued, answer with the single command to issue next."
    ),
}
_SCIENCE = {
    "p0": (
        "You are an agent doing a science experiment in a text-based world. Read the task and what "
        "has happened so far, then reply with the next action to take. Write only the action."
    ),
    "p1": (
        "Carry out the science task in this simulated world one action at a time. Given the "
        "observations and the actions already taken, answer with the single next action."
    ),
}

# instructions per environment name; environments not listed use the game phrasing
INSTRUCTIONS: dict[str, dict[str, str]] = {
    "textworld": _GAME,
    "textworld-express": _GAME,
    "scienceworld": _SCIENCE,
}
# list the admissible actions in the prompt when there are at most this many
# (ScienceWorld lists thousands; WebShop's pages already show their clickables
# and the search box takes free text, as in WebShop's own ReAct prompts)
MAX_LISTED_ACTIONS = {"scienceworld": 0, "webshop": 0}
DEFAULT_MAX_LISTED = 40
# environments whose pages put what matters first (WebShop: the options clicked,
# the top search results), so an over-long observation loses its end
KEEP_OBSERVATION_START = frozenset({"webshop"})
VARIANTS = ("p0", "p1")


@dataclass(frozen=True)
class History:
    """What a policy conditions on at one step of an episode."""

    task_description: str
    steps: tuple[tuple[str, str], ...]  # (observation, action) of the earlier turns, oldest first
    observation: str  # the current observation
    admissible: tuple[str, ...] | None = None


Turn = tuple[str, str, "tuple[str, ...] | None"]  # (observation, action, admissible) of one logged step


def episode_histories(task_description: str, turns: Sequence[Turn]) -> list[History]:
    """The history before each step of one logged episode."""
    return [
        History(task_description, tuple((o, a) for o, a, _ in turns[:t]), observation, admissible)
        for t, (observation, _, admissible) in enumerate(turns)
    ]


def instruction(env_name: str, variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"unknown prompt variant {variant!r}; expected one of {VARIANTS}")
    return INSTRUCTIONS.get(env_name, _GAME)[variant]


class PromptTemplate:
    """Renders histories of ``env_name`` with phrasing ``variant`` for one tokenizer.

    ``max_prompt_tokens`` is the room for the prompt (context length minus
    the tokens reserved for the answer). Tokenizers with a chat template get
    the instruction as system message and the history as user message; the
    assistant turn is opened and starts with the action cue.
    """

    def __init__(self, env_name: str, variant: str, tokenizer, max_prompt_tokens: int) -> None:
        self.env_name = env_name
        self.variant = variant
        self.tokenizer = tokenizer
        self.instruction = instruction(env_name, variant)
        self.max_listed = MAX_LISTED_ACTIONS.get(env_name, DEFAULT_MAX_LISTED)
        self.max_prompt_tokens = max_prompt_tokens
        self._overhead = self._count(self._wrap(""))
        if self._overhead >= max_prompt_tokens:
            raise ValueError(f"a context of {max_prompt_tokens} tokens cannot hold even the instruction")

    def _counts(self, texts: list[str]) -> list[int]:
        """Token counts of ``texts``, tokenised in one batched call."""
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def _count(self, text: str) -> int:
        return self._counts([text])[0]

    def _wrap(self, body: str) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "system", "content": self.instruction}, {"role": "user", "content": body}]
            opened = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            return opened + ACTION_CUE
        return f"{self.instruction}\n\n{body}\n{ACTION_CUE}"

    def _tail(self, history: History) -> str:
        tail = f"Observation: {history.observation.strip()}"
        if history.admissible and len(history.admissible) <= self.max_listed:
            tail += "\nValid actions: " + "; ".join(history.admissible)
        return tail

    def render(self, history: History) -> str:
        """The prompt for ``history``, truncated from the oldest turn to fit."""
        return self._wrap(self._body(history))

    def messages(self, history: History) -> list[dict]:
        """The same content as system (instruction) and user (history) messages, for endpoints
        that apply their own chat template; the user message ends with the action cue."""
        return [{"role": "system", "content": self.instruction},
                {"role": "user", "content": f"{self._body(history)}\n{ACTION_CUE}"}]

    def _body(self, history: History) -> str:
        """Task, the newest turns that fit and the current observation, as the prompt's body."""
        head = f"Task: {history.task_description.strip()}"
        turns = [f"Observation: {obs.strip()}\n{ACTION_CUE} {act}" for obs, act in history.steps]
        tail = self._tail(history)
        room = self.max_prompt_tokens - self._overhead
        fixed, *turn_costs = self._counts([head + "\n" + tail, *(turn + "\n" for turn in turns)])
        used = fixed + 1
        if used > room:  # even without history it does not fit: cut the newest observation's start
            return head + "\n" + self._cut(tail, room - self._count(head + "\n") - 1)
        kept: list[str] = []
        for turn, cost in zip(reversed(turns), reversed(turn_costs)):  # newest first; per-piece counts
            cost += 1  # may differ from the joined count by a token, checked below
            if used + cost > room:
                break
            kept.append(turn)
            used += cost
        kept.reverse()
        while True:
            body = "\n".join([head, *kept, tail])
            if self._count(self._wrap(body)) <= self.max_prompt_tokens or not kept:
                return body
            kept.pop(0)

    def _cut(self, text: str, n_tokens: int) -> str:
        """``text`` cut to its last ``n_tokens`` tokens (its first, where the start is what matters)."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        n_tokens = max(n_tokens, 1)
        kept = ids[:n_tokens] if self.env_name in KEEP_OBSERVATION_START else ids[max(len(ids) - n_tokens, 0) :]
        return self.tokenizer.decode(kept)


def action_continuation(action: str) -> str:
    """The text whose probability after the prompt is π(action|h)."""
    return " " + action.strip() + ACTION_END

