"""01 ingest with the real broker and real Delta tables: exactly the valid distinct events land."""
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
from deltalake import DeltaTable

from sensorcep import ingest, simulator
from sensorcep.broker import create_topics

pytestmark = pytest.mark.integration
START = datetime(2026, 3, 1, 8, 0, tzinfo=timezone.utc)


def _bronze_keys(settings):
    df = DeltaTable(settings.table_path("bronze_events")).to_pandas(columns=["device_id", "event_time"])
    return list(zip(df.device_id, df.event_time.dt.tz_localize(None) if df.event_time.dt.tz else df.event_time))


def _expected(*sims):
    rows = []
    for sim in sims:
        rows += list(zip(sim.valid.device_id, sim.valid.event_time.dt.tz_convert(None)))
    return set(rows)


def _quarantine(settings):
    return DeltaTable(settings.table_path("quarantine_events")).to_pandas(columns=["offset", "reason", "raw_value"])


def _produce(settings, events, seed, start):
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic])
    sim = simulator.generate(simulator.SimulationConfig(events=events, devices=40, seed=seed, start=start, rate=100,
                                                        malformed_share=0.03, duplicate_share=0.03))
    simulator.produce(sim, settings.kafka_bootstrap_servers, settings.events_topic)
    return sim


def test_two_runs_land_exactly_the_valid_distinct_events(spark, settings):
    first = _produce(settings, 3_000, seed=1, start=START)
    ingest.start_ingest(spark, settings)
    second = _produce(settings, 2_000, seed=2, start=first.end)
    ingest.start_ingest(spark, settings)

    bronze = _bronze_keys(settings)
    assert len(bronze) == len(set(bronze)), "no duplicate (device_id, event_time) in bronze"
    assert set(bronze) == _expected(first, second)
    quarantine = _quarantine(settings)
    assert len(quarantine) == len(first.malformed) + len(second.malformed)
    assert quarantine.reason.notna().all()
    assert set(quarantine.raw_value) == set(first.malformed.value) | set(second.malformed.value)


def test_killed_run_then_rerun_changes_nothing(spark, settings, tmp_path):
    sim = _produce(settings, 4_000, seed=3, start=START)
    code = (
        "from sensorcep import ingest; from sensorcep.runtime import get_spark; from sensorcep.settings import Settings;"
        f"ingest.start_ingest(get_spark(), Settings(**{settings.__dict__!r}))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bronze_log = os.path.join(settings.table_path("bronze_events"), "_delta_log")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # wait for the first committed batch, then kill
        if os.path.isdir(bronze_log) and len(os.listdir(bronze_log)) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the ingest run finished before it could be killed; use more events"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = len(_bronze_keys(settings))
    assert 0 < partial < len(sim.distinct_valid)

    ingest.start_ingest(spark, settings)
    bronze = _bronze_keys(settings)
    assert len(bronze) == len(set(bronze)) and set(bronze) == _expected(sim)
    assert len(_quarantine(settings)) == len(sim.malformed)
