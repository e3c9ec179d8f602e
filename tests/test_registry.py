import pytest

from adwm_core.envs import EnvironmentUnavailable, env_names, make_env


def test_unknown_environment_lists_the_known_ones():
    with pytest.raises(KeyError, match="unknown environment 'webshopp'.*scienceworld.*textworld-express"):
        make_env("webshopp")
    assert {"scienceworld", "textworld", "textworld-express"} <= set(env_names())


@pytest.mark.parametrize("name", ["scienceworld", "textworld-express"])
def test_missing_java_is_a_clear_error_before_any_engine_starts(name, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EnvironmentUnavailable, match="no `java` is on PATH.*apt-get install -y default-jre-headless"):
        make_env(name)
