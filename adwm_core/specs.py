"""The names every part of ADWM shares: which policy, which environment, which ε levels."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from .envs import make_env
from .validated import Settings

Progress = Callable[[int, int], None]  # (episodes done, episodes in the stage)

EPSILONS = (0.0, 0.25, 0.5, 0.75, 1.0)
REMOTE_BACKENDS = frozenset({"openai"})  # backends that reach a model elsewhere: no weights on this machine
# backend options that say where or how fast a model runs, not what it computes: left out of stage
# keys, so a cell's artifacts are found whatever share of a GPU its engines got
# (vllm_backend.share_gpu_memory), however many requests an endpoint takes at once, whose key, or how
# many bytes of reused key/value states the transformers backend keeps (the same values, to float rounding)
UNKEYED_OPTIONS = frozenset({"gpu_memory_utilization", "concurrency", "device", "timeout", "max_retries",
                             "api_key_env", "prefix_cache_bytes"})


class Spec(Settings):
    """A name shared across ADWM, given with its leading fields in order (``PolicySpec(label,
    model)``) or by keyword."""

    _positional: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args: Any, **fields: Any) -> None:
        if len(args) > len(self._positional):
            raise TypeError(f"{type(self).__name__} takes at most {len(self._positional)} positional fields "
                            f"{self._positional}, got {len(args)}")
        super().__init__(**dict(zip(self._positional, args)), **fields)


class PolicySpec(Spec):
    """A policy by name: a Hugging Face model folder (or hub name), a backend and a prompt variant."""

    _positional = ("label", "model", "backend", "variant", "options")
    label: str = Field(min_length=1)
    model: str = Field(min_length=1)
    backend: str = "transformers"
    variant: str = "p0"
    options: dict[str, Any] = {}  # backend options, e.g. {"batch_size": 32}

    def with_variant(self, variant: str) -> PolicySpec:
        return self.replace(variant=variant)

    @property
    def name(self) -> str:
        """The label logged in the trajectories' ``policy`` column."""
        return f"{self.label}@{self.variant}"


class EnvSpec(Spec):
    """Where episodes come from: environment, its options, task type(s), split, horizon cap.

    ``task`` is one task type, several separated by commas, or ``*`` for every task type of
    the environment (the paper's ScienceWorld and ALFWorld cells span their task types).
    ``skip_variations`` leaves out each task's first variations in the split, e.g. those a
    local policy was fine-tuned on when episodes are drawn from the same split;
    ``n_instances`` keeps only the first (task, variation) pairs, e.g. exactly those."""

    _positional = ("name", "task", "options", "split")
    name: str
    task: str
    options: dict[str, Any] = {}
    split: str = "test"
    max_steps: int = Field(default=12, gt=0)
    skip_variations: int = Field(default=0, ge=0)
    n_instances: int | None = Field(default=None, gt=0)

    def instances(self) -> list[tuple[str, int]]:
        """(task, variation) pairs, task types interleaved so that any first n episodes cover them evenly."""
        with make_env(self.name, **self.options) as env:  # checks name, options and tasks up front
            tasks = env.tasks() if self.task == "*" else [t.strip() for t in self.task.split(",")]
            per_task = [[(t, v) for v in list(env.variations(t, self.split))[self.skip_variations :]] for t in tasks]
        empty = [t for t, pairs in zip(tasks, per_task) if not pairs]
        if empty:
            raise ValueError(f"{self.name}: task(s) {empty} have no {self.split} variations after skipping "
                             f"{self.skip_variations}")
        longest = max(map(len, per_task))
        return [pairs[i] for i in range(longest) for pairs in per_task if i < len(pairs)][: self.n_instances]


def check_epsilons(epsilons: Sequence[float]) -> None:
    if not epsilons or any(not 0.0 <= e <= 1.0 for e in epsilons):
        raise ValueError(f"ε levels must be a non-empty list of values in [0, 1], got {list(epsilons)}")


LogFormat = Literal["parquet", "jsonl", "csv", "hf"]
# the files a logs path may name, by suffix (each may be .gz): what each is read as
LOG_SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".txt": "jsonl", ".log": "jsonl", ".md": "jsonl",
                ".markdown": "jsonl", ".csv": "csv", ".tsv": "csv", ".parquet": "parquet"}
LOG_FIELDS = {"episode_id": "item_id", "conversations": "conversations", "role": "from", "text": "value",
              "reward": "reward", "success": "success", "logprob": "logprob", "observation": "observation",
              "action": "action"}
OPENING_FIELD = "opening"  # a key holding the first observation, kept apart from the turns (no default)


class LogSource(Spec):
    """Where behaviour logs are and how to read them (adwm_core/data/logs.py).

    ``format``: ``parquet`` (the project's trajectories or a table of steps), ``jsonl`` (files or a
    folder of them in any layout data/log_files.py reads: JSONL, JSON, text, each maybe .gz) or
    ``hf`` (a saved or cached dataset); told by the path where not given. ``fields`` names the
    keys to read (keys of :data:`LOG_FIELDS`; the turn and outcome keys are found where not
    named). ``split``: the split of a dataset with several. ``preamble_turns``: turns opening
    every conversation that are no step (unset: an instruction answered by a bare
    acknowledgement is found). ``thoughts``: replies without an action folded into the next
    action (``fold``) or kept as ``think:`` steps (``step``). ``agent_prefix``: the line prefix
    of the agent's lines in a text transcript. ``step_observation``: whether a step row's
    ``observation`` is what the agent saw ``before`` its action or the answer ``after`` it.
    ``rewards``: rewards per step given ``per-step`` or as a running score (``cumulative``);
    unset: a score that never goes down is read as running. ``allow_degenerate``: import logs
    whose steps nearly all take one action. ``strip``: regular expressions; observation lines
    one matches whole are removed. ``outcome_line``: a regular expression whose first group,
    on a line of a text episode, is its reward or success. ``success_line``: a regular expression;
    a text or chat episode with a line it matches is a success, one without a failure.
    ``max_score``: the score that finishes a game, for logs whose rewards are points (rewards are
    read as fractions of it, a success where an episode's return reaches it); the logs' own ``Max
    Score`` field does the same per episode. ``success_at``: the return (or the number under the
    success key) from which an episode is a success."""

    _positional = ("path", "format")
    path: str = Field(min_length=1)
    format: LogFormat | None = None
    fields: dict[str, str] = {}
    split: str | None = None
    preamble_turns: int | None = Field(default=None, ge=0)
    thoughts: Literal["fold", "step"] = "fold"
    agent_prefix: str = Field(default="> ", min_length=1)
    step_observation: Literal["before", "after"] | None = None
    rewards: Literal["per-step", "cumulative"] | None = None
    allow_degenerate: bool = False
    strip: tuple[str, ...] = ()
    outcome_line: str | None = None
    success_line: str | None = None
    max_score: float | None = Field(default=None, gt=0)
    success_at: float | None = None

    @field_validator("strip")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            _compiled(pattern, "strip")
        return value

    @field_validator("outcome_line")
    @classmethod
    def _outcome_pattern(cls, value: str | None) -> str | None:
        if value is not None and _compiled(value, "outcome_line").groups < 1:
            raise ValueError(f"{value!r} has no group: put the reward or flag in parentheses, e.g. 'reward = (\\S+)'")
        return value

    @field_validator("success_line")
    @classmethod
    def _success_pattern(cls, value: str | None) -> str | None:
        if value is not None:
            _compiled(value, "success_line")
        return value

    @field_validator("fields")
    @classmethod
    def _known_fields(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - {*LOG_FIELDS, OPENING_FIELD})
        if unknown:
            raise ValueError(f"unknown key(s) {unknown}; known: {sorted({*LOG_FIELDS, OPENING_FIELD})}")
        return value

    @property
    def resolved_format(self) -> str:
        """How the path is read: its ``format``, else told by its suffix (``LOG_SUFFIXES``), a
        plain folder's files each by their own; a saved dataset's folder, or a name that is no
        path on this machine, is ``hf``. A local file of any other suffix is refused at once: a
        path on this machine is never looked up on a hub."""
        if self.format is not None:
            return self.format
        name = self.path.rstrip("/").lower().removesuffix(".gz")
        suffix = next((s for s in LOG_SUFFIXES if name.endswith(s)), None)
        if suffix is not None:
            return LOG_SUFFIXES[suffix]
        if _is_plain_folder(self.path):
            return "jsonl"
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise ValueError(f"{self.path}: a file whose name says no logs format ({unknown_suffix(self.path)}). "
                             f"Formats read: {', '.join(LOG_SUFFIXES)} (each may be .gz). Say which it is with "
                             "--format jsonl (JSON, JSONL or text, told by the content), --format csv (a table with "
                             "a header, comma or tab separated) or --format parquet")
        return "hf"  # a saved dataset's folder or a dataset name

    def key(self, name: str) -> str:
        return self.fields.get(name, LOG_FIELDS[name])

    def checked(self) -> "LogSource":
        """The source, its path's format told (``resolved_format``): a local file no reader takes
        is refused here, before anything loads or any network is asked."""
        self.resolved_format
        return self


def unknown_suffix(path: str) -> str:
    """How a file's suffix is shown when it names no logs format."""
    suffix = os.path.splitext(os.path.basename(path).removesuffix(".gz"))[1]
    return f"suffix {suffix!r}" if suffix else "no suffix"


def _compiled(pattern: str, what: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as error:
        raise ValueError(f"{what}: {pattern!r} is no regular expression ({error})") from None


def _is_plain_folder(path: str) -> bool:
    """A local folder of log files, not a dataset saved with ``save_to_disk``."""
    return os.path.isdir(path) and not any(os.path.exists(os.path.join(path, marker))
                                           for marker in ("dataset_info.json", "state.json", "dataset_dict.json"))
