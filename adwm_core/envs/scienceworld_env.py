"""ScienceWorld (Wang et al., 2022): 30 science task types, train/dev/test variations.

The engine's score is normalised to [0, 1] (1 = full marks): reward =
clip(score_t - score_{t-1}, -1, 1); success = score 1; a negative score means
the task failed and ends the episode. Valid actions are
listed only when ``observation.admissible`` is read: the engine step takes
~3 ms, listing valid actions 50-200 ms.
"""

from __future__ import annotations

from .base import (
    HISTORY_FREE_HASHES,
    Observation,
    StepCounter,
    StepResult,
    TextEnv,
    check_split,
    close_quietly,
    start_jvm_engine,
)

REFUSAL = "No known action matches that input."


class ScienceWorldEnv(TextEnv):
    name = "scienceworld"

    def __init__(self, simplifications: str = "") -> None:
        from scienceworld import ScienceWorldEnv as Engine

        self._engine = start_jvm_engine(self.name, lambda: Engine("", envStepLimit=10**9), HISTORY_FREE_HASHES)
        self._server = self._engine.server
        self._simplifications = simplifications
        self._task_names = list(self._engine.get_task_names())
        self._loaded: tuple[str, int] | None = None
        self._steps = StepCounter()
        self._last_score = 0.0
        self._task_description = ""

    def tasks(self) -> list[str]:
        return list(self._task_names)

    def variations(self, task: str, split: str) -> list[int]:
        check_split(split)
        self._load(task, 0)
        listing = {
            "train": self._engine.get_variations_train,
            "dev": self._engine.get_variations_dev,
            "test": self._engine.get_variations_test,
        }[split]
        return [int(v) for v in listing()]

    def _load(self, task: str, variation: int) -> None:
        if task not in self._task_names:
            raise ValueError(f"unknown ScienceWorld task {task!r}; known: {', '.join(self._task_names)}")
        if self._loaded != (task, variation):
            n = int(self._server.getTaskMaxVariations(task))
            if not 0 <= variation < n:
                raise ValueError(f"ScienceWorld task {task!r} has variations 0..{n - 1}, not {variation}")
            self._engine.load(task, variation, self._simplifications, generateGoldPath=True)
            self._loaded = (task, variation)

    def reset(self, task: str, variation: int, seed: int = 0) -> Observation:
        self._load(task, variation)
        self._server.reset()
        self._steps.count += 1
        self._last_score = 0.0
        self._task_description = str(self._server.getTaskDescription())
        text = str(self._server.step("look around"))
        return self._observation(text)

    def _observation(self, text: str) -> Observation:
        lister = self._steps.lister(self._engine.get_valid_action_object_combinations)
        return Observation(text, self._task_description, lister)

    def step(self, action: str) -> StepResult:
        if self._loaded is None:
            raise RuntimeError("call reset() before step()")
        self._steps.count += 1
        text = str(self._server.step(action))
        score = float(self._server.getScore())
        reward = min(1.0, max(-1.0, score - self._last_score))
        self._last_score = score
        success = score >= 1.0
        done = bool(self._server.getCompleted()) or score < 0
        return StepResult(
            observation=self._observation(text),
            reward=reward,
            done=done or success,
            score=score,
            success=success,
            action_valid=text.strip() != REFUSAL,
        )

    def gold_actions(self) -> list[str]:
        if self._loaded is None:
            raise RuntimeError("call reset() before gold_actions()")
        return [str(a) for a in self._server.getGoldActionSequence()]

    def close(self) -> None:
        engine, self._engine = getattr(self, "_engine", None), None
        close_quietly(engine)
