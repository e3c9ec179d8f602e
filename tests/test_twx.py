import pytest

from adwm_core.envs import make_env
from conftest import played_in_order, refuse_mid_episode


@pytest.fixture(scope="module")
def env():
    with make_env("textworld-express", game_params={"coin": "numLocations=6,includeDoors=1"}) as env:
        yield env


@pytest.mark.parametrize("game", ["coin", "cookingworld", "mapreader"])
def test_gold_sequence_reaches_success(env, game):
    variation = env.variations(game, "test")[3]
    obs = env.reset(game, variation)
    assert obs.text and obs.task_description and obs.admissible
    results = [env.step(a) for a in env.gold_actions()]
    assert results[-1].success and results[-1].done and results[-1].score == pytest.approx(1.0)
    assert all(r.action_valid for r in results)
    assert sum(r.reward for r in results) == pytest.approx(1.0)


def test_folds_are_the_splits(env):
    train, dev, test = (env.variations("twc", s) for s in ("train", "dev", "test"))
    assert max(train) < min(dev) and max(dev) < min(test)
    env.reset("twc", dev[0])  # a dev seed loads from the dev fold


def test_invalid_action_mid_episode(env):
    refused, rest = refuse_mid_episode(env, "cookingworld", 5, "eat the stove with a fork")
    assert not refused.action_valid and not refused.done
    assert "Unknown action" in refused.observation.text
    assert rest[-1].success


def test_unknown_game_and_params_are_refused(env):
    with pytest.raises(ValueError, match="unknown TextWorld-Express game 'chess'.*coin"):
        env.reset("chess", 0)
    with pytest.raises(ValueError, match="unknown games"):
        make_env("textworld-express", game_params={"chess": ""})


def test_an_episode_does_not_depend_on_what_its_engine_played_before():
    """TextWorld-Express runs on a JVM too, but its games come from their seeds alone: four seeded
    episodes of a randomly laid out game, in order and in reverse on one engine, are the same."""
    from adwm_core.specs import EnvSpec

    instances = EnvSpec("textworld-express", "cookingworld", split="train").instances()[:4]
    assert played_in_order("textworld-express", instances, [0, 1, 2, 3], 6) == played_in_order(
        "textworld-express", instances, [3, 2, 1, 0], 6)
