"""Cell configs: every shipped YAML loads, and a bad one names its field before any compute."""

import glob
import os

import pytest
import yaml

from adwm_core.cell import CellConfig, CellConfigError

DEPLOYMENTS = os.path.join(os.path.dirname(__file__), "..", "deployments")
LOCAL = os.path.join(DEPLOYMENTS, "local-simonsays.yaml")


def local_raw() -> dict:
    with open(LOCAL) as f:
        return yaml.safe_load(f)


def test_every_shipped_cell_config_loads():
    paths = sorted(glob.glob(os.path.join(DEPLOYMENTS, "*.yaml")))
    assert paths
    for path in paths:
        config = CellConfig.load(path)
        assert config.name == os.path.basename(path)[: -len(".yaml")]


def test_the_local_cell_resolves_its_sections():
    config = CellConfig.load(LOCAL)
    assert config.env.name == "textworld-express" and config.env.skip_variations == 40
    assert [p.model for p in config.behaviour.pool] == ["local:iter0", "local:iter1", "local:iter2"]
    assert config.evaluation.epsilons == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert config.adwm.horizon == 12 and config.adwm.n_rollouts == 32  # set, and defaulted from the paper
    assert config.world_model.epochs == 50 and config.psi.epochs == 20


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["adwm"].update(n_rolouts=4), r"adwm\.n_rolouts: Unexpected keyword argument"),
    (lambda r: r["world_model"].update(epochs="many"), r"world_model\.epochs: Input should be a valid integer"),
    (lambda r: r["adwm"].update(reading="psychic"), r"adwm: Value error, ADWM config: reading='psychic'"),
    (lambda r: r["behaviour"].update(episodes=0), r"behaviour\.episodes: Input should be greater than 0"),
    (lambda r: r["evaluation"].update(epsilons=[0.0, 1.5]), r"evaluation\.epsilons"),
    (lambda r: r.update(colour="blue"), r"colour: Extra inputs are not permitted"),
    (lambda r: r.pop("env"), r"env: Field required"),
    (lambda r: r["evaluation"]["policy"].update(model="local:iter9"), r"evaluation\.policy\.model = 'local:iter9'"),
])
def test_a_bad_field_is_named(edit, message):
    raw = local_raw()
    edit(raw)
    with pytest.raises(CellConfigError, match=message):
        CellConfig.from_mapping(raw)


def test_model_paths_come_from_environment_variables(tmp_path):
    raw = local_raw()
    raw["evaluation"]["policy"]["model"] = "${MY_AGENT}/checkpoint"
    with pytest.raises(CellConfigError, match=r"evaluation\.policy\.model: environment variable MY_AGENT is not set"):
        CellConfig.from_mapping(raw, environ={})
    config = CellConfig.from_mapping(raw, environ={"MY_AGENT": "/models/agent"})
    assert config.evaluation.policy.model == "/models/agent/checkpoint"


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
