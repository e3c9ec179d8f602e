"""TextWorld-Express (Jansen & Côté, 2022): fast re-implementations of CookingWorld,
TextWorld Commonsense, Coin Collector, Map Reader, Arithmetic, Sorting,
Simon Says and Pecking Order.

A variation is the engine's game seed; its folds are the splits (train, dev,
test). reward = change of the engine's normalised score; success = the
engine's ``tasksuccess``; the episode ends on success or ``taskfailure``.
An action is valid when it is in the engine's valid-action list.

The engine draws some gold paths (coin, twc) by an unseeded random walk, so
each reset may give another one. To keep episodes reproducible, the adapter
fixes one canonical gold sequence per game instance: the shortest of
``GOLD_DRAWS`` draws, stored on first use under the local cache; the first
process to store it wins and every later one reads it back.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping

from ..paths import local_cache_dir
from .base import SPLITS, Observation, StepResult, TextEnv, check_split, close_quietly, start_jvm_engine

GOLD_DRAWS = 5
GAMES = ("cookingworld", "twc", "coin", "mapreader", "arithmetic", "sorting", "simonsays", "peckingorder")


class TextWorldExpressEnv(TextEnv):
    name = "textworld-express"
    # the rewards are changes of a normalised score in [-1, 1], so they sum to the final one (a
    # wrong command in Simon Says pays 0.8 → -1, a step of -1.8)
    reward_range, return_range = (-2.0, 2.0), (-1.0, 1.0)

    def __init__(self, game_params: Mapping[str, str] | None = None) -> None:
        """``game_params``: per game, the engine's parameter string, e.g.
        ``{"coin": "numLocations=4,includeDoors=0"}``."""
        from textworld_express import TextWorldExpressEnv as Engine

        unknown = set(game_params or {}) - set(GAMES)
        if unknown:
            raise ValueError(f"game_params for unknown games {sorted(unknown)}; known: {', '.join(GAMES)}")
        self._game_params = dict(game_params or {})
        self._engine = start_jvm_engine(self.name, lambda: Engine(envStepLimit=10**9))
        self._game: str | None = None
        self._fold_seeds: dict[tuple[str, str], list[int]] = {}
        self._info: dict | None = None
        self._gold: list[str] = []

    def tasks(self) -> list[str]:
        return list(GAMES)

    def _load(self, task: str) -> None:
        if task not in GAMES:
            raise ValueError(f"unknown TextWorld-Express game {task!r}; known: {', '.join(GAMES)}")
        if self._game != task:
            self._engine.load(task, self._game_params.get(task, ""))
            self._game = task

    def _seeds(self, split: str) -> list[int]:
        """The current game's seeds in ``split``, asked of the engine once per (game, fold)."""
        key = (self._game, split)
        if key not in self._fold_seeds:
            listing = {
                "train": self._engine.getValidSeedsTrain,
                "dev": self._engine.getValidSeedsDev,
                "test": self._engine.getValidSeedsTest,
            }[split]
            self._fold_seeds[key] = [int(s) for s in listing()]
        return self._fold_seeds[key]

    def variations(self, task: str, split: str) -> list[int]:
        check_split(split)
        self._load(task)
        return list(self._seeds(split))

    def _fold_of(self, variation: int) -> str:
        for split in SPLITS:
            seeds = self._seeds(split)
            if seeds[0] <= variation <= seeds[-1]:
                return split
        raise ValueError(f"TextWorld-Express {self._game!r} has no game seed {variation}")

    def reset(self, task: str, variation: int, seed: int = 0) -> Observation:
        self._load(task)
        fold = self._fold_of(variation)
        self._gold = self._canonical_gold(task, variation, fold)
        text, info = self._engine.reset(seed=variation, gameFold=fold, generateGoldPath=False)
        self._info = info
        return self._observation(text, info)

    @staticmethod
    def _observation(text: str, info: dict) -> Observation:
        return Observation(text, info["taskDescription"], info["validActions"])

    def _canonical_gold(self, task: str, variation: int, fold: str) -> list[str]:
        params = self._game_params.get(task, "")
        key = hashlib.sha256(f"{task}|{params}|{variation}".encode()).hexdigest()[:16]
        folder = local_cache_dir("gold", self.name)
        path = os.path.join(folder, f"{task}-{variation}-{key}.json")
        if not os.path.exists(path):
            draws = []
            for _ in range(GOLD_DRAWS):
                self._engine.reset(seed=variation, gameFold=fold, generateGoldPath=True)
                draws.append([str(a) for a in self._engine.getGoldActionSequence()])
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(min(draws, key=len), f)
                os.link(tmp, path)  # fails if another process stored its sequence first
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        with open(path) as f:
            return json.load(f)

    def step(self, action: str) -> StepResult:
        if self._info is None:
            raise RuntimeError("call reset() before step()")
        valid = action in self._info["validActions"]
        text, reward, _, info = self._engine.step(action)
        self._info = info
        success = bool(info["tasksuccess"])
        return StepResult(
            observation=self._observation(text, info),
            reward=float(reward),
            done=success or bool(info["taskfailure"]),
            score=float(info["score"]),
            success=success,
            action_valid=valid,
        )

    def gold_actions(self) -> list[str]:
        if self._info is None:
            raise RuntimeError("call reset() before gold_actions()")
        return list(self._gold)

    def close(self) -> None:
        engine, self._engine = getattr(self, "_engine", None), None
        close_quietly(engine)
