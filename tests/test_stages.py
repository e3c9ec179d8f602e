"""Stage descriptors: each task module declares its stage once, and everything else finds the
stage's artifacts through it."""

import pytest

from adwm_core.cell import CellConfig
from flows.cells import cell_config_path
from tasks import adwm, behaviour, ground_truth, report, world_model


@pytest.fixture(scope="module")
def cell():
    return CellConfig.load(cell_config_path("local-simonsays"))


def test_a_stage_not_yet_run_is_named_with_the_command_that_runs_it(cell):
    with pytest.raises(FileNotFoundError, match="no finished behaviour stage.*python -m flows.ope_cell local-simonsays"):
        behaviour.STAGE.finished(cell)


def test_per_policy_stages_need_their_policy_and_the_others_refuse_one(cell):
    policy = cell.evaluation.policies[0]
    with pytest.raises(TypeError, match="'adwm' is per π_e: pass a policy"):
        adwm.STAGE.finished(cell)
    with pytest.raises(TypeError, match="'world-model' is not per π_e"):
        world_model.STAGE.finished(cell, policy=policy)
    assert ground_truth.STAGE.run_name(policy.label) == f"ground-truth [{policy.label}]"
    assert report.STAGE.run_name() == "report"
