import subprocess
import sys

import pytest
import torch

from adwm_core.data.hash_tokenizer import END_ID, PAD_ID, HashTokenizer
from adwm_core.model.encoders import ActionEmbedding, HistoryEncoder, ObservationEncoder


def _millions(module: torch.nn.Module) -> float:
    return round(sum(p.numel() for p in module.parameters()) / 1e6, 3)


def test_parameter_counts_match_the_papers_table():
    assert _millions(ObservationEncoder(d_z=64)) == 5.053
    assert _millions(HistoryEncoder(d_z=64)) == 0.814
    # Table wm-arch prints 0.001 M for |A| = 256, d_a = 32, which is 256·32 = 8,192 parameters:
    # the table's figure contradicts its own sizes, so the formula is checked instead.
    assert sum(p.numel() for p in ActionEmbedding(256, 32).parameters()) == 256 * 32


def test_hash_ids_are_the_same_in_every_process():
    script = "from adwm_core.data.hash_tokenizer import HashTokenizer; print(HashTokenizer().encode('You see a Closed door, and a coin.'))"
    outputs = {
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1
    assert outputs.pop().strip() == str(HashTokenizer().encode("you see a closed door , and a coin ."))


def test_hash_tokenizer_truncates_pads_and_marks_the_end():
    tokenizer = HashTokenizer(vocab_size=1000, max_length=5)
    ids, padding = tokenizer(["a b c d e f g", "hello"])
    assert ids.shape == (2, 5) and ids[0, -1] == END_ID and ids[1, 1] == END_ID
    assert padding.tolist() == [[False] * 5, [False, False, True, True, True]] and (ids[1, 2:] == PAD_ID).all()
    assert ((ids[0, :4] >= 2) & (ids[0, :4] < 1000)).all()


def test_observation_latents_do_not_depend_on_batch_padding():
    torch.manual_seed(0)
    encoder = ObservationEncoder().eval()
    tokenizer = HashTokenizer()
    short = "You are in the kitchen."
    with torch.no_grad():
        alone = encoder(*tokenizer([short]))
        batched = encoder(*tokenizer([short, "a much longer observation " * 10]))
    assert alone.shape == (1, 64)
    torch.testing.assert_close(batched[:1], alone, atol=1e-5, rtol=1e-5)


def test_history_encoding_is_causal():
    torch.manual_seed(0)
    encoder = HistoryEncoder().eval()
    z, a = torch.randn(2, 6, 64), torch.randn(2, 6, 32)
    changed = z.clone()
    changed[:, 4:] += 1.0
    with torch.no_grad():
        before, after = encoder(z, a), encoder(changed, a)
    torch.testing.assert_close(after[:, :4], before[:, :4])
    assert not torch.allclose(after[:, 4:], before[:, 4:])


def test_score_net_and_heads_match_the_papers_table():
    from adwm_core.model.heads import behaviour_cloning_head, inverse_dynamics_head, reward_head, termination_head
    from adwm_core.model.psi import PsiAdapter
    from adwm_core.model.score_net import ScoreNetwork

    assert _millions(ScoreNetwork()) == 0.527
    assert _millions(reward_head()) == 0.115
    assert _millions(termination_head()) == 0.050
    assert _millions(inverse_dynamics_head(256)) == 0.044
    assert _millions(behaviour_cloning_head(256)) == 0.170
    for d_llm in (64, 576, 4096):
        assert sum(p.numel() for p in PsiAdapter(d_llm).parameters()) == 64 * 256 + 256 + 257 * 256 + 257 * 8 * d_llm
    assert _millions(PsiAdapter(256)) == 0.609  # the d_llm the table was computed for


def test_world_model_is_the_sum_of_its_modules_and_starts_at_zero_noise():
    from adwm_core.data.actions import ActionVocabulary
    from adwm_core.model.world_model import WorldModel, WorldModelConfig

    model = WorldModel(WorldModelConfig(ActionVocabulary(tuple(f"a{i}" for i in range(254)))))
    parts = {name: sum(p.numel() for p in m.parameters()) for name, m in model.named_children()}
    assert parts["action_embedding"] == 256 * 32
    assert sum(parts.values()) == sum(p.numel() for p in model.parameters())
    z = model.encode_texts(["Simon says, 'smell apple'.", "You win."])
    assert z.shape == (2, 64)
    torch.testing.assert_close(z.pow(2).mean(-1), torch.ones(2), atol=1e-3, rtol=0)  # unit mean square
    h = model.history(z[None], torch.zeros(1, 2, dtype=torch.long))[0]
    eps = model.eps(torch.randn(2, 64), torch.tensor([3, 40]), h, torch.tensor([5, 9]))
    assert torch.equal(eps, torch.zeros(2, 64))  # zero-initialised output projection


def test_action_vocabulary_ranks_caps_and_maps_unknown_actions():
    from adwm_core.data.actions import NULL, UNKNOWN, ActionVocabulary

    vocab = ActionVocabulary.from_actions(["b", "a", "c", "a", "B ", "d"], cap=4)
    assert vocab.actions == ("a", "b") and len(vocab) == 4  # counts 2, 2 (b and "B "), ties alphabetical
    assert vocab.ids(["A", "b", "zzz"]) == [2, 3, UNKNOWN] and NULL == 0
    react = ActionVocabulary.for_react()
    assert react.ids(["Search[Paris]", "lookup[x]", "finish[yes]", "think about it"]) == [2, 3, 4, UNKNOWN]
    assert ActionVocabulary.from_json(vocab.to_json()) == vocab
    with pytest.raises(ValueError, match="cap"):
        ActionVocabulary.from_actions(["a"], cap=2)


def test_balanced_bce_and_diversity_match_hand_computation():
    import math

    from adwm_core.training.losses import balanced_bce, diversity_loss

    logits, targets = torch.tensor([0.0, 1.0, -1.0, 2.0]), torch.tensor([1.0, 0.0, 0.0, 0.0])
    w = 3.0  # n_neg / n_pos
    sp = lambda x: math.log1p(math.exp(x))  # noqa: E731  softplus: −log σ(−x)
    expected = (w * sp(-0.0) + sp(1.0) + sp(-1.0) + sp(2.0)) / 4
    assert balanced_bce(logits, targets).item() == pytest.approx(expected, rel=1e-6)
    many = torch.zeros(200)
    many[0] = 1.0
    capped = balanced_bce(torch.zeros(200), many).item()
    assert capped == pytest.approx((50 * math.log(2) + 199 * math.log(2)) / 200, rel=1e-6)  # weight capped at 50
    assert balanced_bce(torch.zeros(3), torch.ones(3)).item() == pytest.approx(math.log(2))  # positives only: weight 1
    pooled = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    c = 1 / math.sqrt(2)
    assert diversity_loss(pooled, torch.tensor([0, 1, 2])).item() == pytest.approx((0 + c + c) * 2 / 6, rel=1e-6)
    assert diversity_loss(pooled, torch.tensor([0, 0, 1])).item() == pytest.approx((c + c) * 2 / 4, rel=1e-6)


def test_word_match_marks_the_action_words_its_observation_holds_and_changes_the_reading():
    from adwm_core.data.actions import ActionVocabulary
    from adwm_core.model.world_model import WorldModel, WorldModelConfig, word_matches

    tokenizer = HashTokenizer(32768, 16)
    actions, action_padding = tokenizer(["smell apple", "eat grape"])
    observations, observation_padding = tokenizer(["Simon says, 'smell apple'.", "Simon says, 'smell apple'."])
    matched = word_matches(actions, action_padding, observations, observation_padding)
    words = (~action_padding).sum(1)
    assert matched[0, : words[0] - 1].all() and not matched[1, : words[1] - 1].any()  # the end token aside
    assert not (matched & action_padding).any()

    vocabulary = ActionVocabulary(("smell apple", "eat grape"))
    plain = WorldModel(WorldModelConfig(vocabulary, action_input="text"))
    marked = WorldModel(WorldModelConfig(vocabulary, action_input="text", word_match=True))
    assert marked.load_state_dict(plain.state_dict(), strict=False).missing_keys == ["action_text.match.weight"]
    ids = plain.action_ids(["smell apple", "eat grape"])
    said = ["Simon says, 'smell apple'."] * 2
    assert not torch.allclose(plain.conditions(ids, said), marked.conditions(ids, said))
    assert torch.allclose(plain.action_vectors(ids), marked.action_vectors(ids))  # no observation: nothing marked
    with pytest.raises(ValueError, match="action_input='text'"):
        WorldModelConfig(vocabulary, word_match=True)
