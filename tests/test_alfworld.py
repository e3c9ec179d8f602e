import json
import os
import sys

import pytest

from adwm_core.envs import EnvironmentUnavailable, make_env
from adwm_core.envs.alfworld_env import OFFICIAL_OFFSETS, AlfWorldEnv, write_official_layout
from adwm_core.envs.alfworld_games import TASK_TYPES, generate_game
from conftest import refuse_mid_episode


@pytest.fixture(scope="module")
def env():
    with AlfWorldEnv(data="generated") as env:
        yield env


def _play(env, task, variation):
    obs = env.reset(task, variation)
    gold = env.gold_actions()
    return obs, gold, [env.step(a) for a in gold]


@pytest.mark.parametrize("task", TASK_TYPES)
def test_planner_gold_wins_a_generated_game_of_every_task_type(env, task):
    argv = list(sys.argv)
    obs, gold, results = _play(env, task, 3)
    assert obs.text.startswith("You are in the middle of a room. Looking quickly around you, you see ")
    assert "Welcome to TextWorld" not in obs.text
    assert obs.task_description.startswith("Your task is to: ") and obs.task_description in obs.text
    assert "look" in obs.admissible and any(a.startswith("go to ") for a in obs.admissible)
    assert gold and all(r.action_valid for r in results)
    assert results[-1].success and results[-1].done and results[-1].score == 1.0
    assert [r.reward for r in results] == [0.0] * (len(results) - 1) + [1.0]  # sparse
    assert not any(r.done for r in results[:-1])
    assert sys.argv == argv  # fast-downward's translator overwrites sys.argv; the adapter restores it


def test_generator_is_deterministic_from_the_seed():
    a, b = generate_game("pick_heat_then_place_in_recep", 42), generate_game("pick_heat_then_place_in_recep", 42)
    assert a.game == b.game and a.traj_data == b.traj_data
    other = generate_game("pick_heat_then_place_in_recep", 43)
    assert other.game["pddl_problem"] != a.game["pddl_problem"]
    params = a.traj_data["pddl_params"]
    assert a.traj_data["task_type"] == "pick_heat_then_place_in_recep"
    assert params["object_target"] and params["parent_target"] and params["parent_target"] != "Microwave"
    assert a.task_description.lower() in a.game["grammar"].lower() and "UNKNOWN GOAL" not in a.game["grammar"]
    assert "(:domain alfred)" in a.game["pddl_problem"] and "define (domain alfred)" in a.game["pddl_domain"]


def test_rooms_fit_the_task_type():
    rooms = {task: {generate_game(task, s).traj_data["scene"]["room"] for s in range(12)} for task in TASK_TYPES}
    assert rooms["pick_heat_then_place_in_recep"] == {"Kitchen"}
    assert rooms["pick_cool_then_place_in_recep"] == {"Kitchen"}
    assert rooms["look_at_obj_in_light"] <= {"Bedroom", "LivingRoom"}
    assert rooms["pick_clean_then_place_in_recep"] <= {"Kitchen", "Bathroom"}
    assert len(rooms["pick_and_place_simple"]) > 1


def test_game_is_written_once_to_the_cache(env):
    path = env.game_file("pick_and_place_simple", 5)
    folder = os.path.dirname(path)
    assert os.path.exists(os.path.join(folder, "traj_data.json"))
    mtime = os.path.getmtime(path)
    assert env.game_file("pick_and_place_simple", 5) == path and os.path.getmtime(path) == mtime
    assert not [n for n in os.listdir(os.path.dirname(folder)) if n.startswith(".tmp-")]
    with open(path) as f:
        game = json.load(f)
    assert set(game) >= {"pddl_domain", "grammar", "pddl_problem", "solvable"} and game["solvable"] is True


def test_invalid_command_is_refused_and_the_episode_goes_on(env):
    refused, rest = refuse_mid_episode(env, "pick_clean_then_place_in_recep", 7, "fly to the moon")
    assert not refused.action_valid and not refused.done and refused.reward == 0.0
    assert refused.observation.text == "Nothing happens."
    assert rest[-1].success and rest[-1].done


def test_commands_are_normalised_before_the_engine(env):
    env.reset("pick_and_place_simple", 3)
    first = env.gold_actions()[0]
    result = env.step("  " + first.upper().replace(" ", "   ") + " ")
    assert result.action_valid and result.observation.text != "Nothing happens."


def test_splits_are_disjoint(env):
    train, dev, test = (set(env.variations("look_at_obj_in_light", s)) for s in ("train", "dev", "test"))
    assert train and dev and test
    assert not (train & dev) and not (dev & test) and not (train & test)
    with pytest.raises(ValueError, match="unknown ALFWorld task"):
        env.variations("make_coffee", "train")
    with pytest.raises(ValueError, match="outside every split"):
        env.reset("pick_and_place_simple", -1)


def test_handcoded_expert_is_passed_by_keyword_and_wins(env):
    with AlfWorldEnv(data="generated", expert="handcoded") as handcoded:
        handcoded.reset("look_at_obj_in_light", 3)
        gold = handcoded.gold_actions()
        results = [handcoded.step(a) for a in gold]
    assert gold[0] == "look"  # the hand-coded expert's first move; the planner's plan never wastes one
    assert results[-1].success
    env.reset("look_at_obj_in_light", 3)
    plan = env.gold_actions()
    assert plan[0] != "look" and len(plan) <= len(gold)
    with pytest.raises(ValueError, match="unknown ALFWorld expert"):
        AlfWorldEnv(data="generated", expert="oracle")


def test_official_layout_is_loaded_through_alfworlds_own_collector(tmp_path, monkeypatch):
    games = {
        "train": [generate_game("pick_and_place_simple", s) for s in (1, 2)]
        + [generate_game("pick_two_obj_and_place", 1)],
        "dev": [generate_game("pick_and_place_simple", 10_001)],
        "test": [generate_game("pick_and_place_simple", 11_001)],
    }
    root = write_official_layout(str(tmp_path / "alfworld"), games)
    monkeypatch.setenv("ALFWORLD_DATA", root)
    with make_env("alfworld") as official:
        assert official.official
        train = official.variations("pick_and_place_simple", "train")
        dev = official.variations("pick_and_place_simple", "dev")
        test = official.variations("pick_and_place_simple", "test")
        assert len(train) == 2 and dev == [OFFICIAL_OFFSETS["dev"]] and test == [OFFICIAL_OFFSETS["test"]]
        assert official.variations("pick_two_obj_and_place", "train") == [0]
        assert official.variations("pick_heat_then_place_in_recep", "train") == []
        obs = official.reset("pick_and_place_simple", dev[0])
        assert obs.task_description == "Your task is to: " + games["dev"][0].task_description + "."
        results = [official.step(a) for a in official.gold_actions()]
        assert results[-1].success
        ours = {official.game_file(t, v) for t in TASK_TYPES for v in official.variations(t, "train")}

    # ALFWorld's own loader finds the same training games (solvable, known task types).
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    config = {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": [1, 2, 3, 4, 5, 6]},
        "dataset": {"data_path": os.path.join(root, "json_2.1.1", "train"), "num_train_games": -1},
    }
    assert set(AlfredTWEnv(config, train_eval="train").game_files) == ours


def test_wrong_layout_names_the_missing_file(tmp_path, monkeypatch):
    root = tmp_path / "not-alfworld"
    (root / "json_2.1.1" / "train").mkdir(parents=True)
    monkeypatch.setenv("ALFWORLD_DATA", str(root))
    with pytest.raises(EnvironmentUnavailable) as err:
        make_env("alfworld")
    message = str(err.value)
    assert "$ALFWORLD_DATA" in message and str(root) in message
    assert "json_2.1.1/valid_seen" in message and "logic/alfred.pddl" in message
    assert "json_2.1.1/train" not in message  # present, so not named
    assert "alfworld-download" in message


def test_make_env_plays_generated_games_and_leaves_alfworld_data_unset(monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with make_env("alfworld") as env:
        assert isinstance(env, AlfWorldEnv) and not env.official
        assert env.tasks() == list(TASK_TYPES) and len(env.tasks()) == 6
        env.reset("pick_cool_then_place_in_recep", 11_000)
    assert "ALFWORLD_DATA" not in os.environ  # importing alfworld sets it; the adapter undoes that


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setitem(sys.modules, "alfworld.agents.environment.alfred_tw_env", None)  # as if not installed
    with pytest.raises(EnvironmentUnavailable, match=r'pip install -e "\.\[alfworld\]"'):
        make_env("alfworld")
