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
    from adwm_core.api import endpoint, seed_overrides
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


def test_agents_are_ranked_best_first_with_the_probability_of_being_best():
    from adwm_core.data import ESTIMATES, table_from_rows
    from adwm_core.ranking import rank_agents

    def row(policy, value, half_width, estimator="ADWM:reward_sum"):
        return {"cell": "c", "estimator": estimator, "policy": policy, "epsilon": 0.0, "seed": 0, "value": value,
                "ci_low": value - half_width, "ci_high": value + half_width, "log_abs_value": 0.0, "sign": 1}

    estimates = table_from_rows([row("weak", 1.0, 0.1), row("strong", 3.0, 0.1), row("twin", 3.0, 0.1),
                                 row("strong", -9.0, 0.1, estimator="FQE")], ESTIMATES)
    ranked = rank_agents(estimates)
    assert [a.policy for a in ranked][2] == "weak" and ranked[2].p_best == 0.0
    assert ranked[0].p_best == pytest.approx(0.5, abs=0.02) and sum(a.p_best for a in ranked) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no ADWM:reward_sum estimate at ε=0.5"):
        rank_agents(estimates, epsilon=0.5)
