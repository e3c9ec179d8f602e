#!/usr/bin/env bash
# make up / make down: Prefect server, a worker on pool `gpu` and the MLflow server on 127.0.0.1,
# then every deployment of prefect.yaml. Logs and PIDs under $ADWM_HOME/stack.
# Usage: scripts/stack.sh up|down   (VENV, ADWM_HOME, PREFECT_PORT, MLFLOW_PORT, GPU_SLOTS, STOP_GRACE from the env)
# `down` stops each process group (a server or worker and every process it started), waits up to
# STOP_GRACE seconds (default 20) after SIGTERM, then sends SIGKILL, and says what it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-.venv}
home=${ADWM_HOME:-$PWD/.adwm}
stack=$home/stack
prefect_port=${PREFECT_PORT:-4200}
mlflow_port=${MLFLOW_PORT:-5000}
export PREFECT_HOME=${PREFECT_HOME:-$home/prefect}
# Prefect 3.7 keeps failed flows' results and its block memo under ~/.prefect whatever PREFECT_HOME says
export PREFECT_RESULTS_LOCAL_STORAGE_PATH=${PREFECT_RESULTS_LOCAL_STORAGE_PATH:-$PREFECT_HOME/storage}
export PREFECT_MEMO_STORE_PATH=${PREFECT_MEMO_STORE_PATH:-$PREFECT_HOME/memo_store.toml}
export PREFECT_API_URL=http://127.0.0.1:$prefect_port/api
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export MLFLOW_TRACKING_URI=http://127.0.0.1:$mlflow_port
export ADWM_HOME=$home ADWM_REPO=$PWD
mkdir -p "$stack" "$PREFECT_HOME"

wait_for() {  # url, what
  for _ in $(seq 120); do curl -fsS "$1" > /dev/null 2>&1 && return 0; sleep 1; done
  echo "$2 did not answer at $1 within 120 s; see $stack/*.log" >&2
  exit 1
}

alive() {  # process group id: does any process of the group still run?
  kill -0 -- -"$1" 2> /dev/null
}

start() {  # name, command... (returns once the command leads its own process group)
  local name=$1; shift
  if [ -f "$stack/$name.pid" ] && kill -0 "$(cat "$stack/$name.pid")" 2>/dev/null; then
    echo "$name already running (pid $(cat "$stack/$name.pid"))"; return
  fi
  setsid "$@" > "$stack/$name.log" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" > "$stack/$name.pid"
  for _ in $(seq 100); do alive "$pid" && return 0; sleep 0.1; done  # setsid has not run yet on a busy machine
  echo "$name did not start; see $stack/$name.log" >&2
  exit 1
}

stop() {  # name: SIGTERM to its process group, SIGKILL after the grace period; 1 if it survives
  local name=$1 pid waited=0 grace=${STOP_GRACE:-20}
  [ -f "$stack/$name.pid" ] || return 0
  pid=$(cat "$stack/$name.pid")
  if ! alive "$pid"; then
    echo "$name was not running"; rm -f "$stack/$name.pid"; return 0
  fi
  kill -TERM -- -"$pid" 2> /dev/null || true
  while alive "$pid" && [ "$waited" -lt $((grace * 10)) ]; do sleep 0.1; waited=$((waited + 1)); done
  if alive "$pid"; then
    echo "$name (process group $pid) ignored SIGTERM for ${grace} s: sending SIGKILL"
    kill -KILL -- -"$pid" 2> /dev/null || true
    for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
  fi
  if alive "$pid"; then
    echo "could not stop $name: process group $pid is still running (ps -g $pid)" >&2; return 1
  fi
  rm -f "$stack/$name.pid"
  echo "stopped $name (process group $pid, $((waited / 10)) s)"
}

case ${1:-} in
  up)
    start prefect-server "$venv/bin/prefect" server start --host 127.0.0.1 --port "$prefect_port"
    start mlflow-server "$venv/bin/mlflow" server --host 127.0.0.1 --port "$mlflow_port" \
      --backend-store-uri "sqlite:///$home/mlflow.db" --artifacts-destination "$home/mlartifacts"
    wait_for "$PREFECT_API_URL/health" "the Prefect server"
    wait_for "$MLFLOW_TRACKING_URI/health" "the MLflow server"
    "$venv/bin/prefect" work-pool inspect gpu > /dev/null 2>&1 || "$venv/bin/prefect" work-pool create gpu --type process
    # GPU-bound tasks carry the tag `gpu`: as many at once as this worker has GPUs (at least 1)
    slots=${GPU_SLOTS:-$("$venv/bin/python" -c "import torch; print(max(torch.cuda.device_count(), 1))")}
    "$venv/bin/prefect" concurrency-limit create gpu "$slots" > /dev/null
    "$venv/bin/prefect" --no-prompt deploy --all
    start prefect-worker "$venv/bin/prefect" worker start --pool gpu --type process
    echo "Prefect UI  http://127.0.0.1:$prefect_port"
    echo "MLflow UI   $MLFLOW_TRACKING_URI"
    echo "then: PREFECT_API_URL=$PREFECT_API_URL $venv/bin/prefect deployment run ope-cell/local-simonsays"
    ;;
  down)
    failed=0
    for name in prefect-worker mlflow-server prefect-server; do  # the worker first: it polls the server
      stop "$name" || failed=1
    done
    exit $failed
    ;;
  *)
    echo "usage: $0 up|down" >&2; exit 2 ;;
esac
