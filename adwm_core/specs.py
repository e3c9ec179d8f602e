"""The names every part of ADWM shares: which policy, which environment, which ε levels."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from .envs import make_env

Progress = Callable[[int, int], None]  # (episodes done, episodes in the stage)

EPSILONS = (0.0, 0.25, 0.5, 0.75, 1.0)
REMOTE_BACKENDS = frozenset({"openai"})  # backends that reach a model elsewhere: no weights on this machine
# backend options that say where a model runs, not what it computes: left out of stage keys, so
# a cell's artifacts are found whatever share of a GPU its engines got (vllm_backend.share_gpu_memory)
UNKEYED_OPTIONS = frozenset({"gpu_memory_utilization"})


@dataclass(frozen=True)
class PolicySpec:
    """A policy by name: a Hugging Face model folder (or hub name), a backend and a prompt variant."""

    label: str
    model: str
    backend: str = "transformers"
    variant: str = "p0"
    options: Mapping = field(default_factory=dict)  # backend options, e.g. {"batch_size": 32}

    def with_variant(self, variant: str) -> PolicySpec:
        return replace(self, variant=variant)

    @property
    def name(self) -> str:
        """The label logged in the trajectories' ``policy`` column."""
        return f"{self.label}@{self.variant}"


@dataclass(frozen=True)
class EnvSpec:
    """Where episodes come from: environment, its options, task type(s), split, horizon cap.

    ``task`` is one task type, several separated by commas, or ``*`` for every task type of
    the environment (the paper's ScienceWorld and ALFWorld cells span their task types).
    ``skip_variations`` leaves out each task's first variations in the split, e.g. those a
    local policy was fine-tuned on when episodes are drawn from the same split;
    ``n_instances`` keeps only the first (task, variation) pairs, e.g. exactly those."""

    name: str
    task: str
    options: Mapping = field(default_factory=dict)
    split: str = "test"
    max_steps: int = 12
    skip_variations: int = 0
    n_instances: int | None = None

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


LOG_FORMATS = ("parquet", "jsonl", "hf")
LOG_FIELDS = {"episode_id": "item_id", "conversations": "conversations", "role": "from", "text": "value",
              "reward": "reward", "success": "success", "logprob": "logprob"}


@dataclass(frozen=True)
class LogSource:
    """Where behaviour logs are and how to read them; ``fields`` renames the keys looked for
    (keys of :data:`LOG_FIELDS`); ``split``: the split of a dataset with several;
    ``preamble_turns``: turns opening every conversation that are no step (AgentTraj-L opens
    with the harness's instruction and the agent's "OK"); the first gives the task description
    where the episode names none."""

    path: str
    format: str | None = None  # inferred from the path's suffix where not given
    fields: Mapping[str, str] = field(default_factory=dict)
    split: str | None = None
    preamble_turns: int = 0

    def __post_init__(self) -> None:
        unknown = sorted(set(self.fields) - set(LOG_FIELDS))
        if unknown:
            raise ValueError(f"logs.fields: unknown key(s) {unknown}; known: {sorted(LOG_FIELDS)}")
        if self.preamble_turns < 0:
            raise ValueError(f"logs.preamble_turns must be 0 or more, got {self.preamble_turns}")
        if self.format is not None and self.format not in LOG_FORMATS:
            raise ValueError(f"logs.format: {self.format!r} is not one of {LOG_FORMATS}")

    @property
    def resolved_format(self) -> str:
        if self.format is not None:
            return self.format
        name = self.path.rstrip("/").lower()
        if name.endswith(".parquet"):
            return "parquet"
        if name.endswith((".jsonl", ".json")):
            return "jsonl"
        return "hf"  # a saved dataset's folder or a dataset name

    def key(self, name: str) -> str:
        return self.fields.get(name, LOG_FIELDS[name])
