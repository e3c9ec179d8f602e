import os
import pickle
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
# on SQLite), and room for a slow CI machine to start. When every test is done, the run fails if
# the suite changed the user's own folders (WATCHED) or added to the checkout (pytest_sessionfinish).
# Under pytest-xdist, torch's OpenMP threads wait for work asleep rather than spinning (read when
# torch loads, so set before anything imports it): two workers with a thread per core each would
# otherwise spin against each other. Each keeps as many threads as in one process, so training
# takes the same floating-point path and the fixtures come out the same.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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


def left_behind() -> list[str]:
    """What the suite changed in the user's folders (WATCHED: a file added, removed or rewritten)
    and what it added to the checkout that git does not track (an MLflow ./mlruns, a ./.adwm home,
    a stray output; the tools' caches aside), each as one line; empty where it left nothing."""
    now = {path: folder_state(path) for path in WATCHED}
    found = [f"{path}: {sorted(set(now[path].items()) ^ set(HOME_BEFORE[path].items()))}"
             for path in WATCHED if now[path] != HOME_BEFORE[path]]
    after = checkout_extras()
    if CHECKOUT_BEFORE is not None and after is not None:  # git could say both times (else nothing to compare)
        found += [f"{CHECKOUT}: {path} (not tracked by git)" for path in sorted(after - CHECKOUT_BEFORE)]
    return found


def pytest_sessionfinish(session, exitstatus):
    """After every test, on every worker (the run's one process, or pytest-xdist's controller
    once its workers are done): the suite fails where it left anything in the user's folders or
    the checkout (``left_behind``)."""
    if hasattr(session.config, "workerinput"):
        return
    found = left_behind()
    if found:
        report = session.config.pluginmanager.get_plugin("terminalreporter")
        report.ensure_newline()
        report.write_sep("=", "the suite left these behind (a test wrote outside its private stores)", red=True)
        for line in found:
            report.write_line(line, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# The longest test files first (seconds on two workers, 2-core x86_64, 2026-11-28 16:06), the rest in
# their own order: pytest-xdist hands each worker a file at a time (--dist loadfile, in collection
# order: --no-loadscope-reorder), so no long file starts last on one worker while the other idles.
# The tiny chain's builder and the corridor come first, so that each worker trains one of the two.
LONGEST_FIRST = ("test_world_model_training.py",  # 214, builds the tiny chain
                 "test_adwm.py", "test_flows.py", "test_openai_backend.py", "test_vllm_backend.py",  # 244 266 158 121
                 "test_baselines.py", "test_flows_deployment.py",  # 102 64
                 "test_ope_estimators.py", "test_dask_runner.py")  # 50 47


def pytest_collection_modifyitems(config, items):
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: the rest keep their order


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


def played_in_order(env_name: str, instances: list[tuple[str, int]], order: list[int],
                    max_steps: int = 4) -> dict[int, list[tuple[str, str]]]:
    """Seeded ε = 0.5 episodes of ``instances`` played on one engine in ``order``:
    {instance index: [(observation, action) per turn]} (an environment whose episodes are the same
    in any order keeps no history between them)."""
    from adwm_core.envs.agents import EpsilonGoldAgent
    from adwm_core.envs.episodes import EpisodeSpec
    from adwm_core.envs.runner import EpisodeRunner

    with EpisodeRunner(env_name, n_workers=1, envs_per_worker=1, max_steps=max_steps) as runner:
        episodes = runner.run([EpisodeSpec(k, *instances[k], k) for k in order], EpsilonGoldAgent(0.5))
    return {k: [(t.observation, t.action) for t in e.turns] for k, e in zip(order, episodes)}


TINY_ENV = DEFAULT_LOCAL_ENV  # fast, and a tiny LM learns it in a few hundred steps
TINY_VARIATIONS = 40  # the first training variations, used to fine-tune


def built_once(tmp_path_factory, name: str, build):
    """``build(folder)``'s value, built once per test run: by the first worker to ask, under a
    lock in the folder pytest-xdist's workers share (the run's own folder without xdist); the
    others wait for it and read it back (pickled beside the folder)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    done = shared / f"{name}.pickle"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            done.write_bytes(pickle.dumps(build(shared / name)))
    return pickle.loads(done.read_bytes())


@pytest.fixture(scope="session")
def tiny_policies(tmp_path_factory):
    """A barely trained and a trained checkpoint of a tiny GPT-2 fitted to the expert's
    trajectories of ``TINY_ENV`` (trained once per test run)."""
    from adwm_core.policies.trainer import train_tiny_policies

    name, task, options = TINY_ENV
    return built_once(tmp_path_factory, "tiny-policies", lambda folder: train_tiny_policies(
        name, options, task, str(folder), {"early": 50, "late": 600}, n_variations=TINY_VARIATIONS))


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
def tiny_behaviour(tiny_pool, tmp_path_factory):
    """160 behaviour trajectories of the tiny pool (path to the Parquet file)."""
    from adwm_core.collection import collect_behavior

    def collect(folder):
        out = str(folder / "trajectories.parquet")
        collect_behavior(tiny_env_spec(), tiny_pool, 160, out, cell="test-cell", n_workers=2, envs_per_worker=8)
        return out

    return built_once(tmp_path_factory, "tiny-behaviour", collect)


@pytest.fixture(scope="session")
def tiny_world_model(tiny_behaviour, tmp_path_factory):
    """A world model trained by the default recipe, WM_STEPS optimiser steps, on ``tiny_behaviour``:
    (TrainResult, evaluation rounds reported)."""
    from adwm_core.data import TRAJECTORIES, read_table
    from adwm_core.settings import TrainConfig
    from adwm_core.training.world_model import train_world_model

    def train(folder):
        seen = []
        result = train_world_model(read_table(tiny_behaviour, TRAJECTORIES), str(folder), TrainConfig(
            steps=WM_STEPS, device="cpu"), on_epoch=lambda epoch, _: seen.append(epoch))
        return result, seen

    return built_once(tmp_path_factory, "tiny-world-model", train)


@pytest.fixture(scope="session")
def tiny_psi(tiny_behaviour, tiny_world_model, tiny_pool, tmp_path_factory):
    """The ψ adapter of π_e = tiny-late on the tiny cell (path)."""
    from adwm_core.stages.psi import run_psi
    from adwm_core.settings import PsiConfig

    def train(folder):
        run_psi(tiny_behaviour, tiny_world_model[0].path, tiny_pool[1], str(folder), PsiConfig(device="cpu"))
        return str(folder)

    return built_once(tmp_path_factory, "tiny-psi", train)


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
