"""ALFWorld (Shridhar et al., 2021), text side: ALFRED household tasks as PDDL games played
through TextWorld, loaded the way the ``alfworld`` package loads them (``PddlEnv`` wrapped
in ``AlfredDemangler`` and ``AlfredInfos``; ``AlfredExpert`` gives the gold actions).

Games come from one of two sources:

- the official games, in the layout ``alfworld-download`` writes
  (``json_2.1.1/{train,valid_seen,valid_unseen}/<task>-.../<trial>/{game.tw-pddl,traj_data.json}``
  and ``logic/alfred.{pddl,twl2}``), from ``data`` or else ``$ALFWORLD_DATA``. Splits:
  train = train, dev = valid_seen, test = valid_unseen; a variation is
  ``OFFICIAL_OFFSETS[split]`` + the index of the trial among that split's solvable trials of
  the task type (sorted by path), so ids of different splits never collide;
- games of the same format generated from a seed (:mod:`.alfworld_games`), used when no
  official data is configured (or with ``data="generated"``); a variation is the seed, from
  disjoint ranges per split, and the game is written to the local cache on first use.

A task is one of ALFWorld's six task types. reward = 1 on the step that wins (sparse);
score = 1 once won, else 0; success = the engine's win flag; the episode ends on winning.
Commands are lower-cased and their spaces collapsed before they reach the engine; a command
outside the admissible ones is refused by the engine ("Nothing happens.") and is
``action_valid=False``. Observations drop the "-= Welcome to TextWorld, ALFRED! =-" banner.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
from contextlib import contextmanager

from ..paths import local_cache_dir
from . import alfworld_games
from .alfworld_games import TASK_TYPES, import_alfworld
from .base import SPLITS, EnvironmentUnavailable, Observation, StepResult, TextEnv, check_split

# Seeds of generated games per split (disjoint).
SEED_RANGES = {"train": range(0, 10_000), "dev": range(10_000, 11_000), "test": range(11_000, 12_000)}
# Official games: our split -> ALFWorld's folder, and the offset of the split's variation ids.
OFFICIAL_SPLITS = {"train": "train", "dev": "valid_seen", "test": "valid_unseen"}
OFFICIAL_OFFSETS = {"train": 0, "dev": 100_000, "test": 200_000}
JSON_DIR = "json_2.1.1"
LOGIC_FILES = ("logic/alfred.pddl", "logic/alfred.twl2")
EXPERTS = ("planner", "handcoded")
HANDCODED_MAX_STEPS = 250
GENERATED = "generated"
_BANNER = "-= Welcome to TextWorld, ALFRED! =-"
_GOAL_PREFIX = "Your task is to:"


def _normalise(command: str) -> str:
    return " ".join(command.lower().split())


def clean_text(feedback: str) -> str:
    """The engine's text without ALFWorld's welcome banner."""
    return feedback.replace(_BANNER, "").strip()


def goal_of(intro: str) -> str:
    """The "Your task is to: ..." line of a game's introduction."""
    for line in intro.splitlines():
        if line.strip().startswith(_GOAL_PREFIX):
            return line.strip()
    return ""


def check_layout(root: str, source: str) -> None:
    """Raise :class:`EnvironmentUnavailable` naming what ``root`` lacks of ALFWorld's data layout."""
    needed = [f"{JSON_DIR}/{folder}" for folder in OFFICIAL_SPLITS.values()] + list(LOGIC_FILES)
    missing = [path for path in needed if not os.path.exists(os.path.join(root, path))]
    if not os.path.isdir(root):
        missing = [root]
    if missing:
        raise EnvironmentUnavailable(
            f"{source} = {root} is not an ALFWorld data folder: missing {', '.join(missing)}. "
            f"Point it at the folder `alfworld-download` fills (it holds {JSON_DIR}/{{train,valid_seen,"
            f"valid_unseen}} and logic/alfred.pddl, logic/alfred.twl2), or unset it (or pass "
            f"data={GENERATED!r}) to play generated ALFWorld games."
        )


def write_official_layout(root: str, games: dict[str, list[alfworld_games.GeneratedGame]]) -> str:
    """An ALFWorld data folder at ``root`` in the layout ``alfworld-download`` writes, holding
    ``games`` (split → generated games) and the ALFRED domain and grammar of the installed
    ``alfworld`` package as ``logic/``; returns ``root``."""
    for split, split_games in games.items():
        for game in split_games:
            alfworld_games.write_game(game, os.path.join(root, JSON_DIR, OFFICIAL_SPLITS[split], game.official_folder))
    info = alfworld_games.alfworld_modules()[0]
    os.makedirs(os.path.join(root, "logic"), exist_ok=True)
    for source, target in zip((info.ALFRED_PDDL_PATH, info.ALFRED_TWL2_PATH), LOGIC_FILES):
        shutil.copyfile(source, os.path.join(root, target))
    return root


@contextmanager
def _keep_argv():
    """fast-downward's PDDL translator overwrites ``sys.argv``; put it back."""
    argv = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = argv


class AlfWorldEnv(TextEnv):
    name = "alfworld"
    reward_range = return_range = (0.0, 1.0)  # 1 on the winning step, and the episode ends there

    def __init__(self, data: str | None = None, expert: str = "planner", games_dir: str | None = None) -> None:
        """``data``: an ALFWorld data folder; None (or "") reads ``$ALFWORLD_DATA`` and, when that
        is unset, plays generated games (as does ``"generated"``). ``expert``: who gives the gold
        actions, ``"planner"`` (fast-downward's plan, optimal) or ``"handcoded"`` (ALFWorld's
        hand-coded expert, played out from the start). ``games_dir``: where generated games
        are cached (default: the local cache)."""
        if expert not in EXPERTS:
            raise ValueError(f"unknown ALFWorld expert {expert!r}; expected one of {EXPERTS}")
        source = "data"
        data = data or None  # "" (an unset variable substituted into a cell's options) reads as unset
        if data is None and os.environ.get("ALFWORLD_DATA"):  # read before alfworld's import sets it
            data, source = os.environ["ALFWORLD_DATA"], "$ALFWORLD_DATA"
        self._official = data not in (None, GENERATED)
        if self._official:
            data = os.path.abspath(os.path.expanduser(data))
            check_layout(data, source)
        self._data = data
        self._games_dir = games_dir or local_cache_dir("games", "alfworld")
        self._expert = expert

        self._textworld = import_alfworld("textworld")
        self._pddl = import_alfworld("textworld.envs.pddl.pddl")
        if self._pddl.fast_downward_missing:
            raise EnvironmentUnavailable(
                "ALFWorld's games need TextWorld's PDDL support (fast-downward), which is missing: "
                'run `pip install -e ".[alfworld]"` (or `make install`)'
            )
        self._wrappers = import_alfworld("alfworld.agents.environment.alfred_tw_env")
        self._index: dict[tuple[str, str], list[str]] = {}
        self._engine = None  # plays the episodes
        self._expert_engine = None  # plays the expert, on its own copy of the game
        self._game_path: str | None = None
        self._expert_game: str | None = None
        self._gold: dict[str, list[str]] = {}
        self._state = None
        self._goal = ""
        self._won = False

    @classmethod
    def write_offline_data(cls, folder: str, games_per_task: int = 2) -> str:
        """Generated games of every task type, ``games_per_task`` per split, in the official layout."""
        games = {split: [alfworld_games.generate_game(task, seed) for task in TASK_TYPES
                         for seed in SEED_RANGES[split][:games_per_task]] for split in OFFICIAL_SPLITS}
        return write_official_layout(folder, games)

    # -- games ------------------------------------------------------------------------------

    @property
    def official(self) -> bool:
        """Whether episodes are official ALFWorld games (else generated ones)."""
        return self._official

    def tasks(self) -> list[str]:
        return list(TASK_TYPES)

    def _check_task(self, task: str) -> None:
        if task not in TASK_TYPES:
            raise ValueError(f"unknown ALFWorld task {task!r}; known: {', '.join(TASK_TYPES)}")

    def _official_games(self, task: str, split: str) -> list[str]:
        """Game files of ``task`` in ``split``: the solvable trials, sorted by path."""
        key = (task, split)
        if key not in self._index:
            split_dir = os.path.join(self._data, JSON_DIR, OFFICIAL_SPLITS[split])
            games = []
            for task_dir in sorted(os.listdir(split_dir)):
                # ALFWorld leaves out movable-receptacle and sliced-object tasks.
                if task_dir.split("-")[0] != task or "movable" in task_dir or "Sliced" in task_dir:
                    continue
                task_path = os.path.join(split_dir, task_dir)
                if not os.path.isdir(task_path):
                    continue
                for trial in sorted(os.listdir(task_path)):
                    folder = os.path.join(task_path, trial)
                    game = os.path.join(folder, "game.tw-pddl")
                    if not (os.path.isfile(game) and os.path.isfile(os.path.join(folder, "traj_data.json"))):
                        continue
                    with open(game) as f:
                        if json.load(f).get("solvable"):
                            games.append(game)
            self._index[key] = games
        return self._index[key]

    def variations(self, task: str, split: str) -> list[int]:
        check_split(split)
        self._check_task(task)
        if self._official:
            offset = OFFICIAL_OFFSETS[split]
            return [offset + i for i in range(len(self._official_games(task, split)))]
        return list(SEED_RANGES[split])

    def game_file(self, task: str, variation: int) -> str:
        """Path of the ``game.tw-pddl`` of ``(task, variation)`` (generated on first use)."""
        self._check_task(task)
        if self._official:
            split = next((s for s in SPLITS if 0 <= variation - OFFICIAL_OFFSETS[s] < 100_000), None)
            games = self._official_games(task, split) if split else []
            index = variation - OFFICIAL_OFFSETS[split] if split else -1
            if not 0 <= index < len(games):
                raise ValueError(f"ALFWorld {task} has no official game {variation} in {self._data}")
            return games[index]
        if not any(variation in r for r in SEED_RANGES.values()):
            raise ValueError(f"ALFWorld variation {variation} is outside every split's seed range {SEED_RANGES}")
        return alfworld_games.game_file(task, variation, self._games_dir)

    # -- engines ----------------------------------------------------------------------------

    def _make_engine(self, with_expert: bool):
        """ALFWorld's stack: TextWorld's PDDL environment, names demangled (not shuffled), the
        game file in the infos, and for the expert's engine ALFWorld's expert."""
        infos = self._textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        w = self._wrappers
        env = w.AlfredInfos(w.AlfredDemangler(self._pddl.PddlEnv(infos), shuffle=False))
        if with_expert:
            # By keyword: the first positional parameter of AlfredExpert is the wrapped env.
            env = w.AlfredExpert(env, expert_type=self._expert)
        return env

    def reset(self, task: str, variation: int, seed: int = 0) -> Observation:
        path = self.game_file(task, variation)
        with _keep_argv():
            if self._engine is None:
                self._engine = self._make_engine(with_expert=False)
            if path != self._game_path:  # replays reset the loaded game
                self._game_path = None
                self._engine.load(path)
                self._game_path = path
            self._state = self._engine.reset()
        self._won = bool(self._state["won"])
        self._goal = goal_of(self._state.feedback)
        return self._observation(self._state)

    def _observation(self, state) -> Observation:
        return Observation(clean_text(state.feedback), self._goal, state["admissible_commands"])

    def step(self, action: str) -> StepResult:
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        command = _normalise(action)
        valid = command in set(self._state["admissible_commands"])
        with _keep_argv():
            state, _, _ = self._engine.step(command)
        self._state = state
        won = bool(state["won"])
        reward = 1.0 if won and not self._won else 0.0
        self._won = self._won or won
        return StepResult(
            observation=self._observation(state),
            reward=reward,
            done=won,
            score=1.0 if self._won else 0.0,
            success=won,
            action_valid=valid,
        )

    # -- expert -----------------------------------------------------------------------------

    def gold_actions(self) -> list[str]:
        if self._game_path is None or self._state is None:
            raise RuntimeError("call reset() before gold_actions()")
        path = self._game_path
        if path not in self._gold:
            self._gold[path] = self._expert_plan(path)
        return list(self._gold[path])

    def _expert_plan(self, path: str) -> list[str]:
        with _keep_argv():
            if self._expert_engine is None:
                self._expert_engine = self._make_engine(with_expert=True)
            if path != self._expert_game:
                self._expert_game = None
                self._expert_engine.load(path)
                self._expert_game = path
            state = self._expert_engine.reset()
            if self._expert == "planner":
                plan = list(state["extra.expert_plan"])
                if not plan and not state["won"]:
                    raise RuntimeError(f"the planner found no plan for the ALFWorld game {path}")
                return plan
            return self._play_handcoded(state, path)

    def _play_handcoded(self, state, path: str) -> list[str]:
        """Follow ALFWorld's hand-coded expert from the start until it wins. It breaks some ties
        with the global ``random``: that is seeded from the game file's content for the playout
        (so the same game gives the same actions wherever it is stored), and restored afterwards."""
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        saved = random.getstate()
        random.seed(f"adwm-alfworld-handcoded:{digest}")
        actions: list[str] = []
        try:
            while not state["won"]:
                if len(actions) >= HANDCODED_MAX_STEPS:
                    raise RuntimeError(
                        f"ALFWorld's hand-coded expert did not win {path} in {HANDCODED_MAX_STEPS} steps; "
                        "try expert='planner'"
                    )
                action = state["extra.expert_plan"][0]
                actions.append(action)
                state, _, _ = self._expert_engine.step(action)
        except RuntimeError:
            raise
        except Exception as err:  # the expert gives up with a bare Exception("Timeout") or HandCodedAgentFailed
            raise RuntimeError(f"ALFWorld's hand-coded expert failed on {path}: {err!r}; try expert='planner'") from err
        finally:
            random.setstate(saved)
        return actions

    # -- cleanup ----------------------------------------------------------------------------

    def close(self) -> None:
        # The engines are only dropped: unloading fast-downward's library here (dlclose) left
        # objects that still point into it, and the interpreter crashed (SIGSEGV) at exit.
        self._engine = self._expert_engine = None
        self._game_path = self._expert_game = None
        self._state = None
