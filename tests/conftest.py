import os
import shutil
import subprocess
import tempfile

import pytest

# The tests keep out of the user's stores: every run gets its own Prefect home (its database and
# the test server's, the results of failed flows and the block memo — Prefect 3.7 puts those two
# under ~/.prefect whatever PREFECT_HOME says, so they are set here too), MLflow store, artifact
# root (``adwm_home``) and cache for remote roots, all removed afterwards — whatever `make`,
# `make up` or the shell exported (a Prefect server or MLflow server URL included). Prefect reads
# these when it starts its test server; no telemetry (which otherwise logs "database is locked"
# on SQLite), and room for a slow CI machine to start. The last test checks that the suite left
# the user's own folders (WATCHED) as they were.
PRIVATE_PREFECT_HOME = tempfile.mkdtemp(prefix="adwm-test-prefect-")
os.environ["PREFECT_HOME"] = PRIVATE_PREFECT_HOME
os.environ["PREFECT_RESULTS_LOCAL_STORAGE_PATH"] = os.path.join(PRIVATE_PREFECT_HOME, "storage")
os.environ["PREFECT_MEMO_STORE_PATH"] = os.path.join(PRIVATE_PREFECT_HOME, "memo_store.toml")
os.environ["ADWM_CACHE"] = os.path.join(PRIVATE_PREFECT_HOME, "adwm-cache")
for name in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI"):
    os.environ.pop(name, None)
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")

# the user's folders, and the checkout's own ./mlruns (MLflow's default artifact folder)
WATCHED = [os.path.expanduser(p) for p in ("~/.prefect", "~/.cache/adwm", "~/mlruns")] + [
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mlruns")]
HOME_CHECK = "test_home.py::test_the_suite_left_the_users_prefect_cache_and_mlflow_folders_as_they_were"


def folder_state(path: str) -> dict[str, tuple[int, int]]:
    """Every file under ``path``: (size, modification time in ns); empty where there is none."""
    found = {}
    for folder, _, names in os.walk(path):
        for name in names:
            full = os.path.join(folder, name)
            status = os.lstat(full)
            found[full] = (status.st_size, status.st_mtime_ns)
    return found if found or not os.path.isdir(path) else {path: (0, 0)}


HOME_BEFORE = {path: folder_state(path) for path in WATCHED}
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHES = ("__pycache__", ".pytest_cache", ".ruff_cache")  # Python's and the tools' own, expected anywhere


def checkout_extras() -> set[str] | None:
    """Every path git does not track in the checkout, untracked or ignored (a new folder as one
    entry), the tools' caches left out; None where git cannot say (no checkout, no git)."""
    try:
        found = subprocess.run(["git", "-C", CHECKOUT, "status", "--porcelain", "--ignored", "--untracked-files=normal"],
                               capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if found.returncode:
        return None
    return {line[3:] for line in found.stdout.splitlines() if line[:2] in ("??", "!!")
            and not any(c in line for c in CACHES)}


CHECKOUT_BEFORE = checkout_extras()


def pytest_collection_modifyitems(config, items):
    """The check of the user's folders runs after every other test selected."""
    items.sort(key=lambda item: item.nodeid.endswith(HOME_CHECK))


def pytest_unconfigure(config):
    shutil.rmtree(PRIVATE_PREFECT_HOME, ignore_errors=True)

from adwm_core.envs.registry import DEFAULT_LOCAL_ENV


@pytest.fixture(scope="session", autouse=True)
def adwm_home(tmp_path_factory):
    """Every artifact of the test session (compiled games and the MLflow store included) goes to
    a fresh folder, removed with pytest's temporary folders of passing runs."""
    home = tmp_path_factory.mktemp("adwm_home")
    os.environ["ADWM_HOME"] = str(home)
    return home


def refuse_mid_episode(env, task: str, variation: int, bad_action: str, after: int = 1):
    """Play ``after`` gold actions, then ``bad_action``, then the rest of the gold sequence;
    return the refused step's result and the results of the rest."""
    env.reset(task, variation)
    gold = env.gold_actions()
    for action in gold[:after]:
        env.step(action)
    refused = env.step(bad_action)
    return refused, [env.step(action) for action in gold[after:]]


TINY_ENV = DEFAULT_LOCAL_ENV  # fast, and a tiny LM learns it in a few hundred steps
TINY_VARIATIONS = 40  # the first training variations, used to fine-tune


@pytest.fixture(scope="session")
def tiny_policies(adwm_home):
    """A barely trained and a trained checkpoint of a tiny GPT-2 fitted to the expert's
    trajectories of ``TINY_ENV`` (trained once per test session)."""
    from adwm_core.policies.trainer import train_tiny_policies

    name, task, options = TINY_ENV
    return train_tiny_policies(
        name, options, task, str(adwm_home / "tiny-policies"), {"early": 50, "late": 600},
        n_variations=TINY_VARIATIONS,
    )


def tiny_env_spec():
    """Held-out variations of the split the tiny policies were fine-tuned on (TWX's test split
    names objects never seen in training, which a from-scratch LM cannot spell)."""
    from adwm_core.specs import EnvSpec

    name, task, options = TINY_ENV
    return EnvSpec(name, task, options, split="train", max_steps=12, skip_variations=TINY_VARIATIONS)


@pytest.fixture(scope="session")
def tiny_pool(tiny_policies):
    from adwm_core.specs import PolicySpec

    return [PolicySpec("tiny-early", tiny_policies["early"]), PolicySpec("tiny-late", tiny_policies["late"])]


WM_STEPS = 200  # optimiser steps; the default budget of 50 000 drawn transitions is about 170 on this log


@pytest.fixture(scope="session")
def tiny_behaviour(tiny_pool, adwm_home):
    """160 behaviour trajectories of the tiny pool (path to the Parquet file)."""
    from adwm_core.collection import collect_behavior

    out = str(adwm_home / "tiny-cell" / "trajectories.parquet")
    collect_behavior(tiny_env_spec(), tiny_pool, 160, out, cell="test-cell", n_workers=2, envs_per_worker=8)
    return out


@pytest.fixture(scope="session")
def tiny_world_model(tiny_behaviour, adwm_home):
    """A world model trained by the default recipe, WM_STEPS optimiser steps, on ``tiny_behaviour``:
    (TrainResult, evaluation rounds reported)."""
    from adwm_core.data import TRAJECTORIES, read_table
    from adwm_core.settings import TrainConfig
    from adwm_core.training.world_model import train_world_model

    seen = []
    result = train_world_model(read_table(tiny_behaviour, TRAJECTORIES), str(adwm_home / "tiny-cell" / "world-model"),
                               TrainConfig(steps=WM_STEPS, device="cpu"), on_epoch=lambda epoch, _: seen.append(epoch))
    return result, seen


@pytest.fixture(scope="session")
def tiny_psi(tiny_behaviour, tiny_world_model, tiny_pool, adwm_home):
    """The ψ adapter of π_e = tiny-late on the tiny cell (path)."""
    from adwm_core.stages.psi import run_psi
    from adwm_core.settings import PsiConfig

    out = str(adwm_home / "tiny-cell" / "psi")
    run_psi(tiny_behaviour, tiny_world_model[0].path, tiny_pool[1], out, PsiConfig(device="cpu"))
    return out


def tiny_cell(path, policies: dict[str, str]) -> str:
    """A cell config of the default local cell's shape at toy sizes, with the session's tiny
    policies, written to ``path`` (flows reuse each other's stages through it)."""
    import yaml

    env = tiny_env_spec()
    config = {
        "name": "tiny-flow",
        "env": {"name": env.name, "task": env.task, "split": env.split, "max_steps": env.max_steps,
                "skip_variations": env.skip_variations},
        "behaviour": {"episodes": 24, "variants": ["p0"],
                      "pool": [{"label": "early", "model": policies["early"]},
                               {"label": "late", "model": policies["late"]}]},
        "evaluation": {"policies": [{"label": "late", "model": policies["late"]}], "epsilons": [0.0, 0.5, 1.0]},
        "ground_truth": {"episodes": 12},
        "world_model": {"epochs": 40, "device": "cpu"},  # long enough (seconds) to be killed midway in test_flows
        "psi": {"epochs": 2, "batch_size": 4, "device": "cpu"},
        "adwm": {"n_rollouts": 4, "horizon": 6, "seeds": [0, 1], "n_bootstrap": 50, "guidance": "none",
                 "reading": "soft_tokens"},  # the flow's longest path: ψ before ADWM
        "baselines": {"n_bootstrap": 50, "fqe": {"epochs": 2}},
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)
