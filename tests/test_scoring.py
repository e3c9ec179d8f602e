import math

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from adwm_core.policies.scoring import action_span, context_limit, eps_mix_logprob, fit_context, score_actions

CORPUS = [f"Observation: room {i}.\nAction: take coin\nAction: move east\nAction: open door\n" for i in range(200)]


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE trained here, which merges ' take' (space + word) into one token."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>"]))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>")


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2)
    return GPT2LMHeadModel(config).eval()


def test_span_follows_a_bpe_merge_across_the_prompt_action_boundary(tokenizer):
    prompt, action = "Observation: room 3.\nAction: ", "take coin"
    head = tokenizer(prompt)["input_ids"]
    full, start = action_span(tokenizer, prompt, action)
    assert tokenizer.decode(head[-1:]) == " "  # the prompt ends in a lone space token...
    assert tokenizer.decode(full[start:]) == " take coin"  # ...which the action's first token absorbs
    assert start == len(head) - 1
    # Counting the action's own tokens from the end would score other tokens:
    naive = tokenizer(action)["input_ids"]
    assert full[len(full) - len(naive) :] != naive


def test_batched_scores_equal_the_token_by_token_chain(tokenizer, model):
    prompts = ["Observation: room 3.\nAction: ", "Observation: room 12.\nAction:", "Action: open"]
    actions = ["take coin", " move east", " door"]
    logprobs, n_tokens = score_actions(model, tokenizer, prompts, actions, batch_size=2)
    for prompt, action, got, n in zip(prompts, actions, logprobs, n_tokens):
        full, start = action_span(tokenizer, prompt, action)
        expected = 0.0
        for j in range(start, len(full)):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([full[:j]])).logits[0, -1]
            expected += torch.log_softmax(logits.double(), -1)[full[j]].item()
        assert got == pytest.approx(expected, abs=1e-5) and n == len(full) - start
    single, _ = score_actions(model, tokenizer, prompts, actions, batch_size=1)
    np.testing.assert_allclose(single, logprobs, atol=1e-5)


def test_an_action_past_the_context_is_scored_after_the_latest_prompt_tokens(tokenizer, model):
    """The model has 64 positions: the prompt loses its oldest tokens, the action span stays whole."""
    prompt, action = "Observation: room 3.\n" * 12 + "Action: ", "take coin"
    full, start = action_span(tokenizer, prompt, action)
    assert len(full) > 64
    ids, kept_start = fit_context(full, start, 64)
    assert len(ids) == 64 and ids[kept_start:] == full[start:] and ids[:kept_start] == full[len(full) - 64 : start]
    (got,), (n,) = score_actions(model, tokenizer, [prompt], [action])
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    expected = sum(torch.log_softmax(logits[j - 1], -1)[ids[j]].item() for j in range(kept_start, len(ids)))
    assert got == pytest.approx(expected, abs=1e-5) and n == len(full) - start
    with pytest.raises(ValueError, match="does not fit a 2-token context"):
        fit_context(full, start, 2)


def test_context_limit_reads_either_config_name_and_honours_the_cap():
    from transformers import LlamaConfig, PretrainedConfig

    assert context_limit(GPT2Config(n_positions=64)) == 64  # GPT-2 calls it n_positions
    assert context_limit(LlamaConfig(max_position_embeddings=8192), 2048) == 2048
    assert context_limit(LlamaConfig(max_position_embeddings=512), 2048) == 512
    assert context_limit(PretrainedConfig()) == 2048  # a config naming no length


def test_eps_mixed_probabilities_sum_to_one():
    rng = np.random.default_rng(0)
    n_adm, n_out = 5, 3
    p = rng.dirichlet(np.ones(n_adm + n_out))  # π also puts mass on inadmissible text
    admissible = np.arange(n_adm + n_out) < n_adm
    for eps in (0.0, 0.25, 0.5, 0.75, 1.0):
        mixed = eps_mix_logprob(np.log(p), eps, admissible, n_adm)
        assert np.exp(mixed).sum() == pytest.approx(1.0)
        assert np.exp(mixed[admissible]).sum() == pytest.approx((1 - eps) * p[admissible].sum() + eps)


def test_eps_mixing_is_stable_at_extreme_log_probabilities():
    assert eps_mix_logprob(-800.0, 0.0, True, 4) == -800.0  # no underflow to -inf
    assert eps_mix_logprob(-800.0, 0.25, True, 4) == pytest.approx(math.log(0.25 / 4))
    assert eps_mix_logprob(-800.0, 1.0, False, 4) == -np.inf
    assert eps_mix_logprob(-np.inf, 0.5, True, 2) == pytest.approx(math.log(0.25))
    with pytest.raises(ValueError, match="epsilon"):
        eps_mix_logprob(0.0, 1.5, True, 2)
