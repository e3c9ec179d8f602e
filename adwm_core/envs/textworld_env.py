"""TextWorld (Côté et al., 2018) on games compiled locally with ``tw-make``.

A task names a game recipe (the cooking challenge of the First TextWorld
Problems among them); a variation is the generation seed. Games are compiled
on first use into a local cache and reused. reward = TextWorld's intermediate
reward (+1 progress, -1 a step away from the goal, 0 otherwise); score = game
points / max points; success = the game is won. The ASCII banner, the status
line and the input prompt are stripped from observations. An action is valid
when it is in the game's admissible commands.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import warnings

from ..paths import local_cache_dir
from .base import EnvironmentUnavailable, Observation, StepResult, TextEnv, check_split

# task -> tw-make arguments (without --seed/--output).
GAME_RECIPES: dict[str, list[str]] = {
    "cooking": ["tw-cooking", "--recipe", "1", "--take", "1", "--go", "1"],
    "cooking-hard": ["tw-cooking", "--recipe", "2", "--take", "2", "--go", "6", "--open", "--cook", "--cut"],
    "coin": ["tw-coin_collector", "--level", "5"],
    "treasure": ["tw-treasure_hunter", "--level", "5"],
    "simple": ["tw-simple", "--rewards", "dense", "--goal", "detailed"],
}
# Disjoint generation-seed ranges per split.
SEED_RANGES = {"train": range(0, 10_000), "dev": range(10_000, 11_000), "test": range(11_000, 12_000)}
COOKING_SPLITS = {"train": "train", "dev": "valid", "test": "test"}

_STATUS_LINE = re.compile(r"[ \t]*-=\s.*?\s=-\s*-?\d+/\d+\s*$")
_PROMPT = re.compile(r"\n>[ \t]*$")
_GAME_OVER_QUESTION = "Would you like to RESTART, RESTORE a saved game, QUIT or UNDO the last command?"


def clean_text(raw: str) -> str:
    """Strip TextWorld's banner (the leading lines with no letters), the input
    prompt, the status line (``-= Room =-score/moves``) and the restart question."""
    lines = raw.replace(_GAME_OVER_QUESTION, "").split("\n")
    while lines and not re.search(r"[A-Za-z]", lines[0]):
        lines.pop(0)
    text = "\n".join(lines)
    text = _STATUS_LINE.sub("", text.rstrip())
    text = _PROMPT.sub("", "\n" + text.rstrip())
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _normalise(command: str) -> str:
    return " ".join(command.lower().split())


class TextWorldEnv(TextEnv):
    name = "textworld"

    def __init__(self, games_dir: str | None = None) -> None:
        import textworld

        self._textworld = textworld
        self._infos = textworld.EnvInfos(
            admissible_commands=True,
            objective=True,
            intermediate_reward=True,
            max_score=True,
            score=True,
            won=True,
            lost=True,
            extras=["walkthrough"],
        )
        self._games_dir = games_dir or local_cache_dir("games", "textworld")
        self._engine = None
        self._game_path: str | None = None
        self._state = None

    def tasks(self) -> list[str]:
        return list(GAME_RECIPES)

    def variations(self, task: str, split: str) -> list[int]:
        check_split(split)
        self._check_task(task)
        return list(SEED_RANGES[split])

    def _check_task(self, task: str) -> None:
        if task not in GAME_RECIPES:
            raise ValueError(f"unknown TextWorld task {task!r}; known: {', '.join(GAME_RECIPES)}")

    def game_file(self, task: str, variation: int) -> str:
        """Path of the compiled game, compiling it with ``tw-make`` on first use."""
        self._check_task(task)
        split = next((s for s, r in SEED_RANGES.items() if variation in r), None)
        if split is None:
            raise ValueError(f"TextWorld variation {variation} is outside every split's seed range {SEED_RANGES}")
        folder = os.path.join(self._games_dir, task)
        path = os.path.join(folder, f"{variation}.z8")
        if os.path.exists(path):
            return path
        os.makedirs(folder, exist_ok=True)
        args = list(GAME_RECIPES[task])
        if args[0] == "tw-cooking":
            args += ["--split", COOKING_SPLITS[split]]
        tw_make = os.path.join(os.path.dirname(sys.executable), "tw-make")
        with tempfile.TemporaryDirectory(dir=folder, prefix=".tmp-") as tmp:
            out = os.path.join(tmp, "game.z8")
            cmd = [tw_make, *args, "--seed", str(variation), "--output", out, "--silent", "-f"]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True)
            except FileNotFoundError as err:
                raise EnvironmentUnavailable(
                    f"TextWorld's game compiler {tw_make} is missing: install TextWorld in this environment "
                    "(`pip install textworld==1.7.0`, done by `make install`)"
                ) from err
            if done.returncode != 0 or not os.path.exists(out):
                raise EnvironmentUnavailable(
                    f"tw-make failed to compile TextWorld game {task}/{variation}: {done.stderr.strip()[-2000:]}"
                )
            # The .json metadata must be in place before the .z8 appears.
            os.replace(os.path.join(tmp, "game.json"), os.path.join(folder, f"{variation}.json"))
            os.replace(out, path)
        return path

    def reset(self, task: str, variation: int, seed: int = 0) -> Observation:
        path = self.game_file(task, variation)
        if self._engine is None or path != self._game_path:  # replays reset the same game: reuse its engine
            self.close()
            with warnings.catch_warnings():
                # Jericho does not know generated games; TextWorld's own infos carry score and win.
                warnings.filterwarnings("ignore", message=".*is not fully supported.*")
                self._engine = self._textworld.start(path, request_infos=self._infos)
            self._game_path = path
        self._state = self._engine.reset()
        return self._observation(self._state)

    def _observation(self, state) -> Observation:
        return Observation(clean_text(state.feedback), state.objective or "", state.admissible_commands or [])

    def step(self, action: str) -> StepResult:
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        admissible = {_normalise(a) for a in self._state.admissible_commands or []}
        state, _, done = self._engine.step(action)
        self._state = state
        max_score = state.max_score or 1
        return StepResult(
            observation=self._observation(state),
            reward=float(state.intermediate_reward or 0),
            done=bool(done),
            score=float(state.score) / max_score,
            success=bool(state.won),
            action_valid=_normalise(action) in admissible,
        )

    def gold_actions(self) -> list[str]:
        if self._state is None:
            raise RuntimeError("call reset() before gold_actions()")
        return list(self._state["extra.walkthrough"])

    def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
