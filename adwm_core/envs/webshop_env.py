"""WebShop (Yao et al., 2022) as a text environment: find, customise and buy the product an
instruction asks for, on WebShop's pages in its simple text mode.

Protocol, as in WebShop's ``WebAgentTextEnv``: ``search[query]`` on the search page gives
a results page (BM25 top 50, 10 a page); ``click[x]`` clicks a clickable of the current page,
matched in lower case: ``back to search``, ``next >`` / ``< prev`` on results, a product id,
and on an item page its option values, ``description`` / ``features`` / ``reviews`` (sub
pages, left by ``< prev``), ``< prev`` (back to the results, whose options reset) and
``buy now``, which ends the episode with the reward. Anything else is refused
(``action_valid`` False): the page stays, its text prefixed with ``Invalid action!`` and why.
One deliberate narrowing: WebShop runs a ``search[…]`` typed on any page; here only the
search page, the one with a search bar, takes it.

Observations are the pages' visible texts joined by ``[SEP]``, e.g.
``WebShop [SEP] Instruction: [SEP] i need … [SEP] Search`` and
``Instruction: [SEP] … [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP]
B0… [SEP] title [SEP] $12.99 [SEP] …``. On an item page the chosen options are told first,
``You have clicked lavender.``, as WebShop's rich text mode does (the simple mode shows
nothing, which would leave the chosen options out of the text).

Admissible actions: the page's clickables as ``click[…]``. On the search page the query is
free text, so admissible lists the candidates of WebShop's own baseline (its ``env.py``):
the instruction, the goal's product query, and "<attribute> <query>" for each goal
attribute. Any other non-empty ``search[…]`` is accepted as well.

Reward (WebShop paper §3; ``engine/goal.py``), paid at Buy Now, 0 before:
``R = r_type · (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[price ≤ u_price]) / (|U_att| + |U_opt| + 1)``.
A goal attribute is met when it fuzzy-matches one of the product's attributes (token-set
ratio > 85, thefuzz's ``token_set_ratio`` re-implemented on ``difflib``) or is a substring of
its title, features or description. A chosen option counts when it matches a goal option
(in lower case, after colour normalisation: a value naming a basic colour stands for it):
exactly for ``size``, by the same fuzzy ratio otherwise, or when it is a substring of those
texts; the count is capped at |U_opt| (WebShop's can exceed it, giving R > 1). The type factor ``r_type`` is 1
when the queries match, or the categories share two breadcrumb parts, or the title score
> 0.2; else 0.5; 0.1 when the title score < 0.1; 0 when it is 0. The title score is the share
of the goal title's words found in the bought product's title; WebShop takes nouns (spaCy
``en_core_web_lg``), here content words (Lucene's English stop words removed) stand in.
success = (R == 1), WebShop's "success rate"; score = R (0 until bought).

Search: WebShop indexes each product's title, description, first feature and options with
pyserini (Lucene BM25). Here the same text goes to ``bm25s`` with Lucene's English stop
words and pyserini's defaults k1 = 0.9, b = 0.4 (no stemming); hits with score 0 are dropped.

The expert (gold): search with the admissible query that ranks the goal product highest
(the product's title if none retrieves it), page on to it, open it, click the option values
that match its goal options, buy. It reaches R = 1 on every goal of the generated catalogue.

Data: the constructor option ``data``, else ``$WEBSHOP_DATA``, names a folder of official
files, loaded once per instance on first use; unset (or ``data="generated"``), the offline
catalogue of :mod:`.webshop_catalogue` drawn from ``catalogue_seed``. One task, ``shop``; a
variation is a goal's index; splits as in :func:`.webshop_catalogue.split_range`.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass

from .base import Observation, StepResult, TextEnv
from .bm25 import import_bm25s
from .webshop_catalogue import (Catalogue, Goal, Product, generate_catalogue, load_official, official_files,
                                split_range, write_official)

TASK = "shop"
GENERATED = "generated"
SEARCH_RETURN_N = 50  # results a search returns
PRODUCT_WINDOW = 10  # results a page shows
FUZZY_THRESHOLD = 85
EXACT_MATCH_OPTIONS = ("size",)
BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW = "back to search", "next >", "< prev", "buy now"
SUB_PAGES = ("description", "features", "reviews")
# Lucene's English stop words (pyserini's default analyser), also bm25s's "en" list.
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)
# A value naming one of these (first in this order) is read as that colour.
BASIC_COLOURS = ("black", "white", "grey", "gray", "silver", "gold", "beige", "ivory", "khaki", "brown", "tan",
                 "red", "pink", "orange", "yellow", "green", "teal", "blue", "navy", "purple", "clear")


# --------------------------------------------------------------------------- reward


def _tokens(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's ``token_set_ratio`` (0–100): 100 when one text's word set contains the other's."""
    ta, tb = set(_tokens(a)), set(_tokens(b))
    if not ta or not tb:
        return 0
    common = " ".join(sorted(ta & tb))
    with_a = f"{common} {' '.join(sorted(ta - tb))}".strip()
    with_b = f"{common} {' '.join(sorted(tb - ta))}".strip()
    pairs = ((common, with_a), (common, with_b), (with_a, with_b))
    return round(100 * max(difflib.SequenceMatcher(None, x, y).ratio() for x, y in pairs))


def normalize_color(value: str) -> str:
    """The basic colour ``value`` names (e.g. 'navy blue' -> 'blue'), else ``value`` itself."""
    words = set(_tokens(value))
    return next((c for c in BASIC_COLOURS if c in words), value)


def title_words(title: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", title.lower()) if len(w) > 1 and w not in STOP_WORDS}


def _product_text(product: Product) -> tuple[str, str, str]:
    return product.title.lower(), " ".join(product.bullets).lower(), product.description.lower()


def type_reward(product: Product, goal: Goal) -> float:
    """WebShop's r_type: 1, 0.5, 0.1 or 0 (see the module docstring)."""
    query_match = product.query == goal.query
    bought = {x.strip() for x in product.product_category.split("›")}
    wanted = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(bought & wanted) >= 2
    desired = title_words(goal.name)
    title_score = len(desired & title_words(product.title)) / len(desired) if desired else 0.2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


def attribute_met(product: Product, attribute: str) -> bool:
    attribute = attribute.lower()
    if any(token_set_ratio(a, attribute) > FUZZY_THRESHOLD for a in product.attributes):
        return True
    return any(attribute in text for text in _product_text(product))


def option_met(product: Product, name: str, value: str, goal_options: tuple[str, ...] | list[str]) -> bool:
    """Whether the chosen ``value`` of option ``name`` matches one of ``goal_options``."""
    value = normalize_color(value.lower())
    wanted = [normalize_color(g.lower()) for g in goal_options]
    if name.lower() in EXACT_MATCH_OPTIONS:
        if value in wanted:
            return True
    elif any(token_set_ratio(g, value) > FUZZY_THRESHOLD for g in wanted):
        return True
    return any(value in text for text in _product_text(product))


@dataclass(frozen=True)
class Reward:
    r_type: float
    attributes_met: int
    options_met: int
    price_ok: bool
    total: float


def purchase_reward(product: Product, goal: Goal, options: dict[str, str], price: float | None = None) -> Reward:
    """The reward of buying ``product`` with the chosen ``options`` (name -> value) for ``goal``."""
    price = product.price if price is None else price
    n_att = sum(attribute_met(product, a) for a in goal.attributes)
    n_opt = min(len(goal.options), sum(option_met(product, k, v, goal.options) for k, v in options.items()))
    price_ok = price <= goal.price_upper
    r_type = type_reward(product, goal)
    total = r_type * (n_att + n_opt + price_ok) / (len(goal.attributes) + len(goal.options) + 1)
    return Reward(r_type, n_att, n_opt, price_ok, total)


# --------------------------------------------------------------------------- search


def search_document(product: Product) -> str:
    """What WebShop indexes of a product: title, description, first feature, options."""
    options = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options.items())
    first = product.bullets[0] if product.bullets else ""
    return " ".join([product.title, product.description, first, options]).lower()


class ProductSearch:
    """BM25 over the products (bm25s), top :data:`SEARCH_RETURN_N` product ids per query."""

    def __init__(self, products: list[Product]) -> None:
        bm25s = import_bm25s()
        self._asins = [p.asin for p in products]
        self._tokenizer = bm25s.tokenization.Tokenizer(stopwords=sorted(STOP_WORDS))
        corpus = self._tokenizer.tokenize([search_document(p) for p in products], return_as="string",
                                          show_progress=False)
        self._bm25 = bm25s.BM25(k1=0.9, b=0.4)
        self._bm25.index(corpus, show_progress=False)
        self._cache: dict[str, list[str]] = {}

    def search(self, query: str) -> list[str]:
        if query not in self._cache:
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[query] = self._search(query)
        return list(self._cache[query])

    def _search(self, query: str) -> list[str]:
        known = self._tokenizer.tokenize([query.lower()], update_vocab=False, return_as="string",
                                         show_progress=False)[0]
        tokens = [t for t in known if t]
        if not tokens:
            return []
        k = min(SEARCH_RETURN_N, len(self._asins))
        ids, scores = self._bm25.retrieve([tokens], k=k, show_progress=False)
        return [self._asins[i] for i, s in zip(ids[0], scores[0]) if s > 0]


# --------------------------------------------------------------------------- environment

_ACTION = re.compile(r"(search|click)\[(.*)\]", re.IGNORECASE | re.DOTALL)


def search_candidates(goal: Goal) -> list[str]:
    """The admissible queries: WebShop's baseline candidates for ``goal``."""
    texts = [goal.instruction.lower(), goal.query] + [f"{a} {goal.query}" for a in goal.attributes]
    return list(dict.fromkeys(t.strip() for t in texts if t.strip()))


def _sep(*parts: str) -> str:
    return " [SEP] ".join(parts)


class WebShopEnv(TextEnv):
    name = "webshop"
    reward_range = return_range = (0.0, 1.0)  # R, paid once at Buy Now

    def __init__(self, data: str | None = None, catalogue_seed: int = 0, n_products: int = 300) -> None:
        """``data``: a folder of official WebShop files, or "generated"; None reads
        ``$WEBSHOP_DATA`` and, when that is unset too, uses the generated catalogue of
        ``n_products`` products drawn from ``catalogue_seed``."""
        folder = data if data is not None else (os.environ.get("WEBSHOP_DATA") or None)
        self._folder = None if folder == GENERATED else folder
        if self._folder is not None:
            official_files(self._folder)  # a wrong layout fails here; the files load on first use
        self._seed, self._n_products = catalogue_seed, n_products
        if self._folder is None and n_products < 6:
            raise ValueError(f"a generated WebShop catalogue needs at least 6 products, got n_products={n_products}")
        self._catalogue: Catalogue | None = None
        self._search: ProductSearch | None = None
        self._goal: Goal | None = None

    @classmethod
    def write_offline_data(cls, folder: str) -> str:
        """The generated catalogue written as WebShop's official files (:func:`write_official`)."""
        write_official(generate_catalogue(), folder)
        return folder

    # ---- data, loaded once on first use

    @property
    def catalogue(self) -> Catalogue:
        if self._catalogue is None:
            self._catalogue = (load_official(self._folder) if self._folder is not None
                               else generate_catalogue(self._seed, self._n_products))
        return self._catalogue

    @property
    def engine(self) -> ProductSearch:
        if self._search is None:
            self._search = ProductSearch(self.catalogue.products)
        return self._search

    # ---- protocol

    def tasks(self) -> list[str]:
        return [TASK]

    def _check_task(self, task: str) -> None:
        if task != TASK:
            raise ValueError(f"unknown WebShop task {task!r}; the only task is {TASK!r}")

    def variations(self, task: str, split: str) -> list[int]:
        self._check_task(task)
        return list(split_range(len(self.catalogue.goals), split))

    def reset(self, task: str, variation: int, seed: int = 0) -> Observation:
        self._check_task(task)
        goals = self.catalogue.goals
        if not 0 <= variation < len(goals):
            raise ValueError(
                f"WebShop has no goal {variation}; goals are 0..{len(goals) - 1} ({self.catalogue.source})")
        self._goal = goals[variation]
        self._page = "search"
        self._hits: list[str] = []
        self._page_no = 1
        self._asin: str | None = None
        self._options: dict[str, str] = {}
        self._sub = ""
        self._reward = 0.0
        return self._observation()

    def step(self, action: str) -> StepResult:
        if self._goal is None:
            raise RuntimeError("call reset() before step()")
        if self._page == "done":
            return self._refuse("The purchase is made and the episode is over.")
        match = _ACTION.fullmatch(action.strip())
        if match is None:
            return self._refuse("Actions are search[<query>] or click[<one of the page's clickables>].")
        kind, arg = match.group(1).lower(), match.group(2).strip().lower()
        if kind == "search":
            if self._page != "search":
                return self._refuse("This page has no search bar; click[back to search] first.")
            if not arg:
                return self._refuse("The search query is empty.")
            self._run_search(arg)
        else:
            if arg not in self._clickables():
                return self._refuse(f"There is no '{arg}' to click on this page.")
            self._click(arg)
        done = self._page == "done"
        reward = self._reward if done else 0.0
        return StepResult(self._observation(), reward, done, reward, done and reward >= 1.0 - 1e-9, True)

    def gold_actions(self) -> list[str]:
        if self._goal is None:
            raise RuntimeError("call reset() before gold_actions()")
        goal = self._goal
        product = self.catalogue.by_asin[goal.asin]
        # the query ranking the goal product highest, the shortest of those (as people search: a
        # policy that must type the whole instruction back fails where a few words would do)
        ranked = [(hits.index(goal.asin), len(query.split()), query)
                  for query in [*search_candidates(goal), product.title.lower()]
                  if goal.asin in (hits := self.engine.search(query))]
        if not ranked:
            return [f"search[{product.title.lower()}]"]  # not retrievable: the expert cannot reach it
        rank, _, query = min(ranked)
        pages = [f"click[{NEXT_PAGE}]"] * (rank // PRODUCT_WINDOW)
        actions = [f"search[{query}]", *pages, f"click[{goal.asin.lower()}]"]
        chosen: set[str] = set()
        for wanted in goal.options:
            for name, values in product.options.items():
                value = next((v for v in values if name not in chosen and option_met(product, name, v, [wanted])), None)
                if value is not None:
                    chosen.add(name)
                    actions.append(f"click[{value}]")
                    break
        return actions + [f"click[{BUY_NOW}]"]

    # ---- pages

    def _run_search(self, query: str) -> None:
        self._hits = self.engine.search(query)
        self._page, self._page_no, self._asin, self._options = "results", 1, None, {}

    def _page_asins(self) -> list[str]:
        start = (self._page_no - 1) * PRODUCT_WINDOW
        return self._hits[start:start + PRODUCT_WINDOW]

    def _option_names(self) -> dict[str, str]:
        """value -> option name on the current item page (a value on two options goes to the last)."""
        product = self.catalogue.by_asin[self._asin]
        return {v: name for name, values in product.options.items() for v in values}

    def _clickables(self) -> list[str]:
        if self._page == "results":
            prev = [PREV_PAGE] if self._page_no > 1 else []
            more = [NEXT_PAGE] if self._page_no * PRODUCT_WINDOW < len(self._hits) else []
            return [BACK_TO_SEARCH, *prev, *more, *(a.lower() for a in self._page_asins())]
        if self._page == "item":
            return [BACK_TO_SEARCH, PREV_PAGE, *self._option_names(), *SUB_PAGES, BUY_NOW]
        if self._page == "sub":
            return [BACK_TO_SEARCH, PREV_PAGE]
        return []

    def _click(self, arg: str) -> None:
        if arg == BACK_TO_SEARCH:
            self._page, self._hits, self._asin, self._options = "search", [], None, {}
        elif arg == NEXT_PAGE:
            self._page_no += 1
        elif arg == PREV_PAGE:
            if self._page == "results":
                self._page_no -= 1
            elif self._page == "item":  # back to the results, which WebShop re-renders with no options
                self._page, self._asin, self._options = "results", None, {}
            else:
                self._page = "item"
        elif self._page == "results":
            self._page, self._asin = "item", next(a for a in self._page_asins() if a.lower() == arg)
        elif arg in SUB_PAGES:
            self._page, self._sub = "sub", arg
        elif arg == BUY_NOW:
            product = self.catalogue.by_asin[self._asin]
            self._reward = purchase_reward(product, self._goal, self._options).total
            self._page = "done"
        else:
            self._options[self._option_names()[arg]] = arg

    def _text(self) -> str:
        instruction = self._goal.instruction
        if self._page == "search":
            return _sep("WebShop", "Instruction:", instruction, "Search")
        head = ("Instruction:", instruction, "Back to Search")
        if self._page == "results":
            buttons = (["< Prev"] if self._page_no > 1 else []) + (
                ["Next >"] if self._page_no * PRODUCT_WINDOW < len(self._hits) else [])
            items = []
            for asin in self._page_asins():
                product = self.catalogue.by_asin[asin]
                items += [asin, product.title, product.price_tag]
            return _sep(*head, f"Page {self._page_no} (Total results: {len(self._hits)})", *buttons, *items)
        if self._page == "done":
            return _sep("Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{self._reward:.2f}")
        product = self.catalogue.by_asin[self._asin]
        if self._page == "sub":
            if self._sub == "description":
                body = [product.description or "No Description"]
            elif self._sub == "features":
                body = list(product.bullets) or ["No Features"]
            else:
                body = [t for r in product.reviews for t in (f'"{r.title}"', str(r.score), r.body)] or [
                    "No reviews found"]
            return _sep(*head, "< Prev", *body)
        options = [t for name, values in product.options.items() for t in (name, *values)]
        page = _sep(*head, "< Prev", *options, product.title, f"Price: {product.price_tag}",
                    f"Rating: {product.rating}", "Description", "Features", "Reviews", "Buy Now")
        clicked = " ".join(f"You have clicked {v}." for v in self._options.values())
        return _sep(clicked, page) if clicked else page

    def _admissible(self) -> list[str]:
        if self._page == "search":
            return [f"search[{q}]" for q in search_candidates(self._goal)]
        return [f"click[{c}]" for c in self._clickables()]

    def _observation(self, refusal: str | None = None) -> Observation:
        text = self._text()
        if refusal is not None:
            text = _sep(f"Invalid action! {refusal}", text)
        return Observation(text, self._goal.instruction, self._admissible())

    def _refuse(self, why: str) -> StepResult:
        done = self._page == "done"
        score = self._reward if done else 0.0
        return StepResult(self._observation(why), 0.0, done, score, done and score >= 1.0 - 1e-9, False)
