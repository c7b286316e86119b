"""Shared test fixtures: one SparkSession and one real local Kafka broker per test session.

The broker (Apache Kafka, KRaft) runs on its own port with its data in a temporary folder; the notebooks run
by nbmake inherit ``SENSORCEP_*`` environment variables pointing them at it and at a temporary base
path, with a small simulated data set already in their topic.
"""

from __future__ import annotations

import os
import re
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pytest

#: ports of this test session's broker and Spark Connect server (test_connect.py); another port pair lets two
#: test sessions run side by side on one machine
TEST_BROKER = os.environ.get("SENSORCEP_TEST_BROKER", "127.0.0.1:19092")
CONNECT_PORT = int(os.environ.get("SENSORCEP_TEST_CONNECT_PORT", "19002"))
SESSION_DIR = Path(tempfile.mkdtemp(prefix="sensorcep-tests-"))
NOTEBOOK_START = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


#: fixtures that need the JVM (and with it the broker): a test asking for one is an integration test
JVM_FIXTURES = {"spark", "bootstrap", "settings"}


def pytest_collection_modifyitems(config, items):
    """Mark every test that needs Spark or the broker (a notebook, or a test asking for a JVM fixture) as
    ``integration``: ``pytest -m "not integration"`` (``make unit``) runs the rest in seconds, with no JVM."""
    for item in items:
        if JVM_FIXTURES & set(getattr(item, "fixturenames", ())) or item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.integration)


def pytest_collection_finish(session):
    """Start the broker (and give the notebooks their data) only when a selected test needs it."""
    if any(item.get_closest_marker("integration") for item in session.items):
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
            "SENSORCEP_ALERTS_TRIGGER": "realtime:5 seconds",  # 03 and 05 run the real-time alert query
            "SENSORCEP_DEVICE_TIMEOUT": "20 seconds",
            "SENSORCEP_DRIVER_MEMORY": "3g",
            "SENSORCEP_RUN_DIR": str(SESSION_DIR / "run"),  # where notebooks save their plots (not the source tree)
        }
    )


def _start_broker():
    from sensorcep.local import broker, simulator

    broker.up(TEST_BROKER, SESSION_DIR / "broker")
    broker.create_topics(TEST_BROKER, ["nb-sensor-events", "nb-sensor-alerts", "nb-sensor-alert-acks"])
    sim = simulator.generate(
        simulator.SimulationConfig(events=6_000, devices=50, seed=7, start=NOTEBOOK_START, rate=50)
    )
    simulator.produce(sim, TEST_BROKER, "nb-sensor-events")
    simulator.produce_records(simulator.acknowledgements(sim), TEST_BROKER, "nb-sensor-alert-acks")


def pytest_sessionfinish(session, exitstatus):
    from sensorcep.local import broker

    if (SESSION_DIR / "broker").exists():
        broker.down(SESSION_DIR / "broker")


@pytest.fixture(scope="session")
def spark():
    """The test session; it also serves Spark Connect on ``CONNECT_PORT`` (the variable is set only while it starts:
    the notebooks' kernels start their own sessions and must not bind the port again)."""
    from sensorcep.local.session import CONNECT_PORT_ENV
    from sensorcep.runtime import get_spark

    os.environ[CONNECT_PORT_ENV] = str(CONNECT_PORT)
    try:
        return get_spark()
    finally:
        del os.environ[CONNECT_PORT_ENV]


@pytest.fixture(scope="session")
def bootstrap() -> str:
    return TEST_BROKER


@pytest.fixture
def settings(tmp_path, request):
    """Settings for one test: its own base path, schema (the session's catalog holds every test's tables) and topics
    (named after the test)."""
    from sensorcep.settings import Settings

    name = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]
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
