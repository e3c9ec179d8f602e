import os
import re

import pytest

from adwm_core.envs import make_env
from adwm_core.envs.textworld_env import clean_text
from conftest import refuse_mid_episode


@pytest.fixture(scope="module")
def env():
    with make_env("textworld") as env:
        yield env


def test_clean_text_strips_banner_status_line_and_prompt():
    raw = (
        "\n\n   ________  __\n  |  $$  \\$$ |\n   \\$$$$$$  \n\n"
        "You are hungry!\n\n-= Kitchen =-\nA kitchen.\n\n\n\n>          "
    )
    assert clean_text(raw) == "You are hungry!\n\n-= Kitchen =-\nA kitchen."
    step = "\nYou take the pepper.\n\n\n\n>                        -= Kitchen =-1/4"
    assert clean_text(step) == "You take the pepper."


def test_cooking_game_is_compiled_once_and_cached(env):
    path = env.game_file("cooking", 7)
    assert os.path.exists(path) and os.path.exists(path[: -len(".z8")] + ".json")
    mtime = os.path.getmtime(path)
    assert env.game_file("cooking", 7) == path and os.path.getmtime(path) == mtime
    assert not [n for n in os.listdir(os.path.dirname(path)) if n.startswith(".tmp-")]


def test_gold_walkthrough_wins_the_cooking_game(env):
    obs = env.reset("cooking", 7)
    assert obs.text[0].isalpha() and "$$" not in obs.text  # banner gone
    assert "cook" in obs.task_description.lower() or "meal" in obs.task_description.lower()
    assert obs.admissible and "look" in obs.admissible
    results = [env.step(a) for a in env.gold_actions()]
    assert results[-1].success and results[-1].done and results[-1].score == pytest.approx(1.0)
    assert all(r.action_valid for r in results)
    assert any(r.reward > 0 for r in results)  # intermediate reward marks progress
    for r in results:
        assert not re.search(r"-= .* =-\d+/\d+", r.observation.text) and not r.observation.text.endswith(">")


def test_invalid_action_mid_episode_returns_the_parser_text(env):
    refused, rest = refuse_mid_episode(env, "cooking", 7, "xyzzy the fridge")
    assert not refused.action_valid and not refused.done
    assert "recognise" in refused.observation.text or "understand" in refused.observation.text
    assert rest[-1].success


def test_splits_are_disjoint_seed_ranges(env):
    train, dev, test = (set(env.variations("coin", s)) for s in ("train", "dev", "test"))
    assert not (train & dev) and not (dev & test) and not (train & test)
    with pytest.raises(ValueError, match="unknown TextWorld task"):
        env.game_file("dungeon", 1)
