"""Environments by name: ``make_env("scienceworld")``."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

from .base import TextEnv

# name -> "module:Class", imported on demand so an engine is loaded only when used.
_REGISTRY: dict[str, str] = {
    "scienceworld": "adwm_core.envs.scienceworld_env:ScienceWorldEnv",
    "textworld": "adwm_core.envs.textworld_env:TextWorldEnv",
    "textworld-express": "adwm_core.envs.twx_env:TextWorldExpressEnv",
    "alfworld": "adwm_core.envs.alfworld_env:AlfWorldEnv",
    "webshop": "adwm_core.envs.webshop_env:WebShopEnv",
    "hotpotqa": "adwm_core.envs.hotpotqa_env:HotpotQAEnv",
    "chain": "adwm_core.envs.chain:ChainEnv",  # synthetic, with exactly known values
}

# The environment local cells and the demo use by default: (name, task, options).
# Simon Says: each observation names the command to type, a wrong command ends the game,
# so a policy learnt from the expert beats chance by far. (On coin the expert walks
# straight to a coin it cannot see; imitating it does no better than random moves.)
DEFAULT_LOCAL_ENV = ("textworld-express", "simonsays", {})


def register(name: str, target: str | Callable[..., TextEnv]) -> None:
    """Add an environment: ``target`` is a factory or a ``"module:Class"`` path."""
    _REGISTRY[name] = target


def env_names() -> list[str]:
    return sorted(_REGISTRY)


def registered(name: str) -> str | Callable[..., TextEnv]:
    """What ``name`` was registered as: a ``"module:Class"`` path or a factory."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown environment {name!r}; known environments: {', '.join(env_names())}")
    return _REGISTRY[name]


def env_factory(name: str) -> Callable[..., TextEnv]:
    target = registered(name)
    if callable(target):
        return target
    module, _, attr = target.partition(":")
    return getattr(import_module(module), attr)


def env_module(name: str) -> str | None:
    """The module of the environment registered as ``name`` (None for a registered factory)."""
    target = registered(name)
    return None if callable(target) else target.partition(":")[0]


def uses_react_actions(name: str) -> bool:
    """Whether the environment registered as ``name`` declares ReAct actions (a factory
    that is not a :class:`TextEnv` class declares nothing)."""
    return bool(getattr(env_factory(name), "react_actions", False))


def check_env_task(name: str, task: str = "*") -> None:
    """Refuse an environment name the registry lacks, and task types (comma-separated; ``*``:
    all) the environment does not offer — before logs of it are read. Where the environment's
    engine cannot start here, the task names are left unchecked (a cell that runs it checks them)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown environment {name!r}: known environments are {', '.join(env_names())} "
                         "(`adwm envs`); pass --env with one of them")
    if task == "*":
        return
    from .base import EnvironmentUnavailable

    try:
        with make_env(name) as env:
            known = env.tasks()
    except EnvironmentUnavailable:
        return
    unknown = [t.strip() for t in task.split(",") if t.strip() not in known]
    if unknown:
        raise ValueError(f"{name} has no task type(s) {unknown}: its task types are {', '.join(known)}; pass --task "
                         "with those (comma-separated) or * for all")


def make_env(name: str, **kwargs) -> TextEnv:
    """Build the environment registered as ``name`` with its keyword options."""
    return env_factory(name)(**kwargs)
