import pytest
from transformers import AutoTokenizer

from adwm_core.policies.local_models import smollm2_dir
from adwm_core.policies.parsing import map_to_admissible, parse_action
from adwm_core.policies.prompts import ACTION_CUE, History, PromptTemplate, action_continuation
from adwm_core.policies.trainer import train_tokenizer

ROOMS = ["kitchen", "pantry", "hallway", "living room", "bedroom", "garden", "street", "backyard"]


def _history(n_turns: int, observation: str = "You are in the garden.") -> History:
    steps = tuple((f"You are in the {ROOMS[i % 8]} (visit {i}).", f"move {['north', 'east'][i % 2]}") for i in range(n_turns))
    return History("Find the coin and take it.", steps, observation, ("take coin", "move west"))


@pytest.fixture(scope="module")
def tokenizer():
    texts = [f"You are in the {r}. To the North you see the {q}." for r in ROOMS for q in ROOMS] * 5
    return train_tokenizer(texts + ["Task: Observation: Action: Valid actions: take coin; move west"], vocab_size=400)


def _n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_variants_differ_in_instruction_only(tokenizer):
    p0 = PromptTemplate("textworld-express", "p0", tokenizer, 4000).render(_history(3))
    p1 = PromptTemplate("textworld-express", "p1", tokenizer, 4000).render(_history(3))
    body0, body1 = p0.split("\n\n", 1)[1], p1.split("\n\n", 1)[1]
    assert p0 != p1 and body0 == body1
    assert body0.endswith(f"Observation: You are in the garden.\nValid actions: take coin; move west\n{ACTION_CUE}")
    assert body0.count("Observation:") == 4


def test_history_is_cut_from_the_oldest_whole_turns(tokenizer):
    template = PromptTemplate("textworld-express", "p0", tokenizer, 4000)
    full = template.render(_history(20))
    budget = _n_tokens(tokenizer, full) // 2
    cut = PromptTemplate("textworld-express", "p0", tokenizer, budget).render(_history(20))
    assert _n_tokens(tokenizer, cut) <= budget
    assert "(visit 19)" in cut and "(visit 0)" not in cut  # newest kept, oldest dropped
    kept = [i for i in range(20) if f"(visit {i})." in cut]
    assert kept == list(range(kept[0], 20))  # a contiguous run of the newest turns
    # every kept turn is whole: its observation and its action
    assert f"You are in the {ROOMS[kept[0] % 8]} (visit {kept[0]}).\n{ACTION_CUE} move" in cut


def test_an_overlong_observation_is_cut_on_a_token_boundary(tokenizer):
    long_obs = " ".join(f"You are in the {ROOMS[i % 8]}." for i in range(300))
    template = PromptTemplate("textworld-express", "p0", tokenizer, 200)
    prompt = template.render(_history(5, long_obs))
    assert _n_tokens(tokenizer, prompt) <= 200
    assert "(visit" not in prompt and "Task: Find the coin" in prompt
    tail = prompt.split("Task: Find the coin and take it.\n", 1)[1].split(f"\n{ACTION_CUE}")[0]
    original = tokenizer(f"Observation: {long_obs}\nValid actions: take coin; move west", add_special_tokens=False)["input_ids"]
    suffixes = {tokenizer.decode(original[k:]) for k in range(len(original))}
    assert tail in suffixes and tail.endswith("Valid actions: take coin; move west")


def test_webshop_pages_keep_their_start_and_list_no_clickables(tokenizer):
    """WebShop's item page tells the clicked options first and its results page the top hits:
    an over-long page loses its end, and its clickables (already on the page) are not listed."""
    page = "You have clicked kitchen. [SEP] " + " ".join(f"You are in the {ROOMS[i % 8]}." for i in range(300))
    prompt = PromptTemplate("webshop", "p0", tokenizer, 200).render(_history(5, page))
    assert _n_tokens(tokenizer, prompt) <= 200
    tail = prompt.split("Task: Find the coin and take it.\n", 1)[1].split(f"\n{ACTION_CUE}")[0]
    original = tokenizer(f"Observation: {page}", add_special_tokens=False)["input_ids"]
    assert tail in {tokenizer.decode(original[:k]) for k in range(1, len(original))}
    assert tail.startswith("Observation: You have clicked kitchen.") and "Valid actions" not in prompt


def test_chat_models_get_system_and_user_messages_and_the_cue():
    tok = AutoTokenizer.from_pretrained(smollm2_dir())
    prompt = PromptTemplate("scienceworld", "p1", tok, 2000).render(_history(2))
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith(f"<|im_start|>assistant\n{ACTION_CUE}")
    assert "Valid actions" not in prompt  # ScienceWorld's lists are too long to show


@pytest.mark.parametrize(
    "response, expected",
    [
        (" take coin\n", "take coin"),
        ("\n\n  Take Coin.\nObservation: ...", "Take Coin"),
        ("Thought: the coin is here.\nAction: take coin", "take coin"),
        (" `open door to north`", "open door to north"),
        ("   \n", ""),
    ],
)
def test_parse_action(response, expected):
    assert parse_action(response) == expected


def test_map_to_admissible_exact_then_normalised_then_nearest():
    admissible = ("take coin", "open door to north", "move north")
    assert map_to_admissible("move north", admissible) == "move north"
    assert map_to_admissible("Open  Door to North", admissible) == "open door to north"
    assert map_to_admissible("open the door to north", admissible) == "open door to north"
    assert map_to_admissible("dance wildly", admissible) == "dance wildly"  # nothing near: the engine judges it
    assert map_to_admissible("anything", None) == "anything"


def test_action_continuation_closes_the_action():
    assert action_continuation(" take coin ") == " take coin\n"
