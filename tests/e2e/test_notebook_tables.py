"""What the notebooks wrote, checked against the events they ran on: the notebooks themselves only show their results
(a notebook is a user's page, not a test), so these tests read the tables 01-03 wrote and compare them with the
simulated topic (:mod:`support.notebook_data`), 04's study results with the matrix of the session's preset (``smoke``;
``quick`` in ``make nightly``), and 05's progress record and plots with the queries 01-03 ran.

They run after the notebooks, on the same pytest-xdist worker, in the notebooks' session folder (``tests/conftest.py``
orders them so), and only when the notebooks run too: they read what the notebooks wrote.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from support.notebook_data import notebook_simulation
from support.streams import delta_frame

from sensorcep import tuning
from sensorcep.observability import accounting, reports
from sensorcep.pipeline import alerts
from sensorcep.settings import env_settings


@pytest.fixture(scope="module")
def settings():
    return env_settings()  # the notebooks' settings: SENSORCEP_* as tests/conftest.py sets them for the session


@pytest.fixture(scope="module")
def sim():
    return notebook_simulation()


def _table(settings, name: str, columns: list[str] | None = None) -> pd.DataFrame:
    return delta_frame(settings.table_path(name), columns)


def _keys(frame: pd.DataFrame) -> list[tuple[str, int]]:
    micros = frame.event_time.dt.tz_convert("UTC").dt.as_unit("us").astype("int64")
    return list(zip(frame.device_id, micros, strict=True))


def test_01_lands_each_valid_event_once_in_bronze_each_copy_in_duplicates_each_bad_record_in_quarantine(
    spark, settings, sim
):
    bronze = _table(settings, "bronze_events", ["device_id", "event_time"])
    quarantine = _table(settings, "quarantine_events", ["raw_value", "reason"])
    duplicates = _table(settings, "duplicate_events", ["device_id", "event_time"])

    assert len(bronze) == len(set(_keys(bronze))), "one bronze row per (device_id, event_time)"
    assert set(_keys(bronze)) == set(_keys(sim.distinct_valid))
    assert sorted(quarantine.raw_value) == sorted(sim.malformed.value) and quarantine.reason.notna().all()
    assert len(duplicates) == len(sim.valid) - len(sim.distinct_valid)
    assert set(_keys(duplicates)) <= set(_keys(bronze)), "a duplicate repeats an event bronze holds"
    assert len(bronze) + len(quarantine) + len(duplicates) == len(sim.records), "every record in exactly one table"


def test_02_samples_each_closed_window_first_middle_last_and_every_anomaly_from_bronze(spark, settings):
    samples = _table(settings, "sensor_samples")
    bronze = _table(settings, "bronze_events", ["device_id", "event_time", "sensor_freq"])
    late = _table(settings, "late_events", ["query", "device_id", "event_time"])
    assert len(samples) and settings.sample_scope == "window"

    held = dict(zip(_keys(bronze), bronze.sensor_freq, strict=True))
    assert all(held.get(key) == freq for key, freq in zip(_keys(samples), samples.sensor_freq, strict=True)), (
        "every sample is an event of bronze, with its frequency"
    )
    too_late = set(_keys(late[late["query"] == settings.query_name("sampling")]))
    taken = bronze[[key not in too_late for key in _keys(bronze)]]
    length, slide = pd.Timedelta(seconds=settings.window_seconds), pd.Timedelta(seconds=settings.slide_seconds)
    watermark = bronze.event_time.max() - pd.Timedelta(seconds=settings.watermark_seconds)
    starts = {t.floor(slide) - k * slide for t in taken.event_time for k in range(length // slide)}
    closed = {start for start in starts if start + length <= watermark}
    assert len(closed) > 1 and set(samples.window_start) == closed, "every window the final watermark closed, no other"
    for (start, end), window in samples.groupby(["window_start", "window_end"]):
        roles = window.roles.explode()
        assert sorted(roles[roles.isin(["first", "middle", "last"])]) == ["first", "last", "middle"], start
        sampled = set(_keys(window))
        inside = bronze[(bronze.event_time >= start) & (bronze.event_time < end)]
        taken = [key for key in _keys(inside) if key not in too_late]
        first, last = window[window.roles.map(lambda r: "first" in r)], window[window.roles.map(lambda r: "last" in r)]
        assert _keys(first)[0][1] == min(t for _, t in taken) and _keys(last)[0][1] == max(t for _, t in taken), start
        anomalous = inside[inside.sensor_freq < settings.anomaly_threshold]
        assert {key for key in _keys(anomalous) if key not in too_late} <= sampled, f"every anomaly of {start}"


def test_03_alerts_every_anomalous_event_once_whatever_its_copies_and_lateness(spark, settings, sim):
    anomalies = _table(settings, "anomalies", ["alert_id", "rule_id", "device_id"])
    anomalous = sim.distinct_valid[sim.distinct_valid.sensor_freq < 0]  # the packaged rule: sensor_freq < 0
    expected = {alerts.alert_id(device, t, "negative_frequency") for device, t in _keys(anomalous)}

    assert len(anomalous) > 0
    assert sorted(anomalies.alert_id) == sorted(expected), "one anomaly row per anomalous event, none other"
    assert set(anomalies.rule_id) == {"negative_frequency"}


def test_04_records_one_row_per_configuration_of_its_matrix_with_the_windows_it_closed(spark, settings):
    results = _table(settings, "tuning_results")
    preset = settings.tuning_preset  # smoke; quick in make nightly
    matrix, workload = tuning.MATRICES[preset], tuning.WORKLOADS[preset]
    assert sorted(zip(results["query"], results["preset"], strict=True)) == sorted(matrix)
    assert (results.batches == workload.events // workload.batch).all()
    assert (results.input_rows == workload.events).all()
    for column in ("events_per_s", "batch_p95_ms", "commit_p95_ms", "state_rows_max"):
        assert (results[column] > 0).all(), column
    assert (results.output_rows > 0).all(), "the workload spans more event time than a window: windows closed"


#: the queries notebooks 01-03 start with the packaged rules and no routes_file (no stateful or group rule is in force)
STARTED = {"ingest", "sampling", "device_activity", "alerts", "anomalies", "alert_lifecycle"}


def test_05_shows_the_progress_of_every_query_started_and_every_record_ingest_and_alerts_read(spark, settings, sim):
    progress = reports.read_progress(spark, settings)
    assert set(progress.query_name) == {settings.query_name(q) for q in STARTED}
    rows = progress.groupby("query_name").num_input_rows.sum()
    assert rows[settings.query_name("ingest")] == len(sim.records), "ingest read each record of the topic once"
    assert rows[settings.query_name("alerts")] == len(sim.records), "the alert query read the topic itself, once"
    assert (rows > 0).all()
    plots = {path.name for path in Path(os.environ["SENSORCEP_RUN_DIR"]).glob("progress_*.png")}
    assert plots == {f"progress_{name}.png" for name in progress.query_name.unique()}, "05 saved a plot per query"
    late = accounting.late_event_summary(spark, settings, progress)
    assert late.accounted.all(), "every row a query dropped as late is in late_events"
