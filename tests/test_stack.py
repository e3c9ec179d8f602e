"""`make up` / `make down` (scripts/stack.sh): every server and worker `up` starts, `down` stops."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SERVICES = ("prefect-server", "mlflow-server", "prefect-worker")


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stack(command: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/stack.sh", command], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow  # 40 s (2026-11-24): three servers and `prefect deploy --all`; `make test-all` runs it
def test_down_stops_every_process_up_started(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI")}
    env.update(ADWM_HOME=str(tmp_path), PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_PORT=free_port(),
               MLFLOW_PORT=free_port(), VENV=sys.prefix, GPU_SLOTS="1", STOP_GRACE="10")
    groups = {}
    try:
        up = stack("up", env)
        for name in SERVICES:
            pid_file = tmp_path / "stack" / f"{name}.pid"
            if pid_file.exists():
                groups[name] = int(pid_file.read_text())
        assert up.returncode == 0, up.stdout + up.stderr
        assert set(groups) == set(SERVICES), up.stdout
        for name, group in groups.items():
            log = tmp_path / "stack" / f"{name}.log"
            assert group_alive(group), f"{name} is not running after `up`:\n{log.read_text()[-3000:]}"
    finally:
        down = stack("down", env)
    print(down.stdout)
    assert down.returncode == 0, down.stdout + down.stderr
    for name, group in groups.items():
        assert not group_alive(group), f"{name} (process group {group}) survived `down`: {down.stdout}"
        assert f"stopped {name}" in down.stdout
    again = stack("down", env)  # nothing left to stop, and it says so by saying nothing wrong
    assert again.returncode == 0 and "stopped" not in again.stdout
