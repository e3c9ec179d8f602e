import os

import pytest

from adwm_core.envs.registry import DEFAULT_LOCAL_ENV


@pytest.fixture(scope="session", autouse=True)
def adwm_home(tmp_path_factory):
    """Every artifact of the test session (compiled games included) goes to a fresh folder."""
    home = tmp_path_factory.mktemp("adwm_home")
    os.environ["ADWM_HOME"] = str(home)
    return home


def refuse_mid_episode(env, task: str, variation: int, bad_action: str, after: int = 1):
    """Play ``after`` gold actions, then ``bad_action``, then the rest of the gold sequence;
    return the refused step's result and the results of the rest."""
    env.reset(task, variation)
    gold = env.gold_actions()
    for action in gold[:after]:
        env.step(action)
    refused = env.step(bad_action)
    return refused, [env.step(action) for action in gold[after:]]


TINY_ENV = DEFAULT_LOCAL_ENV  # fast, and a tiny LM learns it in a few hundred steps
TINY_VARIATIONS = 40  # the first training variations, used to fine-tune


@pytest.fixture(scope="session")
def tiny_policies(adwm_home):
    """A barely trained and a trained checkpoint of a tiny GPT-2 fitted to the expert's
    trajectories of ``TINY_ENV`` (trained once per test session)."""
    from adwm_core.policies.trainer import train_tiny_policies

    name, task, options = TINY_ENV
    return train_tiny_policies(
        name, options, task, str(adwm_home / "tiny-policies"), {"early": 50, "late": 600},
        n_variations=TINY_VARIATIONS,
    )
