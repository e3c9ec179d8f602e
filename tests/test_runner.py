import os
import subprocess
import sys

import psutil
import pytest

from adwm_core.data import TRAJECTORIES, read_table, write_table
from adwm_core.envs.agents import EpsilonGoldAgent
from adwm_core.envs.episodes import EpisodeSpec, episodes_table
from adwm_core.envs.runner import EpisodeRunner

ENV_KWARGS = {"game_params": {"coin": "numLocations=6,includeDoors=1"}}
SPECS = [EpisodeSpec(episode=100 + i, task="coin", variation=i, seed=i) for i in range(6)]


def _trace(episodes):
    return [[(t.observation, t.action, t.reward, t.done) for t in ep.turns] for ep in episodes]


@pytest.fixture(scope="module")
def runner():
    with EpisodeRunner("textworld-express", ENV_KWARGS, n_workers=2, envs_per_worker=2, max_steps=40) as runner:
        yield runner


@pytest.fixture(scope="module")
def reference():
    """The same episodes run undisturbed in a single worker."""
    with EpisodeRunner("textworld-express", ENV_KWARGS, n_workers=1, max_steps=40) as single:
        return single.run(SPECS, EpsilonGoldAgent(0.3))


class Saboteur:
    """The ε-expert, which kills the processes ``victims()`` returns on its ``at_call``-th batch."""

    needs_gold = True
    needs_admissible = True

    def __init__(self, victims, at_call=3):
        self.inner, self.victims, self.at_call, self.calls, self.killed = EpsilonGoldAgent(0.3), victims, at_call, 0, []

    def act(self, states):
        self.calls += 1
        if self.calls == self.at_call:
            for proc in self.victims():
                proc.kill()
                self.killed.append(proc.pid)
        return self.inner.act(states)


def test_parallel_run_is_reproducible_and_matches_a_single_worker(runner, reference):
    episodes = runner.run(SPECS, EpsilonGoldAgent(0.3))
    assert [ep.spec for ep in episodes] == SPECS
    assert _trace(episodes) == _trace(reference)
    assert _trace(runner.run(SPECS, EpsilonGoldAgent(0.3))) == _trace(reference)
    assert all(ep.turns[0].admissible for ep in episodes)  # the runner records admissible actions


def test_expert_succeeds_everywhere_and_random_play_does_worse(runner):
    expert = runner.run(SPECS, EpsilonGoldAgent(0.0))
    assert all(ep.success for ep in expert)
    random_play = runner.run(SPECS, EpsilonGoldAgent(1.0))
    assert sum(ep.success for ep in random_play) < len(SPECS)


def test_killed_jvm_is_restarted_and_the_episode_replayed(runner, reference):
    def worker_jvms():
        worker = psutil.Process(runner.worker_pids()[0])
        return [p for p in worker.children(recursive=True) if "java" in p.name()]

    agent = Saboteur(worker_jvms)
    episodes = runner.run(SPECS, agent)
    assert agent.killed, "the test killed no JVM"
    assert sum(ep.retries for ep in episodes) >= 1
    assert _trace(episodes) == _trace(reference)


def test_killed_worker_process_is_restarted_and_the_episode_replayed(runner, reference):
    agent = Saboteur(lambda: [psutil.Process(runner.worker_pids()[1])])
    old_pid = runner.worker_pids()[1]
    episodes = runner.run(SPECS, agent)
    assert agent.killed == [old_pid] and runner.worker_pids()[1] != old_pid
    assert sum(ep.retries for ep in episodes) >= 1
    assert _trace(episodes) == _trace(reference)


def test_horizon_cut_is_not_done():
    with EpisodeRunner("textworld-express", ENV_KWARGS, n_workers=1, max_steps=3) as short:
        episodes = short.run(SPECS, EpsilonGoldAgent(1.0))
    assert all(len(ep.turns) <= 3 for ep in episodes)
    assert any(len(ep.turns) == 3 and not ep.turns[-1].done for ep in episodes)


def test_bad_task_fails_at_once_with_the_engine_message(runner):
    with pytest.raises(RuntimeError, match="bad input(.|\n)*unknown TextWorld-Express game 'chess'"):
        runner.run([EpisodeSpec(1, "chess", 0)], EpsilonGoldAgent(0.0))


def test_episodes_become_a_valid_trajectories_file(runner, reference, tmp_path):
    table = episodes_table(reference, cell="twx-coin", source="behavior", policy="expert-eps0.3", epsilon=None)
    path = str(tmp_path / "trajectories.parquet")
    write_table(table, path, TRAJECTORIES)
    back = read_table(path, TRAJECTORIES)
    assert back.num_rows == sum(len(ep.turns) for ep in reference)
    first = back.slice(0, 1).to_pylist()[0]
    turn = reference[0].turns[0]
    assert (first["episode"], first["t"], first["action"], first["observation"]) == (100, 0, turn.action, turn.observation)
    assert first["admissible"] == list(turn.admissible)
    # each step's answer is the next step's observation
    for ep in reference:
        assert [t.next_observation for t in ep.turns[:-1]] == [t.observation for t in ep.turns[1:]]


PROBE = """
import os
import sys
from adwm_core.envs.chain import ChainEnv

class ProbeEnv(ChainEnv):
    def __init__(self, **options):
        super().__init__(**options)
        with open("probe.log", "a") as log:  # a relative path: the worker's working folder
            log.write(f"{os.getpid()} {os.environ.get('CALLER_SAYS')} {sys.warnoptions} {sorted(sys._xoptions)}\\n")
"""

CALLER = """
import os, sys
with open(os.environ["IMPORTS_LOG"], "a") as log:  # a line per process that runs this module
    log.write(f"{os.getpid()}\\n")
from adwm_core.envs.agents import EpsilonGoldAgent
from adwm_core.envs.chain import ChainEnv
from adwm_core.envs.episodes import EpisodeSpec
from adwm_core.envs.registry import register
from adwm_core.envs.runner import EpisodeRunner

def local_factory(**options):
    return ChainEnv(**options)

if __name__ == "__main__":
    register("probe", "probe_env:ProbeEnv")  # by path, at run time
    os.environ["CALLER_SAYS"] = "set at run time"
    os.chdir(sys.argv[1])
    with EpisodeRunner("probe", {"length": 2}, n_workers=2, max_steps=4) as runner:
        episodes = runner.run([EpisodeSpec(k, "corridor", k, k) for k in range(4)], EpsilonGoldAgent(0.0))
        print(all(e.success for e in episodes), *sorted(runner.worker_pids()))
    register("local", local_factory)
    try:
        EpisodeRunner("local", n_workers=1).start()
    except ValueError as refusal:
        print(refusal)
"""


def test_workers_skip_the_callers_main_and_see_its_registry_environment_and_folder_of_now(tmp_path):
    """A caller run as ``python -m module``, as ``python -m flows.ope_cell`` is: its workers do
    not run that module again (multiprocessing's spawn would, once per worker: Prefect's imports
    in the flow's case), yet build an environment it registered by path at run time, in its
    environment variables and working folder of when they started. A factory defined in that
    module, which no worker can import, is refused by name before any worker starts. The workers
    run with the caller's interpreter options (-X, -W), as spawn's did."""
    (tmp_path / "probe_env.py").write_text(PROBE)
    (tmp_path / "caller_module.py").write_text(CALLER)
    work = tmp_path / "work"
    work.mkdir()
    imports = tmp_path / "imports.log"
    env = dict(os.environ, IMPORTS_LOG=str(imports), PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    options = ["-X", "faulthandler", "-W", "ignore::ResourceWarning"]  # the caller's interpreter options
    done = subprocess.run([sys.executable, *options, "-m", "caller_module", str(work)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ran, refusal = done.stdout.splitlines()
    success, *workers = ran.split()
    assert success == "True" and len(workers) == 2, done.stdout
    assert len(imports.read_text().split()) == 1  # the caller alone
    assert sorted((work / "probe.log").read_text().splitlines()) == sorted(
        f"{pid} set at run time ['ignore::ResourceWarning'] ['faulthandler']" for pid in workers)
    assert "'local' is registered as <function local_factory" in refusal and "'module:Class'" in refusal, refusal
