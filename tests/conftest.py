"""Shared test fixtures and the test tiers: one SparkSession and one real local Kafka broker per test session.

A test's tier is the directory it lives in, and its marker comes from there (``pytest -m kafka``):

* ``tests/unit``  - no JVM, no broker, no browser (``make unit``, seconds);
* ``tests/spark`` - the session's Spark, controlled micro-batches, no broker;
* ``tests/kafka`` - Spark and the session's broker;
* ``tests/e2e``   - whole job runs, the notebooks (``notebooks/*.ipynb`` through nbmake), Spark Connect, subprocess
  crashes, the console, the HTML report in Chromium;
* ``tests/fault`` - the seeded fault test (its own broker, killed on purpose).

``make test`` runs every tier but the tests :func:`extended` names: the fault test and the longer runs marked
``extended``, which ``make extended`` runs (CI runs both, decision 0063).

A test that asks for more than its tier allows (a unit test asking for ``spark``) is a collection error, so the
tiers stay true. The broker starts only when a selected test needs it; the notebooks find it, a temporary base path
and a small simulated data set through ``SENSORCEP_*`` environment variables. Every notebook but 03 runs as a Spark
Connect client of the worker's session (:data:`CONNECT_NOTEBOOKS`); 03 in a classic session of its own.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import tempfile
from pathlib import Path

import hypothesis
import pytest
from support.notebook_data import notebook_simulation
from support.ports import CONNECT_PORT, TEST_BROKER
from support.profiles import (
    BROKER_JVM_OPTIONS,
    EXTENDED,
    INTERPRETED,
    NIGHTLY,
    TEST_JVM_OPTIONS,
    WORKER_JVM_OPTIONS,
)

SESSION_DIR = Path(tempfile.mkdtemp(prefix="sensorcep-tests-"))

# no time limit per Hypothesis example: tests assert behaviour, not speed, and beside the other xdist worker's Spark
# session an example may take longer than Hypothesis' default 200 ms (measured: 308 ms, a pure-Python property).
# make test and make extended draw the same examples every run (a CI failure reproduces); make nightly draws new ones
# every night and prints how to replay a failing one
hypothesis.settings.register_profile(
    "sensorcep", deadline=None, derandomize=not NIGHTLY, database=None, print_blob=NIGHTLY
)
hypothesis.settings.load_profile("sensorcep")
TESTS = Path(__file__).parent
TIERS = ("unit", "spark", "kafka", "e2e", "fault")
#: the order the tiers' tests are handed out in: the longest units of work first (the fault test, then whole runs), the
#: many short unit tests last, so ``make test``'s two workers end together (longest-processing-time-first)
RUN_ORDER = ("fault", "e2e", "kafka", "spark", "unit")
#: what each tier may ask for: fixtures that start the JVM or need the broker
FORBIDDEN = {"unit": {"spark", "bootstrap"}, "spark": {"bootstrap"}}
#: tiers whose tests need the session's broker
BROKER_TIERS = {"kafka", "e2e"}
#: the JVM options of the worker's session and of every other JVM the tests start (``pytest_sessionstart``)
JVM_OPTIONS: dict[str, str] = {}


def tier(item) -> str:
    """The directory under ``tests/`` a test lives in; a notebook (nbmake) is an end-to-end test."""
    if item.path.suffix == ".ipynb":
        return "e2e"
    part = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else ""
    if part not in TIERS:
        raise pytest.UsageError(f"{item.nodeid}: a test lives in one of tests/{{{','.join(TIERS)}}}/, not {part!r}")
    return part


def pytest_collection_modifyitems(config, items):
    """Mark every test with its tier; refuse a test that needs more than its tier allows."""
    wrong = []
    for item in items:
        name = tier(item)
        item.add_marker(getattr(pytest.mark, name))
        needs = FORBIDDEN.get(name, set()) & set(getattr(item, "fixturenames", ()))
        if needs:
            wrong.append(f"{item.nodeid} is in tests/{name}/ but asks for {', '.join(sorted(needs))}")
    if wrong:
        raise pytest.UsageError("tests outside their tier:\n" + "\n".join(wrong))
    _select_the_runs_tests(config, items)
    items.sort(key=lambda item: RUN_ORDER.index(tier(item)))  # stable: the tests of a tier keep their order
    _check_the_notebooks_after_them(config, items)


def extended(item) -> bool:
    """Whether a test is ``make extended``'s (decision 0063): the fault test, and the tests marked
    ``extended``: long runs of what ``make test`` proves at a smaller scale."""
    return tier(item) == "fault" or item.get_closest_marker("extended") is not None


def _select_the_runs_tests(config, items):
    """Deselect (not skip) what this run leaves to the other: ``make test`` the extended tests, ``make extended``
    everything else; ``make nightly`` runs every test (decision 0063). Tests named on the command line
    (``pytest tests/fault``) run whichever command's they are, unless ``SENSORCEP_EXTENDED=1`` asks for the extended."""
    named = config.args_source == pytest.Config.ArgsSource.ARGS
    if NIGHTLY or (named and not EXTENDED):
        return
    left = [item for item in items if extended(item) != EXTENDED]
    if left:
        config.hook.pytest_deselected(items=left)
        gone = set(map(id, left))
        items[:] = [item for item in items if id(item) not in gone]


#: the tests that read what the notebooks wrote: run after them, in their unit of work (and only with them)
NOTEBOOK_CHECKS = "tests/e2e/test_notebook_tables.py"


def _check_the_notebooks_after_them(config, items):
    """Move the notebooks' checks (:data:`NOTEBOOK_CHECKS`) right after the last notebook; without a notebook in
    the run they have nothing to read, and are deselected."""
    checks = [item for item in items if item.nodeid.startswith(NOTEBOOK_CHECKS)]
    if not checks:
        return
    rest = [item for item in items if not item.nodeid.startswith(NOTEBOOK_CHECKS)]
    notebooks = [i for i, item in enumerate(rest) if item.path.suffix == ".ipynb"]
    if not notebooks:
        config.hook.pytest_deselected(items=checks)
        items[:] = rest
        return
    after = notebooks[-1] + 1
    items[:] = rest[:after] + checks + rest[after:]


def pytest_xdist_make_scheduler(config, log):
    """The two pytest-xdist workers: the notebooks are one unit of work, run in order by one worker (01 -> 05 build on
    each other's tables, in that worker's session folder); so is a module whose tests share a module-scoped fixture;
    every other test is a unit of its own. A worker runs a test once it holds the next, so pytest-xdist queues a unit
    behind the fault test: the last in the run order (the shortest kind), not the next, which waited for the fault test
    while the other worker idled (``make extended``: the Spark Connect pipeline test, 148 s after the fault test's 811).
    (pytest 9 ignores the node-id suffix that pytest-xdist's ``--dist loadgroup`` groups by: the grouping is here.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            if path.endswith(".ipynb") or path == NOTEBOOK_CHECKS:
                return "notebooks"
            return path if _shares_a_module_fixture(path) else nodeid

        def _assign_work_unit(self, node) -> None:
            units = self.assigned_work.get(node, {}).values()
            if any(not done and test.startswith("tests/fault/") for unit in units for test, done in unit.items()):
                self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
            super()._assign_work_unit(node)

    return SuiteScheduling(config, log)


@functools.cache
def _shares_a_module_fixture(path: str) -> bool:
    """Whether the test module has a module-scoped fixture (e.g. one pipeline run that several tests read): its tests
    go to one worker, which runs the fixture once (split over two, each worker ran it: 48 s twice for 04's matrix)."""
    return 'scope="module"' in (TESTS.parent / path).read_text()


def pytest_collection_finish(session):
    """Start the broker (and give the notebooks their data) only when a selected test will run and needs it
    (``--collect-only`` runs nothing: it must not start, or take over, a broker)."""
    if session.config.option.collectonly:
        return
    if any(tier(item) in BROKER_TIERS for item in session.items):
        _start_broker()


def pytest_sessionstart(session):
    os.environ.update(
        {
            "SENSORCEP_KAFKA_BOOTSTRAP_SERVERS": TEST_BROKER,
            "SENSORCEP_BASE_PATH": str(SESSION_DIR / "notebooks"),
            "SENSORCEP_EVENTS_TOPIC": "nb-sensor-events",
            "SENSORCEP_ALERTS_TOPIC": "nb-sensor-alerts",
            "SENSORCEP_ACKS_TOPIC": "nb-sensor-alert-acks",
            "SENSORCEP_MAX_OFFSETS_PER_TRIGGER": "2000",
            "SENSORCEP_ALERTS_TRIGGER": "realtime:5 seconds",  # 03 runs the real-time alert query
            "SENSORCEP_DEVICE_TIMEOUT": "20 seconds",
            "SENSORCEP_DRIVER_MEMORY": "3g",
            "SENSORCEP_RUN_DIR": str(SESSION_DIR / "run"),  # where notebooks save their plots (not the source tree)
            "SENSORCEP_TUNING_PRESET": "quick" if NIGHTLY else "smoke",  # 04: the study's path, not the study
            # short-lived test JVMs: the C1 compiler only, one GC thread (measured: the device-activity and sampling
            # restart tests, 114 s -> 90 s on 2 cores); the product's sessions keep the JVM's defaults
            "SENSORCEP_JVM_OPTIONS": _jvm_options("others"),
            "SENSORCEP_BROKER_JVM_OPTIONS": BROKER_JVM_OPTIONS,
            # the catalog's managed tables: the session's own (make test runs two sessions side by side)
            "SENSORCEP_WAREHOUSE_DIR": str(SESSION_DIR / "warehouse"),
        }
    )


def _jvm_options(which: str) -> str:
    """The options of the worker's session (``"worker"``) or of the other JVMs (``"others"``); a
    ``SENSORCEP_JVM_OPTIONS`` set by hand wins for both."""
    if not JVM_OPTIONS:
        mode = "" if NIGHTLY else f" {INTERPRETED}"
        own = os.environ.get("SENSORCEP_JVM_OPTIONS")
        JVM_OPTIONS.update(worker=own or WORKER_JVM_OPTIONS + mode, others=own or TEST_JVM_OPTIONS + mode)
    return JVM_OPTIONS[which]


def _start_broker():
    from sensorcep.local import broker, simulator

    broker.up(TEST_BROKER, SESSION_DIR / "broker")
    broker.create_topics(TEST_BROKER, ["nb-sensor-events", "nb-sensor-alerts", "nb-sensor-alert-acks"])
    sim = notebook_simulation()
    simulator.produce(sim, TEST_BROKER, "nb-sensor-events")
    simulator.produce_records(simulator.acknowledgements(sim), TEST_BROKER, "nb-sensor-alert-acks")


def pytest_sessionfinish(session, exitstatus):
    from sensorcep.local import broker

    if (SESSION_DIR / "broker").exists():
        broker.down(SESSION_DIR / "broker")


@pytest.fixture(scope="session")
def spark():
    """The test session; it also serves Spark Connect on ``CONNECT_PORT``."""
    return _serving_session()


def _serving_session():
    """The worker's one session, serving Spark Connect, with the worker's JVM options (both variables are set only while
    it starts: the notebooks' kernels that start sessions of their own must not bind the port again)."""
    from sensorcep.local.session import CONNECT_PORT_ENV
    from sensorcep.runtime import get_spark

    os.environ.update({CONNECT_PORT_ENV: str(CONNECT_PORT), "SENSORCEP_JVM_OPTIONS": _jvm_options("worker")})
    try:
        return get_spark()
    finally:
        del os.environ[CONNECT_PORT_ENV]
        os.environ["SENSORCEP_JVM_OPTIONS"] = _jvm_options("others")


#: the notebooks that run as Spark Connect clients of the worker's session: serverless' and standard access mode's
#: path, proven on the notebooks themselves, and no cold JVM of their own (measured: a fresh JVM costs 11-21 s before
#: its first Delta read returns, with and without the class archive: benchmarks/results/cold_start.md). 03 runs the
#: real-time alert query, which open-source Spark Connect cannot ask for (runtime.set_trigger): it starts a classic
#: session of its own.
CONNECT_NOTEBOOKS = {
    "01_ingest.ipynb",
    "02_sampling_state.ipynb",
    "04_state_tuning.ipynb",
    "05_monitoring.ipynb",
    "backtest_rules.ipynb",
}


def pytest_runtest_setup(item):
    if item.path.name in CONNECT_NOTEBOOKS:
        _serving_session()
        os.environ["SPARK_REMOTE"] = f"sc://localhost:{CONNECT_PORT}"  # the kernel nbmake starts inherits it


def pytest_runtest_teardown(item):
    if item.path.name in CONNECT_NOTEBOOKS:
        os.environ.pop("SPARK_REMOTE", None)


@pytest.fixture(scope="session")
def bootstrap() -> str:
    return TEST_BROKER


@pytest.fixture
def settings(tmp_path, request):
    """Settings for one test: its own base path, schema (the session's catalog holds every test's tables) and topics
    (named after the test)."""
    from sensorcep.settings import Settings

    name = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")
    if len(name) > 60:  # cut short, with a digest of the whole: two parameters of one test get two topics
        name = f"{name[:51]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return Settings(
        kafka_bootstrap_servers=TEST_BROKER,
        base_path=str(tmp_path),
        schema=re.sub(r"\W", "_", tmp_path.name),
        events_topic=f"ev-{name}",
        alerts_topic=f"al-{name}",
        acks_topic=f"ack-{name}",
        max_offsets_per_trigger=1_000,
    )


#: a two-task job (the second depends on the first) for the local job runner's tests; notebooks: the test's own
TINY_JOB = """
resources:
  jobs:
    tiny:
      parameters:
        - name: events_topic
          default: tiny-events
      tasks:
        - task_key: first
          notebook_task: {notebook_path: ../notebooks/first.ipynb}
        - task_key: second
          depends_on: [{task_key: first}]
          notebook_task: {notebook_path: ../notebooks/second.ipynb}
"""


@pytest.fixture
def bundle(tmp_path):
    """A tiny bundle in ``tmp_path``: databricks.yml, bundles/tiny.job.yml (:data:`TINY_JOB`), an empty notebooks/."""
    (tmp_path / "databricks.yml").write_text("bundle:\n  name: tiny\n")
    (tmp_path / "bundles").mkdir()
    (tmp_path / "bundles" / "tiny.job.yml").write_text(TINY_JOB)
    (tmp_path / "notebooks").mkdir()
    return tmp_path
