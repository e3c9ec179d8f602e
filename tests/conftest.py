import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def adwm_home(tmp_path_factory):
    """Every artifact of the test session (compiled games included) goes to a fresh folder."""
    home = tmp_path_factory.mktemp("adwm_home")
    os.environ["ADWM_HOME"] = str(home)
    return home
