"""A seed cell on a machine without its GPU, weights or data fails at its first stage (policy
preparation), saying what is missing and how to provide it."""

import os
import re

import pytest

from adwm_core.cell import CellConfig
from adwm_core.runnable import check_runnable

DEPLOYMENTS = os.path.join(os.path.dirname(__file__), "..", "deployments")
SCIENCEWORLD_VARIABLES = ("SCIENCEWORLD_SFT_MODEL", "SCIENCEWORLD_ETO_MODEL")


def seed_cell(environ: dict, **update) -> CellConfig:
    config = CellConfig.load(os.path.join(DEPLOYMENTS, "scienceworld-eto.yaml"), environ=environ)
    return config.replace(**update)


def test_without_a_gpu_the_cell_says_where_to_run():
    config = seed_cell({v: "/models/x" for v in SCIENCEWORLD_VARIABLES})
    with pytest.raises(RuntimeError, match="needs a GPU .* work pool 'gpu'"):
        check_runnable(config)


def test_missing_weights_name_the_field_and_the_fix(tmp_path):
    weights = tmp_path / "sft"
    weights.mkdir()
    (weights / "config.json").write_text("{}")
    config = seed_cell({"SCIENCEWORLD_SFT_MODEL": str(weights), "SCIENCEWORLD_ETO_MODEL": str(tmp_path / "eto")},
                       needs_gpu=False)
    with pytest.raises(FileNotFoundError, match=r"evaluation\.policies\[0\]\.model = .*/eto holds no Hugging Face"):
        check_runnable(config, environment=False)


def test_a_hub_name_absent_from_the_cache_offline_says_how_to_download_it(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    config = seed_cell({v: "some-lab/sw-llama-sft" for v in SCIENCEWORLD_VARIABLES}, needs_gpu=False)
    with pytest.raises(FileNotFoundError, match=r"behaviour\.pool\[0\]\.model = 'some-lab/sw-llama-sft' is neither "
                                                r".*`hf download some-lab/sw-llama-sft`"):
        check_runnable(config, environment=False)


@pytest.mark.parametrize("cell, variable, missing", [
    ("hotpotqa-dpo", "HOTPOTQA_DATA", "hotpot_dev_distractor_v1.json"),
    ("webshop-iter1", "WEBSHOP_DATA", "items_shuffle"),
    ("alfworld-iter1", "ALFWORLD_DATA", "json_2.1.1"),
])
def test_a_data_folder_with_the_wrong_layout_names_the_missing_file(cell, variable, missing, tmp_path):
    from adwm_core.envs import EnvironmentUnavailable

    weights = tmp_path / "model"
    weights.mkdir()
    (weights / "config.json").write_text("{}")
    path = os.path.join(DEPLOYMENTS, f"{cell}.yaml")
    with open(path) as f:
        names = set(re.findall(r"\$\{(\w+)\}", f.read()))
    environ = {name: str(weights) for name in names} | {variable: str(tmp_path / "data")}
    (tmp_path / "data").mkdir()
    config = CellConfig.load(path, environ=environ).replace(needs_gpu=False)
    with pytest.raises(EnvironmentUnavailable, match=missing):
        check_runnable(config)


def test_the_vllm_engines_of_a_cell_split_the_gpu_between_them():
    """On a GPU worker every engine of a cell lives in one process; at vLLM's default share (0.9)
    the second engine of webshop-iter1 (three pool LLMs and π_e) would find no memory left."""
    from adwm_core.policies.vllm_backend import GPU_MEMORY_SHARE, share_gpu_memory

    path = os.path.join(DEPLOYMENTS, "webshop-iter1.yaml")
    with open(path) as f:
        names = set(re.findall(r"\$\{(\w+)\}", f.read()))
    config = CellConfig.load(path, environ={name: f"/models/{name.lower()}" for name in names})
    shared = config.with_policies(share_gpu_memory(config.policies()))
    shares = [spec.options["gpu_memory_utilization"] for _, spec in shared.policies()]
    assert shares == [round(GPU_MEMORY_SHARE / 4, 3)] * 4 and sum(shares) <= GPU_MEMORY_SHARE
    # a share the cell sets is kept and not counted; one model named twice is one engine
    pinned = config.evaluation.policies[0].replace(options={"gpu_memory_utilization": 0.3})
    twice = config.with_policies(lambda spec: spec.replace(model="/models/same")).with_evaluated(pinned)
    shared = twice.with_policies(share_gpu_memory(twice.policies()))
    assert [spec.options["gpu_memory_utilization"] for _, spec in shared.policies()] == [0.6, 0.6, 0.6, 0.3]
    greedy = twice.with_evaluated(pinned.replace(options={"gpu_memory_utilization": 0.9}))
    with pytest.raises(ValueError, match="leaving nothing for the 1 that set none"):
        share_gpu_memory(greedy.policies())
    # the share says where an engine runs, not what it computes: stage keys ignore it, so
    # evaluate-policy (another engine count) finds the cell's behaviour data and per-π_e artifacts
    from adwm_core import pipeline

    shared = config.with_policies(share_gpu_memory(config.policies()))
    assert pipeline.locate(shared, "behaviour") == pipeline.locate(config, "behaviour")
    assert pipeline.locate(shared, "logprobs", shared.evaluation.policies[0]) == \
        pipeline.locate(config, "logprobs", config.evaluation.policies[0])
