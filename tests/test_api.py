"""The Python API's inputs and ranking metrics, without running a stage (the API end to end,
against `adwm evaluate`, is in test_flows.py): logs built from a list of episodes and from a
DataFrame of steps read as the JSONL file does; bad input refused by name before any stage;
regret@k with ties in expectation; ranking metrics per estimator over the points with a truth."""

import math

import pandas as pd
import pytest

from adwm_core import pipeline
from adwm_core.api import LoggedEpisodes, OffPolicyEvaluation, _ranking_metrics, agent, logs_cell, seed_overrides
from adwm_core.data import TRAJECTORIES, write_table
from adwm_core.runnable import prepared
from adwm_core.ope.statistics.metrics import regret_at_1, regret_at_k
from adwm_core.data.logs import LogFormatError

ENV, TASK = "textworld-express", "simonsays"


def episode(item: int, actions: list[str], success: bool) -> dict:
    turns = []
    for i, action in enumerate(actions):
        turns += [{"from": "human", "value": f"room {item}.{i}"},
                  {"from": "gpt", "value": f"Action: {action}", "reward": float(i == len(actions) - 1 and success)}]
    return {"item_id": item, "task_description": f"task {item}", "conversations": turns + [{"from": "human",
            "value": f"room {item}.end"}], "success": success, "done": True}


def steps_frame(episodes: list[dict]) -> pd.DataFrame:
    rows = []
    for e in episodes:
        turns = e["conversations"]
        for t in range(0, len(turns) - 1, 2):
            rows.append({"episode": e["item_id"], "t": t // 2, "observation": turns[t]["value"],
                         "action": turns[t + 1]["value"].removeprefix("Action: "),
                         "response": turns[t + 1]["value"], "reward": turns[t + 1]["reward"],
                         "next_observation": turns[t + 2]["value"], "success": e["success"], "done": True,
                         "task_description": e["task_description"]})
    return pd.DataFrame(rows)


def test_episodes_in_memory_and_a_steps_dataframe_read_as_their_jsonl(adwm_home):
    episodes = [episode(3, ["go north", "take coin"], True), episode(5, ["look"], False)]
    from_records = LoggedEpisodes.from_records(episodes, ENV, TASK, name="mine")
    assert from_records.source.path.endswith("/mine.jsonl") and from_records.n_episodes == 2
    assert LoggedEpisodes.from_records(episodes, ENV, TASK, name="mine").source == from_records.source  # same file
    frame = steps_frame(episodes).sample(frac=1.0, random_state=1)  # any row order: t orders the steps
    from_frame = LoggedEpisodes.from_dataframe(frame, ENV, TASK, name="mine-steps")
    columns = ["episode", "t", "observation", "next_observation", "action", "reward", "success", "done",
               "task_description"]
    assert from_frame.steps.select(columns).equals(from_records.steps.select(columns))
    assert from_frame.to_pandas().query("episode == 3").action.tolist() == ["go north", "take coin"]


def test_bad_episodes_are_refused_by_name_before_any_stage(adwm_home):
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['reward'\]"):
        LoggedEpisodes.from_dataframe(steps_frame([episode(1, ["look"], True)]).drop(columns="reward"), ENV)
    broken = episode(1, ["look"], True)
    del broken["success"]
    for turn in broken["conversations"]:
        turn.pop("reward", None)
    with pytest.raises(LogFormatError, match=r"mine.jsonl:1: reward: missing"):
        LoggedEpisodes.from_records([broken], ENV, name="mine")
    with pytest.raises(ValueError, match="non-empty list of episode records"):
        LoggedEpisodes.from_records(episode(1, ["look"], True), ENV)


def test_the_papers_guidance_refuses_logs_without_a_success_before_any_stage(adwm_home):
    """Its success bank is the last observations of successful logged episodes: a log without one is
    refused when the evaluation is set up, before the world model and ψ are trained."""
    failures = LoggedEpisodes.from_records([episode(1, ["look"], False), episode(2, ["go north"], False)], ENV, TASK,
                                           name="failures")
    smollm2 = agent("offline:smollm2-135m-instruct", backend="transformers")
    with pytest.raises(ValueError, match="none of the 2 behaviour episodes succeeded"):
        OffPolicyEvaluation(failures, smollm2, settings={"adwm.preset": "paper"}, log=lambda _: None)
    OffPolicyEvaluation(failures, smollm2, log=lambda _: None)  # the default's guidance does without
    assert not (adwm_home / "cells" / "failures").exists()  # no stage ran
    # a variant of a cell whose behaviour stage is finished (and its world model reused) is refused too
    cell = logs_cell(failures.source, ENV, [smollm2], task=TASK, overrides={"adwm.preset": "paper"})
    behaviour = pipeline.locate(cell, "behaviour")
    write_table(failures.steps, behaviour.file("trajectories"), TRAJECTORIES)
    open(f"{behaviour.path}/{pipeline.MARKER}", "w").close()
    with pytest.raises(ValueError, match="none of the 2 behaviour episodes succeeded"):
        prepared(cell)
    prepared(logs_cell(failures.source, ENV, [smollm2], task=TASK))


def test_an_endpoint_agent_takes_the_routes_lm_evaluation_harness_users_give():
    chat = agent("m", "http://host:8000/v1/chat/completions")
    assert chat.options["base_url"] == "http://host:8000/v1" and chat.options["mode"] == "chat"
    assert agent("m", "http://host:8000/v1/").options["mode"] == "completions"
    assert agent("/models/my-agent/", backend="transformers").label == "my-agent"
    assert seed_overrides(0) == {} and seed_overrides(2)["adwm.seeds"] == [2, 3, 4]


def test_regret_at_k_counts_ties_at_the_kth_place_in_expectation():
    assert regret_at_k([3, 1, 2], [10, 0, 5], 1) == 0.0
    assert regret_at_k([1, 3, 2], [10, 0, 5], 1) == 1.0 and regret_at_k([1, 3, 2], [10, 0, 5], 2) == 0.5
    # top-2: the 2 for sure, then one of the three tied at 1 (J 0, 1 or 3): E[max] = (2 + 2 + 3) / 3
    assert regret_at_k([1, 1, 1, 2], [0, 1, 3, 2], 2) == pytest.approx((3 - 7 / 3) / 3)
    assert regret_at_k([1, 1, 1, 2], [0, 1, 3, 2], 1) == regret_at_1([1, 1, 1, 2], [0, 1, 3, 2]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="1 ≤ k ≤ 3"):
        regret_at_k([1, 2, 3], [1, 2, 3], 4)


def test_ranking_metrics_grade_each_estimator_on_the_points_with_a_truth():
    def row(estimator, policy, epsilon, value):
        return {"estimator": estimator, "policy": policy, "epsilon": epsilon, "value": value,
                "log_abs_value": -math.inf if value == 0 else math.log(abs(value)),
                "sign": (value > 0) - (value < 0)}

    rows = [row(e, p, eps, v) for e, p, eps, v in [
        ("ADWM:reward_sum", "a", 0.0, 3.0), ("ADWM:reward_sum", "b", 0.0, 2.0), ("ADWM:reward_sum", "c", 0.0, 1.0),
        ("FQE", "a", 0.0, 1.0), ("FQE", "b", 0.0, 2.0), ("FQE", "c", 0.0, 3.0), ("FQE", "a", 1.0, 9.0)]]
    truth = {("a", 0.0): 30.0, ("b", 0.0): 20.0, ("c", 0.0): 10.0}
    metrics = {m["estimator"]: m for m in _ranking_metrics(rows, truth, top_k=2)}
    assert metrics["ADWM:reward_sum"]["rho"] == 1.0 and metrics["FQE"]["rho"] == -1.0
    assert metrics["ADWM:reward_sum"]["regret_at_1"] == 0.0 and metrics["FQE"]["regret_at_2"] == 0.5
    assert metrics["FQE"]["n_points"] == 3  # (a, ε=1) has no true value
    assert metrics["ADWM:reward_sum"]["nmae"] == pytest.approx((27 + 18 + 9) / 3 / 20)
    with pytest.raises(ValueError, match="no estimate at the points"):
        _ranking_metrics(rows, {("z", 0.0): 1.0}, top_k=2)
