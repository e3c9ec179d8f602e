import json
from types import SimpleNamespace

import numpy as np
import pyarrow.compute as pc
import pytest
import torch

from adwm_core.data import TRAJECTORIES, read_table, table_from_rows
from adwm_core.data.actions import NULL, UNKNOWN, ActionVocabulary
from adwm_core.data.behaviour_log import BehaviourLog
from adwm_core.data.windows import covering_windows, episode_arrays, reward_scale, windows_at
from adwm_core.model.world_model import WorldModel, WorldModelConfig, member_path
from adwm_core.policies.loading import load_language_model
from adwm_core.model.psi import PsiAdapter
from adwm_core.settings import PsiConfig, TrainConfig
from adwm_core.training.psi import observation_texts, train_psi_adapter
from adwm_core.training.losses import world_model_losses
from adwm_core.model.windows import Tokenised
from adwm_core.training.world_model import (ReachableTokenRows, bootstrap_episodes, optimiser_steps,
                                            reachable_token_ids, split_indices, train_ensemble, train_world_model)
from conftest import WM_STEPS


def _rows(episode, steps, done_last=True):
    """Trajectories rows of an episode with per-step ``steps`` = [(action, reward)]."""
    return [
        {"cell": "c", "source": "behavior", "policy": "p@p0", "epsilon": None, "seed": 0, "episode": episode,
         "task": "t", "variation": 0, "t": t, "task_description": "d", "observation": f"o{episode}.{t}",
         "next_observation": f"o{episode}.{t + 1}", "response": a, "action": a, "action_valid": True,
         "admissible": None, "reward": r, "done": done_last and t == len(steps) - 1, "score": 0.0,
         "success": False}
        for t, (a, r) in enumerate(steps)
    ]


def test_windows_align_observations_actions_and_targets():
    table = table_from_rows(_rows(0, [("go", 0.5), ("take", 0.5), ("go", -1.0)]) + _rows(1, [("drop", 0.5)], False),
                            TRAJECTORIES)
    vocab = ActionVocabulary.from_actions(table["action"].to_pylist(), cap=3)  # room for "go" only
    log = BehaviourLog(table)
    scale = reward_scale(log)
    assert (scale.low, scale.high, scale.target, scale.terminal_only, scale.binary) == (-1.0, 0.5, "step", False, False)
    data = episode_arrays(log, vocab, scale)
    assert [data.texts[i] for i in data.observations[0]] == ["o0.0", "o0.1", "o0.2", "o0.3"]
    w = windows_at(data, np.array([0, 0, 1]), np.array([0, 1, 0]), 2)
    go = 2
    assert w.actions.tolist() == [[go, UNKNOWN], [UNKNOWN, go], [UNKNOWN, NULL]]
    assert w.previous_actions.tolist() == [[NULL, go, UNKNOWN], [go, UNKNOWN, go], [NULL, UNKNOWN, NULL]]
    assert [[data.texts[i] if i >= 0 else None for i in row] for row in w.observations[1:]] == [
        ["o0.1", "o0.2", "o0.3"], ["o1.0", "o1.1", None]]
    assert w.valid.tolist() == [[True, True], [True, True], [True, False]]
    assert w.done.tolist() == [[False, False], [False, True], [False, False]]
    np.testing.assert_allclose(w.reward_targets[1], [1.0, 0.0])  # (0.5 − (−1)) / 1.5, (−1 − (−1)) / 1.5
    to_go = reward_scale(log, "to_go")
    assert (to_go.low, to_go.high) == (-1.0, 0.5)  # reward-to-go 0, −0.5, −1 and 0.5
    with pytest.raises(ValueError, match="'step' or 'to_go'"):
        reward_scale(log, "return")


def test_the_behaviour_log_is_one_sorted_checked_view_of_the_behaviour_steps():
    rows = _rows(3, [("go", 0.0), ("take", 1.0)]) + _rows(1, [("drop", 0.0)])
    ground_truth = {**rows[0], "source": "ground_truth", "episode": 9}
    log = BehaviourLog(table_from_rows([rows[1], ground_truth, rows[2], rows[0]], TRAJECTORIES))
    assert log.column("episode") == [1, 3, 3] and log.column("t") == [0, 0, 1]  # behaviour only, by (episode, t)
    assert log.lengths.tolist() == [1, 2] and log.last_steps().tolist() == [0, 2]
    assert [e["action"] for e in log.episodes(["action"])] == [["drop"], ["go", "take"]]
    with pytest.raises(ValueError, match="the file x.parquet holds no behaviour steps"):
        BehaviourLog(table_from_rows([ground_truth], TRAJECTORIES), "the file x.parquet")


def test_terminal_only_rewards_supervise_terminal_steps_with_balanced_bce():
    table = table_from_rows(_rows(0, [("go", 0.0), ("go", 1.0)]) + _rows(1, [("go", 0.0), ("go", 0.0)]), TRAJECTORIES)
    log = BehaviourLog(table)
    scale = reward_scale(log)
    assert scale.terminal_only and scale.binary and (scale.low, scale.high) == (0.0, 1.0)
    data = episode_arrays(log, ActionVocabulary.from_actions(["go"]), scale)
    assert data.reward_mask.tolist() == [[False, True], [False, True]]


def test_gaps_in_an_episode_are_refused():
    rows = _rows(0, [("go", 0.0), ("go", 0.0), ("go", 1.0)])
    table = table_from_rows([rows[0], rows[2]], TRAJECTORIES)
    with pytest.raises(ValueError, match="episode 0: steps \\[0, 2\\]"):
        BehaviourLog(table)


def test_bad_training_config_and_missing_checkpoint_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"epochs\n  Input should be greater than 0"):
        TrainConfig(epochs=0)
    with pytest.raises(ValueError, match=r"heldout_fraction\n  Input should be less than 1"):
        TrainConfig(heldout_fraction=1.0)
    with pytest.raises(FileNotFoundError, match="model.safetensors missing"):
        WorldModel.load(str(tmp_path))
    table = table_from_rows(_rows(0, [("go", 1.0)]), TRAJECTORIES)
    with pytest.raises(ValueError, match="holds no behaviour steps"):
        train_world_model(table.filter(pc.equal(table["t"], 5)), str(tmp_path / "wm"))
    with pytest.raises(ValueError, match="collect more behaviour data"):
        train_world_model(table, str(tmp_path / "wm"))


def test_a_checkpoint_is_kept_when_no_held_out_step_is_reward_supervised(tmp_path):
    """Terminal-only rewards and a held-out episode cut at the horizon (never done): its reward
    MSE is undefined at every epoch, and termination alone picks the checkpoint (ALFWorld's
    local cell once completed its stage with no checkpoint at all)."""
    (held_out,) = split_indices(10, 0.1, 0)[1]
    rows = [row for e in range(10)
            for row in _rows(e, [("go", 0.0), ("take", 0.0 if e == held_out else 1.0)], done_last=e != held_out)]
    result = train_world_model(table_from_rows(rows, TRAJECTORIES), str(tmp_path / "wm"),
                               TrainConfig(epochs=2, batch_size=4, device="cpu"))
    assert all(np.isnan(epoch["heldout_reward_mse"]) for epoch in result.history)
    assert result.best_epoch >= 0 and WorldModel.load(str(tmp_path / "wm")) is not None


def test_ensemble_members_resample_the_training_episodes_and_keep_the_held_out_ones():
    train, heldout = split_indices(100, 0.1, 0)
    assert bootstrap_episodes(train, 0, 0) is train
    first, second = bootstrap_episodes(train, 0, 1), bootstrap_episodes(train, 0, 2)
    assert len(first) == len(train) and set(first) <= set(train) and not set(first) & set(heldout)
    assert len(set(first)) < len(train)  # drawn with replacement: some episodes twice, some never
    assert not np.array_equal(first, second) and np.array_equal(first, bootstrap_episodes(train, 0, 1))


def test_an_ensemble_is_member_zero_where_the_model_always_was_and_the_others_inside_it(tmp_path):
    """``members=3``: member 0 is the model one training gives (same seed, same data); members 1
    and 2, trained on resamples from their own seeds, differ from it and load back in order;
    every member is scored on the same held-out episodes."""
    rows = [row for e in range(12) for row in _rows(e, [("go north", 0.0)] * (e % 3) + [("take apple", 1.0)])]
    table, folder = table_from_rows(rows, TRAJECTORIES), str(tmp_path / "wm")
    config = TrainConfig(steps=2, batch_size=4, device="cpu", members=3)
    results = train_ensemble(table, folder, config)
    assert [r.path for r in results] == [folder, f"{folder}/members/1", f"{folder}/members/2"]
    assert [member_path(folder, k) for k in range(3)] == [r.path for r in results]
    alone = WorldModel.load(train_world_model(table, str(tmp_path / "alone"), config).path).state_dict()
    weights = [m.state_dict() for m in WorldModel.load_ensemble(folder)]
    assert len(weights) == 3 and all(torch.equal(weights[0][name], alone[name]) for name in alone)
    assert all(any(not torch.equal(w[name], alone[name]) for name in alone) for w in weights[1:])
    held_out_done_rates = {r.history[0]["heldout_done_error_constant"] for r in results}
    assert len(held_out_done_rates) == 1
    assert len(WorldModel.load_ensemble(str(tmp_path / "alone"))) == 1


def test_unknown_actions_read_as_null_only_where_training_never_saw_one(tmp_path):
    """⟨unk⟩'s embedding is fitted only if some training action was outside the vocabulary;
    otherwise imagination conditions such an action on ∅ (the trained unconditional branch)."""
    rows = [row for e in range(10) for row in _rows(e, [("search[a]", 0.0), ("finish[b]", 1.0)])]
    table = table_from_rows(rows, TRAJECTORIES)
    odd = table_from_rows(rows + [row for e in range(10, 15) for row in _rows(e, [("think", 0.0), ("finish[c]", 1.0)])],
                          TRAJECTORIES)  # 5 of 15 episodes with an ⟨unk⟩ step: 2 are held out, some train
    for name, data, react, trained in (("strings", table, False, False), ("react", table, True, False),
                                       ("react-with-unk", odd, True, True)):
        config = TrainConfig(preset="paper", epochs=1, batch_size=4, device="cpu", react_actions=react)
        model = WorldModel.load(train_world_model(data, str(tmp_path / name), config).path)
        assert model.config.unknown_trained is trained, name
        known = model.config.actions.ids(["finish[x]"])[0] if react else model.config.actions.ids(["search[a]"])[0]
        conditioned = model.action_ids(["zzz", "finish[x]" if react else "search[a]"]).tolist()
        assert conditioned == [UNKNOWN if trained else NULL, known], name
        assert model.action_ids(["zzz"], unknown_as_null=False).tolist() == [UNKNOWN]


def test_text_actions_give_every_action_an_id_and_read_it_against_its_observation(tmp_path):
    """With text actions (the default preset) an action the pool never played gets its own id
    past the vocabulary and a vector of its own; the same action reads differently in different
    observations; outcome heads that read the action refuse a call without it."""
    rows = [row for e in range(10) for row in _rows(e, [("go north", 0.0), ("take apple", 1.0)])]
    model = WorldModel.load(train_world_model(table_from_rows(rows, TRAJECTORIES), str(tmp_path / "wm"),
                                              TrainConfig(steps=2, batch_size=4, device="cpu")).path)
    assert model.config.action_input == "text" and model.config.prediction == "z0"
    n = len(model.config.actions)
    ids = model.action_ids(["take apple", "eat the pear", "Eat  the pear", "open door"])
    assert ids.tolist() == [model.config.actions.ids(["take apple"])[0], n, n, n + 1]
    with torch.no_grad():
        vectors = model.action_vectors(ids)
        null = model.as_conditions(None, 1)[0]
        assert not torch.allclose(vectors[1], vectors[3]) and not torch.allclose(vectors[1], null)
        torch.testing.assert_close(vectors[1], vectors[2])
        in_rooms = model.conditions(ids[:2].repeat(2), ["a kitchen", "a kitchen", "a garden with a pear", "a hall"])
        assert not torch.allclose(in_rooms[1], in_rooms[3])
        with pytest.raises(ValueError, match="outcome heads read the action"):
            model.predicted_reward(None, torch.zeros(1, 128))


def test_actions_are_read_under_bf16_autocast_as_training_on_a_gpu_runs(tmp_path):
    """Training on CUDA runs under bf16 autocast: the action reader's bf16 vectors join the
    float32 ∅ vector (a GPU worker once failed there), here under the CPU's bf16 autocast."""
    rows = [row for e in range(6) for row in _rows(e, [("go north", 0.0), ("take apple", 1.0)])]
    model = WorldModel.load(train_world_model(table_from_rows(rows, TRAJECTORIES), str(tmp_path / "wm"),
                                              TrainConfig(steps=1, batch_size=4, device="cpu")).path)
    ids = model.action_ids(["take apple", "open door", "go north"])
    ids[1] = NULL
    with torch.no_grad():
        plain = model.action_vectors(ids)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = model.action_vectors(ids)
    assert mixed.dtype == plain.dtype == torch.float32
    torch.testing.assert_close(mixed[1], plain[1])  # ∅ stays the parameter itself
    torch.testing.assert_close(mixed, plain, atol=0.1, rtol=0.05)


def test_training_through_the_reachable_token_rows_is_training_on_the_whole_table():
    """The loss through the rows the training texts reach has the gradient of the loss through the
    whole 32,768-row table: the same for every other parameter, the table's own on those rows and
    zero on the rest (so AdamW, elementwise, moves every parameter alike but for the decay of rows
    nothing reads); the table written back holds the trained rows beside the untouched ones."""
    rows = [row for e in range(6) for row in _rows(e, [("go north", 0.0), ("take apple", 1.0)])]
    table = table_from_rows(rows, TRAJECTORIES)
    vocabulary, scale = ActionVocabulary.from_actions(table["action"].to_pylist(), cap=None), reward_scale(BehaviourLog(table))
    data = episode_arrays(BehaviourLog(table), vocabulary, scale)
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig(actions=vocabulary, reward=scale, prediction="z0", action_input="text",
                                        outcome_input="action", word_match=True))
    tokens = Tokenised(model, data.texts)
    batch = tokens.batch(covering_windows(data, np.arange(6), 2), torch.device("cpu"))
    encoder, full = model.observation_encoder, model.observation_encoder.tokens

    def gradients() -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        world_model_losses(model, batch, model.diffusion, generator=torch.Generator().manual_seed(0))["total"].backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    dense = gradients()
    encoder.tokens = reachable = ReachableTokenRows(full, reachable_token_ids(model, tokens))
    sparse = gradients()
    table_grad, rows_grad = dense.pop("observation_encoder.tokens.weight"), sparse.pop("observation_encoder.tokens.rows")
    assert len(reachable.ids) < 50 and rows_grad.shape == (len(reachable.ids), 128)
    torch.testing.assert_close(rows_grad, table_grad[reachable.ids])
    untouched = torch.ones(len(table_grad), dtype=torch.bool)
    untouched[reachable.ids] = False
    assert table_grad.abs().sum() > 0 and not table_grad[untouched].any()
    assert dense.keys() == sparse.keys()
    for name, grad in dense.items():
        torch.testing.assert_close(sparse[name], grad, rtol=1e-4, atol=1e-6, msg=name)

    before = full.weight.detach().clone()
    with torch.no_grad():
        reachable.rows += 1.0
    reachable.restore(encoder)
    assert encoder.tokens is full
    torch.testing.assert_close(full.weight[reachable.ids], before[reachable.ids] + 1.0)
    torch.testing.assert_close(full.weight[untouched], before[untouched])
    with pytest.raises(IndexError):  # a hash id no training text holds has no row while the rows are in place
        reachable(torch.tensor([int(torch.nonzero(untouched)[0])]))


def test_presets_fill_what_a_config_leaves_out():
    paper, default = TrainConfig(preset="paper"), TrainConfig()
    assert (paper.prediction, paper.action_input, paper.outcome_input, paper.window, paper.epochs, paper.steps,
            paper.selection, paper.word_match) == ("eps", "ids", "next_latent", 8, 50, None, "heads_on_true", False)
    assert (default.prediction, default.action_input, default.outcome_input, default.epochs, default.word_match) == (
        "z0", "text", "action", None, True)
    assert (default.epochs, default.steps) == (None, None) and default.transitions > 0 and default.rounds == 50
    budget = TrainConfig(epochs=3)  # one budget set drops the preset's others
    assert (budget.epochs, budget.steps, budget.transitions, budget.rounds) == (3, None, None, 3)
    assert TrainConfig(steps=7).rounds == 7  # at most one evaluation per step
    assert TrainConfig(preset="paper", prediction="z0").prediction == "z0"
    assert TrainConfig(action_input="ids").word_match is False  # the default's word marks are for text actions
    with pytest.raises(ValueError, match="give one training budget"):
        TrainConfig(epochs=3, steps=10)
    with pytest.raises(ValueError, match="steps=10, transitions=500; give one training budget"):
        TrainConfig(steps=10, transitions=500)
    with pytest.raises(ValueError, match="preset='fast'"):
        TrainConfig(preset="fast")
    with pytest.raises(ValueError, match="react_actions=True with action_input='text'"):
        TrainConfig(react_actions=True)
    with pytest.raises(ValueError, match=r"prediction\n  Input should be 'eps' or 'z0'"):
        TrainConfig(prediction="v")


def test_a_transition_budget_buys_steps_by_the_length_of_what_a_batch_draws():
    config, draws = TrainConfig(transitions=640_000, batch_size=64), np.arange(10)
    short, long = SimpleNamespace(lengths=np.full(10, 2)), SimpleNamespace(lengths=np.full(10, 40))
    assert optimiser_steps(config, short, draws, 32) == 640_000 // (64 * 2)
    assert optimiser_steps(config, long, draws, 32) == -(-640_000 // (64 * 32))  # windows cut at 32 transitions
    assert optimiser_steps(TrainConfig(transitions=10), long, draws, 32) == 50  # one step per evaluation round at least
    assert optimiser_steps(TrainConfig(epochs=2, batch_size=4), long, draws, 32) == 2 * 3


def test_a_world_model_saved_before_unknown_trained_existed_infers_it():
    from adwm_core.data.actions import MAX_ACTIONS
    from adwm_core.model.world_model import WorldModelConfig

    def saved(vocabulary):
        data = WorldModelConfig(actions=vocabulary).to_json()
        del data["unknown_trained"]
        return WorldModelConfig.from_json(data).unknown_trained

    assert not saved(ActionVocabulary.from_actions(["a", "b"]))
    assert saved(ActionVocabulary.from_actions([str(i) for i in range(MAX_ACTIONS)]))  # capped: the rest were ⟨unk⟩
    assert saved(ActionVocabulary.for_react())


def test_the_diffusion_schedule_is_saved_with_the_model_and_an_unknown_one_is_named():
    from adwm_core.diffusion.schedule import cosine_alpha_bar
    from adwm_core.model.world_model import WorldModel, WorldModelConfig

    data = WorldModelConfig(actions=ActionVocabulary.from_actions(["a"]), n_denoise=20).to_json()
    assert data["schedule"] == "cosine"
    model = WorldModel(WorldModelConfig.from_json(data))
    np.testing.assert_allclose(model.diffusion.alpha_bar.numpy(), cosine_alpha_bar(20))
    with pytest.raises(ValueError, match="schedule='linear'; choose from \\('cosine',\\)"):
        WorldModelConfig.from_json({**data, "schedule": "linear"})


@pytest.fixture(scope="module")
def behaviour(tiny_behaviour):
    return read_table(tiny_behaviour, TRAJECTORIES)


@pytest.fixture(scope="module")
def trained(tiny_world_model):
    return tiny_world_model


def test_every_loss_term_falls_and_progress_reaches_the_callback(trained):
    result, seen = trained
    assert seen == list(range(len(result.history))) and result.history[-1]["optimiser_steps"] == WM_STEPS
    first, last = result.history[0], result.history[-1]
    for term in ("dsm", "idm", "bc", "div", "reward", "done", "total"):
        assert last[f"train_{term}"] < 0.9 * first[f"train_{term}"], term
    assert result.history[-1]["lr"] < result.history[0]["lr"]


def test_reward_and_termination_heads_beat_the_constant_predictor_on_held_out_episodes(trained):
    """Read as imagination reads them — from the action in its observation, no true next state;
    termination as the 0.5 threshold reads it — on episodes of held-out variations."""
    best = trained[0].best
    ratios = (best["heldout_reward_mse"] / best["heldout_reward_mse_constant"],
              best["heldout_done_error"] / best["heldout_done_error_constant"],  # stops at P(done) ≥ 0.5
              best["heldout_latent_mse"] / best["heldout_latent_mse_copy"])
    assert all(r < 0.8 for r in ratios), ratios


def test_a_saved_world_model_loads_back_to_the_same_outputs(trained, behaviour):
    result = trained[0]
    with open(f"{result.path}/history.json") as f:
        assert json.load(f)["best_epoch"] == result.best_epoch
    model = WorldModel.load(result.path)
    again = WorldModel.load(result.path)
    assert model.config == again.config and len(model.config.actions) > 3
    texts = behaviour["observation"].to_pylist()[:6]
    z = model.encode_texts(texts)
    assert torch.equal(z, again.encode_texts(texts))
    # distinct observations keep distinct latents (no encoder collapse)
    assert torch.cdist(z, z)[~torch.eye(6, dtype=torch.bool)].min() > 0 or len(set(texts)) < 6
    with torch.no_grad():
        h = model.history(z[None], torch.zeros(1, 6, dtype=torch.long))[0]
        k, a = torch.arange(6) * 8, torch.arange(6) + 2
        for m in (model, again):
            assert m.training is False
        assert torch.equal(model.eps(z, k, h, a), again.eps(z, k, h, a))
        assert torch.equal(model.predicted_reward(z, h, a), again.predicted_reward(z, h, a))
        assert torch.equal(model.done_probability(z, h, a), again.done_probability(z, h, a))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        train_world_model(behaviour, result.path)


def test_psi_adapter_retrieves_observations_well_above_chance(trained, behaviour, tiny_policies, tmp_path):
    texts = observation_texts(behaviour)
    lm = load_language_model(tiny_policies["late"])
    targets = lm.mean_input_embeddings(texts)
    assert targets.shape == (len(texts), lm.model.config.n_embd)
    model = WorldModel.load(trained[0].path)
    result = train_psi_adapter(model, texts, targets, str(tmp_path / "psi"), PsiConfig(device="cpu"))
    final = result.final
    assert final["random_top1"] == 1 / 8
    assert final["train_top1"] > 0.5 and final["heldout_top1"] > 0.3, final
    assert final["train_infonce"] < result.history[0]["train_infonce"]
    adapter = PsiAdapter.load(result.path)
    with torch.no_grad():
        soft = adapter(model.encode_texts(texts[:3]))
    assert soft.shape == (3, 8, targets.shape[1])


def test_psi_adapter_training_repeats_whatever_another_thread_draws_meanwhile(trained, behaviour, tiny_policies,
                                                                               tmp_path):
    """A cell's flow trains ψ beside the baselines stage, which loads a world model and builds
    FQE's network from torch's shared generator. ψ's weights depend on its seed alone: a thread
    reseeding and drawing from the shared generator the whole time changes none of them, and the
    initial weights are those torch.manual_seed(seed) gave the adapter when nothing drew beside it."""
    import threading

    from adwm_core.model.seeded import seeded_linears

    torch.manual_seed(5)
    by_global_seed = PsiAdapter(16, 8).state_dict()
    drawn = seeded_linears(PsiAdapter(16, 8).net, 5).state_dict()
    assert all(torch.equal(drawn[k], by_global_seed[f"net.{k}"]) for k in drawn)
    texts = observation_texts(behaviour)[:64]
    targets = load_language_model(tiny_policies["late"]).mean_input_embeddings(texts)
    model, config = WorldModel.load(trained[0].path), PsiConfig(device="cpu", epochs=2)
    alone = PsiAdapter.load(train_psi_adapter(model, texts, targets, str(tmp_path / "alone"), config).path)
    stop = threading.Event()

    def meddle():
        while not stop.is_set():
            torch.manual_seed(7)
            torch.nn.Linear(64, 64)

    thread = threading.Thread(target=meddle)
    thread.start()
    try:
        beside = PsiAdapter.load(train_psi_adapter(model, texts, targets, str(tmp_path / "beside"), config).path)
    finally:
        stop.set()
        thread.join()
    assert all(torch.equal(alone.state_dict()[k], beside.state_dict()[k]) for k in alone.state_dict())


def test_one_seed_trains_the_same_file_twice_on_two_threads(tmp_path):
    """A world model trained again from its seed is byte for byte the first (the bench's store keeps
    only its digests): torch's deterministic kernels are on while it trains, and off again after.
    This small model trains to the same bytes even without them; local-alfworld's did not (apart
    from round 2 on, a new file each run, 2026-12-06), which a suite-sized test cannot afford."""
    rows = [row for e in range(24) for row in _rows(e, [(f"go {e % 5}", 0.0), (f"take {e % 7} from {e % 3}", 0.0),
                                                        ("open", float(e % 2))])]
    trajectories = table_from_rows(rows, TRAJECTORIES)
    config = TrainConfig(steps=12, batch_size=8, device="cpu")
    seen = []
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for run in ("a", "b"):
            train_world_model(trajectories, str(tmp_path / run), config,
                              on_epoch=lambda *_: seen.append(torch.are_deterministic_algorithms_enabled()))
    finally:
        torch.set_num_threads(threads)
    assert all(seen) and not torch.are_deterministic_algorithms_enabled()
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
