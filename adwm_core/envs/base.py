"""One protocol for multi-turn text environments.

An episode is addressed by ``(task, variation)``: the task type and the
engine's own instance id (ScienceWorld variation, TextWorld generation seed,
TextWorld-Express game seed). Given that pair every engine here is
deterministic; the episode ``seed`` only seeds the agent's randomness.

Scale conventions shared by every adapter:
- ``reward`` is the per-step reward, in [-1, 1] unless the environment declares
  another ``reward_range`` (a change of a normalised score may be up to 2);
- ``score`` is the engine's cumulative score normalised to [-1, 1] (1 = full marks);
- ``success`` is the engine's own win flag;
- ``action_valid`` is False when the engine did not accept the action; the
  observation then carries the engine's own refusal text and the episode goes on.
"""

from __future__ import annotations

import os
import shutil
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

SPLITS = ("train", "dev", "test")


class EnvironmentUnavailable(RuntimeError):
    """A dependency of an environment (Java, a package, a data path) is missing."""


class StaleObservation(RuntimeError):
    """Admissible actions were asked of an observation the environment has moved past."""


JVM_OPTIONS = "-Xmx384m -XX:+UseSerialGC"
"""Heap bound and collector for every engine JVM. py4j starts ``java`` with no options, so
each JVM may grow its heap to a quarter of RAM: a ScienceWorld engine reached 0.95 GiB RSS
in 90 s of play, 0.48 GiB with these options, at the same episodes/s. A cell runs up to 32
engines at once (behaviour beside ground truth, 2 workers × 8 engines each)."""

HISTORY_FREE_HASHES = "-XX:+UnlockExperimentalVMOptions -XX:hashCode=2"
"""Every object's identity hash one constant, for engines whose text follows the order of hashed
sets: HotSpot's identity hashes depend on what the JVM allocated and hashed before, so an
episode then depends on the episodes its engine played first. ScienceWorld lists a room's
objects that way: the same 8 episodes played in reverse order on one engine differed in 4 (two
from the first observation); with this option in none, at 9 % more time (2-core x86_64,
2026-11-28)."""

Engine = TypeVar("Engine")
_JAVA_TOOL_OPTIONS_LOCK = threading.Lock()  # the variable is process-wide: one launch at a time sets it


def require_java(env_name: str) -> str:
    """Path of the ``java`` binary, or a clear error saying how to install it."""
    java = shutil.which("java")
    if java is None:
        raise EnvironmentUnavailable(
            f"{env_name} runs on the Java virtual machine, and no `java` is on PATH. "
            "Install a Java runtime (11 or newer), e.g. `apt-get install -y default-jre-headless`, "
            "or run `make install`, which does so when it can."
        )
    return java


def start_jvm_engine(env_name: str, start: Callable[[], Engine], options: str = "") -> Engine:
    """``start()`` with Java present and its JVM launched under :data:`JVM_OPTIONS` and ``options``.

    The options go through ``JAVA_TOOL_OPTIONS`` (the engines accept none of their own),
    for this launch only. A user's own ``JAVA_TOOL_OPTIONS`` come after ours, and the
    JVM takes the last of a repeated flag, so e.g. ``-Xmx1g`` there raises the bound.
    """
    require_java(env_name)
    with _JAVA_TOOL_OPTIONS_LOCK:
        user_options = os.environ.get("JAVA_TOOL_OPTIONS")
        os.environ["JAVA_TOOL_OPTIONS"] = " ".join(o for o in (JVM_OPTIONS, options, user_options) if o)
        try:
            return start()
        finally:
            if user_options is None:
                del os.environ["JAVA_TOOL_OPTIONS"]
            else:
                os.environ["JAVA_TOOL_OPTIONS"] = user_options


def close_quietly(engine) -> None:
    """Close a JVM-backed engine; one whose JVM is already gone has nothing left to release."""
    if engine is None:
        return
    try:
        engine.close()
    except Exception:  # py4j raises when the JVM died first
        pass


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")


class Observation:
    """What the agent sees: the text, the task description and the admissible actions.

    ``admissible`` may be given as a callable; it is then listed on first access
    only (ScienceWorld spends ~95% of a step listing valid actions), and raises
    :class:`StaleObservation` if the environment has stepped on since.
    """

    __slots__ = ("text", "task_description", "_admissible", "_lister")

    def __init__(
        self,
        text: str,
        task_description: str,
        admissible: Sequence[str] | Callable[[], Sequence[str]],
    ) -> None:
        self.text = text
        self.task_description = task_description
        if callable(admissible):
            self._admissible, self._lister = None, admissible
        else:
            self._admissible, self._lister = tuple(admissible), None

    @property
    def admissible(self) -> tuple[str, ...]:
        if self._admissible is None:
            self._admissible = tuple(self._lister())
            self._lister = None
        return self._admissible

    def __repr__(self) -> str:
        return f"Observation(text={self.text[:60]!r}...)"


@dataclass(frozen=True)
class StepResult:
    observation: Observation
    reward: float
    done: bool
    score: float
    success: bool
    action_valid: bool


class TextEnv(ABC):
    """A multi-turn text environment on a real engine."""

    name: str
    # Actions are ReAct calls ``type[argument]``: a world model keys them by type, the
    # fixed vocabulary {⟨unk⟩, search, lookup, finish} (app:wm-arch), not by string.
    react_actions: bool = False
    # What a return can be, declared by the engine's rules (the identified bounds of ADWM's
    # interval rest on them, ope/statistics/bounds.py): every step's reward lies in
    # ``reward_range`` (the protocol's [-1, 1] unless the engine pays less), and where the rules
    # bound a whole episode's return more tightly than its steps do, ``return_range`` says so.
    reward_range: tuple[float, float] = (-1.0, 1.0)
    return_range: tuple[float, float] | None = None

    @abstractmethod
    def tasks(self) -> list[str]:
        """Task types this environment offers."""

    @abstractmethod
    def variations(self, task: str, split: str) -> list[int]:
        """Instance ids of ``task`` in ``split`` (one of :data:`SPLITS`)."""

    @abstractmethod
    def reset(self, task: str, variation: int, seed: int = 0) -> Observation:
        """Start an episode of ``task`` instance ``variation``."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply ``action``; never raises for an action the engine refuses."""

    @abstractmethod
    def gold_actions(self) -> list[str]:
        """The engine's expert action sequence for the current episode, from its start."""

    @classmethod
    def write_offline_data(cls, folder: str) -> str | None:
        """Write this environment's data in its official file format, from the offline sources
        shipped with ADWM, under ``folder``; return the value of the ``data`` option that reads
        it (smoke runs exercise the official loader this way). None: the environment reads no
        data files (its engine ships its content)."""
        return None

    def close(self) -> None:
        """Release the engine (JVM, interpreter)."""

    def __enter__(self) -> TextEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class StepCounter:
    """Counts steps so a lazily listed observation can tell it is stale."""

    def __init__(self) -> None:
        self.count = 0

    def lister(self, list_now: Callable[[], Sequence[str]]) -> Callable[[], Sequence[str]]:
        issued_at = self.count

        def list_admissible() -> Sequence[str]:
            if self.count != issued_at:
                raise StaleObservation(
                    "admissible actions of an earlier observation were asked after the "
                    "environment stepped on; read `observation.admissible` before stepping"
                )
            return list_now()

        return list_admissible
