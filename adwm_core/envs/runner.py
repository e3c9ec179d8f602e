"""Parallel episode runner: many episodes of one environment across worker processes.

Worker processes host the engines (``envs_per_worker`` each); the agent runs
in the calling process and decides for every waiting episode in one batch, so
an LLM policy sees batches as wide as the number of running episodes. Each
episode is reproducible from its spec: engines are deterministic given
``(task, variation)`` and the agent's generator is seeded from ``seed``.

When an engine fails (its JVM killed, a py4j error) or a worker process dies
or hangs, the worker is restarted, the engine reset and the episode's actions
so far replayed; the replayed observation must match the logged one. The
episode then goes on where it stopped, without asking the agent again. After
``max_retries`` failures of one episode the run stops with the engine's error.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Pipe

import numpy as np

from .base import EnvironmentUnavailable, close_quietly
from .episodes import Agent, Decision, Episode, EpisodeSpec, EpisodeState, Turn
from .registry import make_env, register, registered


class EpisodeFailed(RuntimeError):
    """An episode kept failing after its retries."""


class NotReproducible(RuntimeError):
    """Replaying an episode's actions on a fresh engine gave a different observation."""


# --------------------------------------------------------------------------- worker side


def _observation(obs, list_admissible: bool) -> dict:
    return {
        "text": obs.text,
        "task_description": obs.task_description,
        "admissible": tuple(obs.admissible) if list_admissible else None,
    }


def _reset(env, task, variation, seed, want_gold, list_admissible):
    obs = env.reset(task, variation, seed)
    return {"obs": _observation(obs, list_admissible), "gold": env.gold_actions() if want_gold else None}


def _step(env, action, list_admissible):
    r = env.step(action)
    return {
        "obs": _observation(r.observation, list_admissible),
        "reward": r.reward,
        "done": r.done,
        "score": r.score,
        "success": r.success,
        "action_valid": r.action_valid,
    }


def _replay(env, task, variation, seed, actions, want_gold, list_admissible):
    out = _reset(env, task, variation, seed, want_gold, list_admissible and not actions)
    for i, action in enumerate(actions):
        out["obs"] = _observation(env.step(action).observation, list_admissible and i == len(actions) - 1)
    return out


def _open(env):
    return None  # the engine was built on receipt of the command


_OPS = {"open": _open, "step": _step, "replay": _replay}
_FATAL = (ValueError, KeyError, TypeError, EnvironmentUnavailable)


def _serve(conn, env_name: str, env_kwargs: dict, n_slots: int) -> None:
    """Build engines of ``env_name`` in ``n_slots`` slots on demand and answer the runner's
    batches on ``conn`` until it closes or sends None."""
    envs: list = [None] * n_slots
    while True:
        try:
            batch = conn.recv()
        except EOFError:
            break
        if batch is None:
            break
        replies = []
        for slot, op, args in batch:
            try:
                if envs[slot] is None:
                    envs[slot] = make_env(env_name, **env_kwargs)
                replies.append(("ok", _OPS[op](envs[slot], *args)))
            except _FATAL:
                replies.append(("fatal", traceback.format_exc()))
            except Exception:  # an engine failure: drop the engine, the runner replays
                replies.append(("error", traceback.format_exc()))
                env, envs[slot] = envs[slot], None
                close_quietly(env)
        conn.send(replies)
    for env in envs:
        close_quietly(env)


def _worker_main(descriptor: int) -> None:
    """A worker process's entry: its end of the runner's connection on ``descriptor``, then the
    environment (name, registered target, options, slots) as the first message."""
    conn = Connection(descriptor)
    env_name, target, env_kwargs, n_slots = conn.recv()
    register(env_name, target)  # registered in the caller, perhaps at run time
    _serve(conn, env_name, env_kwargs, n_slots)


# A fresh interpreter with the caller's sys.path (argv[2]) runs _worker_main: nothing of the caller's
# __main__ is imported again (multiprocessing's spawn would: `python -m flows.ope_cell` paid Prefect's
# imports, about 5 s of CPU, in every worker), and no JVM socket or torch thread is inherited (a fork's).
# The caller's interpreter options (-X, -W, -O, …) are passed on, as spawn passes them, by the same
# standard-library helper multiprocessing uses (subprocess._args_from_interpreter_flags).
_BOOT = ("import json, sys; sys.path[:] = json.loads(sys.argv[2]); "
         "from adwm_core.envs.runner import _worker_main; _worker_main(int(sys.argv[1]))")


def _worker_target(env_name: str):
    """What ``env_name`` is registered as, checked to reach a worker process, which imports no
    ``__main__`` of the caller's: a factory defined in the running script, or one that does not
    pickle, is refused by name."""
    target = registered(env_name)
    try:
        reachable = b"__main__" not in pickle.dumps(target)
    except (pickle.PicklingError, TypeError, AttributeError):
        reachable = False
    if not reachable:
        raise ValueError(f"environment {env_name!r} is registered as {target!r}, which worker processes cannot "
                         "import (defined in the script that runs, or not picklable); register it from an "
                         "importable module, or as 'module:Class'")
    return target


class _Worker:
    def __init__(self, settings: tuple) -> None:
        """``settings``: (environment name, registered target, options, slots), _worker_main's first message."""
        self._settings = settings
        self.process: subprocess.Popen | None = None
        self.conn = None
        self.start()

    def start(self) -> None:
        parent, child = Pipe()
        paths = json.dumps([os.fsdecode(p) for p in sys.path])
        flags = subprocess._args_from_interpreter_flags()
        self.process = subprocess.Popen([sys.executable, *flags, "-c", _BOOT, str(child.fileno()), paths],
                                        pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL)
        child.close()
        parent.send(self._settings)
        self.conn = parent

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self._join(10)
        self.conn.close()

    def close(self) -> None:
        try:
            self.conn.send(None)
            self._join(30)
        except (BrokenPipeError, OSError):
            pass
        self.kill()

    def _join(self, timeout: float) -> None:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


# --------------------------------------------------------------------------- runner side


@dataclass
class _Live:
    spec: EpisodeSpec
    rng: np.random.Generator
    turns: list[Turn] = field(default_factory=list)
    task_description: str = ""
    observation: dict | None = None
    gold: list[str] | None = None
    decision: Decision | None = None
    replay: bool = False
    retries: int = 0


class EpisodeRunner:
    """Runs episodes of ``env_name`` on ``n_workers`` processes × ``envs_per_worker`` engines.

    ``list_admissible`` records the admissible actions of every step (the
    trajectory contract stores them); otherwise they are listed only for
    agents that need them. ``max_steps`` cuts an episode (a cut is not ``done``).
    """

    def __init__(
        self,
        env_name: str,
        env_kwargs: Mapping | None = None,
        *,
        n_workers: int | None = None,
        envs_per_worker: int = 1,
        max_steps: int = 30,
        list_admissible: bool = True,
        max_retries: int = 3,
        step_timeout: float = 300.0,
    ) -> None:
        bad = {"n_workers": n_workers if n_workers is not None and n_workers < 1 else None,
               "envs_per_worker": envs_per_worker if envs_per_worker < 1 else None,
               "max_steps": max_steps if max_steps < 1 else None}
        bad = {name: value for name, value in bad.items() if value is not None}
        if bad:
            raise ValueError(f"episode runner: {bad} must be at least 1 (n_workers=None uses every CPU)")
        self.env_name = env_name
        self.env_kwargs = dict(env_kwargs or {})
        self.n_workers = n_workers if n_workers is not None else os.cpu_count() or 1
        self.envs_per_worker = envs_per_worker
        self.max_steps = max_steps
        self.list_admissible = list_admissible
        self.max_retries = max_retries
        self.step_timeout = step_timeout
        self._workers: list[_Worker] = []

    def __enter__(self) -> EpisodeRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
        self._workers = []

    def start(self) -> EpisodeRunner:
        """Start the workers and build every engine now (JVM start-up included), not on first use."""
        if not self._workers:
            settings = (self.env_name, _worker_target(self.env_name), self.env_kwargs, self.envs_per_worker)
            self._workers = [_Worker(settings) for _ in range(self.n_workers)]
            commands = {w: [(s, "open", ()) for s in range(self.envs_per_worker)] for w in range(self.n_workers)}
            for replies in self._exchange(commands).values():
                for status, payload in replies:
                    if status != "ok":
                        raise RuntimeError(f"could not start {self.env_name}:\n{payload}")
        return self

    def run(
        self,
        specs: Sequence[EpisodeSpec],
        agent: Agent,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[Episode]:
        """Run every spec to its end and return the episodes in spec order."""
        ids = [s.episode for s in specs]
        if len(set(ids)) != len(ids):
            raise ValueError("episode ids must be unique within a run")
        self.start()
        want_admissible = self.list_admissible or agent.needs_admissible
        pending = deque(specs)
        free = [(w, s) for s in range(self.envs_per_worker) for w in range(self.n_workers)]
        active: dict[tuple[int, int], _Live] = {}
        finished: dict[int, Episode] = {}

        while pending or active:
            while free and pending:
                spec = pending.popleft()
                active[free.pop(0)] = _Live(spec, np.random.default_rng(spec.seed), replay=True)
            commands: dict[int, list] = {}
            for (w, s), live in active.items():
                spec = live.spec
                if live.replay:
                    actions = [turn.action for turn in live.turns]
                    args = (spec.task, spec.variation, spec.seed, actions, agent.needs_gold, want_admissible)
                    commands.setdefault(w, []).append((s, "replay", args))
                elif live.decision is not None:
                    commands.setdefault(w, []).append((s, "step", (live.decision.action, want_admissible)))
            for w, replies in self._exchange(commands).items():
                for (s, op, _), (status, payload) in zip(commands[w], replies):
                    live = active[(w, s)]
                    if status == "fatal":
                        raise RuntimeError(f"episode {live.spec} failed on bad input:\n{payload}")
                    if status == "error":
                        self._retry(live, payload)
                    elif op == "replay":
                        self._resumed(live, payload)
                    else:
                        self._stepped(live, payload)
                        if live.turns[-1].done or len(live.turns) >= self.max_steps:
                            finished[live.spec.episode] = Episode(
                                live.spec, live.task_description, live.turns, live.retries
                            )
                            del active[(w, s)]
                            free.append((w, s))
                            if progress:
                                progress(len(finished), len(specs))
            waiting = [(key, live) for key, live in active.items() if live.decision is None and not live.replay]
            if waiting:
                states = [self._state(live) for _, live in waiting]
                decisions = list(agent.act(states))
                if len(decisions) != len(states):
                    raise RuntimeError(f"agent returned {len(decisions)} decisions for {len(states)} episodes")
                for (_, live), decision in zip(waiting, decisions):
                    live.decision = decision
        return [finished[i] for i in ids]

    def _exchange(self, commands: dict[int, list]) -> dict[int, list]:
        """Send each worker its batch, then collect every reply; a dead or hung
        worker is restarted and all its commands are answered as errors."""
        sent = {}
        for w, batch in commands.items():
            try:
                self._workers[w].conn.send(batch)
                sent[w] = True
            except (BrokenPipeError, OSError):
                sent[w] = False
        replies = {}
        for w, batch in commands.items():
            worker = self._workers[w]
            try:
                if sent[w] and worker.conn.poll(self.step_timeout):
                    replies[w] = worker.conn.recv()
                    continue
                reason = f"worker {w} did not answer within {self.step_timeout:.0f} s"
            except (EOFError, OSError) as err:
                reason = f"worker {w} (pid {worker.process.pid}) died: {err!r}"
            worker.kill()
            worker.start()
            replies[w] = [("error", reason)] * len(batch)  # every active slot had a command
        return replies

    def _retry(self, live: _Live, error: str) -> None:
        live.retries += 1
        if live.retries > self.max_retries:
            raise EpisodeFailed(f"episode {live.spec} failed {live.retries} times; last error:\n{error}")
        live.replay = True

    def _resumed(self, live: _Live, payload: dict) -> None:
        expected = live.observation["text"] if live.observation is not None else None
        if expected is not None and payload["obs"]["text"] != expected:
            raise NotReproducible(
                f"episode {live.spec}: replaying {len(live.turns)} action(s) gave\n"
                f"{payload['obs']['text']!r}\ninstead of\n{expected!r}"
            )
        live.replay = False
        live.observation = payload["obs"]
        live.task_description = payload["obs"]["task_description"]
        live.gold = payload["gold"]

    def _stepped(self, live: _Live, payload: dict) -> None:
        before, decision = live.observation, live.decision
        live.turns.append(
            Turn(
                t=len(live.turns),
                observation=before["text"],
                next_observation=payload["obs"]["text"],
                admissible=before["admissible"],
                response=decision.response if decision.response is not None else decision.action,
                action=decision.action,
                action_valid=payload["action_valid"],
                reward=payload["reward"],
                done=payload["done"],
                score=payload["score"],
                success=payload["success"],
            )
        )
        live.observation = payload["obs"]
        live.decision = None

    @staticmethod
    def _state(live: _Live) -> EpisodeState:
        obs = live.observation
        return EpisodeState(live.spec, live.task_description, obs["text"], obs["admissible"], live.turns, live.gold, live.rng)
