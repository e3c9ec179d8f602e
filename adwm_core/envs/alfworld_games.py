"""ALFWorld-format games generated from a seed, for running ALFWorld cells offline.

The official ALFWorld games are PDDL problems over the ALFRED domain, each in a
folder with ``game.tw-pddl`` (the domain, the TextWorld grammar with the goal
text filled in, the problem) and ``traj_data.json`` (the task type and its
parameters, which the hand-coded expert reads). This module writes folders of
the same format: the domain, the grammar, the goal phrasings and ALFRED's
object/receptacle affordances are read from the installed ``alfworld`` package;
only the scene is drawn here, from ``(task type, seed)``:

- a room of a kind ALFRED allows for the task type (kitchen, bathroom, bedroom,
  living room), with a few receptacles of the kinds such a room has;
- the goal's object (and for ``look_at_obj_in_light`` a desk lamp) and a few
  distractors, each put in a receptacle that ALFRED lets hold it;
- the goal of the task type, never already satisfied at the start.

Problems are kept small (at most 16 receptacles and 9 objects) so that the
planner answers in well under a second.
"""

from __future__ import annotations

import importlib
import json
import os
import random
from dataclasses import dataclass, field

from ..paths import write_whole
from .base import EnvironmentUnavailable

# Bump when the generated games change, so cached folders of an older generator are not reused.
GENERATOR_VERSION = 1

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

# Per room kind: receptacle kinds as (ALFRED class, fewest, most), and the objects found there.
ROOMS: dict[str, dict] = {
    "Kitchen": {
        "receptacles": [
            ("CounterTop", 1, 2), ("Cabinet", 2, 3), ("Drawer", 1, 2), ("Fridge", 1, 1),
            ("Microwave", 1, 1), ("SinkBasin", 1, 1), ("StoveBurner", 1, 2), ("GarbageCan", 1, 1),
            ("DiningTable", 0, 1), ("CoffeeMachine", 0, 1), ("Shelf", 0, 1),
        ],
        "objects": [
            "Apple", "Bowl", "Bread", "ButterKnife", "Cup", "DishSponge", "Egg", "Fork", "Kettle",
            "Knife", "Ladle", "Lettuce", "Mug", "Pan", "PepperShaker", "Plate", "Pot", "Potato",
            "SaltShaker", "SoapBottle", "Spatula", "Spoon", "Tomato", "WineBottle",
        ],
        "number": (1, 30),  # ALFRED's floor-plan numbers for this kind of room
    },
    "LivingRoom": {
        "receptacles": [
            ("Sofa", 1, 1), ("ArmChair", 0, 1), ("CoffeeTable", 1, 1), ("SideTable", 1, 2),
            ("TVStand", 0, 1), ("Shelf", 0, 2), ("Drawer", 0, 2), ("Dresser", 0, 1), ("GarbageCan", 1, 1),
        ],
        "objects": [
            "Book", "Bowl", "Box", "Candle", "CellPhone", "CreditCard", "KeyChain", "Laptop",
            "Newspaper", "Pillow", "Plate", "RemoteControl", "Statue", "TissueBox", "Vase", "Watch",
        ],
        "number": (201, 230),
    },
    "Bedroom": {
        "receptacles": [
            ("Bed", 1, 1), ("Desk", 0, 1), ("SideTable", 1, 2), ("Dresser", 0, 1), ("Drawer", 1, 2),
            ("Shelf", 0, 2), ("GarbageCan", 1, 1), ("LaundryHamper", 0, 1), ("Safe", 0, 1),
        ],
        "objects": [
            "AlarmClock", "BaseballBat", "BasketBall", "Book", "Bowl", "CD", "CellPhone", "Cloth",
            "CreditCard", "KeyChain", "Laptop", "Mug", "Pen", "Pencil", "Pillow", "TennisRacket", "Vase", "Watch",
        ],
        "number": (301, 330),
    },
    "Bathroom": {
        "receptacles": [
            ("CounterTop", 1, 1), ("SinkBasin", 1, 1), ("Cabinet", 1, 2), ("Drawer", 0, 2), ("Toilet", 1, 1),
            ("Shelf", 0, 1), ("GarbageCan", 1, 1), ("ToiletPaperHanger", 1, 1), ("HandTowelHolder", 0, 1),
        ],
        "objects": [
            "Candle", "Cloth", "DishSponge", "HandTowel", "SoapBar", "SoapBottle", "SprayBottle",
            "TissueBox", "ToiletPaper",
        ],
        "number": (401, 430),
    },
}
LAMP = "DeskLamp"
LAMP_HOSTS = ("Desk", "SideTable", "Dresser")  # where a desk lamp stands
# Each task type's state change: the ALFRED affordance its object needs and the appliance used.
STATE_CHANGE = {
    "pick_clean_then_place_in_recep": ("Cleanable", "SinkBasin"),
    "pick_heat_then_place_in_recep": ("Heatable", "Microwave"),
    "pick_cool_then_place_in_recep": ("Coolable", "Fridge"),
}
# Types named as constants by the ALFRED domain's actions: every problem declares them.
DOMAIN_RTYPES = ("SinkBasin", "Microwave", "Fridge")
DOMAIN_OTYPES = ("Knife", "ButterKnife")
DISTRACTORS = (3, 6)
AGENT = "agent1"


def import_alfworld(module: str):
    """Import ``module`` of the ``alfworld`` package, or say how to install it.

    Importing ``alfworld`` sets ``$ALFWORLD_DATA`` to its default cache folder when unset;
    that is undone here, so the variable keeps meaning only what the user set."""
    before = os.environ.get("ALFWORLD_DATA")
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise EnvironmentUnavailable(
            f"ALFWorld needs the `alfworld` package and TextWorld's PDDL support ({err}): "
            'run `pip install -e ".[alfworld]"` (or `make install`)'
        ) from err
    finally:
        if before is None:
            os.environ.pop("ALFWORLD_DATA", None)
        else:
            os.environ["ALFWORLD_DATA"] = before


def alfworld_modules():
    """The parts of the ``alfworld`` package the generator reads: (info, constants, goal library)."""
    return (
        import_alfworld("alfworld.info"),
        import_alfworld("alfworld.gen.constants"),
        import_alfworld("alfworld.gen.goal_library"),
    )


def mangle(alfred_id: str) -> str:
    """An ALFRED object id (``Apple|+01.59|+00.97|-01.29``) as a PDDL name, the way ALFWorld writes it."""
    for char, word in (("|", "_bar_"), ("+", "_plus_"), ("-", "_minus_"), (".", "_dot_"), (",", "_comma_")):
        alfred_id = alfred_id.replace(char, word)
    return alfred_id


@dataclass
class Entity:
    cls: str  # ALFRED class, e.g. "Apple", "SinkBasin"
    name: str  # PDDL name
    location: str = ""  # PDDL name of its location (receptacles; objects take their receptacle's)
    receptacle: str = ""  # objects: PDDL name of the receptacle holding it


@dataclass
class Scene:
    task_type: str
    seed: int
    room: str
    floor_plan: int
    receptacles: list[Entity] = field(default_factory=list)
    objects: list[Entity] = field(default_factory=list)
    start: str = ""  # the agent's starting location
    object_target: str = ""
    parent_target: str = ""
    toggle_target: str = ""


@dataclass(frozen=True)
class GeneratedGame:
    task_type: str
    seed: int
    game: dict  # the content of game.tw-pddl
    traj_data: dict  # the content of traj_data.json

    @property
    def task_description(self) -> str:
        return self.traj_data["turk_annotations"]["anns"][0]["task_desc"]

    @property
    def official_folder(self) -> str:
        """The ``<task>-<object>-<movable receptacle>-<receptacle>-<floor plan>/trial_<id>`` path
        ALFWorld's data uses for a game like this one."""
        params = self.traj_data["pddl_params"]
        target = params["parent_target"] or params["toggle_target"]
        task_dir = "-".join([
            self.task_type, params["object_target"], params["mrecep_target"] or "None", target,
            str(self.traj_data["scene"]["floor_plan"]),
        ])
        return os.path.join(task_dir, f"trial_T00000000_{self.seed:06d}_gen")


class _Namer:
    """Unique ALFRED-style ids (class + coordinates) and location names, drawn from ``rng``."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._used: set[str] = set()

    def _coord(self, low: float, high: float) -> str:
        return f"{self._rng.uniform(low, high):+06.2f}"

    def entity(self, cls: str) -> str:
        while True:
            coords = "|".join((self._coord(-3.5, 3.5), self._coord(0.0, 2.2), self._coord(-3.5, 3.5)))
            alfred_id = f"Sink|{coords}|SinkBasin" if cls == "SinkBasin" else f"{cls}|{coords}"
            name = mangle(alfred_id)
            if name not in self._used:
                self._used.add(name)
                return name

    def location(self) -> str:
        while True:
            r = self._rng
            x, z, rotation, horizon = r.randint(-8, 12), r.randint(-8, 12), r.randint(0, 3), r.choice((-30, 0, 30, 60))
            alfred_id = f"loc|{x}|{z}|{rotation}|{horizon}"
            name = mangle(alfred_id)
            if name not in self._used:
                self._used.add(name)
                return name


def _check_task(task_type: str) -> None:
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown ALFWorld task type {task_type!r}; known: {', '.join(TASK_TYPES)}")


def draw_scene(task_type: str, seed: int) -> Scene:
    """The scene of ``(task_type, seed)``: the same pair always gives the same scene."""
    _check_task(task_type)
    _, constants, _ = alfworld_modules()
    holds = constants.VAL_RECEPTACLE_OBJECTS
    affords = constants.VAL_ACTION_OBJECTS
    rng = random.Random(f"adwm-alfworld:{GENERATOR_VERSION}:{task_type}:{seed}")
    namer = _Namer(rng)

    room = rng.choice(sorted(constants.GOALS_VALID[task_type]))
    spec = ROOMS[room]
    scene = Scene(task_type, seed, room, rng.randint(*spec["number"]))
    for cls, low, high in spec["receptacles"]:
        for _ in range(rng.randint(low, high)):
            scene.receptacles.append(Entity(cls, namer.entity(cls), namer.location()))
    scene.start = namer.location()
    present = sorted({r.cls for r in scene.receptacles})

    def hosts(obj_cls: str, excluded: tuple[str, ...] = ()) -> list[Entity]:
        return [r for r in scene.receptacles if obj_cls in holds.get(r.cls, ()) and r.cls not in excluded]

    # The goal: an object of the room that the task can act on, and a receptacle kind to bring it to.
    affordance, appliance = STATE_CHANGE.get(task_type, (None, None))
    candidates = [o for o in spec["objects"] if affordance is None or o in affords[affordance]]
    if task_type == "look_at_obj_in_light":
        lamp_hosts = [r for r in scene.receptacles if r.cls in LAMP_HOSTS]
        pairs = [(o, "") for o in candidates if hosts(o)]
    else:
        pairs = [
            (o, r) for o in candidates for r in present
            if r != appliance and o in holds.get(r, ()) and hosts(o, excluded=(r,))
        ]
    if not pairs:  # every room kind offers pairs for its task types; guard against edits to ROOMS
        raise RuntimeError(f"no goal fits the {room} drawn for {task_type} seed {seed}")
    scene.object_target, scene.parent_target = rng.choice(sorted(pairs))
    n_targets = 2 if task_type == "pick_two_obj_and_place" else 1
    excluded = (scene.parent_target,) if scene.parent_target else ()
    for _ in range(n_targets):
        host = rng.choice(hosts(scene.object_target, excluded))
        scene.objects.append(Entity(scene.object_target, namer.entity(scene.object_target), receptacle=host.name))
    if task_type == "look_at_obj_in_light":
        scene.toggle_target = LAMP
        host = rng.choice(lamp_hosts)
        scene.objects.append(Entity(LAMP, namer.entity(LAMP), receptacle=host.name))

    # Distractors: other objects of the room, each where ALFRED lets it be.
    others = [o for o in spec["objects"] if o != scene.object_target and hosts(o)]
    for obj_cls in rng.sample(others, min(len(others), rng.randint(*DISTRACTORS))):
        host = rng.choice(hosts(obj_cls))
        scene.objects.append(Entity(obj_cls, namer.entity(obj_cls), receptacle=host.name))
    return scene


def _goal(scene: Scene) -> str:
    obj, recep = f"{scene.object_target}Type", f"{scene.parent_target}Type"
    if scene.task_type == "look_at_obj_in_light":
        return (
            "(:goal (and\n"
            "  (exists (?t - object ?r - receptacle ?a - agent ?l - location)\n"
            f"    (and (objectType ?t {scene.toggle_target}Type) (toggleable ?t) (isToggled ?t)\n"
            "         (inReceptacle ?t ?r) (receptacleAtLocation ?r ?l) (atLocation ?a ?l)))\n"
            "  (exists (?o - object ?a - agent)\n"
            f"    (and (objectType ?o {obj}) (holds ?a ?o)))))"
        )
    if scene.task_type == "pick_two_obj_and_place":
        return (
            "(:goal (exists (?r - receptacle ?o1 - object ?o2 - object)\n"
            f"  (and (receptacleType ?r {recep}) (not (= ?o1 ?o2))\n"
            f"       (objectType ?o1 {obj}) (inReceptacle ?o1 ?r)\n"
            f"       (objectType ?o2 {obj}) (inReceptacle ?o2 ?r))))"
        )
    state = {
        "pick_clean_then_place_in_recep": "(cleanable ?o) (isClean ?o)",
        "pick_heat_then_place_in_recep": "(heatable ?o) (isHot ?o)",
        "pick_cool_then_place_in_recep": "(coolable ?o) (isCool ?o)",
    }.get(scene.task_type, "")
    return (
        "(:goal (exists (?r - receptacle ?o - object)\n"
        f"  (and (objectType ?o {obj}) (receptacleType ?r {recep}) (inReceptacle ?o ?r) {state})))"
    ).replace(" )", ")")


def problem_pddl(scene: Scene) -> str:
    """The scene as a PDDL problem over the ALFRED domain."""
    _, constants, _ = alfworld_modules()
    holds = constants.VAL_RECEPTACLE_OBJECTS
    affords = constants.VAL_ACTION_OBJECTS
    openable = set(constants.OPENABLE_CLASS_LIST)
    movable = set(constants.MOVABLE_RECEPTACLES)
    where = {r.name: r.location for r in scene.receptacles}

    rtypes = sorted({r.cls for r in scene.receptacles} | set(DOMAIN_RTYPES) | {scene.parent_target} - {""})
    otypes = sorted({o.cls for o in scene.objects} | set(DOMAIN_OTYPES))
    locations = sorted({r.location for r in scene.receptacles} | {scene.start})
    declared = (
        [f"{AGENT} - agent"]
        + [f"{loc} - location" for loc in locations]
        + [f"{r.name} - receptacle" for r in scene.receptacles]
        + [f"{o.name} - object" for o in scene.objects]
        + [f"{t}Type - rtype" for t in rtypes]
        + [f"{t}Type - otype" for t in otypes]
    )
    facts = [f"(atLocation {AGENT} {scene.start})"]
    for r in scene.receptacles:
        facts.append(f"(receptacleType {r.name} {r.cls}Type)")
        facts.append(f"(receptacleAtLocation {r.name} {r.location})")
        if r.cls in openable:
            facts.append(f"(openable {r.name})")
    present = sorted({r.cls for r in scene.receptacles})
    for rcls in present:
        for ocls in otypes:
            if ocls in holds.get(rcls, ()):
                facts.append(f"(canContain {rcls}Type {ocls}Type)")
    for o in scene.objects:
        facts.append(f"(objectType {o.name} {o.cls}Type)")
        facts.append(f"(inReceptacle {o.name} {o.receptacle})")
        facts.append(f"(objectAtLocation {o.name} {where[o.receptacle]})")
        if o.cls in affords["Toggleable"]:
            facts.append(f"(toggleable {o.name})")
            continue  # lamps stay where they stand
        facts.append(f"(pickupable {o.name})")
        for affordance, predicate in (
            ("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable"), ("Sliceable", "sliceable"),
        ):
            if o.cls in affords[affordance]:
                facts.append(f"({predicate} {o.name})")
        if o.cls in movable:
            facts.append(f"(isReceptacleObject {o.name})")

    lines = [f"(define (problem adwm_{scene.task_type}_{scene.seed})", "(:domain alfred)", "(:objects"]
    lines += [f"  {d}" for d in declared]
    lines += [")", "(:init"]
    lines += [f"  {f}" for f in facts]
    lines += [")", _goal(scene), ")", ""]
    return "\n".join(lines)


def generate_game(task_type: str, seed: int) -> GeneratedGame:
    """The ALFWorld game of ``(task_type, seed)``, as the contents of its two files."""
    info, _, goal_library = alfworld_modules()
    scene = draw_scene(task_type, seed)
    rng = random.Random(f"adwm-alfworld-goal-text:{task_type}:{seed}")
    template = rng.choice(goal_library.gdict[task_type]["templates"])
    task_desc = template.format(
        obj=scene.object_target.lower(), recep=scene.parent_target.lower(),
        toggle=scene.toggle_target.lower(), mrecep="",
    )
    with open(info.ALFRED_PDDL_PATH) as f:
        domain = f.read()
    with open(info.ALFRED_TWL2_PATH) as f:
        grammar = f.read()
    if "UNKNOWN GOAL" not in grammar:
        raise EnvironmentUnavailable(
            f"the ALFRED grammar shipped with alfworld ({info.ALFRED_TWL2_PATH}) has no 'UNKNOWN GOAL' "
            "placeholder for the task text; this alfworld version is not supported"
        )
    game = {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", task_desc),
        "pddl_problem": problem_pddl(scene),
        "solvable": True,  # by construction: the goal objects, receptacles and appliances are all there
        "walkthrough": None,  # the planner plans it when the game is loaded
    }
    traj_data = {
        "task_id": f"adwm_gen_{task_type}_{seed}",
        "task_type": task_type,
        "pddl_params": {
            "object_target": scene.object_target,
            "parent_target": scene.parent_target,
            "toggle_target": scene.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"room": scene.room, "floor_plan": scene.floor_plan, "random_seed": seed},
        "turk_annotations": {"anns": [{"task_desc": task_desc, "high_descs": [], "assignment_id": "generated"}]},
        "generator": {"name": "adwm_core.envs.alfworld_games", "version": GENERATOR_VERSION},
    }
    return GeneratedGame(task_type, seed, game, traj_data)


def write_game(game: GeneratedGame, folder: str) -> str:
    """Write ``game`` as ``folder/game.tw-pddl`` and ``folder/traj_data.json`` (the folder appears
    whole or not at all); return the game file."""

    def fill(aside: str) -> str:
        with open(os.path.join(aside, "traj_data.json"), "w") as f:
            json.dump(game.traj_data, f, indent=1)
        with open(os.path.join(aside, "game.tw-pddl"), "w") as f:
            json.dump(game.game, f)
        return aside

    write_whole(folder, fill)
    return os.path.join(folder, "game.tw-pddl")


def game_file(task_type: str, seed: int, root: str) -> str:
    """Path of the generated game's ``game.tw-pddl`` under ``root``, writing it on first use."""
    _check_task(task_type)
    folder = os.path.join(root, f"v{GENERATOR_VERSION}", task_type, str(seed))
    path = os.path.join(folder, "game.tw-pddl")
    if os.path.exists(path):
        return path
    return write_game(generate_game(task_type, seed), folder)
