# shoal developer entry points. Every target creates and uses the project-local virtualenv,
# so `make run` and `make test` work on a fresh machine with only python3 on the PATH.
# Debian's own interpreter where there is one: tasks run as their users (docs/security.md), who
# can reach /usr/bin but not an interpreter in root's home (pyenv's, say), so the examples and
# the tests' tasks can run the virtualenv's python.
PYTHON ?= $(shell [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-runtime
TORCH_STAMP := $(VENV)/.torch
SDK_DIR := tests/openpai_sdk
SDK_STAMP := $(SDK_DIR)/node_modules/.installed
# Wheels of shoal's runtime dependencies (and setuptools, to build shoal's own wheel offline):
# `shoal cluster create` copies them to hosts that have no route to a package index.
WHEELHOUSE := $(VENV)/wheelhouse
WHEEL_STAMP := $(WHEELHOUSE)/.built
# Root installs system packages itself, anyone else through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The PyTorch DDP example's test needs torch; a CPU wheel lies on these machines, so pip takes it
# offline. If it cannot be installed, that one test is skipped with the reason.
TORCH_VERSION ?= 2.13.0

# `make run PORT=9000` starts the server on that port (an error if it is taken); without PORT,
# `shoal up` tries 8476 and takes a free port if 8476 is in use.
PORT ?=
# `make run PORT_BASE=30000` gives tasks ports from 30000 (1,000 per node; `shoal up --port-base`,
# default 20000), e.g. when another cluster or service already holds 20000 and up.
PORT_BASE ?=

.PHONY: setup setup-runtime system-deps containers k8s wheelhouse web screenshots test-browser test-cloud-install bench-dashboard run test test-fast lint format bench bench-scheduler bench-launch bench-peers bench-sim bench-cli bench-cluster bench-api bench-kubernetes bench-proxy bench-stores bench-nodes crash fuzz clean

# What running needs (`pip install -e .`: the server, agent and CLI, numpy for the examples).
$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

# The lint, type-check and test tools, and matplotlib for `shoal sim --report`, on top.
$(STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,cluster,kubernetes,azure,postgresql]'
	touch $(STAMP)

setup-runtime: $(RUN_STAMP)

setup: $(STAMP) $(WHEEL_STAMP) $(SDK_STAMP)

# OpenPAI's JS SDK for tests/integration/test_openpai_sdk.py, pinned by its lockfile; `npm ci`
# runs again only when the lockfile or package.json changes. Without node or npm, setup says so
# and that test is skipped with the reason.
$(SDK_STAMP): $(SDK_DIR)/package.json $(SDK_DIR)/package-lock.json
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		echo "installing OpenPAI's JS SDK in $(SDK_DIR) (npm ci)"; \
		cd $(SDK_DIR) && npm ci --prefer-offline --no-audit --no-fund --loglevel=error \
			&& touch node_modules/.installed; \
	else \
		echo "node or npm is missing: OpenPAI's JS SDK is not installed and" \
			"tests/integration/test_openpai_sdk.py will be skipped (install Node.js with npm," \
			"then run make setup)"; \
	fi

# The web dashboard (web/: TypeScript, Preact, uPlot, xterm.js, CodeMirror), pinned by its
# lockfile and built into the Python package, which the server serves at /ui/. Without node or
# npm it says so: the server then answers /ui/ with how to build it, and the browser tests skip.
# `npm ci` also installs the dev dependencies the browser tests use from disk (axe-core); it runs
# again when the lockfile or package.json changes, or when web/node_modules is gone
# (node_modules/.package-lock.json is written by every install).
WEB_DIST := src/shoal/server/web/dist/index.html
WEB_MODULES := web/node_modules/.package-lock.json
WEB_SOURCES := web/index.html web/vite.config.ts web/tsconfig.json \
	$(wildcard web/src/*.ts web/src/*.tsx web/src/*.css web/src/pages/*.tsx)
$(WEB_MODULES): web/package.json web/package-lock.json
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		echo "installing the dashboard's packages (npm ci in web/)"; \
		cd web && npm ci --prefer-offline --no-audit --no-fund --loglevel=error; \
	else \
		echo "node or npm is missing: the dashboard's packages are not installed (install" \
			"Node.js with npm, then run make web)"; \
	fi
$(WEB_DIST): $(WEB_SOURCES) $(WEB_MODULES)
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		echo "building the dashboard (vite build; scripts and styles also gzipped)"; \
		cd web && npm run --silent build; \
	else \
		echo "node or npm is missing: the dashboard is not built (install Node.js with npm," \
			"then run make web)"; \
	fi

web: $(WEB_DIST)

# Built while the package registry is reachable (pip's cache makes it quick), used offline later.
$(WHEEL_STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip wheel --quiet --wheel-dir $(WHEELHOUSE) . 'setuptools>=77,<81'
	touch $(WHEEL_STAMP)

wheelhouse: $(WHEEL_STAMP)

# The SSH tests run a real sshd (openssh-server, a Debian package) inside network namespaces;
# the browser tests drive Debian's chromium through Playwright (no browser download); the
# PostgreSQL tests start throwaway clusters with Debian's PostgreSQL server (tests/postgresql.py).
# Quiet when they are there; installed through apt-get when they are not.
system-deps:
	@missing=""; \
	[ -x /usr/sbin/sshd ] || missing="$$missing openssh-server"; \
	ls /usr/lib/*/libnss_wrapper.so >/dev/null 2>&1 || missing="$$missing libnss-wrapper"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
		if command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing (the SSH, browser and PostgreSQL tests need them)"; \
			$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
				$(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
		else \
			echo "$$missing missing and there is no apt-get: the tests that need them will be skipped"; \
		fi; \
	fi

# podman, crun and runc, the two per-boot fixes and the cached test images (docs/containers.md):
# container jobs and their tests need them; without apt-get or root it says so and the container
# tests are skipped with the reason.
containers:
	@scripts/containers-setup.sh

# The Kubernetes the Kubernetes tests run against (docs/kubernetes.md): etcd, kube-apiserver,
# controller-manager, scheduler, kubelet, kubectl and kwok built from the Go module proxy, cached
# in ~/.cache/shoal/k8s (about 10 CPU-minutes cold, seconds after); containerd and the CNI plugins
# for the real node, and the sysctls a kubelet wants, set here rather than by the kubelet.
k8s:
	@scripts/k8s-build.sh
	@scripts/k8s-node-setup.sh

$(TORCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet torch==$(TORCH_VERSION) \
		|| echo "torch==$(TORCH_VERSION) could not be installed: the DDP example test will be skipped"
	touch $(TORCH_STAMP)

# The main job: start a local cluster (2 simulated nodes), run the distributed RL example to
# completion, and show its logs. The cluster stays up for you: `.venv/bin/shoal down` stops it.
# `--context local`: the commands talk to this cluster even if a shoal context is current.
# Tasks run with the submitting shell's PATH, so the job is submitted with the venv's bin first
# (its python has numpy), as after `source .venv/bin/activate`.
# Tasks run as their users (docs/security.md); a checkout those users cannot reach (under /root,
# say) cannot give them its .venv, so there the example's tasks run as the agent's own user.
SHARED_VENV = $(shell $(BIN)/python -c 'from shoal.agent.task_users import interpreter_reachable as r; print(int(r()))' 2>/dev/null)
run: setup-runtime web
	@if [ "$(SHARED_VENV)" = 0 ] && [ -z "$$SHOAL_TASK_USERS" ]; then echo "note: $(CURDIR)/.venv is out of other users' reach: the example's tasks run as the agent's user (SHOAL_TASK_USERS=agent; docs/security.md)"; fi
	$(if $(filter 0,$(SHARED_VENV)),SHOAL_TASK_USERS=$${SHOAL_TASK_USERS:-agent}) $(BIN)/shoal up --nodes 2 --cpus 4 --memory 8Gi --gpus 2 $(if $(PORT),--port $(PORT)) \
		$(if $(PORT_BASE),--port-base $(PORT_BASE))
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/shoal --context local job submit \
		examples/rl-actor-learner/job.yaml --wait
	$(BIN)/shoal --context local job logs rl-actor-learner --task learner/0
	$(BIN)/shoal --context local job status rl-actor-learner
	@echo "shoal is still running: try '.venv/bin/shoal status' or the dashboard ('.venv/bin/shoal ui'), stop it with '.venv/bin/shoal down'"

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

format: setup
	$(BIN)/ruff check --fix src tests bench
	$(BIN)/ruff format src tests bench

# pytest exits 5 when it collected no test; make treats any non-zero exit as failure. Every
# test's time is in test-artifacts/junit.xml (the 25 slowest are printed).
test: lint $(TORCH_STAMP) system-deps containers k8s web
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=25 -m "not long" \
		--junitxml=test-artifacts/junit.xml

# The long end-to-end tests `make test` leaves out (marked `long`: a whole cluster made over SSH,
# a second attempt held back by a stopped kubelet, the server as a Pod, an image pushed to two
# hosts, a hostile job in a container, failover on a shared SQLite file).
test-long: lint $(TORCH_STAMP) system-deps containers k8s web
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m long

# A cloud machine that installs shoal from the server's wheelhouse for real (docs/cloud.md): about
# a minute of pip install, so not in the default run, which covers the bootstrap's other modes.
test-cloud-install: setup
	SHOAL_CLOUD_INSTALL=1 $(BIN)/python -m pytest -q tests/cloud/test_wheelhouse_install.py

# The server suite with every test's store a fresh PostgreSQL database of a throwaway cluster
# (docs/postgresql.md; tests/postgresql.py). The default run has its bounded slice, tests/store.
test-postgresql: setup system-deps
	SHOAL_TEST_STORE=postgresql $(BIN)/python -m pytest -q -n 2 tests/server tests/store

test-fast: lint
	$(BIN)/python -m pytest -q tests/spec tests/core tests/cli tests/server

# The fuzzers' long mode (docs/fuzzing.md): schemathesis over the API and Hypothesis-made job files
# with 20x the examples of the default run, freshly drawn (about 10 minutes); every failure goes to
# .fuzz-report.txt.
fuzz: setup
	rm -f .fuzz-report.txt
	SHOAL_FUZZ_EXAMPLES=80 SHOAL_FUZZ_REPORT=.fuzz-report.txt $(BIN)/python -m pytest -q tests/fuzz

# All benchmarks, one command: scheduler throughput, local launch, shoal against Slurm and Ray
# side by side (bench/peers installs them), scheduling quality on the real traces, the CLI,
# cluster mode and the API under load. Each
# prints its tables and rewrites its results section of docs/benchmarks.md or
# docs/scheduling-quality.md.
bench: bench-scheduler bench-launch bench-peers bench-sim bench-cli bench-cluster bench-api \
	bench-dashboard bench-kubernetes bench-proxy bench-stores bench-nodes

# The dashboard's pictures in docs/img/ (README, docs/dashboard.md): a throwaway local cluster,
# photographed page by page with Debian's chromium.
screenshots: setup web system-deps
	$(BIN)/python scripts/screenshots.py

# The browser tests alone (they are in `make test` too).
test-browser: setup web system-deps
	$(BIN)/python -m pytest -q tests/browser

bench-scheduler: setup
	$(BIN)/python bench/scheduler.py

# Its container row needs podman and the test images (without them the row says so, skipped).
bench-launch: setup containers
	$(BIN)/python bench/launch.py

bench-peers: setup
	$(BIN)/python bench/peers/run.py

bench-sim: setup
	$(BIN)/python bench/sim_quality.py

bench-cli: setup
	$(BIN)/python bench/cli.py

# Acknowledged submissions/s from 20 clients, reads while the scheduler works, memory with
# 100,000 finished jobs (bench/api.py; docs/benchmarks.md, "API").
bench-proxy: setup
	$(BIN)/python bench/proxy.py

# SQLite and PostgreSQL side by side: submissions/s from 20 clients, job list p99 (docs/postgresql.md)
bench-stores: setup system-deps
	$(BIN)/python bench/stores.py

bench-api: setup
	$(BIN)/python bench/api.py

# The dashboard with 2,000 jobs on 50 nodes: first render, server CPU with 5 live pages.
bench-dashboard: setup web system-deps
	$(BIN)/python bench/dashboard.py

# shoal on Kubernetes against kube-scheduler alone and Kueue + kube-scheduler, on one cluster of
# 1,000 kwok nodes x 8 GPUs with 2,000 gang jobs (bench/kubernetes.py; docs/benchmarks.md,
# "Kubernetes"). The test cluster's binaries and Kueue v0.17.0 are built first (cached); about
# 15 minutes. `$(BIN)/python bench/kubernetes.py --small` is a 2-minute smoke run.
bench-kubernetes: setup
	@scripts/k8s-build.sh
	@scripts/k8s-build.sh --kueue
	$(BIN)/python bench/kubernetes.py

# Needs root: the server and agents run on network-namespace hosts (198.18.0.0/15).
bench-cluster: setup
	$(BIN)/python bench/cluster.py

# Server CPU per idle node, 500 to 5,000 simulated agents over HTTP, on SQLite and PostgreSQL
# (bench/nodes.py; docs/benchmarks.md, "Nodes at rest"). About 20 minutes.
bench-nodes: setup system-deps
	$(BIN)/python bench/nodes.py

# Crash rounds under load, the long version (tests/crash/; the default run has 2 + 2 small rounds):
# 10 server kill -9 rounds of 1,000 submissions from 20 clients, 10 agent kill -9 rounds, then the
# plain load figures (500 and 1,000 submissions, no crash). Figures: bench/results/crash.json.
crash: setup
	SHOAL_CRASH_ROUNDS=10 SHOAL_CRASH_REPORT=bench/results/crash.json \
		$(BIN)/python -m pytest -q -s tests/crash
	$(BIN)/python -m tests.crash.loadgen --submissions 500 1000

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis $(SDK_DIR)/node_modules
