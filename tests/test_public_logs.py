"""Real logs load as their projects ship them (tests/data/public_logs/SOURCES.md), every layout
the importer promises reads without a flag, and nothing is read wrong in silence: a reply
without an action is never an action, an instruction/"OK" opening is never a step, an
ambiguous outcome is refused with the flag that settles it — and that flag works."""

import gzip
import math
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adwm_core import cli
from adwm_core.api import LoggedEpisodes
from adwm_core.data.logs import LogFormatError, import_logs, inspect_logs, read_logs
from adwm_core.specs import LogSource

PUBLIC = Path(__file__).parent / "data" / "public_logs"


def _counts(table: pa.Table) -> tuple[int, int, int]:
    """(episodes, steps, successes) of an imported table."""
    rows = table.to_pylist()
    last = {}
    for row in rows:
        last[row["episode"]] = row["success"]
    return len(last), len(rows), sum(last.values())


def test_knowagent_alfworld_jsonl_loads_as_shipped():
    """KnowAgent's ALFWorld runs: JSONL, ``traj`` a "> " transcript, ``result`` true/false/0, and
    "> Think:" / "> ActionPath:" lines that are no action."""
    path = PUBLIC / "knowagent_alfworld_first10.jsonl"
    episodes = [json.loads(line) for line in path.read_text().splitlines()]
    actions = [line for e in episodes for line in e["traj"].splitlines()
               if line.startswith("> ") and not re.match(r"> (Think|ActionPath):", line)]
    table, summary = inspect_logs(LogSource(str(path)), cell="knowagent")
    assert _counts(table) == (len(episodes), len(actions), sum(e["result"] is True for e in episodes)) == (10, 204, 3)
    # no labelled line is an action ("> ActionPath" alone was sent, and answered "Nothing happens.")
    assert not any(re.match(r"(think|actionpath):", a, re.I) for a in table["action"].to_pylist())
    assert summary.layout == "JSONL, one episode per line" and summary.mapping["success"] == "result"
    assert summary.readings["replies without an action folded into the next action"] == 211


def test_fireact_hotpotqa_json_object_loads_as_shipped():
    """FireAct's HotpotQA runs: one JSON object keyed by question id, role/content turns under
    ``traj``, a boolean ``reward`` and no success key."""
    path = PUBLIC / "fireact_hotpotqa_items145to165.json"
    episodes = json.loads(path.read_text())
    table, summary = inspect_logs(LogSource(str(path)), cell="fireact")
    agent_turns = sum(t["role"] == "assistant" for e in episodes.values() for t in e["traj"])
    assert _counts(table) == (len(episodes), agent_turns, sum(e["reward"] for e in episodes.values())) == (20, 35, 7)
    assert summary.layout == "JSON object of episodes keyed by id"
    assert summary.readings["rewards given as true/false, read as 1.0/0.0"] == 20
    assert sorted(set(table["reward"].to_pylist())) == [0.0, 1.0]
    assert table["action"][0].as_py() == "finish[Santana]"  # after the 'Action:' cue, not the thought


def test_reflexion_alfworld_transcripts_load_as_shipped():
    """Reflexion's ALFWorld transcripts: plain text, episodes ending at 'STATUS: FAIL', a
    reflection after each, "> think:" lines answered "OK."/"Ok.", and bare "> " replies."""
    path = PUBLIC / "reflexion_alfworld_few_shot_examples.txt"
    text = path.read_text()
    table, summary = inspect_logs(LogSource(str(path)), cell="reflexion")
    assert _counts(table) == (text.count("STATUS:"), len(re.findall(r"^> (?!think:)\S", text, re.M)), 0) == (2, 22, 0)
    actions = table["action"].to_pylist()
    assert not any(a.startswith("think") or a == "" for a in actions)
    assert not any(o.strip() in ("OK.", "Ok.") or o.startswith("New plan") for o in table["observation"].to_pylist())
    assert summary.layout == "text transcripts, each ending at a STATUS line"


def test_adapt_alfworld_results_load_with_the_options_their_layout_needs():
    """ADaPT's ALFWorld results: episodes grouped by task type, the first observation apart
    (``problem``) from a transcript (``trace``) that starts with the agent's unprefixed line."""
    path = PUBLIC / "adapt_alfworld_first6_of_two_tasks.json"
    groups = json.loads(path.read_text())
    with pytest.raises(LogFormatError, match=r"--fields conversations=KEY"):
        read_logs(LogSource(str(path)), cell="adapt")
    table, summary = inspect_logs(LogSource(str(path), fields={"conversations": "trace", "opening": "problem"}),
                                  cell="adapt")
    episodes = [e for g in groups.values() for e in g.values()]
    steps = sum(len(re.findall(r"^>\s*\n*\s*(?!think:)\S", e["trace"], re.M)) for e in episodes)
    successes = sum(e["reward"] is True for e in episodes)
    assert _counts(table) == (sum(bool(e["trace"]) for e in episodes), steps, successes) == (11, 138, 7)
    assert summary.readings["episodes without a single action, left out"] == 1
    assert set(table["task"].to_pylist()) == set(groups)
    first = table.filter(pa.compute.equal(table["episode"], 0)).to_pylist()[0]
    assert first["observation"].startswith("You are in the middle of a room") and first["action"] == "go to desk 1"


def test_a_thought_only_reply_is_never_an_action_and_step_keeps_it_marked(tmp_path):
    transcript = ("You are in a hall.\nYour task is to: find a key.\n> think: the key may be in the drawer.\nOK.\n"
                  "> open drawer\nYou see a key.\n> think: take it.\nOK.\n> take key\nTaken.")
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"trajectory": transcript, "won": True}) + "\n")
    folded = read_logs(LogSource(str(path)), cell="t").to_pylist()
    assert [r["action"] for r in folded] == ["open drawer", "take key"]
    assert folded[0]["response"].startswith("think: the key may be in the drawer.")
    assert [r["next_observation"] for r in folded] == ["You see a key.", "Taken."]
    kept = read_logs(LogSource(str(path), thoughts="step"), cell="t").to_pylist()
    assert [r["action"] for r in kept] == ["think: the key may be in the drawer.", "open drawer", "think: take it.",
                                           "take key"]
    assert kept[0]["next_observation"] == "OK."
    conversation = {"messages": [{"role": "user", "value": "o"}, {"role": "assistant", "value": "Thought: hmm"},
                                 {"role": "assistant", "value": "Action: look"}, {"role": "user", "value": "o2"}],
                    "reward": 1}
    path.write_text(json.dumps(conversation) + "\n")
    table, summary = inspect_logs(LogSource(str(path)), cell="t")
    assert table["action"].to_pylist() == ["look"] and summary.readings


def test_an_instruction_and_ok_opening_is_never_a_step(tmp_path):
    episode = {"conversations": [
        {"from": "human", "value": "You are a shopping agent. Answer with Action: search[...] or click[...]."},
        {"from": "gpt", "value": "OK."},
        {"from": "human", "value": "WebShop [SEP] Instruction: a red mug"},
        {"from": "gpt", "value": "Action: search[red mug]"}, {"from": "human", "value": "Results"}],
        "reward": 0.5, "success": False}
    path = tmp_path / "sft.json"
    path.write_text(json.dumps([episode]))
    table, summary = inspect_logs(LogSource(str(path)), cell="t")
    assert table["action"].to_pylist() == ["search[red mug]"]
    assert table["task_description"][0].as_py().startswith("You are a shopping agent")
    assert summary.readings["preamble turns dropped (instruction and acknowledgement)"] == 2
    told = read_logs(LogSource(str(path), preamble_turns=0), cell="t")
    assert told["action"].to_pylist() == ["OK", "search[red mug]"]


def _episode(i: int, **outcome) -> dict:
    return {"conversations": [{"from": "human", "value": f"room {i}"}, {"from": "gpt", "value": "Action: look"},
                              {"from": "human", "value": "dark"}], **outcome}


@pytest.mark.parametrize("layout, write", [
    ("JSON object of episodes keyed by id",
     lambda p, es: p.write_text(json.dumps({f"ep{i}": e for i, e in enumerate(es)}))),
    ("JSON object {'episodes': [episodes]}", lambda p, es: p.write_text(json.dumps({"episodes": es}))),
    ("JSON array of episodes", lambda p, es: p.write_text(json.dumps(es))),
    ("JSONL, one episode per line", lambda p, es: p.write_bytes(
        b"\xef\xbb\xbf" + "".join(json.dumps(e) + "\n" for e in es).encode())),  # with a byte-order mark
])
def test_every_json_layout_loads_without_a_flag(tmp_path, layout, write):
    episodes = [_episode(i, reward=True, success=True) for i in range(3)] + [_episode(3, reward="0.5", success=False)]
    path = tmp_path / "logs.json"
    write(path, episodes)
    table, summary = inspect_logs(LogSource(str(path)), cell="t")
    assert summary.layout == layout and _counts(table) == (4, 4, 3)
    assert table["reward"].to_pylist() == [1.0, 1.0, 1.0, 0.5]
    assert summary.readings == {"rewards given as true/false, read as 1.0/0.0": 3,
                                "rewards given as numeric strings, read as numbers": 1}


def test_a_folder_of_gzipped_sessions_and_tables_of_steps_load(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    for i in range(3):
        with gzip.open(folder / f"session_{i}.jsonl.gz", "wt") as f:
            f.write(json.dumps(_episode(i, score=1.0 * i, won=i == 2)) + "\n")
    table, summary = inspect_logs(LogSource(str(folder)), cell="t")
    assert _counts(table) == (3, 3, 1) and summary.mapping["reward"] == "score" and summary.mapping["success"] == "won"
    steps = [{"episode": e, "t": t, "observation": f"o{e}{t}", "action": f"a{t}", "reward": float(t), "success": e == 1}
             for e in range(2) for t in range(3)]
    lines = tmp_path / "steps.jsonl"
    lines.write_text("".join(json.dumps(s) + "\n" for s in steps))
    table, summary = inspect_logs(LogSource(str(lines)), cell="t")
    assert summary.layout == "JSONL, one step per line" and _counts(table) == (2, 6, 1)
    parquet = tmp_path / "steps.parquet"
    pq.write_table(pa.Table.from_pylist(steps), parquet)
    assert cli.main(["import", str(parquet), "--env", "textworld-express"]) == 0
    assert read_logs(LogSource(str(parquet)), cell="t")["reward"].to_pylist() == [0.0, 1.0, 2.0] * 2


def test_an_ambiguous_outcome_is_refused_with_the_flag_that_settles_it(tmp_path, capsys):
    path = tmp_path / "scored.jsonl"
    path.write_text("".join(json.dumps(_episode(i, reward=1.0, score=0.25 * i, success=True)) + "\n" for i in range(3)))
    assert cli.main(["import", str(path), "--env", "textworld-express"]) == 2
    error = capsys.readouterr().err
    assert "both 'reward' and 'score' could be the episode's reward" in error and "--fields reward=score" in error
    assert cli.main(["import", str(path), "--env", "textworld-express", "--fields", "reward=score"]) == 0
    printed = capsys.readouterr().out
    assert "reward ← score" in printed and "reward range: [0, 0.5]" in printed
    agreeing = tmp_path / "agreeing.jsonl"  # two keys that never disagree are no ambiguity
    agreeing.write_text(json.dumps(_episode(0, reward=1.0, score=1.0, success=True)) + "\n")
    assert read_logs(LogSource(str(agreeing)), cell="t")["reward"].to_pylist() == [1.0]


def test_fields_renames_keys_from_the_cli_and_every_suggested_fix_works(tmp_path, capsys):
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps({"steps_taken": [{"speaker": "user", "text": "o"}, {"speaker": "assistant",
                                                                                   "text": "Action: look"}],
                                "outcome": 1.0}) + "\n")
    assert cli.main(["import", str(path), "--env", "hotpotqa"]) == 2
    assert "--fields conversations=KEY" in capsys.readouterr().err
    args = ["import", str(path), "--env", "hotpotqa", "--fields", "conversations=steps_taken"]
    assert cli.main(args) == 2
    assert "--fields role=KEY" in capsys.readouterr().err
    assert cli.main([*args, "role=speaker", "text=text"]) == 2
    assert "--fields reward=KEY" in capsys.readouterr().err
    assert cli.main([*args, "role=speaker", "text=text", "reward=outcome"]) == 0
    assert "episodes:  1   steps: 1   successes: 1" in capsys.readouterr().out
    transcript = tmp_path / "run.txt"
    transcript.write_text("A hall.\n$ look\nDark.\n$ open door\nOpen.\n")
    assert cli.main(["import", str(transcript), "--env", "textworld"]) == 2
    assert "--agent-prefix PREFIX" in capsys.readouterr().err
    transcript.write_text("A hall.\n$ look\nDark.\nSTATUS: OK\n")
    assert cli.main(["import", str(transcript), "--env", "textworld", "--agent-prefix", "$ "]) == 0


def test_an_unknown_environment_or_task_is_refused_at_import(tmp_path, capsys):
    path = PUBLIC / "knowagent_alfworld_first10.jsonl"
    assert cli.main(["import", str(path), "--env", "no-such-env"]) == 2
    assert "unknown environment 'no-such-env'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown environment"):
        LoggedEpisodes.from_file(str(path), "no-such-env")
    with pytest.raises(ValueError, match=r"has no task type\(s\) \['make-tea'\]"):
        LoggedEpisodes.from_file(str(path), "textworld-express", task="make-tea")


def test_the_import_records_its_mapping_beside_the_trajectories(tmp_path):
    out = tmp_path / "behaviour" / "trajectories.parquet"
    out.parent.mkdir()
    summary = import_logs(LogSource(str(PUBLIC / "fireact_hotpotqa_items145to165.json")), str(out), cell="t")
    recorded = json.loads((out.parent / "import.json").read_text())
    assert recorded["mapping"] == summary.mapping and recorded["mapping"]["reward"] == "reward"
    assert recorded["episodes"] == 20 and recorded["layout"] == "JSON object of episodes keyed by id"


def test_the_readme_shows_what_adwm_import_prints_on_each_slice(capsys):
    """The README's import summaries are the CLI's output today, command by command."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = readme.split("<!-- import-summaries -->")[1].split("<!-- /import-summaries -->")[0]
    shown = block.strip().removeprefix("```console").removesuffix("```").strip().split("$ adwm ")[1:]
    assert {Path(command.split()[1]).name for command in shown} == {p.name for p in PUBLIC.iterdir()
                                                                    if p.is_file() and p.suffix != ".md"}
    for command in shown:
        argv, *printed = command.strip().splitlines()
        assert cli.main(argv.split()) == 0
        assert capsys.readouterr().out.strip().splitlines() == printed, argv


def test_set_reaches_into_the_logs_settings_of_a_logs_cell():
    """``adwm evaluate --set behaviour.logs.fields.conversations=traj`` names a key as --fields does."""
    from adwm_core.cell import CellConfig
    from adwm_core.specs import PolicySpec

    agent = PolicySpec.model_validate({"label": "a", "model": "m", "backend": "openai",
                                       "options": {"base_url": "http://127.0.0.1:1/v1"}})
    config = CellConfig.for_logs(LogSource(str(PUBLIC / "knowagent_alfworld_first10.jsonl")), "alfworld", [agent],
                                 overrides={"behaviour.logs.fields.conversations": "traj",
                                            "behaviour.logs.thoughts": "step"})
    assert config.behaviour.logs.fields == {"conversations": "traj"} and config.behaviour.logs.thoughts == "step"


def test_shapes_that_were_once_read_wrong_in_silence(tmp_path):
    """Each of these was misread without a word before a review of the importer: the episode's
    reward beside zero turn rewards, an episode right after a STATUS line, step rows that keep
    their prompt's messages, a hidden checkpoint copy in a folder, ReAct's numbered cue."""
    turns = [{"from": "human", "value": "Room."}, {"from": "gpt", "value": "Action: go north", "reward": 0},
             {"from": "human", "value": "Hall."}, {"from": "gpt", "value": "Action: take key", "reward": 0},
             {"from": "human", "value": "Taken."}]
    path = tmp_path / "final_reward.jsonl"
    path.write_text(json.dumps({"conversations": turns, "reward": 1.0}) + "\n")
    table, summary = inspect_logs(LogSource(str(path)), cell="t")
    assert table["reward"].to_pylist() == [0.0, 1.0] and _counts(table) == (1, 2, 1)
    assert any("differs from the sum of their turns' rewards" in line for line in summary.readings)

    path = tmp_path / "run.txt"
    path.write_text("A room.\n> look\nDark.\nSTATUS: OK\nA hall.\n> open door\nOpen.\nSTATUS: FAIL\n"
                    "New plan: go west.\n\nA yard.\n> dig\nNothing.\nSTATUS: FAIL\n")
    table = read_logs(LogSource(str(path)), cell="t")
    assert _counts(table) == (3, 3, 1) and table["action"].to_pylist() == ["look", "open door", "dig"]

    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps({"traj_id": "a", "id": i, "t": t, "observation": o, "action": a,
                                        "reward": float(t), "success": True, "messages": [{"role": "user",
                                                                                        "content": o}]}) + "\n"
                            for i, (t, o, a) in enumerate([(1, "Hall.", "take key"), (0, "Room.", "go north")])))
    table, summary = inspect_logs(LogSource(str(path)), cell="t")
    assert summary.layout == "JSONL, one step per line" and table["action"].to_pylist() == ["go north", "take key"]

    folder = tmp_path / "notebook"
    (folder / ".ipynb_checkpoints").mkdir(parents=True)
    episode = json.dumps({"conversations": turns[:3], "reward": 1, "success": True}) + "\n"
    (folder / "logs.jsonl").write_text(episode)
    (folder / ".ipynb_checkpoints" / "logs-checkpoint.jsonl").write_text(episode)
    assert _counts(read_logs(LogSource(str(folder)), cell="t")) == (1, 1, 1)

    path = tmp_path / "numbered.jsonl"
    path.write_text(json.dumps({"conversations": [{"from": "human", "value": "Q"}, {
        "from": "gpt", "value": "Thought 1: search it\nAction 1: Search[Hamlet]"}, {"from": "human", "value": "O"}],
        "reward": 1}) + "\n")
    assert read_logs(LogSource(str(path)), cell="t")["action"].to_pylist() == ["Search[Hamlet]"]
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "Q"}, {
        "role": "assistant", "content": "", "tool_calls": [{"function": {"name": "search"}}]}], "reward": 1}) + "\n")
    with pytest.raises(LogFormatError, match=r"messages\[1\].tool_calls: a tool-calling turn"):
        read_logs(LogSource(str(path)), cell="t")


def test_thoughts_kept_as_steps_on_knowagent_keep_the_state_between_back_to_back_lines():
    table, summary = inspect_logs(LogSource(str(PUBLIC / "knowagent_alfworld_first10.jsonl"), thoughts="step"),
                                  cell="t")
    assert _counts(table) == (10, 204 + 211, 3)
    rows = table.to_pylist()
    assert rows[0]["action"].startswith("Think:") and rows[0]["next_observation"] == rows[0]["observation"]
    assert rows[3]["action"] == "go to shelf 8" and rows[3]["next_observation"].startswith("On the shelf 8")


def test_episodes_beside_other_keys_and_one_keyed_turn_list_load(tmp_path):
    run = {"config": {"model": "agent-7"}, "scores": {"mean": 1.0},
           "results": [{"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "Action: look"}],
                        "reward": 1}]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    table, summary = inspect_logs(LogSource(str(path)), cell="t")
    assert summary.layout == "JSON object, episodes under 'results'" and table["action"].to_pylist() == ["look"]
    path.write_text(json.dumps({"ep_42": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "look"},
                                          {"role": "user", "content": "Dark."}]}))
    with pytest.raises(LogFormatError, match=r"run.json: episode 'ep_42': reward: missing: a bare list of messages "
                                             r"holds no outcome"):  # one episode, read as such
        read_logs(LogSource(str(path)), cell="t")


MORE = PUBLIC / "more"  # slices not shown in the README (SOURCES.md)


def test_reflexion_hotpotqa_react_run_log_splits_into_one_episode_per_question():
    """Reflexion's ReAct run log on HotpotQA: numbered Question: blocks in one text file under
    CORRECT / INCORRECT section headers (the outcome), a trial header above them."""
    path = MORE / "reflexion_hotpotqa_react_first37.txt"
    text = path.read_text()
    questions = len(re.findall(r"^Question:", text, re.M))
    correct = len(re.findall(r"^Question:", text.split("BEGIN INCORRECT AGENTS")[0], re.M))
    actions = len(re.findall(r"^Action \d+:", text, re.M))
    table, summary = inspect_logs(LogSource(str(path)), cell="reflexion")
    assert _counts(table) == (questions, actions, correct) == (37, 121, 34)
    rows = table.to_pylist()
    assert not any(re.search(r"^Question:", r["next_observation"], re.M) for r in rows)
    assert [r["observation"] for r in rows if r["t"] == 0] == [q.strip() for q in re.findall(r"^Question:.*", text,
                                                                                              re.M)]
    assert summary.readings["episodes whose success is read from their section header (CORRECT / INCORRECT / FAIL / "
                            "HALTED)"] == questions
    assert summary.layout == "text transcripts, split at section headers, new tasks"


def test_react_fever_run_log_splits_at_its_rules_and_reads_the_outcome_line_it_names():
    """ReAct's FEVER notebook run: episodes between "-----------" rules, each "<id> Claim: …"
    then numbered Thought/Action/Observation lines, its outcome in the harness's info line."""
    path = MORE / "react_fever_first12_episodes.txt"
    text = path.read_text()
    claims = len(re.findall(r"^\d+ Claim:", text, re.M))
    actions = len(re.findall(r"^Action \d+:", text, re.M))
    rewards = [int(r) for r in re.findall(r"'reward': (\d)", text)]
    status = cli.main(["import", str(path), "--env", "hotpotqa"])
    assert status == 2  # no outcome the importer could know of: it says which flag reads one
    table, summary = inspect_logs(LogSource(str(path), outcome_line=r"'reward': (\d)"), cell="react")
    assert _counts(table) == (claims, actions, sum(rewards)) == (12, 33, 7)
    last = {r["episode"]: r["reward"] for r in table.to_pylist() if r["done"]}
    assert [last[e] for e in sorted(last)] == rewards
    assert summary.readings["episodes whose outcome is read from the line --outcome-line matches"] == claims


def test_the_refusal_of_an_outcome_less_text_log_names_a_flag_that_works(capsys):
    path = MORE / "react_fever_first12_episodes.txt"
    assert cli.main(["import", str(path), "--env", "hotpotqa"]) == 2
    error = capsys.readouterr().err
    assert "--outcome-line REGEX" in error and "--fields reward" not in error and f"{path}:1: " in error
    assert cli.main(["import", str(path), "--env", "hotpotqa", "--outcome-line", "'reward': (\\d)"]) == 0
    assert "episodes:  12   steps: 33   successes: 7" in capsys.readouterr().out


def test_swiftsage_scienceworld_histories_load_nested_with_running_scores_and_answers_as_observations():
    """SwiftSage's ScienceWorld oracle logs: episodes keyed by id, their steps one object down
    (history.history), each row's observation the answer to its action, its score a running
    total written as a string, isCompleted a string flag."""
    path = MORE / "swiftsage_scienceworld_oracle_task19.json"
    episodes = json.loads(path.read_text())
    histories = [e["history"]["history"] for e in episodes.values()]
    completed = sum(h[-1]["isCompleted"] == "true" for h in histories)
    source = LogSource(str(path), step_observation="after",
                       fields={"opening": "history.taskDescription", "success": "isCompleted"})
    table, summary = inspect_logs(source, cell="swiftsage")
    assert _counts(table) == (len(episodes), sum(map(len, histories)), completed) == (10, 70, 10)
    first, rows = histories[0], table.filter(pa.compute.equal(table["episode"], 0)).to_pylist()
    scores = [float(step["score"]) for step in first]
    assert [r["reward"] for r in rows] == [b - a for a, b in zip([0.0, *scores], scores)]
    assert [r["next_observation"] for r in rows] == [step["observation"] for step in first]
    assert rows[0]["observation"] == episodes["93"]["history"]["taskDescription"]
    assert rows[1]["observation"] == first[0]["observation"]
    assert summary.mapping["conversations"] == "history.history" and summary.mapping["success"] == "isCompleted"
    assert summary.readings["episodes whose per-step 'score' is a running score, read as its per-step "
                            "differences"] == 10
    _, unflagged = inspect_logs(LogSource(str(path)), cell="swiftsage")  # the reading it cannot know is flagged
    assert any("--step-observation after" in line for line in unflagged.readings)


def test_intercode_sql_human_trajectories_load_with_each_rows_observation_the_answer_to_its_action(capsys):
    """InterCode's human SQL sessions: episodes keyed by task id, each a ``query`` and step rows
    under ``trajectory`` whose observation is the database's answer to the row's action, and a
    0/1 ``reward`` per episode."""
    path = MORE / "intercode_sql_human_last10.json"
    episodes = json.loads(path.read_text())
    rows = [e["trajectory"] for e in episodes.values()]
    solved = sum(e["reward"] == 1.0 for e in episodes.values())
    source = LogSource(str(path), step_observation="after", fields={"opening": "query"})
    table, summary = inspect_logs(source, cell="intercode")
    assert _counts(table) == (len(episodes), sum(map(len, rows)), solved) == (10, 62, 9)
    for i, (episode, steps) in enumerate(zip(episodes.values(), rows)):
        read = table.filter(pa.compute.equal(table["episode"], i)).to_pylist()
        assert [r["action"] for r in read] == [step["action"] for step in steps]
        assert [r["next_observation"] for r in read] == [step["observation"] for step in steps]
        assert [r["observation"] for r in read] == [episode["query"]] + [step["observation"] for step in steps[:-1]]
        assert sum(r["reward"] for r in read) == episode["reward"]
    assert summary.mapping["conversations"] == "trajectory" and summary.mapping["reward"] == "reward"
    assert summary.readings["step rows whose observation is the answer to the row's action (--step-observation "
                            "after)"] == len(episodes)
    # the query alone, with the rows read as before their actions, would stand before the first answer: refused
    argv = ["import", str(path), "--env", "hotpotqa", "--fields", "opening=query"]
    assert cli.main(argv) == 2
    assert "--fields opening=query: step rows read as what the agent saw before each action" in capsys.readouterr().err
    assert cli.main([*argv, "--step-observation", "after"]) == 0
    assert f"episodes:  {len(episodes)}   steps: 62   successes: {solved}" in capsys.readouterr().out


def test_lats_debug_log_is_refused_as_not_a_trajectory_log(capsys):
    """LATS's tree-search run on HotpotQA, its Python logging output, prompts and all."""
    path = MORE / "lats_hotpotqa_tot_10it.log"
    records = len(re.findall(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d+ - ", path.read_text(), re.M))
    assert cli.main(["import", str(path), "--env", "hotpotqa"]) == 2
    error = capsys.readouterr().err
    assert f"{path}: not a trajectory log: a debug log, {records} of its lines are logging records" in error
    assert "problem(s)" not in error and ":1:" not in error


def test_every_public_slice_is_cited_in_sources():
    sources = (PUBLIC / "SOURCES.md").read_text()
    slices = [p for p in PUBLIC.rglob("*") if p.is_file() and p.suffix != ".md"]
    assert len(slices) >= 8 and all(f"`{p.relative_to(PUBLIC)}`" in sources for p in slices)


BALROG = MORE / "balrog_textworld_claude35"


def test_balrog_run_folder_reads_one_episode_per_csv_with_its_summary_and_asks_about_the_running_score(capsys):
    """BALROG's leaderboard layout: one CSV per episode (Step, Observation, Action, Reasoning,
    Reward, Done; each row's observation the answer to its action) beside its JSON summary
    (progression 1.0 a success). The cooking game's Reward is the running score: refused until
    --reward says so, then read as differences."""
    tables = sorted(BALROG.rglob("*.csv"))
    summaries = [json.loads(p.with_suffix(".json").read_text()) for p in tables]
    rows = [p.read_bytes().count(b"\r\n") - 1 for p in tables]  # csv.writer ends each row with \r\n
    assert rows == [s["num_steps"] for s in summaries]
    expected = (len(tables), sum(rows), sum(s["progression"] == 1.0 for s in summaries))
    assert expected == (4, 107, 1)
    assert cli.main(["import", str(BALROG), "--env", "textworld"]) == 2
    error = capsys.readouterr().err
    assert "the_cooking_game_run_01.csv" in error and "--reward cumulative" in error and "--reward per-step" in error
    source = LogSource(str(BALROG), rewards="cumulative")
    table, summary = inspect_logs(source, cell="balrog")
    assert _counts(table) == expected
    assert summary.layout == "CSV, one episode per file, its BALROG summary (JSON) beside it"
    cooking = tables[0].read_bytes().decode()
    final_score = float(re.findall(r",(\d+(?:\.\d+)?),(?:True|False)\r\n", cooking)[-1])
    first = table.filter(pa.compute.equal(table["episode"], 0)).to_pylist()
    assert sum(r["reward"] for r in first) == final_score == 5.0  # differences of the running score
    assert first[0]["observation"] == "" and first[0]["next_observation"].startswith(
        cooking.split('\r\n0,"', 1)[1][:30])  # the row's observation is the answer to its action
    assert first[1]["observation"] == first[0]["next_observation"]
    assert cli.main(["import", str(BALROG), "--env", "textworld", "--reward", "cumulative"]) == 0
    assert f"episodes:  {expected[0]}   steps: {expected[1]}   successes: {expected[2]}" in capsys.readouterr().out
    one = tables[1]  # a single CSV, its summary found beside it, reads as shipped
    assert cli.main(["import", str(one), "--env", "textworld"]) == 0
    assert f"episodes:  1   steps: {rows[1]}   successes: 1" in capsys.readouterr().out


TALES = MORE / "tales_detective_gpt4omini_first11steps.jsonl"


def test_tales_one_long_run_is_split_where_the_move_counter_restarts_and_scored_against_its_max_score(capsys):
    """TALES: one JSONL row per step of one long game (Step, Score, Max Score, Moves,
    Observation, Action, Feedback, the prompt's history): an episode per life, its running Score
    read as fractions of Max Score."""
    lines = TALES.read_text().splitlines()
    moves = [int(re.search(r'"Moves":(\d+)', line).group(1)) for line in lines]
    scores = [int(re.search(r'"Score":(\d+)', line).group(1)) for line in lines]
    top = int(re.search(r'"Max Score":(\d+)', lines[0]).group(1))
    starts = [0] + [i for i in range(1, len(lines)) if moves[i] < moves[i - 1]]
    expected = (len(starts), len(lines), sum(scores[end - 1] >= top for end in [*starts[1:], len(lines)]))
    assert expected == (2, 11, 0)
    assert cli.main(["import", str(TALES), "--env", "textworld"]) == 0
    printed = capsys.readouterr().out
    assert f"episodes:  {expected[0]}   steps: {expected[1]}   successes: {expected[2]}" in printed
    assert "fractions of their own 'Max Score'" in printed and "per-step 'Score' is a running score" in printed
    table = read_logs(LogSource(str(TALES)), cell="tales")
    for episode, (start, end) in enumerate(zip(starts, [*starts[1:], len(lines)])):
        rewards = [r["reward"] for r in table.to_pylist() if r["episode"] == episode]
        assert len(rewards) == end - start and math.isclose(sum(rewards), scores[end - 1] / top)
    assert table["next_observation"][0].as_py() == json.loads(lines[0])["Feedback"]


def test_a_score_above_one_with_no_maximum_is_refused_naming_the_flags_and_max_score_reads_it(tmp_path, capsys):
    """The TALES run without its Max Score: a reward key over raw scores of 10–40 would read as
    success in silence; it is refused, and --max-score (or --success-at) reads it."""
    path = tmp_path / "no_max.jsonl"
    rows = [json.loads(line) for line in TALES.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "Max Score"}) + "\n" for row in rows))
    assert cli.main(["import", str(path), "--env", "textworld", "--fields", "reward=Score"]) == 2
    error = capsys.readouterr().err
    assert "episode(s) without a success flag return more than 1 (up to 30)" in error
    assert "--max-score N" in error and "--success-at X" in error
    assert cli.main(["import", str(path), "--env", "textworld", "--max-score", "360"]) == 0
    assert "episodes:  2   steps: 11   successes: 0" in capsys.readouterr().out
    assert cli.main(["import", str(path), "--env", "textworld", "--success-at", "20"]) == 0
    assert "episodes:  2   steps: 11   successes: 2" in capsys.readouterr().out  # both lives reach 20 points


ADK = MORE / "adk_personalized_shopping"


def test_adk_markdown_sessions_read_function_calls_as_actions_and_take_their_outcome_from_the_flag_named(capsys):
    """Google ADK's exported sessions: **\\[user\\]:** turns, fenced `function call` blocks with
    their args (the action) and `Response from` blocks (the observation), no outcome."""
    sessions = sorted(ADK.glob("*.md"))
    texts = [p.read_text() for p in sessions]
    calls = [re.findall(r'^function call: "(\w+)"\nargs: \{\n\s+"\w+": "([^"]*)"', t, re.M) for t in texts]
    done = "Thank you for shopping with us"
    expected = (len(sessions), sum(map(len, calls)), sum(done in t for t in texts))
    assert expected == (2, 23, 2)
    assert cli.main(["import", str(ADK), "--env", "webshop"]) == 2
    assert "--success-line REGEX" in capsys.readouterr().err
    argv = ["import", str(ADK), "--env", "webshop", "--success-line", done]
    assert cli.main(argv) == 0
    assert f"episodes:  {expected[0]}   steps: {expected[1]}   successes: {expected[2]}" in capsys.readouterr().out
    table = read_logs(LogSource(str(ADK), success_line=done), cell="adk")
    assert table["action"].to_pylist() == [f"{name}[{value}]" for episode in calls for name, value in episode]
    first = table.to_pylist()[0]
    assert first["observation"].startswith("(Upload [an image]") and first["next_observation"].startswith(
        "Back to Search [SEP] Page 1")


AUTOACT = MORE / "autoact_hotpotqa_hard_first6.jsonl"


def test_autoact_transcripts_held_in_a_prompt_string_are_found_by_content_and_load_as_shipped(capsys):
    """AutoAct's HotpotQA runs (BOLAA's record: question, answer, correct, reward, halted, error,
    prompt): the instruction, the question and the whole Thought/Action/Observation transcript
    are one string under ``prompt``; once refused listing the keys, read without a flag now."""
    raw = AUTOACT.read_text().splitlines()
    expected = (len(raw), sum(line.count("\\nAction: ") for line in raw), sum('"correct": true' in line for line in raw))
    assert expected == (6, 29, 1)
    assert cli.main(["import", str(AUTOACT), "--env", "hotpotqa"]) == 0
    printed = capsys.readouterr().out
    assert f"episodes:  {expected[0]}   steps: {expected[1]}   successes: {expected[2]}" in printed
    assert "conversations ← prompt" in printed
    table = read_logs(LogSource(str(AUTOACT)), cell="autoact")
    assert table["action"].to_pylist()[:3] == ["BingSearch[VIDEO INTERACTIVE VISION AND AUDIO]",
                                               "Finish[VIRTUAL INTERACTIVE VISION AND AUDIO]", "Reflect[right]"]


EMMA = MORE / "emma_reflexion_teacher_alfworld_trial1_first18envs.log"


def test_emma_reflexion_teacher_log_leaves_out_the_demonstrations_shown_before_each_task(capsys):
    """EMMA's Reflexion teacher on ALFWorld (a trial log as Reflexion's harness writes it): each
    "Environment #N:" block shows the agent two ReAct demonstrations, each with its own room,
    task and "> " lines, then its reflection memory, then its task, ending at a STATUS line, with
    no line announcing the demonstrations; tasks solved in an earlier trial are placeholders."""
    text = EMMA.read_text()
    blocks = re.split(r"^STATUS: (?:OK|FAIL)$", text, flags=re.M)[:-1]  # each ends at its STATUS line
    tasks = [block.rsplit("\nYou are in the middle of a room", 1)[1] for block in blocks]  # the last room opened
    steps = [sum(line.startswith("> ") and not line.startswith("> think:") for line in task.splitlines())
             for task in tasks]
    expected = (len(blocks), sum(steps), text.count("\nSTATUS: OK"))
    assert expected == (3, 55, 0) and len(re.findall(r"^Environment #\d+:$", text, re.M)) == len(blocks)
    shown = text.count("\nYour task is to: ") - len(blocks)  # the demonstrations' own task lines
    placeholders = len(re.findall(r"^Environment #\d+: Success$", text, re.M))
    assert (shown, placeholders) == (6, 15)
    assert cli.main(["import", str(EMMA), "--env", "alfworld"]) == 0
    assert f"episodes:  {expected[0]}   steps: {expected[1]}   successes: {expected[2]}" in capsys.readouterr().out
    table, summary = inspect_logs(LogSource(str(EMMA)), cell="emma")
    assert _counts(table) == expected
    assert summary.readings["few-shot demonstrations left out (tasks before the one a STATUS line ends, none with a "
                            "STATUS or outcome line of its own)"] == shown
    assert summary.readings["text blocks between section headers in which the agent never speaks (placeholders), "
                            "dropped"] == placeholders
    assert not any("new task" in reading for reading in summary.readings)  # no episode begins at a demonstration
    rows = table.to_pylist()
    openings = [r["observation"] for r in rows if r["t"] == 0]
    assert [o.splitlines()[-1] for o in openings] == [t.splitlines()[1] for t in tasks]  # each its own task
    assert [o.splitlines()[0] for o in openings] == ["You are in the middle of a room" + t.splitlines()[0]
                                                     for t in tasks]
    assert not any("Your memory for the task below" in r["observation"] + r["next_observation"] for r in rows)
    last = [t.splitlines()[-1] for t in tasks]  # each ends on an action the harness never answered
    assert [r["action"] for r in rows if r["done"]] == [line.removeprefix("> ") for line in last]


def test_a_task_with_a_status_line_of_its_own_is_never_read_as_a_demonstration(tmp_path):
    """Each STATUS line ends one episode: given its own, EMMA's first demonstration is an episode."""
    text = EMMA.read_text()
    second_room = text.index("\nYou are in the middle of a room", text.index("Environment #1:") + 100)
    path = tmp_path / "trial.log"
    path.write_text(text[:second_room] + "\nSTATUS: OK\n" + text[second_room:])
    table, summary = inspect_logs(LogSource(str(path)), cell="emma")
    first = table.filter(pa.compute.equal(table["episode"], 0)).to_pylist()
    assert first[0]["observation"].endswith("Your task is to: clean some apple and put it in sidetable.")
    assert _counts(table)[0] == 4 and _counts(table)[2] == 1 and summary.readings[
        "few-shot demonstrations left out (tasks before the one a STATUS line ends, none with a STATUS or outcome "
        "line of its own)"] == 5
