# Two commands do everything on a fresh machine:  `make all`  and  `make test`.
# Each creates .venv from requirements.lock when it is missing or out of date.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CORES ?= 8
SNAKEMAKE := $(VENV)/bin/snakemake
# GPU=1 installs TensorFlow with CUDA (requirements-gpu.lock) instead of the CPU build
# (requirements.lock, the tested default). The choice sticks: a .venv set up with GPU=1
# stays GPU until `make setup GPU=0`. Switching rebuilds .venv (the two TensorFlow
# distributions install the same files).
GPU ?= $(if $(wildcard $(VENV)/.installed-gpu),1,0)
FLAVOUR := $(if $(filter 1,$(GPU)),gpu,cpu)
OTHER := $(if $(filter 1,$(GPU)),cpu,gpu)
LOCK := $(if $(filter 1,$(GPU)),requirements-gpu.lock,requirements.lock)
STAMP := $(VENV)/.installed-$(FLAVOUR)

.PHONY: all setup test test-slow test-long test-all lint bench ui mlflow-server clean compare-ptychi

$(STAMP): $(LOCK) pyproject.toml
	@if [ -e "$(VENV)/.installed-$(OTHER)" ] || [ -e "$(VENV)/.installed" ]; then \
	  echo "rebuilding $(VENV) for $(FLAVOUR) (was set up for another TensorFlow build)"; rm -rf "$(VENV)"; fi
	$(PYTHON) -m venv "$(VENV)"
	"$(PY)" -m pip install -q --upgrade pip
	"$(PY)" -m pip install -q -r "$(LOCK)"
	# ptychodus's own product reader, for the tests of the products (docs/ptychodus.md): reading a
	# product needs none of its GUI, AI or workflow dependencies, which pin packages the lock holds.
	"$(PY)" -m pip install -q --no-deps ptychodus==1.7.0
	"$(PY)" -m pip install -q --no-deps -e .
	touch "$@"

setup: $(STAMP)  ## the venv from the lock (GPU=1: TensorFlow with CUDA)

all: setup  ## run the whole study (simulate, train, infer, score, report)
	"$(SNAKEMAKE)" --cores $(CORES) all

# The fast tests run on TEST_JOBS workers at once (pytest-xdist), one per core up to 4: a
# fast test mostly waits on one process (a CLI, a server starting), so on 2 cores 2 workers
# take half the time of 1 (11 min against 21-24). TEST_JOBS=0 runs them in pytest's own
# process. The slow tests run whole pipelines on every core, so they run one at a time (two
# at once took 47-55 min against 51); the `long` ones, which CI's 90 minutes leave out, by
# `make test-long` (docs/tests-and-bench.md).
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))

test: setup  ## fast tests (unit and integration), minutes
	"$(PY)" -m pytest -m "not slow" -q -n $(TEST_JOBS) --durations=20

test-slow: setup  ## end-to-end and training tests (CI runs them)
	"$(PY)" -m pytest -m "slow and not long" -q --durations=15

test-long: setup  ## the end-to-end tests CI leaves out: an upgrade, a lost store, a CXI study, Ctrl-C and kill -9, a condition, the locks on PyPI
	"$(PY)" -m pytest -m long -q --durations=15

test-all: setup
	"$(PY)" -m pytest -q

lint: setup  ## ruff lint and format check, Snakemake's linter (CI runs it before the tests)
	"$(VENV)/bin/ruff" check ptycho tests docs
	"$(VENV)/bin/ruff" format --check ptycho tests docs
	"$(SNAKEMAKE)" --lint

bench: setup  ## XLA modes vs off (compile, step alone and shared, components, inference), then cost growth with the data
	"$(PY)" -m ptycho bench
	"$(PY)" -m ptycho scaling

ui: setup  ## browse the embedded MLflow store at http://127.0.0.1:5000 (RESULTS=<folder> for another results folder)
	"$(PY)" -m ptycho track ui "$(or $(RESULTS),results)" --port "$(or $(UI_PORT),5000)"

# A tracking server for cluster runs: MLFLOW_HOST=0.0.0.0 make mlflow-server, then
# export MLFLOW_TRACKING_URI=http://<this host>:5001 before snakemake. Jobs on other nodes
# address it by host name, which MLflow 3 answers with 403 unless the name is in
# --allowed-hosts (its DNS-rebinding protection; /health is exempt, so only API calls
# show it): allowed are this machine's names, MLflow's own defaults (loopback, private
# IPs) and MLFLOW_ALLOWED_HOSTS=name:port,name:*,... if set.
# Artifacts are uploaded through the server (--artifacts-destination): nodes need no
# shared path for them. A port already taken (a second `make mlflow-server`) is one line
# and exit 1 before anything starts (MLflow itself exits 0 after 'Address already in use').
# `ptycho serve` runs the server: "starting" first, its address (and the export) only once
# it answers (MLflow takes 20-50 s to start), and the server stops with it, even killed.
mlflow-server: setup  ## a tracking server for cluster runs (export MLFLOW_TRACKING_URI=http://HOST:5001)
	@host=$$(hostname); fqdn=$$(hostname -f 2>/dev/null || echo $$host); \
	allowed=$$host,$$host:*,$$fqdn,$$fqdn:*,localhost,localhost:*,127.0.0.1,127.0.0.1:*,[::1],[[]::1]:*,0.0.0.0,0.0.0.0:*,10.*,192.168.*,$$(printf '172.%s.*,' {16..31})fc00:*,fd00:*$${MLFLOW_ALLOWED_HOSTS:+,$$MLFLOW_ALLOWED_HOSTS}; \
	if ! $(PYTHON) -c 'import socket, sys; s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], int(sys.argv[2])))' "$${MLFLOW_HOST:-127.0.0.1}" "$${MLFLOW_PORT:-5001}" 2>/dev/null; then \
	  echo "make mlflow-server: error: port $${MLFLOW_PORT:-5001} on $${MLFLOW_HOST:-127.0.0.1} is already in use (a tracking server running already?); use that one, stop it by its pid, or choose another port: MLFLOW_PORT=5002 make mlflow-server" >&2; exit 1; fi; \
	exec "$(PY)" -m ptycho serve --tracking-uri "http://$$fqdn:$${MLFLOW_PORT:-5001}" -- \
	  "$(VENV)/bin/mlflow" server --backend-store-uri "sqlite:///$(CURDIR)/results/mlflow-server.db" \
	  --artifacts-destination "$(CURDIR)/results/mlflow-artifacts" --host "$${MLFLOW_HOST:-127.0.0.1}" --port "$${MLFLOW_PORT:-5001}" \
	  --allowed-hosts "$$allowed"

clean:
	rm -rf results .snakemake

# Not in the lock or CI: pty-chi (PyTorch) goes into a scratch venv (.cache/ptychi-venv, ~1.5 GB, built once).
compare-ptychi: setup  ## pty-chi (LSQML, ePIE) on the default test split, scored like ours: docs/ptychi-comparison.{md,json}
	"$(PY)" scripts/compare_ptychi.py
