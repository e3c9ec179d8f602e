"""The public names of adwm_core.ope, loaded on first use."""

import subprocess
import sys

import pytest

import adwm_core.ope as ope


def test_every_public_name_resolves_and_the_estimators_answer_to_their_row_names():
    from adwm_core.ope import WIS, LoggedTrajectories, WeightedImportanceSampling
    from adwm_core.ope.estimators import LoggedTrajectories as defined

    assert WIS is WeightedImportanceSampling and WIS.name == "WIS" and LoggedTrajectories is defined
    for name in ope.__all__:
        assert getattr(ope, name) is not None, name
    assert {ope.ESTIMATORS[name] for name in ope.ESTIMATORS} == {getattr(ope, name) for name in ope.ESTIMATORS}
    with pytest.raises(AttributeError, match="no attribute 'WISH'"):
        ope.WISH


def test_the_adwm_settings_load_without_torch():
    code = "import sys, adwm_core.ope.adwm_config as c; c.AdwmConfig(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
