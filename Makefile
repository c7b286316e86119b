# sensor-cep: two commands from a fresh clone.
#   make demo   venv + JVM jars + local Kafka broker + simulated events + the pipeline job, then a summary
#   make test   venv + JVM jars + ruff (lint, format) + the test suite but make extended's tests: tests/unit, spark,
#               kafka with the real broker, e2e (the notebooks, Spark Connect clients, the console, the HTML report)
#   make unit   only tests/unit: no JVM, no broker, no browser, under a minute
#   make extended  what make test leaves out: the seeded fault test and the long end-to-end runs
#               (the always-on job, the pipeline through Spark Connect); CI runs it after make test (decision 0063)
#   make nightly  both with the full property counts, 04's quick preset, generated code and every table's kill
#               points, then the long fault chain
# Prerequisites: Python 3.10+, Java 17, Maven 3.8+ (fetches the jars pinned in jvm/pom.xml once, into .jars/); for the
# tests also Chromium (they open the run's HTML report in it, headless)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EVENTS ?= 200000
# Python writes each module's bytecode at its first import, also where the environment says not to (this machine and
# CI's set PYTHONDONTWRITEBYTECODE): otherwise every process (test workers, Spark's Python workers, notebook kernels)
# compiles every module it imports again, and pip must compile every installed module up front (decision 0064)
unexport PYTHONDONTWRITEBYTECODE

.PHONY: venv jars jvm-jars demo test unit extended nightly lint lab up broker-up broker-down bench nemesis clean check-java check-chromium

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10+ is required")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

venv: $(STAMP)

jars: check-java  # the pinned JVM jars, and the class archive every local Spark JVM starts from (once, about a minute)
	@$(PY) -m sensorcep jars

# make test's few JVMs would save less than the archive's minute (decision 0063); they use one built before
jvm-jars: check-java
	@$(PY) -m sensorcep jars --no-class-archive

check-java: venv
	@$(PY) -c 'from sensorcep.local.java import check_java, JavaMissingError as E; import sys;\
	exec("try: check_java()\nexcept E as e: sys.exit(str(e))")'

check-chromium:  # the tests render the run's HTML report in a real browser, headless
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { echo "Chromium is not installed:\
	 the tests open the run's HTML report in it, headless; install it (Debian/Ubuntu: sudo apt-get install chromium)"\
	 >&2; exit 1; }

broker-up: venv
	$(PY) -m sensorcep broker up

broker-down: venv
	$(PY) -m sensorcep broker down

demo: jars broker-up
	$(PY) -m sensorcep simulate --events $(EVENTS) --devices 1000 --seed 42 --devices-table
	$(PY) -m sensorcep run --summary

# two pytest-xdist workers, a Spark session and a broker each (one Spark session leaves half of 2 cores idle: it
# waits on Kafka, Delta's log and Python); the notebooks run in order on one of them, the longest units of work are
# handed out first: in make extended the fault test (its own broker and job runs) on one worker while the other runs
# the rest (tests/conftest.py, decisions 0023, 0063)
XDIST := -n 2 --no-loadscope-reorder

test: check-chromium jvm-jars lint
	$(PY) -m pytest $(XDIST)

unit: venv  # the inner loop: tests/unit needs no JVM, no broker and no browser (on two workers: 43 s, not 62)
	$(PY) -m pytest $(XDIST) tests/unit

extended: check-chromium jars  # what make test leaves out: the fault test and the long end-to-end runs (CI runs it after make test)
	SENSORCEP_EXTENDED=1 $(PY) -m pytest $(XDIST)

nightly: check-chromium jars lint  # before a release, or after a change to the pipeline's guarantees
	SENSORCEP_NIGHTLY=1 $(PY) -m pytest $(XDIST)
	$(PY) tests/support/nemesis.py --seed $(or $(SEED),7) --kills $(or $(KILLS),60)

lint: venv  # ruff: lint and format, as configured in pyproject.toml
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

up: jars broker-up  # the always-on job locally, until Ctrl-C (MINUTES=n to stop after n minutes)
	$(PY) -m sensorcep run --job sensor_cep_streaming $(if $(MINUTES),--minutes $(MINUTES))

lab: jars broker-up
	$(PY) -m pip install --quiet -r requirements-lab.txt
	cd notebooks && ../$(PY) -m jupyter lab --ServerApp.root_dir=.

bench: jars broker-up
	$(PY) benchmarks/cold_start.py
	$(PY) benchmarks/python_worker.py
	$(PY) benchmarks/job_start.py
	$(PY) benchmarks/fault_points.py
	$(PY) benchmarks/ingest.py
	$(PY) benchmarks/bronze_stats.py
	$(PY) benchmarks/sampling.py
	$(PY) benchmarks/sampling_pass.py
	$(PY) benchmarks/alert_latency.py
	$(PY) benchmarks/notifier_latency.py
	$(PY) benchmarks/stateful_rules.py
	$(PY) benchmarks/shared_pass.py
	$(PY) benchmarks/state_tuning.py
	$(PY) benchmarks/soak.py
	$(PY) benchmarks/idle_cost.py
	$(PY) benchmarks/cost_model.py

nemesis: jars  # only the long fault chain of make nightly: make nemesis SEED=7 KILLS=60
	$(PY) tests/support/nemesis.py --seed $(or $(SEED),7) --kills $(or $(KILLS),60)

clean: broker-down
	rm -rf .data runs .broker
