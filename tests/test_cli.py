import os

import numpy as np
import pytest
import pyarrow.compute as pc
from adwm_core.cli import main
from adwm_core.data import TRAJECTORIES, read_table


def test_collect_writes_a_valid_file_with_a_falling_success_curve(tmp_path, capsys):
    out = str(tmp_path / "traj.parquet")
    args = ["collect", "--episodes", "8", "--epsilons", "0,1", "--workers", "1", "--out", out]
    assert main(args) == 0
    table = read_table(out, TRAJECTORIES)
    success = {}
    for eps in (0.0, 1.0):
        rows = table.filter(pc.equal(table["epsilon"], eps))
        success[eps] = len(set(rows.filter(rows["success"])["episode"].to_pylist())) / 8
    assert success[0.0] == 1.0 and success[1.0] < 1.0
    assert "success" in capsys.readouterr().out
    assert main(args) == 2  # the file exists: kept, and said so
    assert "already exists; pass --overwrite" in capsys.readouterr().err


def test_collect_refuses_bad_input_before_running_anything(tmp_path, capsys):
    out = tmp_path / "never.parquet"
    assert main(["collect", "--task", "chess", "--workers", "1", "--out", str(out)]) == 2
    assert "unknown TextWorld-Express game 'chess'" in capsys.readouterr().err and not out.exists()
    assert main(["collect", "--env", "webshopp", "--out", str(out)]) == 2
    assert "known environments:" in capsys.readouterr().err


def test_adwm_evaluate_reads_full_routes_shifts_seeds_and_refuses_a_missing_agent(monkeypatch, capsys):
    from adwm_core.api import endpoint, seed_overrides  # the API's name for adwm_core.endpoints.endpoint
    from flows.cli import main

    assert endpoint("http://h:8000/v1/completions", None) == ("http://h:8000/v1", "completions")
    assert endpoint("http://h:8000/v1/chat/completions/", None) == ("http://h:8000/v1", "chat")
    assert endpoint("http://h:8000/v1", "chat") == ("http://h:8000/v1", "chat")
    with pytest.raises(ValueError, match="is the chat route, but --agent-mode is completions"):
        endpoint("http://h/v1/chat/completions", "completions")
    assert seed_overrides(0) == {}
    shifted = seed_overrides(2)
    assert shifted["world_model.seed"] == 2 and shifted["adwm.seeds"] == [2, 3, 4]
    assert seed_overrides(2, {"adwm.preset": "paper"})["adwm.seeds"] == [2, 3, 4, 5, 6]  # the preset's five seeds
    monkeypatch.delenv("ADWM_AGENT_MODEL", raising=False)
    assert main(["evaluate", "--logs", "x.jsonl", "--env", "webshop", "--agent-base-url", "http://h/v1"]) == 2
    assert "name the agent: --agent-model" in capsys.readouterr().err
    nowhere = "/no/such/folder/samples.jsonl"
    assert main(["evaluate", "--logs", "x.jsonl", "--env", "webshop", "--agent-base-url", "http://h/v1",
                 "--agent-model", "m", "--log-samples", nowhere]) == 2
    assert f"--log-samples {nowhere}: no writable folder /no/such/folder" in capsys.readouterr().err


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["evaluate", "--help"], 0),
                                        (["evaluate", "--logs", "x.jsonl", "--bogus"], 2), (["envs"], 0)])
def test_help_and_a_malformed_argument_are_answered_before_prefect_or_numpy_load(argv, code):
    """`adwm --help`, `adwm evaluate --help` and a refused flag need only the parser: no Prefect,
    MLflow, torch, numpy or pyarrow is imported (issue 59: the command answers at once)."""
    import subprocess
    import sys

    probe = ("import sys\nfrom flows.cli import main\ntry:\n    code = main(sys.argv[1:])\nexcept SystemExit as e:\n"
             "    code = e.code\nheavy = [m for m in ('prefect', 'mlflow', 'torch', 'numpy', 'pyarrow', 'transformers') "
             "if m in sys.modules]\nprint('PROBE', code, ','.join(heavy) or '-')")
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert f"PROBE {code} -" in done.stdout.splitlines(), done.stdout + done.stderr


def test_a_server_set_in_the_active_prefect_profile_makes_adwm_evaluate_tracked(tmp_path, monkeypatch):
    """`prefect config set PREFECT_API_URL=...` writes the URL to the active profile, not the
    environment: `adwm evaluate` reads it as Prefect does. Without any Prefect settings file it
    decides without importing Prefect (the in-process path's first stage stays quick)."""
    import subprocess
    import sys

    probe = ("import sys\nfrom flows.cli import prefect_server_configured\n"
             "print('PROBE', prefect_server_configured(), 'prefect' in sys.modules)")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_PROFILES_PATH", raising=False)
    monkeypatch.delenv("PREFECT_PROFILE", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))

    def decided() -> str:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE")]
        assert lines, done.stderr[-3000:]
        return lines[0]

    assert decided() == "PROBE None False"  # no settings file anywhere: Prefect stays unloaded
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "profiles.toml").write_text(
        'active = "team"\n\n[profiles.team]\nPREFECT_API_URL = "http://10.0.0.7:4200/api"\n')
    assert decided() == "PROBE http://10.0.0.7:4200/api True"
    (tmp_path / "home" / "profiles.toml").write_text(  # a server named in a profile that is not active
        'active = "solo"\n\n[profiles.solo]\n\n[profiles.team]\nPREFECT_API_URL = "http://10.0.0.7:4200/api"\n')
    assert decided() == "PROBE None True"
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")  # the environment wins, as in Prefect
    assert decided() == "PROBE http://127.0.0.1:4200/api False"


def test_the_commands_agent_modes_are_the_endpoint_backends():
    from adwm_core.policies.openai_backend import MODES
    from flows.cli import AGENT_MODES

    assert AGENT_MODES == MODES


def test_the_commands_pairs_views_are_the_recommendations():
    from adwm_core.ope.statistics.recommend import PAIRS_SHOWN
    from flows import cli

    assert sorted(cli.PAIRS_SHOWN) == sorted(PAIRS_SHOWN)


def test_agents_are_ranked_best_first_and_the_best_is_named_only_where_every_verdict_says_so():
    """Three agents over the same 2 seeds × 40 rollouts: "strong" pays 1 more than "twin" on one
    rollout in forty, "weak" 2 less everywhere. Paired, the verdicts part weak from the others and
    cannot part strong from twin, so no agent is called the best; without twin, strong is."""
    from adwm_core.ranking import best_agent, rank_agents, ranking_lines

    shared = np.random.default_rng(0).normal(0, 3, (2, 40))  # what every agent's rollout i of a seed shares

    def rows(policy, shift, bump=0.0):
        return [{"estimator": "ADWM", "policy": policy, "epsilon": 0.0, "member": 0, "seed": s, "unit": i,
                 "value": v, "low": v - 5, "high": v + 5}
                for s in range(2) for i in range(40) for v in [shared[s, i] + shift + (bump if i == 0 else 0.0)]]

    table = rows("weak", -2.0) + rows("strong", 0.0, bump=1.0) + rows("twin", 0.0)
    ranked, comparisons = rank_agents(table, n_resamples=500)
    assert [a.policy for a in ranked] == ["strong", "twin", "weak"]
    assert all(a.ci_low <= a.value <= a.ci_high and a.bounds_low < a.ci_low and a.bounds_high > a.ci_high
               for a in ranked)  # the log alone identifies less than the rollouts' spread says
    said = {(c.verdict.a, c.verdict.b): c for c in comparisons}
    assert said["strong", "weak"].verdict.better == "strong" and said["twin", "weak"].verdict.better == "twin"
    assert said["strong", "twin"].verdict.better is None and all(c.log_alone.better is None for c in comparisons)
    assert best_agent(ranked, comparisons) is None
    assert ranking_lines(ranked, comparisons, "ADWM:reward_sum", 0.0)[-1] == "best: cannot tell from these logs"
    without_twin = [r for r in table if r["policy"] != "twin"]
    assert best_agent(*rank_agents(without_twin, n_resamples=500)) == "strong"
    with pytest.raises(ValueError, match="no ADWM rollouts at ε=0.5"):
        rank_agents(table, epsilon=0.5)


def test_calibrated_agents_keep_their_verdict_where_both_left_the_log_and_lose_it_where_only_one_did():
    """Under ``interval: calibrated`` a shared off-log error e ∈ [−1, 1]: the agents' levels widen by
    it, their paired verdict stands where both left the log on every rollout and falls where only
    the weaker one did (e could make up its deficit); ranges that differ by float noise give their hull."""
    from adwm_core.ranking import PrintedInterval, rank_agents

    rng = np.random.default_rng(2)
    shared = rng.normal(0, 1, 60)

    def rows(policy, shift, left):
        return [{"estimator": "ADWM", "policy": policy, "epsilon": 0.0, "member": 0, "seed": 0, "unit": i,
                 "value": shared[i] + shift, "low": -9.0, "high": 9.0, "steps": 4, "log_steps": 1 if left else 4}
                for i in range(60)]

    answers = [{"policy": p, "held_out": {"error_range": [-1.0, 1.0]}} for p in ("good", "poor")]
    printed = PrintedInterval.of(answers)
    plain, _ = rank_agents(rows("good", 0.5, True) + rows("poor", 0.0, True), n_resamples=400)
    ranked, said = rank_agents(rows("good", 0.5, True) + rows("poor", 0.0, True), n_resamples=400,
                               printed=printed)
    assert [a.ci_high - a.ci_low for a in ranked] == pytest.approx([a.ci_high - a.ci_low + 2 for a in plain])
    assert said[0].verdict.better == "good"
    _, apart = rank_agents(rows("good", 0.5, False) + rows("poor", 0.0, True), n_resamples=400,
                           printed=printed)
    assert apart[0].verdict.better is None
    assert PrintedInterval.of([{"policy": "x"}]) == PrintedInterval()
    assert PrintedInterval.of(answers + [{"policy": "z", "held_out": {"error_range": [-1.0 + 1e-9, 1.0 + 1e-9]}}]).error_range == \
        (-1.0, 1.0 + 1e-9)  # another worker's float noise: the hull


@pytest.fixture
def answering_endpoint():
    """An HTTP server on loopback that answers GET /v1/models as an OpenAI-compatible one does
    (two agents served): the endpoint check passes, and nothing is ever generated."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Models(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": "agent-a"}, {"id": "agent-b"}]}).encode()
            self.send_response(200 if self.path.endswith("/models") else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_an_endpoint_that_does_not_answer_is_named_in_seconds_before_any_other_lookup(tmp_path, monkeypatch, capsys):
    """Issue 88: the shipped example with an endpoint nothing listens on took 58 s of hub retries,
    then blamed a tokenizer. The endpoint is named first, within 5 s; a tokenizer neither here nor
    reachable is named at once, with what to pass instead."""
    import time

    from adwm_core.endpoints import check_tokenizer
    from flows.cli import main

    monkeypatch.setenv("ADWM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = ["evaluate", "--logs", "examples/simonsays-logs.jsonl", "--env", "textworld-express",
            "--agent-base-url", "http://127.0.0.1:9/v1", "--agent-model", "x"]
    started = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - started < 5.0
    error = capsys.readouterr().err
    assert "the agent's endpoint http://127.0.0.1:9/v1 does not answer" in error and "tokenizer" not in error
    started = time.monotonic()
    with pytest.raises(FileNotFoundError, match="no tokenizer 'no-such-org/no-such-model' on this machine .* and the "
                                                "hub cannot be reached: pass --agent-tokenizer FOLDER"):
        check_tokenizer("no-such-org/no-such-model")
    assert time.monotonic() - started < 2.0
    assert not (tmp_path / "home" / "cells").exists()


def test_an_answering_endpoint_whose_tokenizer_is_nowhere_is_refused_at_once(answering_endpoint, tmp_path,
                                                                            monkeypatch, capsys):
    import time

    from flows.cli import main

    monkeypatch.setenv("ADWM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    assert main(["evaluate", "--logs", "examples/simonsays-logs.jsonl", "--env", "textworld-express",
                 "--agent-base-url", answering_endpoint, "--agent-model", "agent-a"]) == 2
    assert time.monotonic() - started < 5.0
    assert "no tokenizer 'agent-a' on this machine" in capsys.readouterr().err


def test_a_live_top_up_that_cannot_happen_is_refused_before_any_stage(answering_endpoint, tmp_path, monkeypatch,
                                                                      capsys):
    """--live with an environment whose engine cannot start here and no --live-logs names both
    fixes; live logs of agents the run does not score name the agents; neither leaves a cell."""
    import json
    import os

    from adwm_core.envs import EnvironmentUnavailable, registry
    from flows.cli import main

    def no_engine(**options):
        raise EnvironmentUnavailable("no-engine runs on a simulator this machine lacks")

    monkeypatch.setitem(registry._REGISTRY, "no-engine", no_engine)  # a registered environment that cannot start
    home = tmp_path / "home"
    monkeypatch.setenv("ADWM_HOME", str(home))
    base = ["evaluate", "--logs", "examples/simonsays-logs.jsonl", "--agent-base-url", answering_endpoint,
            "--agent-tokenizer", str(tmp_path), "--agent-model", "agent-a", "--agent-model", "agent-b"]
    assert main([*base, "--env", "no-engine", "--live", "4"]) == 2
    error = capsys.readouterr().err
    assert "the environment no-engine cannot be run here (no-engine runs on a simulator this machine lacks)" in error
    assert "make it runnable" in error and "--live-logs FILE" in error

    live = tmp_path / "live.jsonl"
    turns = [{"from": "human", "value": "Simon says, 'hop'."}, {"from": "gpt", "value": "hop"}]
    live.write_text("".join(json.dumps({"policy": who, "conversations": turns, "reward": 0.2, "success": True}) + "\n"
                            for who in ("agent-a", "agent-c", "agent-d")))
    assert main([*base, "--env", "textworld-express", "--task", "simonsays", "--live-logs", str(live)]) == 2
    error = capsys.readouterr().err
    assert "holds episodes of ['agent-c', 'agent-d'], but this run's agents are ['agent-a@p0', 'agent-b@p0']" in error
    live.write_text("".join(json.dumps({"policy": who, "conversations": turns, "reward": 0.2, "success": True}) + "\n"
                            for who in ("agent-a", "agent-b", "agent-b")))
    assert main([*base, "--env", "textworld-express", "--live-logs", str(live)]) == 2
    assert "fewer than 2 live episodes of ['agent-a@p0 at ε=0']" in capsys.readouterr().err
    assert main([*base, "--env", "textworld-express", "--live-logs", str(live), "--epsilons", "0.5,1"]) == 2
    assert "episodes at ε [0.0], which this run does not score" in capsys.readouterr().err
    assert main([*base, "--env", "textworld-express", "--live", "1"]) == 2
    assert "at least 2 live episodes" in capsys.readouterr().err
    assert main([*base, "--env", "textworld-express", "--live", "4", "--live-logs", str(live)]) == 2
    assert "not both" in capsys.readouterr().err
    assert not os.path.exists(home / "cells")


def test_live_episodes_name_their_agent_by_label_unless_two_agents_share_it(tmp_path):
    """Two prompt variants of one model share a label: an episode tagged with the bare label could be
    either's, so only label@variant names them; a label of its own still names its agent."""
    import json

    from adwm_core.api import agent, live_file

    agents = [agent("/models/smollm2", backend="transformers", label="smollm2", variant=v) for v in ("p0", "p1")]
    agents.append(agent("/models/tiny", backend="transformers", label="tiny"))
    turns = [{"from": "human", "value": "Simon says, 'hop'."}, {"from": "gpt", "value": "hop"}]

    def episodes(*who):
        path = tmp_path / f"{'-'.join(who)}.jsonl"
        path.write_text("".join(json.dumps({"policy": w, "conversations": turns, "reward": 0.2, "success": True}) + "\n"
                                for w in who))
        return str(path)

    found = live_file(episodes("smollm2@p1", "smollm2@p1", "tiny", "tiny"), agents)
    assert sorted(found) == [("smollm2@p1", 0.0), ("tiny@p0", 0.0)] and len(found["smollm2@p1", 0.0]) == 2
    with pytest.raises(ValueError, match=r"holds episodes of \['smollm2'\].*label@variant where two agents share"):
        live_file(episodes("smollm2", "tiny"), agents)
