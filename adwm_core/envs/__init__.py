"""Text environments: one protocol (:class:`TextEnv`), adapters on real engines, a registry."""

from .base import SPLITS, EnvironmentUnavailable, Observation, StaleObservation, StepResult, TextEnv
from .registry import check_env_task, env_names, make_env, register, uses_react_actions

__all__ = [
    "SPLITS",
    "EnvironmentUnavailable",
    "Observation",
    "StaleObservation",
    "StepResult",
    "TextEnv",
    "check_env_task",
    "env_names",
    "make_env",
    "register",
    "uses_react_actions",
]
