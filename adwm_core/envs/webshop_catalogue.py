"""Where WebShop's products and goals come from: the official files, or a generated catalogue.

A :class:`Catalogue` is the list of products and the list of goals (purchase instructions)
in variation order; the environment only reads catalogues.

Official data (Yao et al., 2022), a folder holding
- ``items_shuffle*.json``: the products (the full ``items_shuffle.json`` is chosen over the
  1000-item ``items_shuffle_1000.json`` when both are there);
- ``items_ins_v2*.json``: each product's attributes (the file of the same suffix as the
  products file is preferred);
- ``items_human_ins.json``: the crowd-sourced instructions with their goal attributes and options;
- ``reviews.json`` (optional): the product reviews, shown on the Reviews page.

Products are read as WebShop's loader reads them: an id longer than 10 characters or
``nan`` and a repeated id are skipped, option names and values are lower-cased with ``/``
written `` | ``, the price tag is ``$a`` or ``$a to $b``. Where WebShop draws at random (the
price of a product priced as a range, uniform in the range; the price bound of a goal, the
larger of two of the first four multiples of 10 above the price), the draw here is seeded by
the product id and the instruction's position, so a catalogue is the same on every load.
Human goals without attributes are skipped, as WebShop does; the goal list is then shuffled
by ``random.Random(233)``, which is WebShop's own ``random.seed(233); random.shuffle(goals)``.

Splits (:func:`split_range`), over the goal list in that order: test is the first
``min(500, n // 6)`` goals, dev the next ``min(1000, n // 6)``, train the rest. On the full
official data this is WebShop's split (test = goals 0–499, dev = 500–1499, train = the
rest, as in its baseline ``env.py``); on a small catalogue it keeps a sixth each for
test and dev.

The generated catalogue (:func:`generate_catalogue`) is the offline stand-in: products of
15 types in WebShop's five categories, each with three attributes (from its type's pool), one
to two option axes (a subset of its type's values on each), a price, a title, a description,
features and reviews; one goal per product, asking for one to three of its attributes, one
value per option axis, and a price bound drawn by WebShop's rule, phrased like WebShop's
instructions ("i am looking for shampoo that is sulfate free, in lavender scent and 16 fl oz
size, and price lower than 30.00 dollars"). It is built in memory from ``seed`` in a few
milliseconds, so nothing is stored. Titles and texts name no option value, so a wrong option
gets no credit through WebShop's title/feature/description fallback.
"""

from __future__ import annotations

import glob
import json
import os
import random
import re
from dataclasses import dataclass, field

from .base import EnvironmentUnavailable, check_split

GOAL_SHUFFLE_SEED = 233  # WebShop's seed for the order of its goals
PRICE_STEPS = [10.0 * i for i in range(1, 100)]  # WebShop's candidate price bounds
NO_BOUND = 1_000_000.0  # WebShop's bound when no two candidates lie above the price

# (glob pattern, what it holds) of the three required files, in the order they are checked.
PRODUCTS, ATTRIBUTES, HUMAN_INSTRUCTIONS = "items_shuffle", "items_ins_v2", "items_human_ins"
REQUIRED_FILES = (
    (PRODUCTS, "the products"),
    (ATTRIBUTES, "the product attributes"),
    (HUMAN_INSTRUCTIONS, "the human instructions"),
)
REVIEWS = "reviews.json"


@dataclass(frozen=True)
class Review:
    title: str
    score: int
    body: str


@dataclass
class Product:
    asin: str  # upper case, as WebShop stores it
    title: str
    price: float  # what the reward compares with the bound
    price_tag: str  # what the pages show
    options: dict[str, tuple[str, ...]]  # option name -> values, lower case
    attributes: tuple[str, ...]
    description: str
    bullets: tuple[str, ...]  # the Features page
    query: str  # the search query WebShop scraped the product with
    category: str  # one of beauty, fashion, food, furniture, electronics
    product_category: str  # the breadcrumb, parts separated by '›'
    rating: str = "N.A."
    reviews: tuple[Review, ...] = ()


@dataclass(frozen=True)
class Goal:
    asin: str  # the product the instruction was written for
    instruction: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    price_upper: float
    query: str
    category: str
    product_category: str
    name: str  # the target product's title, for the type factor


@dataclass
class Catalogue:
    products: list[Product]
    goals: list[Goal]  # in variation order
    source: str  # "generated(seed=…, n=…)" or the data folder
    by_asin: dict[str, Product] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_asin = {p.asin: p for p in self.products}


def split_range(n_goals: int, split: str) -> range:
    """Goal indices of ``split``: test first, then dev, then train (see the module docstring)."""
    check_split(split)
    n_test, n_dev = min(500, n_goals // 6), min(1000, n_goals // 6)
    bounds = {"test": (0, n_test), "dev": (n_test, n_test + n_dev), "train": (n_test + n_dev, n_goals)}
    return range(*bounds[split])



def price_bound(price: float, rng: random.Random) -> float:
    """WebShop's goal price bound: the larger of two of the first four multiples of 10 above ``price``."""
    above = [p for p in PRICE_STEPS if p > price][:4]
    return max(rng.sample(above, 2)) if len(above) >= 2 else NO_BOUND


def price_clause(bound: float) -> str:
    return f", and price lower than {bound:.2f} dollars" if bound < NO_BOUND else ""


# --------------------------------------------------------------------------- official files


def _pick(folder: str, stem: str, prefer_suffix: str = "") -> str | None:
    """The file for ``stem*.json`` in ``folder``: ``stem{prefer_suffix}.json``, else the full
    ``stem.json``, else the first match by name; None when nothing matches."""
    matches = sorted(glob.glob(os.path.join(folder, f"{stem}*.json")))
    for name in (f"{stem}{prefer_suffix}.json", f"{stem}.json"):
        if os.path.join(folder, name) in matches:
            return os.path.join(folder, name)
    return matches[0] if matches else None


def official_files(folder: str) -> dict[str, str]:
    """Paths of the required official files, or :class:`EnvironmentUnavailable` naming the missing ones."""
    if not os.path.isdir(folder):
        raise EnvironmentUnavailable(
            f"WebShop data folder {folder!r} does not exist. Point $WEBSHOP_DATA (or the env option "
            "`data`) at a folder holding WebShop's items_shuffle*.json, items_ins_v2*.json and "
            "items_human_ins.json, or unset it to use the generated offline catalogue."
        )
    files = {PRODUCTS: _pick(folder, PRODUCTS)}
    suffix = os.path.basename(files[PRODUCTS])[len(PRODUCTS):-len(".json")] if files[PRODUCTS] else ""
    files[ATTRIBUTES] = _pick(folder, ATTRIBUTES, suffix)
    human = os.path.join(folder, f"{HUMAN_INSTRUCTIONS}.json")
    files[HUMAN_INSTRUCTIONS] = human if os.path.isfile(human) else None
    missing = [
        f"{stem}{'*' if stem != HUMAN_INSTRUCTIONS else ''}.json ({what})"
        for stem, what in REQUIRED_FILES
        if files[stem] is None
    ]
    if missing:
        raise EnvironmentUnavailable(
            f"WebShop data folder {folder!r} lacks {', '.join(missing)}. It should hold the official "
            "WebShop files: items_shuffle*.json, items_ins_v2*.json and items_human_ins.json (the full "
            "or the 1000-item set). Download them on a connected machine (WebShop's setup.sh fetches "
            "them) and copy them here, or unset $WEBSHOP_DATA to use the generated offline catalogue."
        )
    return files


def _read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _pricing(text: str | None) -> tuple[list[float], str]:
    """WebShop's reading of a price text such as ``$12.99`` or ``$10.00 - $20.00``."""
    values = []
    for piece in (text or "").split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", piece)
        if digits.strip("."):
            values.append(float(digits))
    if not values:
        return [100.0], "$100.0"
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def _options(customization: dict | None) -> dict[str, tuple[str, ...]]:
    options = {}
    for name, contents in (customization or {}).items():
        if contents is None:
            continue
        options[name.lower()] = tuple(c["value"].strip().replace("/", " | ").lower() for c in contents)
    return options


def _stars(score) -> int:
    found = re.match(r"\s*(\d+(?:\.\d+)?)", str(score))
    return int(float(found.group(1))) if found else 0


def _reviews(raw: list[dict]) -> tuple[Review, ...]:
    return tuple(
        Review(str(r.get("title", "")), _stars(r.get("score", r.get("stars", 0))),
               str(r.get("body", r.get("review", ""))))
        for r in raw
    )


def load_official(folder: str) -> Catalogue:
    """Products and human goals from WebShop's files in ``folder``."""
    files = official_files(folder)
    raw_products = _read_json(files[PRODUCTS])
    attributes = _read_json(files[ATTRIBUTES])
    human = _read_json(files[HUMAN_INSTRUCTIONS])
    reviews_path = os.path.join(folder, REVIEWS)
    reviews, ratings = {}, {}
    if os.path.isfile(reviews_path):
        for entry in _read_json(reviews_path):
            reviews[entry["asin"]] = _reviews(entry.get("reviews") or [])
            ratings[entry["asin"]] = str(entry.get("average_rating", "N.A."))

    products, seen = [], set()
    for p in raw_products:
        asin = str(p.get("asin", "nan"))
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        pricing, tag = _pricing(p.get("pricing"))
        price = pricing[0] if len(pricing) == 1 else random.Random(f"price/{asin}").uniform(*pricing)
        bullets = p.get("small_description") or []
        products.append(Product(
            asin=asin,
            title=p.get("name") or "",
            price=price,
            price_tag=tag,
            options=_options(p.get("customization_options")),
            attributes=tuple((attributes.get(asin) or {}).get("attributes") or ()),
            description=p.get("full_description") or "",
            bullets=tuple(bullets if isinstance(bullets, list) else [bullets]),
            query=(p.get("query") or "").lower().strip(),
            category=p.get("category") or "",
            product_category=p.get("product_category") or "",
            rating=ratings.get(asin, "N.A."),
            reviews=reviews.get(asin, ()),
        ))

    goals = []
    for product in products:
        for k, entry in enumerate(human.get(product.asin) or []):
            goal_attributes = entry.get("instruction_attributes") or []
            if not goal_attributes:
                continue
            bound = price_bound(product.price, random.Random(f"bound/{product.asin}/{k}"))
            options = entry.get("instruction_options") or []
            goals.append(Goal(
                asin=product.asin,
                instruction=entry["instruction"].strip(".") + price_clause(bound),
                attributes=tuple(goal_attributes),
                options=tuple(options.values() if isinstance(options, dict) else options),
                price_upper=bound,
                query=product.query,
                category=product.category,
                product_category=product.product_category,
                name=product.title,
            ))
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return Catalogue(products, goals, source=folder)


def write_official(catalogue: Catalogue, folder: str) -> None:
    """Write ``catalogue`` as WebShop's files in ``folder`` (``items_shuffle.json``,
    ``items_ins_v2.json``, ``items_human_ins.json``, ``reviews.json``), the inverse of
    :func:`load_official` up to WebShop's own draws: reloaded, goal price bounds are drawn
    again and the goals shuffled again, as WebShop does with its files."""
    os.makedirs(folder, exist_ok=True)
    products = [{
        "asin": p.asin, "name": p.title, "full_description": p.description, "small_description": list(p.bullets),
        "pricing": p.price_tag, "category": p.category, "query": p.query, "product_category": p.product_category,
        "customization_options": {name: [{"value": v, "image": None} for v in values]
                                  for name, values in p.options.items()} or None,
    } for p in catalogue.products]
    instructions: dict[str, list[dict]] = {}
    for goal in catalogue.goals:
        instructions.setdefault(goal.asin, []).append({
            "instruction": goal.instruction.removesuffix(price_clause(goal.price_upper)), "instruction_attributes": list(goal.attributes),
            "instruction_options": list(goal.options)})
    files = {
        f"{PRODUCTS}.json": products,
        f"{ATTRIBUTES}.json": {p.asin: {"attributes": list(p.attributes)} for p in catalogue.products},
        f"{HUMAN_INSTRUCTIONS}.json": instructions,
        REVIEWS: [{"asin": p.asin, "average_rating": p.rating,
                   "reviews": [{"title": r.title, "score": r.score, "body": r.body} for r in p.reviews]}
                  for p in catalogue.products],
    }
    for name, content in files.items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            json.dump(content, f)


# --------------------------------------------------------------------------- generated catalogue

# (category, product type = its search query, breadcrumb, price range, attribute pool, option axes)
PRODUCT_TYPES = (
    ("beauty", "shampoo", "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos", (6, 38),
     ("sulfate free", "paraben free", "cruelty free", "for dry hair", "natural ingredients", "long lasting"),
     {"scent": ("lavender", "coconut", "tea tree", "unscented", "citrus"),
      "size": ("8 fl oz", "12 fl oz", "16 fl oz", "32 fl oz")}),
    ("beauty", "hair extension", "Beauty & Personal Care › Hair Care › Hair Extensions, Wigs & Accessories",
     (12, 75), ("natural looking", "clip in", "heat resistant", "synthetic hair", "easy to apply", "tangle free"),
     {"color": ("natural black", "dark brown", "ash blonde", "auburn"), "size": ("14 inch", "18 inch", "22 inch")}),
    ("beauty", "lipstick", "Beauty & Personal Care › Makeup › Lips › Lipstick", (4, 29),
     ("long lasting", "matte finish", "cruelty free", "moisturizing", "waterproof", "vegan"),
     {"color": ("ruby red", "nude pink", "berry", "coral", "plum")}),
    ("food", "green tea", "Grocery & Gourmet Food › Beverages › Tea › Green Tea", (5, 27),
     ("organic", "decaffeinated", "non gmo", "gluten free", "individually wrapped", "low calorie"),
     {"flavor": ("jasmine", "mint", "lemon", "matcha", "original"), "size": ("20 count", "40 count", "100 count")}),
    ("food", "protein bar", "Grocery & Gourmet Food › Snack Foods › Bars › Protein Bars", (14, 45),
     ("gluten free", "low sugar", "high protein", "keto friendly", "non gmo", "plant based"),
     {"flavor": ("chocolate chip", "peanut butter", "vanilla almond", "salted caramel"),
      "size": ("12 count", "24 count")}),
    ("food", "coffee beans", "Grocery & Gourmet Food › Beverages › Coffee › Whole Coffee Beans", (9, 52),
     ("organic", "fair trade", "dark roast", "low acid", "single origin", "kosher"),
     {"flavor": ("espresso", "hazelnut", "colombian", "breakfast blend"), "size": ("12 ounce", "2 pound", "5 pound")}),
    ("fashion", "polo shirt", "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › Polos", (11, 48),
     ("machine wash", "short sleeve", "moisture wicking", "slim fit", "cotton", "wrinkle free"),
     {"color": ("navy blue", "white", "heather grey", "forest green", "black"),
      "size": ("small", "medium", "large", "x-large")}),
    ("fashion", "running shoes", "Clothing, Shoes & Jewelry › Women › Shoes › Athletic › Running", (25, 95),
     ("non slip", "lightweight", "breathable", "memory foam", "rubber sole", "arch support"),
     {"color": ("black", "white", "pink", "teal"), "size": ("us 6", "us 7", "us 8", "us 9", "us 10")}),
    ("fashion", "winter jacket", "Clothing, Shoes & Jewelry › Men › Clothing › Jackets & Coats", (35, 140),
     ("water resistant", "hooded", "fleece lined", "windproof", "zip closure", "packable"),
     {"color": ("black", "olive", "navy blue", "khaki"), "size": ("small", "medium", "large", "x-large")}),
    ("furniture", "office chair", "Home & Kitchen › Furniture › Home Office Furniture › Home Office Chairs",
     (60, 260), ("ergonomic design", "lumbar support", "adjustable height", "easy assembly", "mesh back", "swivel"),
     {"color": ("black", "grey", "white", "blue")}),
    ("furniture", "bookshelf", "Home & Kitchen › Furniture › Living Room Furniture › Bookcases", (40, 190),
     ("solid wood", "easy assembly", "space saving", "storage space", "industrial style", "wall mounted"),
     {"color": ("walnut", "white", "black oak", "rustic brown"), "size": ("3 tier", "4 tier", "5 tier")}),
    ("furniture", "coffee table", "Home & Kitchen › Furniture › Living Room Furniture › Tables › Coffee Tables",
     (45, 230), ("mid century", "tempered glass", "storage space", "easy assembly", "solid wood", "round top"),
     {"color": ("natural", "espresso", "white", "grey")}),
    ("electronics", "bluetooth headphones", "Electronics › Headphones, Earbuds & Accessories › Headphones",
     (18, 150), ("noise cancelling", "wireless bluetooth", "long battery life", "hands free", "foldable",
                 "high fidelity"),
     {"color": ("black", "white", "rose gold", "silver")}),
    ("electronics", "phone case", "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases", (7, 33),
     ("shockproof", "wireless charging", "slim fit", "anti scratch", "easy install", "kickstand"),
     {"color": ("black", "clear", "purple", "green"), "model": ("iphone 14", "galaxy s23", "pixel 8", "moto g")}),
    ("electronics", "usb cable", "Electronics › Computers & Accessories › Cables › USB Cables", (5, 24),
     ("fast charging", "high speed", "braided nylon", "durable", "tangle free", "data transfer"),
     {"color": ("black", "white", "grey"), "size": ("3 feet", "6 feet", "10 feet")}),
)

BRANDS = ("Alder", "Brightwave", "Cedarline", "Dovetail", "Everpeak", "Fernhill", "Glimmer", "Harbor",
          "Ironbark", "Juniper", "Kestrel", "Lumina", "Meadowlark", "Northwind", "Oakmont", "Pinecrest",
          "Quillon", "Saltmarsh", "Thistle", "Vantage", "Willowby", "Zephyr")
QUALITY_NOTES = ("Made to last through daily use.", "Backed by a one year warranty.",
                 "Packed with care and shipped fast.", "A customer favourite for everyday use.")
REVIEW_TEXTS = (("Great value", 5, "Exactly what I was looking for."),
                ("Works as described", 4, "Good quality for the price."),
                ("Decent", 3, "It does the job, nothing special."),
                ("Love it", 5, "Would buy again."))
INSTRUCTION_FORMS = ("i am looking for {type} that is {attrs}{opts}", "i need {type} which is {attrs}{opts}",
                     "i want to buy {attrs} {type}{opts}", "find me {attrs} {type}{opts}")


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _product(rng: random.Random, asin: str, kind: tuple) -> Product:
    category, query, crumbs, (low, high), pool, axes = kind
    brand = rng.choice(BRANDS)
    attributes = tuple(rng.sample(pool, 3))
    options = {}
    for name, values in axes.items():
        chosen = set(rng.sample(values, rng.randint(2, len(values))))
        options[name] = tuple(v for v in values if v in chosen)
    price = round(rng.uniform(low, high), 2)
    title = f"{brand} {attributes[0].title()} {query.title()} with {attributes[1].title()}"
    reviews = tuple(Review(*r) for r in rng.sample(REVIEW_TEXTS, rng.randint(0, 2)))
    return Product(
        asin=asin,
        title=title,
        price=price,
        price_tag=f"${price:.2f}",
        options=options,
        attributes=attributes,
        description=(f"The {brand} {query} is {attributes[0]}, {attributes[1]} and {attributes[2]}. "
                     f"{rng.choice(QUALITY_NOTES)}"),
        bullets=tuple(f"{a.capitalize()}: a {query} you can count on." for a in attributes),
        query=query,
        category=category,
        product_category=crumbs,
        rating=rng.choice(("N.A.", "N.A.", "3.5", "4.0", "4.5", "5.0")),
        reviews=reviews,
    )


def _goal(rng: random.Random, product: Product) -> Goal:
    wanted = tuple(rng.sample(product.attributes, rng.choice((1, 2, 2, 3))))
    picks = {name: rng.choice(values) for name, values in product.options.items()}
    opts = ", in " + " and ".join(f"{v} {name}" for name, v in picks.items()) if picks else ""
    bound = price_bound(product.price, rng)
    text = rng.choice(INSTRUCTION_FORMS).format(type=product.query, attrs=" and ".join(wanted), opts=opts)
    return Goal(
        asin=product.asin,
        instruction=text + price_clause(bound),
        attributes=wanted,
        options=tuple(picks.values()),
        price_upper=bound,
        query=product.query,
        category=product.category,
        product_category=product.product_category,
        name=product.title,
    )


def generate_catalogue(seed: int = 0, n_products: int = 300) -> Catalogue:
    """``n_products`` products (types in turn) with one goal each, all drawn from ``seed``."""
    if n_products < 6:
        raise ValueError(f"a generated WebShop catalogue needs at least 6 products, got n_products={n_products}")
    rng = random.Random(seed)
    taken: set[str] = set()
    products = [_product(rng, _asin(rng, taken), PRODUCT_TYPES[i % len(PRODUCT_TYPES)]) for i in range(n_products)]
    goals = [_goal(rng, p) for p in products]
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return Catalogue(products, goals, source=f"generated(seed={seed}, n={n_products})")
