"""The public names of adwm_core.ope, loaded on first use, and the settings that load without torch."""

import os
import subprocess
import sys

from typing import get_args

import pytest

import adwm_core.ope as ope
from adwm_core.ope.classical.settings import EstimatorName


def test_every_public_name_resolves_and_the_estimators_answer_to_their_row_names():
    from adwm_core.ope import WIS, LoggedTrajectories, WeightedImportanceSampling
    from adwm_core.ope.classical.estimators import LoggedTrajectories as defined

    assert WIS is WeightedImportanceSampling and WIS.name == "WIS" and LoggedTrajectories is defined
    for name in ope.__all__:
        assert getattr(ope, name) is not None, name
    assert {ope.ESTIMATORS[name] for name in ope.ESTIMATORS} == {getattr(ope, name) for name in ope.ESTIMATORS}
    assert set(get_args(EstimatorName)) == set(ope.ESTIMATORS)  # the settings name every estimator, no other
    with pytest.raises(AttributeError, match="no attribute 'WISH'"):
        ope.WISH


def test_every_stage_setting_loads_without_torch():
    code = ("import sys, adwm_core.settings as s, adwm_core.ope.settings as o, adwm_core.ope.classical.settings as b; "
            "[c() for c in (s.TrainConfig, s.PsiConfig, b.BaselineConfig, o.AdwmConfig, b.FQEConfig)]; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_stage_registry_locates_artifacts_without_torch_prefect_or_mlflow():
    """Finding a cell's artifacts (benches, a notebook) costs no heavy import: each stage's
    compute module loads only when the stage runs."""
    code = ("import sys; from adwm_core import pipeline; from adwm_core.cell import CellConfig; "
            "c = CellConfig.load('deployments/local-simonsays.yaml'); pipeline.locate(c, 'report'); "
            "print(sorted(m for m in ('torch', 'prefect', 'mlflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.stdout.strip() == "[]"


def test_the_python_api_and_its_checks_load_without_torch_transformers_prefect_or_mlflow():
    """`import adwm_core.api` and checking a cell before its first stage (weights, environment
    skipped) import none of the heavy packages: the in-process path reaches its first stage
    sooner (issue 59); torch loads only to ask for a GPU a cell needs or a vLLM engine shares.
    The report's lines, which `adwm evaluate` imports before its stages, need none either."""
    code = ("import sys; from adwm_core.api import OffPolicyEvaluation; from adwm_core.cell import CellConfig; "
            "from adwm_core.runnable import prepared; import adwm_core.report; "
            "prepared(CellConfig.load('deployments/local-simonsays.yaml'), environment=False); "
            "print(sorted(m for m in ('torch', 'transformers', 'vllm', 'prefect', 'mlflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
