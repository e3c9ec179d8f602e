import dataclasses
import json
import sys

import pytest

from adwm_core.envs import EnvironmentUnavailable, make_env
from adwm_core.envs import webshop_catalogue
from adwm_core.envs.webshop_catalogue import Goal, Product, generate_catalogue, load_official, split_range
from adwm_core.envs.webshop_env import WebShopEnv, option_met, purchase_reward, type_reward
from conftest import refuse_mid_episode


@pytest.fixture(scope="module")
def env():
    with WebShopEnv(data="generated") as env:
        yield env


# --------------------------------------------------------------------------- reward, by hand

SHAMPOO = Product(
    asin="B000SHAMP1", title="Acme Sulfate Free Shampoo for Dry Hair", price=12.0, price_tag="$12.00",
    options={"scent": ("lavender", "coconut"), "size": ("8 fl oz", "16 fl oz")},
    attributes=("sulfate free", "paraben free", "long lasting"),
    description="A gentle shampoo for every day.", bullets=("Rinses out clean.",),
    query="shampoo", category="beauty", product_category="Beauty › Hair Care › Shampoo",
)
# Title words of the goal (stop word "for" dropped): acme, sulfate, free, shampoo, dry, hair (6).
GOAL = Goal(
    asin="B000SHAMP1", instruction="i need sulfate free, paraben free and cruelty free shampoo",
    attributes=("sulfate free", "paraben free", "cruelty free"), options=("lavender", "16 fl oz"),
    price_upper=20.0, query="shampoo", category="beauty", product_category="Beauty › Hair Care › Shampoo",
    name=SHAMPOO.title,
)
# Another type, another query, one breadcrumb part in common (Beauty), title words bolt, hair,
# dryer: 1 of the goal's 6 words -> title score 1/6 = 0.167, not > 0.2 and not < 0.1 -> r_type 0.5.
DRYER = Product(
    asin="B000DRYER1", title="Bolt Hair Dryer", price=15.0, price_tag="$15.00",
    options={"color": ("lavender", "black")}, attributes=("paraben free", "fast drying"),
    description="Dries in minutes.", bullets=("Folds for travel.",),
    query="hair dryer", category="beauty", product_category="Beauty › Tools › Hair Dryers",
)


@pytest.mark.parametrize("product, options, price, expected, parts", [
    # 'cruelty free' fuzzy-matches no attribute (token-set ratio 67 with 'sulfate free', 58 with
    # 'paraben free') and is in no text: attributes 2/3. Both options, price 12 <= 20:
    # (2 + 2 + 1) / (3 + 2 + 1) = 5/6.
    (SHAMPOO, {"scent": "lavender", "size": "16 fl oz"}, None, 5 / 6, (1.0, 2, 2, True)),
    # Size is matched exactly: '8 fl oz' is not a goal option, nor in any text: (2 + 1 + 1) / 6.
    (SHAMPOO, {"scent": "lavender", "size": "8 fl oz"}, None, 4 / 6, (1.0, 2, 1, True)),
    # Price 25 over the bound 20: (2 + 2 + 0) / 6.
    (SHAMPOO, {"scent": "lavender", "size": "16 fl oz"}, 25.0, 4 / 6, (1.0, 2, 2, False)),
    # No option chosen: (2 + 0 + 1) / 6 = 0.5.
    (SHAMPOO, {}, None, 0.5, (1.0, 2, 0, True)),
    # The dryer: 'paraben free' met, colour 'lavender' fuzzy-matches the goal's 'lavender' (100),
    # price 15 <= 20: r_type 0.5 * (1 + 1 + 1) / 6 = 0.25.
    (DRYER, {"color": "lavender"}, None, 0.25, (0.5, 1, 1, True)),
])
def test_reward_hand_cases(product, options, price, expected, parts):
    reward = purchase_reward(product, GOAL, options, price)
    assert reward.total == pytest.approx(expected)
    assert (reward.r_type, reward.attributes_met, reward.options_met, reward.price_ok) == parts


def test_type_factor_levels():
    def product(title, query="other", crumbs="Kitchen › Kettles"):
        return Product("B0X", title, 1.0, "$1.00", {}, (), "", (), query, "x", crumbs)

    assert type_reward(SHAMPOO, GOAL) == 1.0  # the goal's own product
    # Title score 1/6 but the same query -> 1; or two breadcrumb parts shared -> 1.
    assert type_reward(product("Zed Shampoo", query="shampoo"), GOAL) == 1.0
    assert type_reward(product("Zed Shampoo", crumbs="Beauty › Hair Care › Conditioner"), GOAL) == 1.0
    # Nothing matches: title score 1/6 -> 0.5; no word in common -> 0.
    assert type_reward(product("Zed Shampoo"), GOAL) == 0.5
    assert type_reward(product("Bolt Travel Kettle"), GOAL) == 0.0
    # 12 goal title words, 1 shared: title score 1/12 = 0.083 < 0.1 -> 0.1.
    long_goal = Goal("B0Y", "", (), (), 10.0, "shampoo", "beauty", "Beauty › Hair Care", name=(
        "Acme Sulfate Free Shampoo Dry Damaged Curly Frizzy Hair Repair Formula Salon"))
    assert type_reward(DRYER, long_goal) == 0.1
    # r_type multiplies everything: the kettle scores 0 whatever it matches.
    kettle = product("Bolt Travel Kettle")
    assert purchase_reward(kettle, GOAL, {}, 1.0).total == 0.0


def test_option_matching_normalises_colours_and_caps_the_count():
    assert option_met(DRYER, "color", "dark blue", ["navy blue"])  # both read as 'blue'
    assert option_met(DRYER, "fit", "x-large", ["large"])  # token-set ratio 100: one set holds the other
    assert not option_met(DRYER, "size", "x-large", ["large"])  # but sizes must match exactly
    assert not option_met(DRYER, "color", "black", ["navy blue"])
    # Two chosen options both matching the single goal option count once: (1 + 1 + 1) / 3 = 1,
    # where WebShop's uncapped count would give (1 + 2 + 1) / 3 > 1.
    goal = Goal("B000SHAMP1", "", ("sulfate free",), ("lavender",), 20.0, "shampoo", "beauty",
                SHAMPOO.product_category, SHAMPOO.title)
    reward = purchase_reward(SHAMPOO, goal, {"scent": "lavender", "color": "lavender"})
    assert reward.options_met == 1 and reward.total == pytest.approx(1.0)


# --------------------------------------------------------------------------- expert and episodes


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_expert_reaches_reward_one_on_every_generated_goal(env, split):
    variations = env.variations("shop", split)
    assert variations
    for variation in variations:
        env.reset("shop", variation)
        results = [env.step(a) for a in env.gold_actions()]
        assert all(r.action_valid for r in results)
        assert [r.reward for r in results[:-1]] == [0.0] * (len(results) - 1)
        last = results[-1]
        assert last.done and last.success and last.reward == 1.0 and last.score == 1.0


def test_the_expert_searches_with_the_shortest_query_that_finds_the_goal_first(env):
    shorter = 0
    for variation in env.variations("shop", "train")[:40]:
        obs = env.reset("shop", variation)
        query = env.gold_actions()[0]
        instruction = obs.admissible[0]  # search[<the whole instruction>]
        assert len(query.split()) <= len(instruction.split())
        shorter += len(query.split()) < len(instruction.split())
        assert env.step(query).observation.admissible[2] == env.gold_actions()[1]  # listed first
    assert shorter >= 30, shorter


def test_a_wrong_option_loses_credit(env):
    env.reset("shop", env.variations("shop", "test")[0])
    gold = env.gold_actions()
    results = [env.step(a) for a in gold[:-1]]
    item = results[-1].observation
    chosen = gold[-2]  # the last option the expert clicked
    other = next(a for a in item.admissible if a not in gold and a.startswith("click[")
                 and a[6:-1] not in ("back to search", "< prev", "description", "features", "reviews", "buy now"))
    env.step(other)
    bought = env.step("click[buy now]")
    assert chosen != other and bought.done and not bought.success and 0.0 < bought.reward < 1.0


def test_search_page_and_free_queries(env):
    obs = env.reset("shop", 3)
    goal = env.catalogue.goals[3]
    assert obs.text == f"WebShop [SEP] Instruction: [SEP] {goal.instruction} [SEP] Search"
    assert obs.task_description == goal.instruction
    assert obs.admissible[0] == f"search[{goal.instruction.lower()}]"
    assert f"search[{goal.query}]" in obs.admissible
    assert all(a.startswith("search[") for a in obs.admissible)
    nothing = env.step("search[zzzz qqqq]")  # free text is accepted, even when it finds nothing
    assert nothing.action_valid and "Page 1 (Total results: 0)" in nothing.observation.text
    assert nothing.observation.admissible == ("click[back to search]",)
    assert "numba" not in sys.modules  # see envs/bm25.py


def test_page_navigation(env):
    env.reset("shop", 0)
    goal = env.catalogue.goals[0]
    hits = env.engine.search(goal.query)
    assert 10 < len(hits) <= 20  # two pages of results
    first = env.step(f"search[{goal.query}]").observation
    assert first.text.startswith(f"Instruction: [SEP] {goal.instruction} [SEP] Back to Search [SEP] "
                                 f"Page 1 (Total results: {len(hits)}) [SEP] Next > [SEP] {hits[0]} [SEP] ")
    product = env.catalogue.by_asin[hits[0]]
    assert f"{hits[0]} [SEP] {product.title} [SEP] {product.price_tag}" in first.text
    assert first.admissible[:2] == ("click[back to search]", "click[next >]")
    assert [a for a in first.admissible if a.startswith("click[b0")] == [f"click[{h.lower()}]" for h in hits[:10]]

    second = env.step("click[next >]").observation
    assert f"Page 2 (Total results: {len(hits)}) [SEP] < Prev [SEP] {hits[10]}" in second.text
    assert "click[next >]" not in second.admissible and "click[< prev]" in second.admissible
    assert env.step("click[< prev]").observation.text == first.text

    asin = hits[0]
    item = env.step(f"click[{asin.lower()}]").observation
    name, values = next(iter(product.options.items()))
    assert item.text.startswith(f"Instruction: [SEP] {goal.instruction} [SEP] Back to Search [SEP] < Prev "
                                f"[SEP] {name} [SEP] {values[0]} [SEP] {values[1]}")
    assert item.text.endswith(f"{product.title} [SEP] Price: {product.price_tag} [SEP] Rating: {product.rating} "
                              "[SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
    assert item.admissible[-4:] == ("click[description]", "click[features]", "click[reviews]", "click[buy now]")

    clicked = env.step(f"click[{values[0]}]").observation
    assert clicked.text == f"You have clicked {values[0]}. [SEP] {item.text}"
    reclicked = env.step(f"click[{values[1]}]").observation  # same option, another value
    assert reclicked.text == f"You have clicked {values[1]}. [SEP] {item.text}"

    description = env.step("click[description]").observation
    assert description.text == (f"Instruction: [SEP] {goal.instruction} [SEP] Back to Search [SEP] < Prev "
                                f"[SEP] {product.description}")
    assert description.admissible == ("click[back to search]", "click[< prev]")
    assert env.step("click[features]").action_valid is False  # not on a sub page
    assert env.step("click[< prev]").observation.text == reclicked.text  # the choice is kept
    features = env.step("click[features]").observation
    assert features.text.endswith("[SEP] < Prev [SEP] " + " [SEP] ".join(product.bullets))
    env.step("click[< prev]")
    assert env.step("click[< prev]").observation.text == first.text  # back to the results
    assert env.step(f"click[{asin.lower()}]").observation.text == item.text  # with no option chosen
    env.step("click[< prev]")
    assert env.step("click[back to search]").observation.text.startswith("WebShop [SEP] Instruction:")


def test_invalid_actions_are_refused_and_the_episode_goes_on(env):
    refused, rest = refuse_mid_episode(env, "shop", 5, "click[no such button]")
    assert not refused.action_valid and not refused.done and refused.reward == 0.0
    assert refused.observation.text.startswith("Invalid action! There is no 'no such button' to click on this page.")
    assert "Page 1 (Total results:" in refused.observation.text  # still on the results page
    assert rest[-1].success

    env.reset("shop", 5)
    env.step(env.gold_actions()[0])
    for bad in ("search[another query]", "buy it", "click[]"):
        result = env.step(bad)
        assert not result.action_valid and not result.done
    assert "This page has no search bar" in env.step("search[x]").observation.text
    for action in env.gold_actions()[1:]:
        done = env.step(action)
    assert done.success
    after = env.step("click[buy now]")
    assert after.done and not after.action_valid and after.score == 1.0


def test_unknown_task_and_variation(env):
    with pytest.raises(ValueError, match="only task is 'shop'"):
        env.reset("cook", 0)
    with pytest.raises(ValueError, match="no goal 300"):
        env.reset("shop", 300)


# --------------------------------------------------------------------------- catalogue and splits


def test_generator_is_deterministic_from_the_seed():
    a, b, c = generate_catalogue(7, 60), generate_catalogue(7, 60), generate_catalogue(8, 60)
    assert a.products == b.products and a.goals == b.goals
    assert a.products != c.products
    assert len(a.products) == len(a.goals) == 60 and len(a.by_asin) == 60
    for goal in a.goals:
        assert goal.query in goal.instruction and goal.instruction.endswith(" dollars")
        assert all(o in goal.instruction for o in goal.options)
        assert a.by_asin[goal.asin].price <= goal.price_upper


def test_splits_are_disjoint_and_follow_webshop(env):
    splits = {s: env.variations("shop", s) for s in ("train", "dev", "test")}
    assert (len(splits["test"]), len(splits["dev"]), len(splits["train"])) == (50, 50, 200)
    assert sorted(sum(splits.values(), [])) == list(range(300))
    # On WebShop's 12,087 human goals: test = goals 0-499, dev = 500-1499, as in its baseline.
    assert split_range(12087, "test") == range(0, 500) and split_range(12087, "dev") == range(500, 1500)
    with pytest.raises(ValueError, match="unknown split"):
        env.variations("shop", "valid")


# --------------------------------------------------------------------------- official files


def write_official(folder, *, products=True, attributes=True, human=True):
    folder.mkdir(exist_ok=True)
    items = [
        {"asin": "B000SHAMP1", "name": "Acme Sulfate Free Shampoo", "full_description": "A gentle shampoo.",
         "small_description": ["Sulfate free formula."], "pricing": "$12.99", "category": "beauty",
         "query": "Shampoo ", "product_category": "Beauty › Hair Care › Shampoo", "images": [""],
         "customization_options": {"Scent": [{"value": "Lavender", "image": None},
                                             {"value": "Coconut/Lime", "image": None}]}},
        {"asin": "B000KETTLE", "name": "Bolt Electric Kettle", "full_description": "Boils water fast.",
         "small_description": "Auto shut off.", "pricing": "$20.00$35.00", "category": "kitchen",
         "query": "kettle", "product_category": "Home › Kitchen › Kettles", "images": [""],
         "customization_options": None},
        {"asin": "nan", "name": "skipped", "pricing": "", "query": "x"},
        {"asin": "B000SHAMP1", "name": "a repeated id, skipped", "pricing": "", "query": "x"},
    ]
    if products:
        (folder / "items_shuffle_1000.json").write_text(json.dumps(items))
    if attributes:
        (folder / "items_ins_v2_1000.json").write_text(json.dumps(
            {"B000SHAMP1": {"attributes": ["sulfate free", "dry hair"]},
             "B000KETTLE": {"attributes": ["stainless steel"]}}))
    if human:
        (folder / "items_human_ins.json").write_text(json.dumps({
            "B000SHAMP1": [
                {"instruction": "i need a sulfate free shampoo with lavender scent.",
                 "instruction_attributes": ["sulfate free"], "instruction_options": ["lavender"]},
                {"instruction": "no attributes: skipped", "instruction_attributes": [], "instruction_options": []},
            ],
            "B000KETTLE": [{"instruction": "i want a stainless steel kettle",
                            "instruction_attributes": ["stainless steel"], "instruction_options": []}],
        }))
    return folder


def test_official_files_load_and_play(tmp_path, monkeypatch):
    folder = write_official(tmp_path / "webshop")
    (folder / "reviews.json").write_text(json.dumps([{"asin": "B000KETTLE", "average_rating": 4.5, "reviews": [
        {"title": "Fast", "stars": "5.0 out of 5 stars", "review": "Boils in a minute."}]}]))
    monkeypatch.setenv("WEBSHOP_DATA", str(folder))
    env = make_env("webshop")
    catalogue = env.catalogue
    assert [p.asin for p in catalogue.products] == ["B000SHAMP1", "B000KETTLE"]
    shampoo, kettle = catalogue.products
    assert shampoo.options == {"scent": ("lavender", "coconut | lime")} and shampoo.query == "shampoo"
    assert shampoo.price == 12.99 and shampoo.price_tag == "$12.99"
    assert shampoo.attributes == ("sulfate free", "dry hair")
    assert kettle.price_tag == "$20.0 to $35.0" and 20.0 <= kettle.price <= 35.0
    assert kettle.bullets == ("Auto shut off.",) and kettle.rating == "4.5" and shampoo.rating == "N.A."
    assert [(r.title, r.score, r.body) for r in kettle.reviews] == [("Fast", 5, "Boils in a minute.")]
    assert len(catalogue.goals) == 2
    goal = next(g for g in catalogue.goals if g.asin == "B000SHAMP1")
    # WebShop's bound: two of the first four multiples of 10 above 12.99, the larger one.
    assert goal.price_upper in (30.0, 40.0, 50.0)
    assert goal.instruction == ("i need a sulfate free shampoo with lavender scent, "
                                f"and price lower than {goal.price_upper:.2f} dollars")
    assert make_env("webshop").catalogue.goals == catalogue.goals  # the same on every load
    variations = env.variations("shop", "train")
    assert variations == [0, 1] and env.variations("shop", "test") == []  # too few goals to hold any out
    for variation in variations:
        env.reset("shop", variation)
        assert env.step(env.gold_actions()[0]).observation.text.count("B000") >= 1
        env.reset("shop", variation)
        assert [env.step(a) for a in env.gold_actions()][-1].success


def test_wrong_layout_names_the_missing_file(tmp_path, monkeypatch):
    folder = write_official(tmp_path / "webshop", attributes=False, human=False)
    monkeypatch.setenv("WEBSHOP_DATA", str(folder))
    with pytest.raises(EnvironmentUnavailable, match=r"lacks items_ins_v2\*\.json \(the product attributes\), "
                                                     r"items_human_ins\.json .*unset \$WEBSHOP_DATA") as error:
        make_env("webshop")
    assert "items_shuffle" not in str(error.value).split("lacks")[1].split(". It")[0]
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(EnvironmentUnavailable, match="does not exist"):
        make_env("webshop")
    with pytest.raises(EnvironmentUnavailable, match=r"lacks items_shuffle\*\.json \(the products\)"):
        make_env("webshop", data=str(write_official(tmp_path / "other", products=False)))
    assert make_env("webshop", data="generated").catalogue.source.startswith("generated")


def test_make_env_builds_the_generated_catalogue_by_default(monkeypatch):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    env = make_env("webshop", catalogue_seed=3, n_products=30)
    assert env.catalogue.source == "generated(seed=3, n=30)" and len(env.catalogue.goals) == 30
    assert env.tasks() == ["shop"]
    with pytest.raises(ValueError, match="at least 6 products"):
        make_env("webshop", n_products=2)


def test_the_generated_catalogue_written_as_official_files_loads_back(tmp_path):
    """write_official is load_official's inverse up to WebShop's own draws (price bounds, goal order)."""
    catalogue = generate_catalogue(seed=3, n_products=30)
    webshop_catalogue.write_official(catalogue, str(tmp_path))
    loaded = load_official(str(tmp_path))
    # WebShop's loader writes the tag back as f"${price}" ($47.6 for $47.60)
    assert [dataclasses.replace(p, price_tag="") for p in loaded.products] == \
        [dataclasses.replace(p, price_tag="") for p in catalogue.products]
    assert [p.price_tag for p in loaded.products] == [f"${p.price}" for p in catalogue.products]

    def request(goal):
        return goal.instruction.split(", and price lower than")[0], goal.attributes, goal.options

    assert sorted(map(request, loaded.goals)) == sorted(map(request, catalogue.goals))
    assert all(g.price_upper > loaded.by_asin[g.asin].price for g in loaded.goals)
