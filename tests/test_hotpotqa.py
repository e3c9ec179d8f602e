import json
import re
import sys

import pytest

from adwm_core.envs import SPLITS, EnvironmentUnavailable, make_env
from adwm_core.envs.hotpotqa_env import (
    DATA_VARIABLE,
    OFFICIAL_FILE,
    OFFLINE_FILE,
    HotpotQAEnv,
    answer_f1,
    exact_match,
    normalize_answer,
)
from conftest import refuse_mid_episode


@pytest.fixture(scope="module")
def env():
    with HotpotQAEnv(data="offline") as env:
        yield env


def offline_episodes(env):
    """(task, variation) of every offline question."""
    return [(task, v) for split in SPLITS for task in env.tasks() for v in env.variations(task, split)]


def variation_asking(env, words: str) -> int:
    """The offline question whose text contains ``words``."""
    (found,) = [pair for pair in offline_episodes(env) if words in env.corpus.questions[pair[1]].question]
    return found


# --- Official answer scoring, on answers worked out by hand ---

def test_normalisation_follows_the_official_script():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"  # punctuation dropped, not spaced
    assert normalize_answer("An apple, a Day") == "apple day"
    assert normalize_answer("Theatre of the Absurd") == "theatre of absurd"  # only whole-word articles go
    assert exact_match("the Seine.", "Seine") and not exact_match("Seine river", "Seine")


def test_f1_on_hand_worked_answers():
    # "the river Seine in Paris" -> [river, seine, in, paris] vs [seine]: 1 common token,
    # P = 1/4, R = 1/1, F1 = 2 * (1/4 * 1) / (1/4 + 1) = 0.4
    assert answer_f1("the river Seine in Paris", "Seine") == pytest.approx(0.4)
    # [mulligan] vs [robert, mulligan]: P = 1, R = 1/2, F1 = 2 * (1/2) / (3/2) = 2/3
    assert answer_f1("Mulligan", "Robert Mulligan") == pytest.approx(2 / 3)
    # [new, new, york] vs [new, york, city]: common counts min(2,1) + 1 = 2, P = R = 2/3, F1 = 2/3
    assert answer_f1("New new York", "New York City") == pytest.approx(2 / 3)
    assert answer_f1("A Seine!", "the seine") == 1.0
    assert answer_f1("Thames", "Seine") == 0.0


def test_yes_no_answers_score_only_when_equal():
    assert answer_f1("yes", "yes it is") == 0.0  # one token in common, but "yes" differs from the gold
    assert answer_f1("yes indeed", "yes") == 0.0
    assert answer_f1("no", "yes") == 0.0
    assert answer_f1("noanswer", "no answer") == 0.0
    assert answer_f1("No.", "no") == 1.0 and exact_match("No.", "no")


# --- The offline question set ---

def test_gold_sequences_reach_success_on_every_offline_question(env):
    episodes = offline_episodes(env)
    assert len(episodes) == 36
    for task, variation in episodes:
        obs = env.reset(task, variation)
        gold = env.gold_actions()
        assert obs.text.startswith("Question: ") and obs.text[10:] in obs.task_description
        assert gold[-1] in obs.admissible and all(a in obs.admissible for a in gold[:-1])
        results = [env.step(a) for a in gold]
        assert all(r.action_valid for r in results)
        assert not any(r.done or r.reward for r in results[:-1])
        assert not any(r.observation.text.startswith("Could not find") for r in results[:-1])
        last = results[-1]
        assert last.done and last.success and last.reward == last.score == pytest.approx(1.0)


def test_splits_and_tasks(env):
    assert env.tasks() == ["bridge", "comparison"]
    by_split = {split: [env.variations(task, split) for task in env.tasks()] for split in SPLITS}
    assert {split: [len(v) for v in both] for split, both in by_split.items()} == {
        "train": [12, 12], "dev": [3, 3], "test": [3, 3]}
    assert sorted(sum(by_split["dev"], [])) == [4, 10, 16, 22, 28, 34]  # position mod 6 == 4
    assert sorted(v for both in by_split.values() for v in sum(both, [])) == list(range(36))
    with pytest.raises(ValueError, match="not bridge"):
        env.reset("bridge", env.variations("comparison", "train")[0])
    with pytest.raises(ValueError, match="unknown HotpotQA task 'trivia'"):
        env.variations("trivia", "train")
    with pytest.raises(ValueError, match="has no question 36"):
        env.reset("bridge", 36)
    assert OFFLINE_FILE.stat().st_size < 150_000


def test_admissible_actions_are_modest_and_deterministic(env):
    for task, variation in offline_episodes(env):
        listed = env.reset(task, variation).admissible
        assert len(listed) <= 27 and len(set(listed)) == len(listed)
        assert listed == env.reset(task, variation).admissible
        finishes = [a for a in listed if a.startswith("finish[")]
        assert sum(exact_match(a[7:-1], env.question.answer) for a in finishes) == 1
        assert any(a.startswith("lookup[") for a in listed)
        assert ("finish[yes]" in listed) == (env.question.type == "comparison")


def test_search_exact_title_bm25_and_not_found(env):
    env.reset(*variation_asking(env, "Eiffel Tower stands"))
    page = env.step("search[  eiffel   TOWER ]").observation.text
    assert page.startswith("The Eiffel Tower is a wrought-iron lattice tower") and "330 metres" in page
    assert env.step("search[Canberra]").observation.text.startswith("Canberra is the capital")  # outside the context
    similar = env.step("search[wrought iron lattice tower]")
    assert similar.action_valid and not similar.done
    assert similar.observation.text.startswith("Could not find wrought iron lattice tower. Similar: ['Eiffel Tower'")
    river = env.step("search[longest river of Italy]").observation.text
    assert river.startswith("Could not find") and "'Tiber'" in river
    assert env.step("search[xyzzy]").observation.text == "Could not find xyzzy. Similar: []."
    # BM25 never brings numba in: with it loaded, vLLM can no longer start in this process (envs/bm25.py)
    assert "numba" not in sys.modules


def test_lookup_walks_the_sentences_of_the_last_page(env):
    env.reset("bridge", 0)
    assert "search[entity]" in env.step("lookup[Danube]").observation.text  # no page yet
    env.step("search[Danube]")
    assert env.step("lookup[danube]").observation.text == (
        "(Result 1 / 2) The Danube is the second-longest river in Europe, after the Volga.")
    assert env.step("lookup[DANUBE]").observation.text.startswith("(Result 2 / 2) It empties into the Black Sea")
    assert env.step("lookup[danube]").observation.text == "No more results."
    env.step("search[no such page]")  # a failed search keeps the page
    assert env.step("lookup[black forest]").observation.text.startswith("(Result 1 / 1) It rises in the Black Forest")
    env.step("search[Vienna]")
    assert env.step("lookup[danube]").observation.text.startswith("(Result 1 / 1) It lies on the Danube")


def test_invalid_actions_are_refused_and_the_episode_goes_on(env):
    for bad in ("go north", "search[]", "finish[   ]", "search[Paris", "think[the Seine]"):
        refused, rest = refuse_mid_episode(env, "bridge", 0, bad)
        assert not refused.action_valid and not refused.done and refused.reward == 0
        assert "Valid actions are search[entity], lookup[keyword] or finish[answer]" in refused.observation.text
        assert rest[-1].success
    env.reset("bridge", 0)
    assert env.step("Search[Paris]").action_valid  # ReAct's capitalised form


def test_finish_scores_f1_and_ends_the_episode(env):
    env.reset(*variation_asking(env, "Gregory Peck won"))  # gold: Robert Mulligan
    result = env.step("finish[Mulligan]")
    assert result.done and not result.success and result.action_valid
    assert result.reward == result.score == pytest.approx(2 / 3)
    assert "F1 0.667" in result.observation.text
    after = env.step("finish[Robert Mulligan]")
    assert not after.action_valid and after.done and after.reward == 0 and after.score == pytest.approx(2 / 3)


# --- Data sources ---

def test_registry_builds_the_offline_set_by_default(monkeypatch):
    monkeypatch.delenv(DATA_VARIABLE, raising=False)
    with make_env("hotpotqa") as env:
        assert env.path == OFFLINE_FILE and env.tasks() == ["bridge", "comparison"]
        assert len(env.variations("bridge", "test")) == 3


def test_a_folder_without_the_questions_file_names_it(monkeypatch, tmp_path):
    (tmp_path / "hotpot_train_v1.1.json").write_text("[]")
    monkeypatch.setenv(DATA_VARIABLE, str(tmp_path))
    with pytest.raises(EnvironmentUnavailable, match=rf"has no {OFFICIAL_FILE}.*unset {DATA_VARIABLE}"):
        make_env("hotpotqa")
    monkeypatch.setenv(DATA_VARIABLE, str(tmp_path / "nowhere"))
    with pytest.raises(EnvironmentUnavailable, match=f"does not exist.*{OFFICIAL_FILE}"):
        make_env("hotpotqa")
    assert HotpotQAEnv(data="offline").path == OFFLINE_FILE  # the option wins over the variable


def official_items(n: int) -> list[dict]:
    """``n`` synthetic questions in HotpotQA's format, 10 context paragraphs each."""
    items = []
    for i in range(n):
        town, river = f"Town {i}", f"River {i}"
        gold = [[town, [f"{town} is a market town.", f" It lies on {river}."]],
                [river, [f"{river} is a river of {i + 5} kilometres.", f" It flows into Lake {i}."]]]
        distractors = [[f"Hill {(i + k) % n}", [f"Hill {(i + k) % n} is a hill near nowhere."]] for k in range(8)]
        if i % 2:
            question, answer, kind = f"Which lake does the river through {town} flow into?", f"Lake {i}", "bridge"
        else:
            question, answer, kind = f"Is {river} longer than 4 kilometres?", "yes", "comparison"
        items.append({"_id": f"{i:024x}", "question": question, "answer": answer, "type": kind, "level": "hard",
                      "supporting_facts": [[town, 1], [river, 1]], "context": distractors[:4] + gold + distractors[4:]})
    return items


def test_official_format_file(monkeypatch, tmp_path):
    items = official_items(12)
    items[7]["context"][0] = ["Town 3", ["Town 3 is also a village elsewhere."]]  # a title shared with question 3
    (tmp_path / OFFICIAL_FILE).write_text(json.dumps(items))
    monkeypatch.setenv(DATA_VARIABLE, str(tmp_path))
    env = make_env("hotpotqa")
    assert env.path == tmp_path / OFFICIAL_FILE
    assert env.variations("bridge", "test") == [5, 11] and env.variations("bridge", "dev") == []
    assert env.variations("comparison", "dev") == [4, 10] and env.variations("comparison", "train") == [0, 2, 6, 8]
    for variation in range(12):
        obs = env.reset("bridge" if variation % 2 else "comparison", variation)
        assert len(obs.admissible) <= 27 and sum(a.startswith("search[") for a in obs.admissible) == 10
        results = [env.step(a) for a in env.gold_actions()]
        assert results[-1].success and results[-1].reward == 1.0
    env.reset("bridge", 3)  # its own Town 3 page comes first; elsewhere, the first one in the file
    assert env.step("search[town 3]").observation.text == "Town 3 is a market town. It lies on River 3."
    env.reset("bridge", 7)
    assert env.step("search[Town 3]").observation.text == "Town 3 is also a village elsewhere."


@pytest.mark.parametrize("content, message", [
    ("{not json", "invalid JSON"),
    (json.dumps({"data": []}), "expected a non-empty JSON list of questions"),
    (json.dumps([official_items(2)[0], {"_id": "x", "question": "q", "answer": "a", "context": []}]),
     "question 1 lacks 'supporting_facts'"),
    (json.dumps([{**official_items(1)[0], "type": "trivia"}]), "question 0 has type 'trivia', not one of bridge"),
    (json.dumps([{**official_items(1)[0], "context": [["Title", "not a list"]]}]),
     r"question 0 has a context entry that is not \[title, \[sentences"),
])
def test_a_malformed_file_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "questions.json"
    path.write_text(content)
    env = HotpotQAEnv(data=str(path))
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} is not a HotpotQA questions file: {message}"):
        env.variations("bridge", "train")
