"""Key/value reuse in the transformers backend (adwm_core/policies/prefix_cache.py): a step reads only
the tokens its prompt does not share with a prompt read before, and decides and scores exactly as
reading the whole prompt does (the backend before reuse: stock SDPA, every prompt whole)."""

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          PreTrainedTokenizerFast)

from adwm_core.policies.base import LLMPolicy
from adwm_core.policies.hf_backend import TransformersLM
from adwm_core.policies.local_models import smollm2_dir
from adwm_core.policies.prefix_cache import CachedSequence, PrefixStore, interleaved_batches
from adwm_core.policies.prompts import History

ROOMS = ("kitchen", "hall", "cellar", "garden", "attic", "study")
ACTIONS = ("go north", "go south", "open door", "take coin", "look")


def episodes(n_episodes: int, n_steps: int) -> list[list[History]]:
    """Histories of ``n_episodes`` episodes whose step t+1 extends step t by one turn, as a runner plays them."""
    played = []
    for e in range(n_episodes):
        steps, histories = [], []
        for t in range(n_steps):
            observation = f"You are in the {ROOMS[(e + t) % 6]}. A door leads {('north', 'south')[t % 2]}; step {t}."
            admissible = ACTIONS[: 3 + (e + t) % 3]
            histories.append(History(f"Find the coin, game {e}.", tuple(steps), observation, admissible))
            steps.append((observation, admissible[(e * 2 + t) % len(admissible)]))
        played.append(histories)
    return played


def sequence(ids) -> CachedSequence:
    """A stored sequence of one layer, one head and one float32 per token: 8 bytes a token (keys and values)."""
    ids = np.asarray(ids, dtype=np.int64)
    layer = torch.zeros((1, len(ids), 1), dtype=torch.float32)
    return CachedSequence(ids, ((layer, layer),))


def test_the_store_serves_the_longest_stored_prefix_within_its_budget():
    store = PrefixStore(max_bytes=8 * 10)  # room for ten tokens
    store.add(sequence([1, 2, 3, 4]))
    store.add(sequence([1, 2, 9]))
    entry, length = store.match(np.array([1, 2, 3, 7]), limit=10)
    assert length == 3 and entry.ids.tolist() == [1, 2, 3, 4]
    assert store.match(np.array([1, 2, 3, 4]), limit=3)[1] == 3  # capped: the caller reads at least one token
    assert store.match(np.array([5, 6]), limit=10) == (None, 0)
    store.add(sequence([1, 2, 9, 9, 9]))  # extends [1, 2, 9], which goes
    assert sorted(len(e.ids) for e in store._entries.values()) == [4, 5]
    store.match(np.array([1, 2, 3]), limit=10)  # [1, 2, 3, 4] is now the most recently used
    store.add(sequence([8, 8, 8]))  # over budget: the least recently used ([1, 2, 9, 9, 9]) goes
    assert sorted(e.ids.tolist() for e in store._entries.values()) == [[1, 2, 3, 4], [8, 8, 8]]
    assert store.bytes == 8 * 7
    store.add(sequence(range(11)))  # larger than the whole budget: not kept, nothing evicted
    assert len(store) == 2
    nothing = PrefixStore(0)
    nothing.add(sequence([1]))
    assert len(nothing) == 0 and nothing.bytes == 0
    with pytest.raises(ValueError, match="budget is a number of bytes >= 0"):
        PrefixStore(-1)


def test_the_store_chooses_as_a_walk_over_its_entries_from_the_least_recently_used():
    """Which stored sequence serves decides whose float rounding a row reuses, so the matrix
    search must pick exactly what the first longest match of a walk from the oldest entry picks,
    and keep and evict the same entries (a walk over a list is the reference here)."""
    rng = np.random.default_rng(0)
    store, walked = PrefixStore(max_bytes=8 * 60), []  # walked: [ids, entry] from least to most recently used

    def walk_match(ids, limit):
        best, length = None, 0
        for kept in walked:
            n = next((k for k, (a, b) in enumerate(zip(kept[0], ids)) if a != b), min(len(kept[0]), len(ids)))
            if n > length:
                best, length = kept, n
        if best is not None:
            walked.remove(best)
            walked.append(best)
        return (best[1], min(length, limit)) if min(length, limit) > 0 else (None, 0)

    for step in range(600):
        ids = [int(t) for t in rng.integers(0, 3, rng.integers(0, 9))]  # 3 token ids: many shared prefixes, many ties
        if rng.random() < 0.5:
            limit = int(rng.integers(0, 10))
            found, expected = store.match(np.array(ids, dtype=np.int64), limit), walk_match(ids, limit)
            assert found[1] == expected[1] and found[0] is expected[0], step
        else:
            entry = sequence(ids)
            store.add(entry)
            if entry.nbytes <= store.max_bytes:
                walked[:] = [kept for kept in walked if kept[0] != ids[:len(kept[0])]]
                while sum(8 * len(kept[0]) for kept in walked) + entry.nbytes > store.max_bytes:
                    walked.pop(0)
                walked.append([ids, entry])
        assert list(store._entries.values()) == [kept[1] for kept in walked]
        assert store.bytes == sum(8 * len(kept[0]) for kept in walked)


def test_interleaved_batches_put_an_episodes_consecutive_steps_in_consecutive_batches():
    batches = interleaved_batches(10, 4)
    assert sorted(i for batch in batches for i in batch) == list(range(10))
    assert all(len(batch) <= 4 for batch in batches)
    where = {i: k for k, batch in enumerate(batches) for i in batch}
    cuts = {0, 3, 6, 8}  # the runs np.array_split makes: [0..2], [3..5], [6..7], [8..9]
    assert all(where[i + 1] == where[i] + 1 for i in range(9) if i + 1 not in cuts)
    assert interleaved_batches(0, 4) == [] and interleaved_batches(3, 8) == [[0, 1, 2]]


@pytest.fixture(scope="module")
def tiny_tokenizer():
    corpus = [f"Task: Find the coin, game {e}.\nObservation: You are in the {r}. A door leads north; step {t}.\n"
              f"Valid actions: {'; '.join(ACTIONS)}\nAction: {a}\n" for e in range(4) for r in ROOMS for t in range(6)
              for a in ACTIONS]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "<eos>"]))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", eos_token="<eos>")


def tiny_model(kind: str, vocab: int):
    """A random model whose logits spread wide (large weights), so float rounding cannot swap an argmax."""
    torch.manual_seed(0)
    if kind == "llama":  # rotary positions, 4 query heads over 2 key/value heads
        config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                             initializer_range=0.4, eos_token_id=1, pad_token_id=0, bos_token_id=1)
        return LlamaForCausalLM(config)
    if kind == "mistral":  # a sliding window of 32 tokens: states a prefix store cannot serve
        config = MistralConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                               sliding_window=32, initializer_range=0.4, eos_token_id=1, pad_token_id=0, bos_token_id=1)
        return MistralForCausalLM(config)
    config = GPT2Config(vocab_size=vocab, n_positions=1024, n_embd=64, n_layer=2, n_head=4, initializer_range=0.4,
                        eos_token_id=1, pad_token_id=0, bos_token_id=1)
    return GPT2LMHeadModel(config)


def whole_prompt_reference(path: str, batch_size: int) -> TransformersLM:
    """The backend reading every prompt whole through stock SDPA, as before key/value reuse."""
    lm = TransformersLM(path, batch_size=batch_size, prefix_cache_bytes=0)
    lm.model.set_attn_implementation("sdpa")
    return lm


def played_and_scored(lm: TransformersLM, env_name: str, played: list[list[History]], max_new_tokens: int = 24):
    """π's responses step by step over the episodes (one call per step, every episode in it, as the
    runner asks), then log π of each logged action over all steps in one call (the log-prob stage)."""
    policy = LLMPolicy(lm, env_name, max_new_tokens=max_new_tokens)
    responses = [[d.response for d in policy.act([episode[t] for episode in played])] for t in range(len(played[0]))]
    histories = [h for episode in played for h in episode]
    actions = [episode[t + 1].steps[-1][1] if t + 1 < len(episode) else "look"
               for episode in played for t in range(len(episode))]
    return responses, policy.logprob(histories, actions)


@pytest.mark.parametrize("kind", ["llama", "gpt2", "mistral"])
def test_reused_prefixes_decide_and_score_as_whole_prompts_do(kind, tiny_tokenizer, tmp_path):
    """Rotary and absolute positions, grouped key/value heads; a sliding-window model reuses nothing."""
    model = tiny_model(kind, len(tiny_tokenizer))
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    played = episodes(n_episodes=5, n_steps=5)
    reused = TransformersLM(str(tmp_path), batch_size=4)
    responses, (logprobs, n_tokens) = played_and_scored(reused, "textworld", played)
    whole_responses, (whole_logprobs, whole_tokens) = played_and_scored(whole_prompt_reference(str(tmp_path), 4),
                                                                         "textworld", played)
    assert responses == whole_responses
    assert any(r.strip() for step in responses for r in step)  # the model wrote text, not only end tokens
    np.testing.assert_array_equal(n_tokens, whole_tokens)
    np.testing.assert_allclose(logprobs, whole_logprobs, atol=1e-4, rtol=0)
    store = reused.prefix_store
    if kind == "mistral":
        assert store.max_bytes == 0 and store.tokens_read == store.tokens_asked
    else:
        assert store.tokens_read < 0.5 * store.tokens_asked, (store.tokens_read, store.tokens_asked)


def test_smollm2_decides_and_scores_the_same_with_reused_prefixes():
    """The one offline pretrained LLM, its chat template and 9 query heads over 3 key/value heads
    (replies cut to 8 tokens: what is compared is each token, not the reply's length)."""
    played = episodes(n_episodes=2, n_steps=3)
    reused = TransformersLM(smollm2_dir(), batch_size=8)
    responses, (logprobs, _) = played_and_scored(reused, "textworld", played, max_new_tokens=8)
    whole_responses, (whole_logprobs, _) = played_and_scored(whole_prompt_reference(smollm2_dir(), 8), "textworld",
                                                             played, max_new_tokens=8)
    assert responses == whole_responses
    np.testing.assert_allclose(logprobs, whole_logprobs, atol=1e-4, rtol=0)
    assert reused.prefix_store.tokens_read < 0.5 * reused.prefix_store.tokens_asked

