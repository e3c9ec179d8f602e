import math

import numpy as np
import pyarrow.compute as pc
import pytest

from adwm_core.specs import EnvSpec, PolicySpec
from adwm_core.collection import (collect_behavior, episode_specs, extract_logprobs, ground_truth_rollouts,
                                  logged_histories, run_epsilon_family)
from adwm_core.envs.runner import EpisodeRunner
from adwm_core.data import LOGPROBS, TRAJECTORIES, read_table
from adwm_core.policies.base import LLMPolicy, PolicyAgent
from adwm_core.policies.loading import load_language_model
from conftest import TINY_ENV, tiny_env_spec

NAME, TASK, OPTIONS = TINY_ENV
ENV = tiny_env_spec()


@pytest.fixture(scope="module")
def pool(tiny_pool):
    return tiny_pool


@pytest.fixture(scope="module")
def behaviour(pool, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("behaviour") / "trajectories.parquet")
    collect_behavior(ENV, pool, 8, out, cell="test-cell", n_workers=2, envs_per_worker=4)
    return out


def test_ground_truth_success_falls_with_epsilon(tiny_policies, tmp_path):
    policy = PolicySpec("tiny-late", tiny_policies["late"])
    timings = {}
    summary = ground_truth_rollouts(
        ENV, policy, 24, str(tmp_path / "gt.parquet"), str(tmp_path / "gt_summary.parquet"),
        cell="test-cell", epsilons=(0.0, 0.5, 1.0), n_workers=2, envs_per_worker=6, timings=timings,
    )
    success = dict(zip(summary["epsilon"].to_pylist(), summary["success_rate"].to_pylist()))
    assert success[0.0] > success[1.0] + 0.15, success
    assert success[0.0] >= success[0.5] >= success[1.0] - 0.1, success
    assert set(timings) == {0.0, 0.5, 1.0}
    se = summary["success_stderr"].to_pylist()[0]
    assert se == pytest.approx(math.sqrt(success[0.0] * (1 - success[0.0]) / 23), abs=1e-9)
    table = read_table(str(tmp_path / "gt.parquet"), TRAJECTORIES)
    assert set(table["source"].to_pylist()) == {"ground_truth"}
    # episode k plays the same variation with the same seed at every ε
    firsts = table.filter(pc.equal(table["t"], 0)).to_pylist()
    by_eps = {e: [(r["variation"], r["seed"]) for r in firsts if r["epsilon"] == e] for e in (0.0, 0.5, 1.0)}
    assert by_eps[0.0] == by_eps[0.5] == by_eps[1.0] and len(by_eps[0.0]) == 24


def test_ground_truth_resumes_at_the_first_unfinished_epsilon(tiny_policies, tmp_path):
    """A run killed at its second ε keeps the first level; the rerun reads it, runs the rest,
    and returns what an unbroken run returns."""
    pi = LLMPolicy(load_language_model(tiny_policies["late"]), NAME, "p0")
    specs = episode_specs(ENV.instances(), range(6), 42)
    units, epsilons = str(tmp_path / "units"), (0.0, 0.5, 1.0)

    def killed_at_half(eps):
        if eps == 0.5:
            raise KeyboardInterrupt("killed")
        return PolicyAgent(pi, eps)

    asked = []

    def counted(eps):
        asked.append(eps)
        return PolicyAgent(pi, eps)

    with EpisodeRunner(ENV.name, ENV.options, n_workers=1, envs_per_worker=6, max_steps=ENV.max_steps) as runner:
        family = dict(cell="c", policy="tiny-late")
        with pytest.raises(KeyboardInterrupt):
            run_epsilon_family(runner, specs, killed_at_half, epsilons, units=units, **family)
        timings = {}
        resumed = run_epsilon_family(runner, specs, counted, epsilons, units=units, timings=timings, **family)
        unbroken = run_epsilon_family(runner, specs, lambda eps: PolicyAgent(pi, eps), epsilons, **family)
    assert asked == [0.5, 1.0] and set(timings) == set(epsilons)
    assert resumed[0].equals(unbroken[0]) and resumed[1].equals(unbroken[1])


def test_behaviour_pool_members_share_the_trajectories(behaviour):
    table = read_table(behaviour, TRAJECTORIES)
    firsts = table.filter(pc.equal(table["t"], 0))
    assert sorted(firsts["episode"].to_pylist()) == list(range(8))
    labels = firsts["policy"].to_pylist()
    assert {labels.count(name) for name in set(labels)} == {2}
    assert set(labels) == {"tiny-early@p0", "tiny-early@p1", "tiny-late@p0", "tiny-late@p1"}
    assert table["epsilon"].null_count == table.num_rows and table["t"].to_numpy().max() < 12
    assert all(a is not None for a in table["admissible"].to_pylist())


def test_behaviour_collection_refuses_to_overwrite_before_running(behaviour, pool):
    before = read_table(behaviour, TRAJECTORIES)
    with pytest.raises(FileExistsError, match="overwrite"):
        collect_behavior(EnvSpec("no-such-env", TASK), pool, 8, behaviour, cell="x")  # fails on the path first
    assert read_table(behaviour, TRAJECTORIES).equals(before)


def test_logprobs_rescore_with_the_producing_policy_and_mix_per_epsilon(behaviour, pool, tmp_path):
    out = str(tmp_path / "logprobs.parquet")
    eval_spec = pool[1]
    extract_logprobs(behaviour, NAME, pool, eval_spec, out, epsilons=(0.0, 0.5, 1.0))
    logp = read_table(out, LOGPROBS)
    steps = list(logged_histories(read_table(behaviour, TRAJECTORIES)))
    assert logp.num_rows == 4 * len(steps)
    rows = {(r["policy"], r["epsilon"], r["episode"], r["t"]): r for r in logp.to_pylist()}
    # behaviour log-probs: the producing member (model and prompt variant) re-scores its own steps
    row, history = next((r, h) for r, h in steps if r["policy"] == "tiny-early@p1")
    direct, _ = LLMPolicy(load_language_model(pool[0].model), NAME, "p1").logprob([history], [row["action"]])
    got = rows[("behavior", None, row["episode"], row["t"])]["logprob"]
    assert got == pytest.approx(direct[0], abs=1e-6) and got < 0
    for row, history in steps:
        key = (row["episode"], row["t"])
        pi_e = rows[("eval", 0.0, *key)]["logprob"]
        n = len(history.admissible)
        uniform = -math.log(n) if row["action"] in history.admissible else -math.inf
        assert rows[("eval", 1.0, *key)]["logprob"] == pytest.approx(uniform)
        assert rows[("eval", 0.5, *key)]["logprob"] == pytest.approx(np.logaddexp(pi_e, uniform) + math.log(0.5))
        assert rows[("eval", 0.5, *key)]["n_admissible"] == n
    # π_e's greedy action at each logged history, the same at every ε (FQE's target policy reads it)
    greedy = {k[2:]: r["greedy_action"] for k, r in rows.items() if k[:2] == ("eval", 0.0)}
    assert all(rows[("eval", 1.0, *k)]["greedy_action"] == a for k, a in greedy.items())
    assert all(r["greedy_action"] is None for k, r in rows.items() if k[0] == "behavior")
    row, history = steps[0]
    late = LLMPolicy(load_language_model(eval_spec.model), NAME, eval_spec.variant)
    assert greedy[(row["episode"], row["t"])] == late.act([history])[0].action
    # greedy behaviour under the late policy: it scores its own actions as likely
    late = [rows[("behavior", None, r["episode"], r["t"])]["logprob"] for r, _ in steps if r["policy"] == "tiny-late@p0"]
    assert np.mean(np.exp(late)) > 0.5


def test_logprob_extraction_reports_its_progress_and_computes_the_same_values(behaviour, pool, tmp_path):
    """Every re-scored step of the pool and every π_e step (scored, then acted on) is counted as its
    model's batch finishes, ending at the total; reporting moves no value."""
    told = []
    quiet = extract_logprobs(behaviour, NAME, pool, pool[1], str(tmp_path / "quiet.parquet"), epsilons=(0.0, 1.0))
    shown = extract_logprobs(behaviour, NAME, pool, pool[1], str(tmp_path / "shown.parquet"), epsilons=(0.0, 1.0),
                             progress=lambda done, total: told.append((done, total)))
    n_steps = len(list(logged_histories(read_table(behaviour, TRAJECTORIES))))
    assert shown.equals(quiet)
    assert len(told) > 3 and {total for _, total in told} == {3 * n_steps}  # π_b re-scores each step, π_e twice
    assert [done for done, _ in told] == sorted(done for done, _ in told) and told[-1][0] == 3 * n_steps
    assert all(getattr(load_language_model(spec.model), "on_items", None) is None for spec in pool)  # unhooked after


def test_logprob_extraction_names_policies_missing_from_the_pool(behaviour, pool, tmp_path):
    with pytest.raises(ValueError, match="tiny-early@p0"):
        extract_logprobs(behaviour, NAME, pool[1:], pool[1], str(tmp_path / "lp.parquet"))


def test_a_missing_model_folder_is_named_before_any_episode_runs(tmp_path):
    out = tmp_path / "never.parquet"
    with pytest.raises(FileNotFoundError, match="no Hugging Face model folder at /nonexistent/model"):
        collect_behavior(ENV, [PolicySpec("ghost", "/nonexistent/model")], 2, str(out), cell="c", n_workers=1)
    assert not out.exists()
