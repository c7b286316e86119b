# sensor-cep: two commands from a fresh clone.
#   make demo   venv + local broker + simulated events + the pipeline job, then a summary
#   make test   venv + the whole test suite (unit, integration with the real broker, notebooks)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EVENTS ?= 200000

.PHONY: venv demo test lab broker-up broker-down bench clean check-java

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10+ is required")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

venv: $(STAMP)

check-java: venv
	@$(PY) -c 'from sensorcep.runtime import check_java, JavaMissingError as E; import sys;\
	exec("try: check_java()\nexcept E as e: sys.exit(str(e))")'

broker-up: venv
	$(PY) -m sensorcep broker up

broker-down: venv
	$(PY) -m sensorcep broker down

demo: check-java broker-up
	$(PY) -m sensorcep simulate --events $(EVENTS) --devices 1000 --seed 42 --devices-table
	$(PY) -m sensorcep run
	$(PY) -m sensorcep summary

test: check-java
	$(PY) -m pytest

lab: check-java broker-up
	$(PY) -m pip install --quiet -r requirements-lab.txt
	cd notebooks && ../$(PY) -m jupyter lab --ServerApp.root_dir=.

bench: check-java broker-up
	$(PY) benchmarks/ingest.py
	$(PY) benchmarks/sampling.py
	$(PY) benchmarks/alert_latency.py
	$(PY) benchmarks/state_tuning.py
	$(PY) benchmarks/soak.py

clean: broker-down
	rm -rf .data runs .broker
