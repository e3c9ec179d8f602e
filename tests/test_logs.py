"""Behaviour logs brought by the user: JSONL / ShareGPT, datasets and Parquet read into the
trajectories contract; malformed logs refused with file, line and field, nothing written."""

import json

import pyarrow.compute as pc
import pytest

from adwm_core.cell import CellConfig, CellConfigError
from adwm_core.data import TRAJECTORIES, read_table
from adwm_core.specs import LogSource
from adwm_core.data.logs import LogFormatError, export_jsonl, import_logs, read_logs


def _sorted(table):
    return table.take(pc.sort_indices(table, [("episode", "ascending"), ("t", "ascending")]))


@pytest.fixture(scope="module")
def native(tiny_behaviour):
    return _sorted(read_table(tiny_behaviour, TRAJECTORIES))


@pytest.fixture(scope="module")
def exported(native, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("logs") / "behaviour.jsonl")
    assert export_jsonl(native, path) == len(set(native["episode"].to_pylist()))
    return path


def test_jsonl_export_reads_back_as_the_same_trajectories(native, exported):
    back = _sorted(read_logs(LogSource(exported), cell=native["cell"][0].as_py()))
    assert back.equals(native)


def test_a_saved_dataset_and_a_parquet_file_read_as_the_jsonl_does(native, exported, tiny_behaviour, tmp_path):
    import datasets

    with open(exported) as f:
        records = [json.loads(line) for line in f]
    folder = str(tmp_path / "dataset")
    datasets.Dataset.from_list(records).save_to_disk(folder)
    cell = native["cell"][0].as_py()
    assert _sorted(read_logs(LogSource(folder), cell=cell)).equals(native)
    assert _sorted(read_logs(LogSource(tiny_behaviour), cell=cell)).equals(native)


def test_plain_sharegpt_episodes_take_rewards_and_success_from_the_episode(tmp_path):
    """No extras at all: actions parsed after the last 'Action:' cue, the episode's reward on its
    last step, OpenAI-style role/content turns read too, string ids numbered in file order."""
    path = tmp_path / "plain.jsonl"
    lines = [
        {"item_id": "a", "conversations": [
            {"from": "system", "value": "Find the key."},
            {"from": "human", "value": "You are in a hall."},
            {"from": "gpt", "value": "Thought: look around.\nAction: look"},
            {"from": "human", "value": "You see a key."},
            {"from": "gpt", "value": "Action: take key"},
            {"from": "human", "value": "Taken."}], "reward": 1.0, "success": True},
        {"item_id": "b", "conversations": [
            {"role": "user", "content": "You are in a hall."},
            {"role": "assistant", "content": "go north", "reward": 0.5, "success": False}]},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    rows = _sorted(read_logs(LogSource(str(path)), cell="mine")).to_pylist()
    assert [(r["episode"], r["t"], r["action"], r["reward"], r["done"], r["success"]) for r in rows] == [
        (0, 0, "look", 0.0, False, False), (0, 1, "take key", 1.0, True, True), (1, 0, "go north", 0.5, True, False)]
    assert rows[0]["task_description"] == "Find the key." and rows[1]["next_observation"] == "Taken."
    assert rows[2]["next_observation"] == "" and rows[0]["behavior_logprob"] is None


MALFORMED = {
    "missing field": ({"item_id": 0, "conversations": [{"from": "human", "value": "o"}, {"from": "gpt", "value": "a"}]},
                      ":1: reward: missing"),
    "wrong type": ({"item_id": 0, "conversations": [{"from": "human", "value": "o"},
                                                    {"from": "gpt", "value": "a", "reward": "one"}], "success": True},
                   ":1: conversations[1].reward: expected a finite number (or true/false), got str"),
    "action first": ({"item_id": 0, "conversations": [{"from": "gpt", "value": "a"}, {"from": "human", "value": "o"}],
                      "reward": 0.0, "success": False}, ":1: conversations[0]: an action turn with no observation"),
    "unknown role": ({"item_id": 0, "conversations": [{"from": "human", "value": "o"}, {"from": "critic", "value": "a"}],
                      "reward": 0.0, "success": False}, ":1: conversations[1].from: unknown role 'critic'"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_logs_name_file_line_and_field_and_write_nothing(case, tmp_path):
    episode, expected = MALFORMED[case]
    good = {"item_id": 9, "conversations": [{"from": "human", "value": "o"}, {"from": "gpt", "value": "a"}],
            "reward": 1.0, "success": True}
    path = tmp_path / "logs.jsonl"
    path.write_text(json.dumps(episode) + "\n" + json.dumps(good) + "\n")
    out = tmp_path / "out" / "trajectories.parquet"
    with pytest.raises(LogFormatError) as error:
        import_logs(LogSource(str(path)), str(out), cell="mine")
    message = str(error.value)
    assert f"{path}{expected}" in message and message.count(str(path)) == 1, message  # one problem, the bad line
    assert not out.exists() and not out.parent.exists()


def test_a_missing_logs_file_is_named(tmp_path):
    from adwm_core.data.logs import fingerprint

    with pytest.raises(FileNotFoundError, match="nowhere.jsonl: no logs file here"):
        fingerprint(LogSource(str(tmp_path / "nowhere.jsonl")))


def test_every_unparseable_episode_is_reported(tmp_path):
    path = tmp_path / "logs.jsonl"
    path.write_text('{"conversations": [}\n[1, 2]\n' + json.dumps({"conversations": 5}) + "\n")
    with pytest.raises(LogFormatError) as error:
        read_logs(LogSource(str(path)), cell="mine")
    message = str(error.value)
    assert "3 problem(s)" in message and ":1: (line): not valid JSON" in message
    assert ":2: (line): an episode is a JSON object, got list" in message
    assert ":3: conversations: expected a list of turns or a transcript, got int" in message


def test_a_cell_imports_logs_instead_of_collecting(exported, tmp_path):
    raw = {"name": "mine", "env": {"name": "textworld-express", "task": "simonsays"},
           "behaviour": {"logs": {"path": exported}},
           "evaluation": {"policies": [{"label": "agent", "model": "my-agent", "backend": "openai",
                                        "options": {"base_url": "http://127.0.0.1:1/v1"}}]},
           "adwm": {"reading": "retrieval"}}
    config = CellConfig.from_mapping(raw)
    assert config.behaviour.logs.resolved_format == "jsonl" and not config.runs_environment
    with pytest.raises(CellConfigError, match="either episodes .* or logs"):
        CellConfig.from_mapping({**raw, "behaviour": {"logs": {"path": exported}, "episodes": 4}})
    with pytest.raises(CellConfigError, match=r"logs.fields: Value error, unknown key\(s\) \[.rewrd.\]"):
        CellConfig.from_mapping({**raw, "behaviour": {"logs": {"path": exported, "fields": {"rewrd": "r"}}}})
    with pytest.raises(CellConfigError, match="does not expose the input embeddings"):
        CellConfig.from_mapping({**raw, "adwm": {"reading": "soft_tokens"}})


def test_an_agenttraj_preamble_is_skipped_and_gives_the_task_description(tmp_path):
    """AgentTraj-L opens each conversation with the harness's instruction and the agent's "OK":
    ``preamble_turns: 2`` keeps them out of the steps; turn numbers in errors stay those of the file."""
    preamble = [{"from": "human", "value": "You are web shopping. Reply with Action: search[...] or click[...]."},
                {"from": "gpt", "value": "OK"}]
    episode = {"item_id": "webshop_7", "reward": 0.75, "success": False, "conversations": [
        *preamble, {"from": "human", "value": "WebShop [SEP] Instruction: a red mug [SEP] Search"},
        {"from": "gpt", "value": "Thought: search first.\nAction: search[red mug]"},
        {"from": "human", "value": "Results: B01 red mug $8"}, {"from": "gpt", "value": "Action: click[B01]"}]}
    path = tmp_path / "agenttraj.jsonl"
    path.write_text(json.dumps(episode) + "\n" + json.dumps({**episode, "conversations": [
        *preamble, {"from": "human", "value": "o"}, {"from": "critic", "value": "a"}]}) + "\n")
    source = LogSource(str(path), preamble_turns=2)
    with pytest.raises(LogFormatError, match=r":2: conversations\[3\].from: unknown role 'critic'"):
        read_logs(source, cell="mine")
    path.write_text(json.dumps(episode) + "\n")
    rows = read_logs(source, cell="mine").to_pylist()
    assert [r["action"] for r in rows] == ["search[red mug]", "click[B01]"]
    assert rows[0]["task_description"].startswith("You are web shopping") and rows[-1]["reward"] == 0.75
    assert len(read_logs(LogSource(str(path)), cell="mine")) == 2  # the opening is found without the option
    assert len(read_logs(LogSource(str(path), preamble_turns=0), cell="mine")) == 3  # "OK" a step when told so


def test_ambiguous_or_non_finite_turns_are_refused_and_an_explicit_empty_action_is_kept(tmp_path):
    def episode(**turn):
        return {"conversations": [{"from": "human", "value": "o"}, {"from": "gpt", "value": "a", **turn}],
                "reward": 1.0, "success": True}

    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in (
        episode(value="Thought: check the door.\nopen door"), episode(logprob=0.5), {**episode(), "reward": "one"},
        episode(value="\n", action=""))) + "\n" + '{"conversations": [{"from": "human", "value": "o"}, '
        '{"from": "gpt", "value": "a", "reward": NaN}], "success": true}\n')
    with pytest.raises(LogFormatError) as error:
        read_logs(LogSource(str(path)), cell="mine")
    message = str(error.value)
    assert "4 problem(s)" in message, message
    assert ":1: conversations[1]: a thought, then lines without a label and no 'Action:' cue" in message
    assert ":2: conversations[1].logprob: expected a finite log-probability" in message
    assert ":3: reward: expected a finite number (or true/false), got str" in message
    assert ":3: reward: missing" not in message
    assert ":5: conversations[1].reward: expected a finite number (or true/false), got float nan" in message
    path.write_text(json.dumps(episode(value="\n", action="")) + "\n")
    assert read_logs(LogSource(str(path)), cell="mine")["action"].to_pylist() == [""]


def test_a_json_array_of_episodes_reads_as_jsonl(exported, native, tmp_path):
    with open(exported) as f:
        records = [json.loads(line) for line in f]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(records, indent=1))
    assert _sorted(read_logs(LogSource(str(path)), cell=native["cell"][0].as_py())).equals(native)


def test_an_agentgym_evaluator_file_with_integer_and_string_flags_round_trips(tmp_path):
    """AgentGym's evaluation scripts write one JSON line per task: item_id "<task>_<n>", the
    conversation with its instruction preamble (turns carry ``loss``), the final reward and
    ``"success": 1`` / ``0``; other evaluators write flags as strings."""
    def evaluated(n: int, reward: float, success) -> dict:
        return {"conversations": [
            {"from": "human", "loss": None, "value": "You are web shopping. Reply with Action: search[...] or click[...]."},
            {"from": "gpt", "loss": False, "value": "Ok."},
            {"from": "human", "loss": None, "value": f"WebShop [SEP] Instruction: item {n} [SEP] Search"},
            {"from": "gpt", "loss": True, "value": f"Thought: find it.\nAction: search[item {n}]"},
            {"from": "human", "loss": None, "value": f"Results: B0{n}"},
            {"from": "gpt", "loss": True, "value": f"Action: click[B0{n}]"}],
            "item_id": f"webshop_{n}", "reward": reward, "success": success}

    path = tmp_path / "webshop_eval.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in (evaluated(1, 1.0, 1), evaluated(2, 0.25, 0),
                                                        evaluated(3, 1.0, "True"), evaluated(4, 0.0, "false"))) + "\n")
    out = tmp_path / "trajectories.parquet"
    assert import_logs(LogSource(str(path), preamble_turns=2), str(out), cell="mine").episodes == 4
    imported = read_table(str(out), TRAJECTORIES)
    last = {r["episode"]: r for r in imported.to_pylist() if r["done"]}
    assert [(last[e]["success"], last[e]["reward"]) for e in sorted(last)] == [
        (True, 1.0), (False, 0.25), (True, 1.0), (False, 0.0)]
    assert [r["action"] for r in imported.to_pylist()][:2] == ["search[item 1]", "click[B01]"]
    back = tmp_path / "back.jsonl"
    export_jsonl(imported, str(back))
    again = read_logs(LogSource(str(back)), cell="mine")
    columns = ["episode", "t", "action", "reward", "done", "success", "observation"]
    assert _sorted(again).select(columns).to_pylist() == _sorted(imported).select(columns).to_pylist()
    path.write_text(json.dumps(evaluated(5, 1.0, 2)) + "\n" + json.dumps(evaluated(6, 1.0, "yes please")) + "\n")
    with pytest.raises(LogFormatError) as error:
        read_logs(LogSource(str(path), preamble_turns=2), cell="mine")
    assert ":1: success: expected true or false (or 1 / 0, success / fail), got int 2" in str(error.value)
    assert ":2: success: expected true or false (or 1 / 0, success / fail), got str 'yes please'" in str(error.value)
