"""Behaviour logs brought by the user: JSONL / ShareGPT, datasets and Parquet read into the
trajectories contract; malformed logs refused with file, line and field, nothing written."""

import json
import re

import pyarrow.compute as pc
import pytest

from adwm_core.cell import CellConfig, CellConfigError
from adwm_core.data import TRAJECTORIES, read_table
from adwm_core.specs import LogSource
from adwm_core.data.logs import LogFormatError, export_jsonl, import_logs, inspect_logs, read_logs


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
    assert ":2: (line): an episode is a JSON object or a list of messages, got list [1, 2]: this is no episode" \
        in message
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


def _import(path, *flags: str) -> tuple[int, str, str]:
    """``adwm import`` on ``path`` with ``flags``: (exit status, what it printed, its error)."""
    import contextlib
    import io

    from adwm_core import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(["import", str(path), "--env", "hotpotqa", *flags])
    return status, out.getvalue(), err.getvalue()


REACT_SECTIONS = """\
########################################
BEGIN TRIAL 1
Trial summary: Correct: 2, Incorrect: 1
#######################################
------------- BEGIN CORRECT AGENTS -------------

Question: Which river runs through Paris?
Thought 1: I should search Paris.
Action 1: Search[Paris]
Observation 1: Paris is on the Seine.
Thought 2: So the answer is the Seine.
Action 2: Finish[Seine]
Observation 2: Answer is CORRECT
Correct answer: Seine

Question: Who wrote Hamlet?
Thought 1: I know this.
Action 1: Finish[Shakespeare]
Observation 1: Answer is CORRECT
Correct answer: William Shakespeare

------------- BEGIN INCORRECT AGENTS -----------

Question: What is the capital of Australia?
Thought 1: I should search Australia.
Action 1: Search[Australia]
Observation 1: Australia is a country. Its largest city is Sydney.
Action 2: Finish[Sydney]
Observation 2: Answer is INCORRECT
Correct answer: Canberra
"""


def test_a_text_transcript_of_several_tasks_is_split_at_each_task_and_never_merges_two(tmp_path):
    """A ReAct run log (Reflexion's HotpotQA layout): numbered Question: blocks under CORRECT /
    INCORRECT section headers, the header the outcome; and, with no marker, a restart of the
    numbering begins an episode too."""
    path = tmp_path / "react_run.txt"
    path.write_text(REACT_SECTIONS)
    table, summary = inspect_logs(LogSource(str(path)), cell="t")
    questions = REACT_SECTIONS.count("\nQuestion:")
    correct = REACT_SECTIONS.split("BEGIN INCORRECT")[0].count("\nQuestion:")
    actions = len(re.findall(r"^Action \d+:", REACT_SECTIONS, re.M))
    rows = table.to_pylist()
    last = {r["episode"]: r for r in rows}
    counted = (len(last), len(rows), sum(r["success"] for r in last.values()))
    assert counted == (questions, actions, correct) == (3, 5, 2)
    assert [r["action"] for r in rows] == ["Search[Paris]", "Finish[Seine]", "Finish[Shakespeare]", "Search[Australia]",
                                           "Finish[Sydney]"]
    assert not any("Question:" in r["next_observation"] for r in rows)  # no question glued to the answer before it
    assert [r["observation"] for r in rows if r["t"] == 0][1] == "Question: Who wrote Hamlet?"
    assert summary.readings["episodes begun in text at a new task (a 'Question:', 'Task:' or 'Your task is to' "
                            "line)"] == 1
    assert summary.readings["episodes whose success is read from their section header (CORRECT / INCORRECT / FAIL / "
                            "HALTED)"] == 3
    # numbering that restarts is a new episode even without a marker; the outcome from --outcome-line
    path.write_text("A quiz about rivers.\nAction 1: Search[Seine]\nObservation 1: A river. Score: 0\n\n"
                    "A quiz about plays.\nThought 1: easy.\nAction 1: Finish[Hamlet]\nObservation 1: Right. Score: 1\n")
    status, printed, error = _import(path)
    assert status == 2 and "--outcome-line REGEX" in error and "--fields reward" not in error
    assert error.count("reward: missing") == 2 and ".txt:1: " in error and ".txt:5: " in error  # each at its line
    table, summary = inspect_logs(LogSource(str(path), outcome_line=r"Score: (\d)"), cell="t")
    assert table["action"].to_pylist() == ["Search[Seine]", "Finish[Hamlet]"]
    assert table["observation"].to_pylist() == ["A quiz about rivers.", "A quiz about plays."]
    assert table["reward"].to_pylist() == [0.0, 1.0]
    assert summary.readings["episodes begun in text where ReAct's numbering restarts"] == 1


def _rafa_like(episodes: int, memory: bool) -> str:
    """ALFWorld run logs written as a critic sees them: every agent line "> OK.", each episode
    opening after a harness header, optionally a reflection memory, placeholders of solved ones."""
    blocks = []
    for i, place in enumerate(PLACES[:episodes]):
        blocks.append(f"#####\n\nEnvironment #{i}: Success\n\n#####\n")  # a placeholder of a solved task
        opening = f"Your memory for the task below:\nTrial 0:\nI forgot to open the {place}.\n" if memory else ""
        blocks.append(f"#####\n\nEnvironment #{i + 100}:\n\n{opening}Here is the task:\n{_room(i)}\n"
                      f"Your task is to: find key {i}.\n> OK.\nThe {place} 1 is closed.\n> OK.\n"
                      f"You open the {place} 1.\n> OK.\nYou take the key {i}.\n\nSTATUS: OK\n")
    return "\n".join(blocks)


PLACES = ("drawer", "cabinet", "safe", "fridge", "shelf", "desk")


def _room(i: int) -> str:
    return f"You are in the middle of a room. Looking quickly around you, you see a cabinet {i}, and a drawer {i}."


def test_a_log_whose_every_action_is_the_same_string_is_refused_with_that_string_and_its_share(tmp_path):
    path = tmp_path / "critic_view.txt"
    text = _rafa_like(6, memory=False)
    path.write_text(text)
    status, _, error = _import(path)
    steps = text.count("\n> OK.")
    assert status == 2 and f"'OK', is {steps} of {steps} steps (100%)" in error and "--allow-degenerate" in error
    status, printed, _ = _import(path, "--allow-degenerate")
    assert status == 0 and f"episodes:  6   steps: {steps}   successes: 6" in printed
    # the placeholders of solved tasks are no episode and glued to none; the acknowledgement is a step
    table = read_logs(LogSource(str(path), allow_degenerate=True), cell="t")
    assert not any("Success" in o for o in table["observation"].to_pylist())
    assert table.filter(pc.equal(table["t"], 0))["next_observation"].to_pylist() == [
        f"The {place} 1 is closed." for place in PLACES]
    assert "6 text blocks between section headers in which the agent never speaks (placeholders), dropped" in printed


def test_an_acknowledgement_answered_by_the_environment_is_a_step_and_an_unsure_opening_asks(tmp_path):
    """An "OK" reply is a preamble only where the turn after it opens the task: RAFA's "> OK.",
    answered by the environment, is the first step; where the turns cannot tell, it asks."""
    path = tmp_path / "acknowledged.jsonl"
    task_first = {"conversations": [
        {"from": "human", "value": "You are in a hall.\nYour task is to: find a key."}, {"from": "gpt", "value": "OK."},
        {"from": "human", "value": "Nothing happens."}, {"from": "gpt", "value": "Action: open drawer"},
        {"from": "human", "value": "Open."}], "reward": 1.0}
    path.write_text(json.dumps(task_first) + "\n")
    table, summary = inspect_logs(LogSource(str(path)), cell="t")
    assert table["action"].to_pylist() == ["OK", "open drawer"] and not summary.readings.get(
        "preamble turns dropped (instruction and acknowledgement)")
    unsure = {"conversations": [{"from": "human", "value": "Please help me."}, {"from": "gpt", "value": "Sure."},
                                {"from": "human", "value": "The room is dark."}, {"from": "gpt", "value": "look"}],
              "reward": 1.0}
    path.write_text(json.dumps(unsure) + "\n" + json.dumps(unsure) + "\n")
    status, _, error = _import(path)
    assert status == 2 and "2 episode(s) open with a user turn" in error
    assert "--preamble-turns 2" in error and "--preamble-turns 0" in error
    assert _import(path, "--preamble-turns", "2")[0] == 0 and _import(path, "--preamble-turns", "0")[0] == 0


def test_lines_the_harness_repeats_in_first_observations_are_counted_and_strip_removes_them(tmp_path):
    path = tmp_path / "with_memory.txt"
    path.write_text(_rafa_like(6, memory=True))
    table, summary = inspect_logs(LogSource(str(path), allow_degenerate=True), cell="t")
    firsts = table.filter(pc.equal(table["t"], 0))["observation"].to_pylist()
    assert all(o.startswith("Your memory for the task below:\nTrial 0:\n") for o in firsts)
    found = {line: n for line, n in summary.readings.items() if line.startswith("first observations holding")}
    assert found == {f"first observations holding the line {line!r} (harness text? --strip '{pattern}' removes it)": 6
                     for line, pattern in (("Your memory for the task below:", "Your memory for the task below:"),
                                           ("Trial 0:", r"Trial \d+:"), ("Here is the task:", "Here is the task:"))}
    strip = ("Your memory for the task below:", r"Trial \d+:", "Here is the task:", r"I forgot to open the \w+\.")
    status, printed, _ = _import(path, "--allow-degenerate", "--strip", *strip)
    assert status == 0 and "read:      24 observation lines removed by --strip" in printed
    stripped = read_logs(LogSource(str(path), allow_degenerate=True, strip=strip), cell="t")
    assert stripped.filter(pc.equal(stripped["t"], 0))["observation"].to_pylist() == [
        f"{_room(i)}\nYour task is to: find key {i}." for i in range(6)]
    status, _, error = _import(path, "--allow-degenerate", "--strip", "No such line")
    assert status == 2 and "--strip 'No such line': matched no observation line" in error


def _science_history(i: int, scores: list[str]) -> dict:
    """A ScienceWorld run history: the episode keyed by id, its steps one object down, each the
    answer to its action and a running score, as strings."""
    steps = [{"action": f"step {i}.{t}", "observation": f"answer {i}.{t}", "score": score,
              "isCompleted": "true" if t == len(scores) - 1 and score == "1.0" else "false"}
             for t, score in enumerate(scores)]
    return {"episodeIdx": i, "history": {"taskDescription": f"Your task is to boil water {i}.", "history": steps}}


def test_nested_episodes_are_found_by_content_and_by_dotted_fields_in_every_layout(tmp_path):
    path = tmp_path / "histories.json"
    path.write_text(json.dumps({str(i): _science_history(i, ["0.0", "0.5", "1.0"]) for i in range(3)}))
    for source in (LogSource(str(path)), LogSource(str(path), fields={"conversations": "history.history"})):
        table, summary = inspect_logs(source, cell="t")
        assert summary.mapping["conversations"] == "history.history" and len(table) == 9
    nested_elsewhere = {"7": {"history": {"taskDescription": "t", "log": _science_history(7, ["1.0"])["history"][
        "history"]}}}
    path.write_text(json.dumps(nested_elsewhere))
    status, _, error = _import(path)  # the episode named by its key, not ':1:', and a fix that works
    assert status == 2 and "histories.json: episode '7': history: expected a list of turns or a transcript, got dict " \
        "(keys: taskDescription, log); where the turns are nested in it, name them with --fields " \
        "conversations=history.KEY" in error
    assert _import(path, "--fields", "conversations=history.log")[0] == 0
    path.write_text(json.dumps({"7": {"run": {"meta": {"log": []}}}}))
    with pytest.raises(LogFormatError, match=r"episode '7': \(episode\): no turns under .* a dotted path"):
        read_logs(LogSource(str(path)), cell="t")
    turns = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "Action: look"}]
    lines = tmp_path / "nested.jsonl"
    lines.write_text("".join(json.dumps({"data": {"messages": turns}, "meta": {"reward": r, "won": r > 0}}) + "\n"
                             for r in (0.0, 1.0)))
    status, _, error = _import(lines)
    assert status == 2 and "--fields reward=KEY (or --fields success=KEY; a dotted path where it is nested)" in error
    table, summary = inspect_logs(LogSource(str(lines), fields={"reward": "meta.reward", "success": "meta.won"}),
                                  cell="t")
    assert summary.mapping["conversations"] == "data.messages" and table["reward"].to_pylist() == [0.0, 1.0]
    assert table["success"].to_pylist() == [False, True]


def _step_rows(scores: dict[str, list[float]]) -> str:
    return "".join(json.dumps({"traj_id": e, "observation": f"o{e}{t}", "action": f"a{t}", "score": s,
                               "isCompleted": t == len(values) - 1}) + "\n"
                   for e, values in scores.items() for t, s in enumerate(values))


def test_fields_are_honoured_on_step_rows_and_a_flag_that_changes_nothing_is_refused(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text(_step_rows({"x": [0.0, 0.5, 1.0], "y": [0.0, 0.25]}))
    table, summary = inspect_logs(LogSource(str(path), fields={"reward": "score", "success": "isCompleted"}), cell="t")
    last = {r["episode"]: r for r in table.to_pylist()}
    assert [last[e]["success"] for e in sorted(last)] == [True, True]  # isCompleted read, not the reward
    assert sum(r["reward"] for r in table.to_pylist() if r["episode"] == 0) == 1.0
    assert summary.mapping["reward"] == "score" and summary.mapping["success"] == "isCompleted"
    status, _, error = _import(path, "--fields", "reward=points")
    assert status == 2 and "--fields reward=points: no episode, turn or step holds 'points'" in error
    assert "traj_id" in error and "isCompleted" in error  # the keys that are there
    per_step = LogSource(str(path), rewards="per-step", success_at=1.0)  # returns above 1: success declared
    assert read_logs(per_step, cell="t")["reward"].to_pylist()[:3] == [0.0, 0.5, 1.0]
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text(json.dumps({"messages": [{"role": "user", "content": "o"}, {"role": "assistant",
                                                                                    "content": "look"}],
                                    "reward": 1}) + "\n")
    status, _, error = _import(episodes, "--reward", "cumulative")
    assert status == 2 and "--reward: no turn or step of these logs holds a reward of its own" in error
    status, _, error = _import(path, "--outcome-line", "x (y)")
    assert status == 2 and "--outcome-line: 'x (y)' matched no line" in error


def test_step_rows_whose_observation_answers_the_action_are_read_so_when_told_and_flagged_when_not(tmp_path):
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps({"episode": 0, "action": a, "observation": o, "reward": r}) + "\n"
                            for a, o, r in (("look", "A hall.", 0.0), ("go north", "A garden.", 1.0))))
    table, summary = inspect_logs(LogSource(str(path)), cell="t")
    assert table["observation"].to_pylist() == ["A hall.", "A garden."]  # the default reading, and it says so
    assert summary.readings["step rows without next_observation, each row's observation read as the one its action "
                            "was taken on (--step-observation after if it is the action's answer)"] == 1
    table, summary = inspect_logs(LogSource(str(path), step_observation="after"), cell="t")
    assert table["observation"].to_pylist() == ["", "A hall."]
    assert table["next_observation"].to_pylist() == ["A hall.", "A garden."]
    assert summary.readings["step rows whose observation is the answer to the row's action (--step-observation "
                            "after)"] == 1
    conversation = tmp_path / "turns.jsonl"
    conversation.write_text(json.dumps({"messages": [{"role": "user", "content": "o"},
                                                     {"role": "assistant", "content": "look"}], "reward": 1}) + "\n")
    status, _, error = _import(conversation, "--step-observation", "after")
    assert status == 2 and "--step-observation: these logs hold no step rows" in error


def test_a_running_score_is_read_as_differences_and_a_score_that_goes_down_asks(tmp_path):
    path = tmp_path / "histories.json"
    scores = ["0.0", "0.25", "0.25", "1.0"]
    path.write_text(json.dumps({"3": _science_history(3, scores), "4": _science_history(4, ["0.0", "0.5"])}))
    table, summary = inspect_logs(LogSource(str(path), step_observation="after"), cell="t")
    first = table.filter(pc.equal(table["episode"], 0)).to_pylist()
    running = [float(s) for s in scores]
    assert [r["reward"] for r in first] == [b - a for a, b in zip([0.0, *running], running)]
    assert [r["score"] for r in first] == running and first[-1]["success"]
    assert summary.readings["episodes whose per-step 'score' is a running score, read as its per-step differences"] == 2
    assert read_logs(LogSource(str(path), step_observation="after", rewards="per-step", success_at=1.0), cell="t")[
        "reward"].to_pylist()[:4] == running  # a return above 1 is a success only where declared
    path.write_text(json.dumps({"5": _science_history(5, ["0.0", "0.5", "0.25"])}))
    status, _, error = _import(path, "--step-observation", "after")
    assert status == 2 and "episode '5': (reward per step): the per-step 'score' goes down (0.5 → 0.25)" in error
    assert _import(path, "--step-observation", "after", "--reward", "cumulative")[0] == 0
    steps = tmp_path / "rewards.jsonl"  # a running total under 'reward': read so only when told
    steps.write_text("".join(json.dumps({"episode": 0, "observation": f"o{t}", "action": "a", "reward": r}) + "\n"
                             for t, r in enumerate([0.5, 1.0])))
    assert read_logs(LogSource(str(steps), success_at=1.0), cell="t")["reward"].to_pylist() == [0.5, 1.0]
    assert read_logs(LogSource(str(steps), rewards="cumulative"), cell="t")["reward"].to_pylist() == [0.5, 0.5]


def test_bare_message_lists_load_and_their_missing_outcome_is_refused_by_name(tmp_path):
    turns = [{"role": "user", "content": "You are in a hall."}, {"from": "gpt", "content": "Action: look"},
             {"role": "user", "content": "Dark."}]
    path = tmp_path / "icl.json"
    path.write_text(json.dumps([turns, turns]))
    status, _, error = _import(path)
    assert status == 2 and error.count("reward: missing: a bare list of messages holds no outcome") == 2
    assert 'e.g. {"messages": [...], "success": true}' in error and "icl.json:1: " in error and "icl.json:2: " in error
    lines = tmp_path / "icl.jsonl"
    lines.write_text(json.dumps(turns) + "\n" + json.dumps({"messages": turns, "success": True}) + "\n")
    status, _, error = _import(lines)
    assert status == 2 and "icl.jsonl:1: reward: missing: a bare list" in error and "icl.jsonl:2" not in error
    one = tmp_path / "one.json"
    one.write_text(json.dumps(turns))
    with pytest.raises(LogFormatError, match=r"one.json:1: reward: missing: a bare list"):
        read_logs(LogSource(str(one)), cell="t")
    lines.write_text(json.dumps({"messages": turns, "success": True}) + "\n")
    table, summary = inspect_logs(LogSource(str(lines)), cell="t")
    assert table["action"].to_pylist() == ["look"]


def test_a_debug_log_is_refused_as_not_a_trajectory_log(tmp_path):
    path = tmp_path / "search.log"
    path.write_text("2024-03-21 20:13:37,657 - INFO - DFS at node depth 0...\n2024-03-21 20:13:37,677 - INFO - PROMPT: "
                    "\nSolve a question answering task.\nQuestion: Which magazine was started first?\nThought 1: \n\n"
                    "2024-03-21 20:13:39,258 - INFO - SAMPLED ACTION: [\"Action 1: Search[Arthur's Magazine]\"]\n"
                    "2024-03-21 20:13:40,129 - INFO - Feedback: {'steps': 1, 'answer': None}\n")
    status, _, error = _import(path)
    assert status == 2 and "search.log: not a trajectory log: a debug log, 4 of its lines are logging records" in error
    assert ":1:" not in error and "action turn" not in error


def test_a_debug_log_behind_a_banner_or_in_absl_form_is_refused_as_such(tmp_path):
    path = tmp_path / "run.log"
    for text in ("Run started with config {'model': 'gpt-4'}\n" + "".join(
            f"[2024-03-21 20:13:3{i}] INFO agent: Action {i}: Search[x]\n" for i in range(1, 4)),
                 "".join(f"I0321 20:13:3{i}.532 agent.py:1{i}] Observation {i}: nothing\n" for i in range(1, 4))):
        path.write_text(text)
        status, _, error = _import(path)
        assert status == 2 and "run.log: not a trajectory log: a debug log, 3 of its lines are logging records" in error
        assert "--agent-prefix" not in error


def test_an_outcome_line_reads_correct_and_incorrect_and_one_it_cannot_read_is_named(tmp_path):
    """ReAct's "Answer is CORRECT" read as the outcome of each Question: block, with no section
    header; a first group that is neither a reward nor a flag is refused at its line."""
    text = REACT_SECTIONS.split("------------- BEGIN CORRECT AGENTS -------------\n")[1].replace(
        "------------- BEGIN INCORRECT AGENTS -----------\n", "")
    path = tmp_path / "react.txt"
    path.write_text(text)
    table = read_logs(LogSource(str(path), outcome_line=r"Answer is (CORRECT|INCORRECT)"), cell="t")
    outcomes = re.findall(r"Answer is (CORRECT|INCORRECT)", text)
    last = {r["episode"]: r["success"] for r in table.to_pylist()}
    assert [last[e] for e in sorted(last)] == [o == "CORRECT" for o in outcomes] == [True, True, False]
    status, _, error = _import(path, "--outcome-line", r"Answer is (\w)")
    line = text.splitlines().index("Observation 2: Answer is CORRECT") + 1
    assert status == 2 and f"react.txt:{line}: --outcome-line 'Answer is (\\\\w)' matches this line, but its first " \
        "group, 'C', is no reward nor true/false" in error


def test_lines_that_run_on_into_a_new_task_are_refused_until_an_empty_or_outcome_line_tells(tmp_path):
    """Where a room description follows the last answer with no empty line, it may end that
    answer or open the next task: refused; an empty line, or the outcome line, settles it."""
    first = ("You are in a room. You see a shelf 1.\nYour task is to: put a mug in shelf.\n> go to shelf 1\n"
             "On the shelf 1, you see a mug 1.\nreward: 1\n")
    second = ("You are in a room. You see a fridge 1.\nYour task is to: heat an egg.\n> open fridge 1\nIt is open.\n"
              "reward: 0\n")
    path = tmp_path / "runs.txt"
    path.write_text(first + second)
    status, _, error = _import(path)
    assert status == 2 and "runs.txt:7: an episode begins here (a new task), but the lines above it, from line 4, " \
        "follow the agent's last line with no empty line between" in error
    assert "Put an empty line where this task's text begins, or name the line that ends each episode with " \
        "--outcome-line REGEX" in error
    table = read_logs(LogSource(str(path), outcome_line=r"reward: (\d)"), cell="t")
    firsts = table.filter(pc.equal(table["t"], 0))["observation"].to_pylist()
    assert firsts == [block.split("\n> ")[0] for block in (first, second)]
    assert table["reward"].to_pylist() == [1.0, 0.0] and "fridge" not in table["next_observation"][0].as_py()
    assert _import(path, "--outcome-line", r"reward: (\d)")[0] == 0
    path.write_text(re.sub(r"reward: \d\n", "", first + "\n" + second))  # an empty line alone splits them too
    status, _, error = _import(path)
    assert status == 2 and "runs.txt:1: reward: missing" in error and "runs.txt:6: reward: missing" in error


def test_an_episode_begun_where_react_numbering_restarts_with_no_question_says_what_to_write(tmp_path):
    path = tmp_path / "restart.txt"
    path.write_text("Claim: Paris is in France.\nAction 1: Search[Paris]\nObservation 1: It is. reward=1\n"
                    "Thought 1: next\nAction 1: Search[Rome]\nObservation 1: Italy. reward=0\n")
    status, _, error = _import(path, "--outcome-line", r"reward=(\d)")
    assert status == 2 and "restart.txt:4: line 4: an action turn with no observation before it" in error
    assert "write the question above its 'Thought 1:'" in error and "--fields opening" not in error
    path.write_text(path.read_text().replace("Thought 1: next", "\nClaim: Rome is in Spain.\nThought 1: next"))
    table = read_logs(LogSource(str(path), outcome_line=r"reward=(\d)"), cell="t")
    assert table["observation"].to_pylist() == ["Claim: Paris is in France.", "Claim: Rome is in Spain."]


def _counts(table) -> tuple[int, int, int]:
    """(episodes, steps, successes) of an imported table."""
    last = {r["episode"]: r["success"] for r in table.to_pylist()}
    return len(last), table.num_rows, sum(last.values())


def test_turns_under_a_key_of_any_name_are_found_by_content_and_episodes_beside_statistics(tmp_path):
    """AgentGym's trajectories file: ``{"episodes": [{..., "transitions": [step rows]}],
    "statistics": {...}}``; no turn key of a known name, found by what the list holds."""
    episodes = [{"episode_id": e, "success": e == 0, "transitions": [
        {"step": t + 1, "action": f"move {t}", "observation": f"at {e}.{t}", "reward": 0.1, "done": False}
        for t in range(3)]} for e in range(2)]
    path = tmp_path / "trajectories.json"
    path.write_text(json.dumps({"episodes": episodes, "statistics": {"num_episodes": 2, "success_rate": 0.5}}))
    table, summary = inspect_logs(LogSource(str(path), step_observation="after"), cell="t")
    assert summary.layout == "JSON object, episodes under 'episodes'"
    assert summary.mapping["conversations"] == "transitions"
    assert _counts(table) == (len(episodes), sum(len(e["transitions"]) for e in episodes),
                              sum(e["success"] for e in episodes)) == (2, 6, 1)
    assert table["next_observation"].to_pylist()[:3] == [row["observation"] for row in episodes[0]["transitions"]]


def test_fields_read_where_they_are_used_a_dotted_id_and_a_log_prob_kept_on_the_episode(tmp_path):
    turns = [{"role": "user", "content": "A hall."}, {"role": "assistant", "content": "Action: look"},
             {"role": "user", "content": "Dark."}]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps({"meta": {"id": i, "lp": -1.0}, "messages": turns, "reward": 1.0}) + "\n"
                            for i in (7, 3)))
    assert sorted(set(read_logs(LogSource(str(path), fields={"episode_id": "meta.id"}), cell="t")["episode"]
                      .to_pylist())) == [3, 7]
    status, _, error = _import(path, "--fields", "logprob=meta.lp")
    assert status == 2 and "--fields logprob=meta.lp: no turn or step holds 'meta.lp', so this changes nothing" in error


def test_a_table_of_steps_reads_in_any_column_order_as_csv_or_tsv_and_fields_name_its_columns(tmp_path):
    """One CSV per episode in either of BALROG's column orders, a TSV whose columns need naming,
    an episode column, a counter that starts again: each read as a user would expect."""
    newer = tmp_path / "newer.csv"  # BALROG's later column order, no summary beside it
    newer.write_text('Step,Action,Reasoning,Observation,Reward,Done\n0,go north,,"A hall.\nA door.",0,False\n'
                     "1,open door,I see a door,Open.,1,True\n")
    table, summary = inspect_logs(LogSource(str(newer)), cell="t")
    assert summary.layout == "CSV, one episode per file" and table["action"].to_pylist() == ["go north", "open door"]
    assert table["observation"][0].as_py() == "A hall.\nA door." and table["response"][1].as_py().startswith("I see")
    assert table["reward"].to_pylist() == [0.0, 1.0] and table["success"].to_pylist() == [False, True]
    assert any("--step-observation after" in line for line in summary.readings)  # the reading it cannot know
    tsv = tmp_path / "run.tsv"
    tsv.write_text("turn\tRoom\tCommand\treward\nt0\tA hall.\tgo north\t0\nt1\tA room.\ttake key\t1\n")
    status, _, error = _import(tsv, "--env", "textworld")
    assert status == 2 and "--fields observation=COLUMN action=COLUMN" in error and "Room, Command" in error
    status, printed, _ = _import(tsv, "--env", "textworld", "--fields", "observation=Room", "action=Command")
    assert status == 0 and "layout:    TSV, one episode per file" in printed and "steps: 2   successes: 1" in printed
    grouped = tmp_path / "two.csv"
    grouped.write_text("episode,observation,action,reward\n7,a,x,0\n8,b,y,1\n7,c,z,1\n")
    assert [r["action"] for r in read_logs(LogSource(str(grouped)), cell="t").to_pylist()] == ["x", "z", "y"]
    state = tmp_path / "state.jsonl"  # the same names for JSON step rows, top level or nested
    state.write_text("".join(json.dumps({"episode": 0, "state": f"s{t}", "command": f"c{t}", "reward": t}) + "\n"
                             for t in range(2)))
    assert _import(state, "--env", "textworld")[0] == 2
    named = LogSource(str(state), fields={"observation": "state", "action": "command"})
    assert read_logs(named, cell="t")["action"].to_pylist() == ["c0", "c1"]
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps([{"trajectory": [{"state": "s0", "command": "c0"}], "reward": 1}]))
    assert read_logs(LogSource(str(nested), fields={"observation": "state", "action": "command"}), cell="t")[
        "observation"].to_pylist() == ["s0"]
    restarted = tmp_path / "run.csv"
    restarted.write_text("Step,Observation,Action,Reward\n0,a,x,0\n1,b,y,1\n0,c,z,0\n1,d,w,0\n")
    table, summary = inspect_logs(LogSource(str(restarted)), cell="t")
    assert len(set(table["episode"].to_pylist())) == 2 and "split where its step counter goes back" in summary.layout


def test_step_rows_of_one_run_split_where_a_counter_goes_back_or_the_game_restarts(tmp_path):
    path = tmp_path / "run.jsonl"

    def write(rows):
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))

    write([{"Step": i + 1, "Moves": m, "Observation": f"o{i}", "Action": f"a{i}", "Reward": r, "Success": s}
           for i, (m, r, s) in enumerate([(1, 0, False), (2, 1, True), (1, 0, False), (2, 0, False), (3, 0, False)])])
    table, summary = inspect_logs(LogSource(str(path)), cell="t")
    assert [len([r for r in table.to_pylist() if r["episode"] == e]) for e in (0, 1)] == [2, 3]
    assert summary.layout == "JSONL, one step per line" and summary.successes == 1
    write([{"observation": f"o{i}", "action": "a", "reward": 0, "restart": i == 2} for i in range(4)])
    assert len(set(read_logs(LogSource(str(path)), cell="t")["episode"].to_pylist())) == 2
    write([{"observation": f"o{i}", "action": "a", "reward": 0} for i in range(3)])
    status, _, error = _import(path, "--env", "textworld")
    assert status == 2 and "no key that groups them into episodes" in error and "a step counter" in error


def test_a_held_positive_reward_that_never_goes_down_asks_whether_it_is_a_running_score(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps({"episode": 0, "observation": f"o{t}", "action": f"a{t}", "reward": r,
                                        "success": t == 2}) + "\n" for t, r in enumerate([0, 1, 1])))
    status, _, error = _import(path, "--env", "textworld")
    assert status == 2 and "stays at 1 from one step to the next" in error and "--reward cumulative" in error
    assert read_logs(LogSource(str(path), rewards="cumulative"), cell="t")["reward"].to_pylist() == [0.0, 1.0, 0.0]
    assert read_logs(LogSource(str(path), rewards="per-step"), cell="t")["reward"].to_pylist() == [0.0, 1.0, 1.0]
    path.write_text("".join(json.dumps({"episode": 0, "observation": f"o{t}", "action": f"a{t}", "reward": r,
                                        "success": t == 2}) + "\n" for t, r in enumerate([0, 1, 0])))
    assert read_logs(LogSource(str(path)), cell="t")["reward"].to_pylist() == [0.0, 1.0, 0.0]  # it went down: per step


def test_scores_are_never_success_in_silence(tmp_path):
    """A return above 1 with no success flag is refused naming the flags; a fraction under a named
    success key needs --success-at; a running score read as success says how to declare it."""
    path = tmp_path / "points.jsonl"
    turns = [{"from": "human", "value": "A room."}, {"from": "gpt", "value": "Action: look"},
             {"from": "human", "value": "Dark."}]
    path.write_text("".join(json.dumps({"conversations": turns, "reward": r, "progression": p}) + "\n"
                            for r, p in ((30, 0.5), (350, 1.0))))
    status, _, error = _import(path, "--env", "textworld")
    assert status == 2 and "2 episode(s) without a success flag return more than 1 (up to 350)" in error
    assert "--fields success=progression" in error
    status, printed, _ = _import(path, "--env", "textworld", "--max-score", "350")
    assert status == 0 and "successes: 1   reward range: [0.0857143, 1]" in printed
    assert _import(path, "--env", "textworld", "--fields", "success=progression")[0] == 2  # 0.5 is no flag
    status, printed, _ = _import(path, "--env", "textworld", "--fields", "success=progression", "--success-at", "1")
    assert status == 0 and "successes: 1" in printed and "'progression' reaching --success-at 1" in printed
    status, _, error = _import(path, "--env", "textworld", "--fields", "success=progression", "--success-at", "1",
                               "--max-score", "350")
    assert status == 0
    flagged = tmp_path / "flagged.jsonl"
    flagged.write_text(json.dumps({"conversations": turns, "reward": 1, "success": True}) + "\n")
    status, _, error = _import(flagged, "--env", "textworld", "--success-at", "0.5")
    assert status == 2 and "--success-at: every episode's success is given by the logs" in error
    histories = tmp_path / "histories.json"  # a running score reaching 1, nothing declared: said, with the flags
    histories.write_text(json.dumps({"3": _science_history(3, ["0.0", "0.5", "1.0"])}))
    _, summary = inspect_logs(LogSource(str(histories), step_observation="after"), cell="t")
    assert summary.successes == 1 and "--max-score N" in summary.warnings[0]
    assert any(line.startswith("warning:   1 episode(s)") for line in summary.lines())
    _, summary = inspect_logs(LogSource(str(histories), step_observation="after", max_score=1.0), cell="t")
    assert summary.successes == 1 and not summary.warnings


DEMOS = """Interact with a household to solve a task. Here are two examples.
You are in the middle of a room. Looking quickly around you, you see a desk 1.
Your task is to: put a mug in desk.
> go to desk 1
On the desk 1, you see a mug 1.
STATUS: OK
You are in the middle of a room. Looking quickly around you, you see a shelf 1.
Your task is to: look at a book.
> look
Nothing happens.
STATUS: FAIL
New plan: look for the book first.

Here is the task:
"""


def test_few_shot_demonstrations_before_each_task_are_left_out_and_counted(tmp_path):
    """A Reflexion-style run log that shows the agent two demonstrations (their own '>' and
    STATUS lines) before each task: only the tasks are episodes."""
    path = tmp_path / "trial_0.log"
    tasks = [("You are in a kitchen.\nYour task is to: heat an egg.\n> go to fridge 1\nThe fridge 1 is closed.\n"
              "> open fridge 1\nYou open the fridge 1.\n", "FAIL"),
             ("You are in a hall.\nYour task is to: find a key.\n> open drawer 1\nYou see a key 1.\n", "OK")]
    path.write_text("".join(f"\n#####\n\nEnvironment #{i}:\n{DEMOS}{task}\nSTATUS: {status}\n\n#####\n"
                            for i, (task, status) in enumerate(tasks)))
    table, summary = inspect_logs(LogSource(str(path)), cell="t")
    assert len(set(table["episode"].to_pylist())) == 2 and table["action"].to_pylist() == [
        "go to fridge 1", "open fridge 1", "open drawer 1"]
    assert summary.successes == 1 and summary.readings[
        "few-shot demonstrations left out (from 'Here are … examples' to 'Here is the task')"] == 2
    assert not any("mug" in o or "book" in o for o in table["observation"].to_pylist())
    path.write_text(DEMOS.replace("Here is the task:\n", "") + tasks[0][0] + "STATUS: FAIL\n")
    status, _, error = _import(path, "--env", "alfworld")
    assert status == 2 and f"{path}:1: few-shot demonstrations begin here" in error and "'Here is the task:'" in error
    prompt = tmp_path / "react.jsonl"  # the same in a transcript held as one string, under a key of another name
    prompt.write_text(json.dumps({"id": 4, "prompt": DEMOS + tasks[1][0], "reward": 1, "correct": True}) + "\n")
    table, summary = inspect_logs(LogSource(str(prompt)), cell="t")
    assert table["action"].to_pylist() == ["open drawer 1"] and summary.mapping["conversations"] == "prompt"
    assert summary.readings["few-shot demonstrations left out (from 'Here are … examples' to 'Here is the task')"] == 1


def test_a_transcript_in_a_string_key_of_any_name_is_found_and_two_candidates_are_named(tmp_path):
    path = tmp_path / "runs.jsonl"
    transcript = ("Question: Who wrote Hamlet?\nThought 1: I search it.\nAction 1: Search[Hamlet]\n"
                  "Observation 1: Hamlet is a play by Shakespeare.\nAction 2: Finish[Shakespeare]\nObservation 2: "
                  "Episode finished, reward = 1\n")
    path.write_text(json.dumps({"question": "Who wrote Hamlet?", "prompt": transcript, "reward": 1,
                                "correct": True}) + "\n")
    table, summary = inspect_logs(LogSource(str(path)), cell="t")
    assert table["action"].to_pylist() == ["Search[Hamlet]", "Finish[Shakespeare]"] and summary.successes == 1
    path.write_text(json.dumps({"prompt": transcript, "output": transcript, "reward": 1}) + "\n")
    status, _, error = _import(path, "--env", "hotpotqa")
    assert status == 2 and "both 'prompt' and 'output' could hold the turns" in error
    assert _import(path, "--env", "hotpotqa", "--fields", "conversations=prompt")[0] == 0


def test_a_local_path_never_leaves_the_machine_and_an_unknown_suffix_is_refused_at_once(tmp_path):
    """`adwm import` of a local file whose suffix names no format answers in under 2 s, before
    any reader (or the hub client) loads, naming the formats and the flag; the flag reads it."""
    import subprocess
    import sys
    import time

    path = tmp_path / "run.dat"
    path.write_text(json.dumps({"conversations": [{"from": "human", "value": "A room."},
                                                  {"from": "gpt", "value": "Action: look"}], "reward": 1}) + "\n")
    probe = ("import sys, time; start = time.monotonic(); from adwm_core import cli; "
             f"code = cli.main(['import', {str(path)!r}, '--env', 'textworld']); "
             "print(code, round(time.monotonic() - start, 2), sorted(m for m in ('datasets', 'huggingface_hub', "
             "'pyarrow', 'fsspec') if m in sys.modules))")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env={"PATH": "", "HF_ENDPOINT": "http://10.255.255.1"})
    wall = time.monotonic() - started
    code, seconds, loaded = done.stdout.split(" ", 2)
    assert code == "2" and float(seconds) < 2.0 and loaded.strip() == "[]", (done.stdout, done.stderr, wall)
    assert "suffix '.dat'" in done.stderr and "Formats read: .jsonl, .json" in done.stderr
    assert "--format jsonl" in done.stderr
    status, printed, _ = _import(path, "--env", "textworld", "--format", "jsonl")
    assert status == 0 and "episodes:  1   steps: 1   successes: 1" in printed
    status, _, error = _import(path, "--env", "textworld", "--format", "hf")
    assert status == 2 and "--format hf reads a folder saved with save_to_disk" in error


def test_a_folder_names_every_file_it_did_not_read(tmp_path):
    folder = tmp_path / "runs"
    (folder / ".ipynb_checkpoints").mkdir(parents=True)
    episode = json.dumps({"conversations": [{"from": "human", "value": "A room."},
                                            {"from": "gpt", "value": "Action: look"}], "reward": 1}) + "\n"
    (folder / "a.jsonl").write_text(episode)
    (folder / ".ipynb_checkpoints" / "a-checkpoint.jsonl").write_text(episode)
    (folder / ".ipynb_checkpoints" / "b-checkpoint.jsonl").write_text(episode)
    (folder / "plot.png").write_bytes(b"\x89PNG")
    (folder / "NOTES").write_text("to do")
    _, summary = inspect_logs(LogSource(str(folder)), cell="t")
    assert summary.episodes == 1 and summary.skipped == [
        ".ipynb_checkpoints: hidden (2 files)",
        "NOTES: no suffix, not a logs file (read: .jsonl, .json, .txt, .log, .md, .markdown, .csv, .tsv, .parquet; "
        "another suffix is read only as the one file named, with --format)",
        "plot.png: suffix '.png', not a logs file (read: .jsonl, .json, .txt, .log, .md, .markdown, .csv, .tsv, "
        ".parquet; another suffix is read only as the one file named, with --format)"]
    status, printed, _ = _import(folder, "--env", "textworld")
    assert status == 0 and "skipped:   plot.png: suffix '.png'" in printed
    (folder / "a.jsonl").unlink()
    status, _, error = _import(folder, "--env", "textworld")
    assert status == 2 and "the folder holds no logs file" in error and "plot.png: suffix '.png'" in error
    run = tmp_path / "submission"  # a leaderboard submission: tables, their summaries, a README, a run summary, logs
    (run / "task" / "logs").mkdir(parents=True)
    (run / "README.md").write_text("# My agent\n\nScores are in the JSON files.\n")
    (run / "task" / "task_summary.json").write_text(json.dumps({"progression_percentage": 50.0}))
    (run / "task" / "logs" / "run.log").write_text("".join(f"2024-03-21 20:13:3{i},532 - INFO - step {i}\n"
                                                           for i in range(4)))
    (run / "task" / "task_run_00.csv").write_text("Step,Observation,Action,Reward,Done\n0,A hall.,go north,1,True\n")
    (run / "task" / "task_run_00.json").write_text(json.dumps({"task": "task", "done": True}))
    table, summary = inspect_logs(LogSource(str(run)), cell="t")
    assert summary.episodes == 1 and table["task"].to_pylist() == ["task"]  # the summary beside its table read
    assert [entry.split(":")[0] for entry in summary.skipped] == ["task/task_summary.json", "README.md",
                                                                 "task/logs/run.log"]
    assert "a debug log (4 Python logging records)" in summary.skipped[2]
    (run / "task" / "task_run_00.csv").write_text('Step,Observation,Action,Reward,Done\n0,A hall.,go north,1,True\n'
                                                  '1,"The process was killed here')
    status, _, error = _import(run, "--env", "textworld")
    assert status == 2 and "task_run_00.csv:3: a row without its action (the file ends inside it" in error
