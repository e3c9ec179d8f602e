import pytest

from adwm_core.envs import StaleObservation, make_env
from adwm_core.envs.scienceworld_env import REFUSAL
from conftest import played_in_order, refuse_mid_episode


@pytest.fixture(scope="module")
def env():
    with make_env("scienceworld") as env:
        yield env


def test_offers_all_30_task_types_with_disjoint_splits(env):
    tasks = env.tasks()
    assert len(tasks) == 30 and "boil" in tasks and "use-thermometer" in tasks
    train, dev, test = (set(env.variations("melt", s)) for s in ("train", "dev", "test"))
    assert train and dev and test
    assert not (train & dev) and not (train & test) and not (dev & test)


@pytest.mark.parametrize("task", ["find-living-thing", "lifespan-longest-lived", "boil", "identify-life-stages-1"])
def test_gold_sequence_reaches_success(env, task):
    variation = env.variations(task, "dev")[0]
    obs = env.reset(task, variation)
    assert obs.task_description.startswith("Your task") and obs.text.startswith("This room is called")
    results = []
    for action in env.gold_actions():  # some gold sequences carry a trailing "wait" past the win
        results.append(env.step(action))
        if results[-1].done:
            break
    last = results[-1]
    assert last.success and last.done and last.score == pytest.approx(1.0)
    assert all(-1.0 <= r.reward <= 1.0 for r in results)
    assert sum(r.reward for r in results) == pytest.approx(last.score)  # rewards are score changes


def test_invalid_action_mid_episode_is_flagged_and_the_episode_goes_on(env):
    env.reset("find-living-thing", 0)
    half = len(env.gold_actions()) // 2
    refused, results = refuse_mid_episode(env, "find-living-thing", 0, "juggle the moon", after=half)
    assert not refused.action_valid and refused.observation.text.strip() == REFUSAL and not refused.done
    assert any(r.success for r in results) and all(r.action_valid for r in results)


def test_admissible_actions_are_listed_lazily_and_never_stale(env):
    obs = env.reset("find-living-thing", 0)
    assert "look around" in obs.admissible
    old = env.step(env.gold_actions()[0]).observation
    env.step("look around")
    with pytest.raises(StaleObservation):
        _ = old.admissible


def test_unknown_task_names_the_known_ones(env):
    with pytest.raises(ValueError, match="unknown ScienceWorld task 'boil-eggs'.*find-living-thing"):
        env.reset("boil-eggs", 0)
    with pytest.raises(ValueError, match="variations 0..29"):
        env.reset("boil", 999)


def test_an_episode_does_not_depend_on_what_its_engine_played_before():
    """Four seeded ε = 0.5 episodes on one engine, in order and in reverse, are the same episodes
    (without HISTORY_FREE_HASHES a room's objects came in another order, and so did the gold
    actions: three of these four differed)."""
    from adwm_core.specs import EnvSpec

    instances = EnvSpec("scienceworld", "find-non-living-thing,lifespan-longest-lived", split="train").instances()[:4]
    assert played_in_order("scienceworld", instances, [0, 1, 2, 3]) == played_in_order("scienceworld", instances, [3, 2, 1, 0])
