# `make demo` and `make test` each set up .venv from nothing (Python 3.11) and then run.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP_FLAGS ?= -q

# System tools the tests and benchmarks drive (Debian packages): wrk (benchmarks/serving.py), Chromium and
# its driver (the dashboard's browser test), HAProxy (the serving-replicas test). Installed with apt-get when
# missing (CI runs as root). Each pair is command:package; the command is looked up in /usr/sbin too.
SYSTEM_TOOLS := wrk:wrk chromium:chromium chromedriver:chromium-driver haproxy:haproxy

.PHONY: venv system-deps demo test bench-serving bench-ingest bench-accuracy bench-federation bench-sandwich bench-scale openapi clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) --upgrade pip
	# torch first and pinned: the CPU wheel on disk, never a CUDA download.
	$(PY) -m pip install $(PIP_FLAGS) torch==2.13.0
	$(PY) -m pip install $(PIP_FLAGS) -e '.[test]'
	touch $@

venv: $(VENV)/.installed

system-deps:
	@missing=""; for pair in $(SYSTEM_TOOLS); do PATH="$$PATH:/usr/sbin:/sbin" command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$missing; \
	  else echo "missing system packages:$$missing (apt-get install them as root)" >&2; fi; \
	fi

demo: venv
	$(VENV)/bin/fedrec demo $(DEMO_ARGS)

test: venv system-deps
	$(PY) -m mypy services models api_common party_api coordinator_api cli
	$(PY) -m pytest -q

# Bounded schemathesis runs against a live party and coordinator, with and without credentials (< 10 min).
fuzz: venv
	$(PY) tests/fuzz/fuzz.py

bench-ingest: venv
	$(PY) benchmarks/ingest.py

bench-accuracy: venv
	$(PY) benchmarks/accuracy.py --data ../shared/data/ml-100k --split u1 --parties 2 --model gcn --seeds 5

bench-federation: venv
	$(PY) benchmarks/federation.py --data ../shared/data/ml-100k

bench-sandwich: venv
	$(PY) benchmarks/sandwich.py --data ../shared/data/filmtrust

bench-serving: venv system-deps
	$(PY) benchmarks/serving.py

bench-scale: venv
	$(PY) benchmarks/scale.py

openapi: venv
	$(VENV)/bin/fedrec openapi party --out docs/openapi-party.json
	$(VENV)/bin/fedrec openapi coordinator --out docs/openapi-coordinator.json

clean:
	rm -rf $(VENV) var .pytest_cache
