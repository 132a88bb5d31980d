# shoal developer entry points. Every target creates and uses the project-local virtualenv,
# so `make run` and `make test` work on a fresh machine with only python3 on the PATH.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint format bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The main job: validate the example jobs and show the gang placement and environment a real
# cluster would give them (the same core.schedule the server uses).
run: setup
	$(BIN)/shoal job validate examples/hello/job.yaml
	$(BIN)/shoal job plan examples/rl-actor-learner/job.yaml --nodes 2 --cpus 8 --gpus 2

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

format: setup
	$(BIN)/ruff check --fix src tests bench
	$(BIN)/ruff format src tests bench

# pytest exits 5 when it collected no test; make treats any non-zero exit as failure.
test: lint
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python bench/scheduler.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
