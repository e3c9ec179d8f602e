import os
import subprocess

import psutil
import pytest

from adwm_core.envs import EnvironmentUnavailable, env_names, make_env
from adwm_core.envs.base import JVM_OPTIONS, start_jvm_engine


def test_unknown_environment_lists_the_known_ones():
    with pytest.raises(KeyError, match="unknown environment 'webshopp'.*scienceworld.*textworld-express"):
        make_env("webshopp")
    assert {"scienceworld", "textworld", "textworld-express"} <= set(env_names())


@pytest.mark.parametrize("name", ["scienceworld", "textworld-express"])
def test_missing_java_is_a_clear_error_before_any_engine_starts(name, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EnvironmentUnavailable, match="no `java` is on PATH.*apt-get install -y default-jre-headless"):
        make_env(name)


def _max_heap_of_a_jvm_started_here() -> int:
    """MaxHeapSize a ``java`` launched now would run with, as the JVM itself reports it."""
    flags = subprocess.run(["java", "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True, check=True)
    (line,) = [row for row in flags.stdout.splitlines() if row.split()[1:2] == ["MaxHeapSize"]]
    return int(line.split("=")[1].split()[0])


@pytest.mark.parametrize("user_options, expected_mib", [(None, 384), ("-Xmx200m", 200)])
def test_engine_jvms_start_with_a_bounded_heap_the_user_can_override(user_options, expected_mib, monkeypatch):
    if user_options is None:
        monkeypatch.delenv("JAVA_TOOL_OPTIONS", raising=False)
    else:
        monkeypatch.setenv("JAVA_TOOL_OPTIONS", user_options)
    assert "-Xmx384m" in JVM_OPTIONS
    assert start_jvm_engine("scienceworld", _max_heap_of_a_jvm_started_here) == expected_mib * 2**20
    assert os.environ.get("JAVA_TOOL_OPTIONS") == user_options  # only that launch saw ours


def test_an_adapters_engine_jvm_carries_the_bound():
    with make_env("textworld-express") as env:
        engine_jvms = [p for p in psutil.Process().children(recursive=True) if p.name() == "java"]
        assert engine_jvms, "the adapter started no JVM"
        assert all(JVM_OPTIONS in p.environ().get("JAVA_TOOL_OPTIONS", "") for p in engine_jvms)
        assert env.tasks()
