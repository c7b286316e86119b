"""03 anomaly alerts: content and alert_id, crash + restart, FAIR pools side by side (the lifecycle after an alert:
test_alert_lifecycle.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import functions as F
from support.crash import kill_after_first_commit
from support.streams import (
    T0,
    T0_US,
    batch_stream,
    delta_frame,
    events,
    topic_end_offsets,
    topic_records,
    write_batches,
)

from sensorcep.local import simulator
from sensorcep.local.broker import create_topics
from sensorcep.pipeline import alerts, sampling
from sensorcep.pipeline.streaming import finish, start_query, stop_when_caught_up
from sensorcep.rules import catalog


def consume_all(bootstrap: str, topic: str) -> list[tuple[bytes, dict]]:
    """Every record of a one-partition topic: (key, JSON value)."""
    return [(key, json.loads(value)) for _, _, key, value in topic_records(bootstrap, topic)]


def test_alert_id_is_the_same_in_python_and_spark(spark):
    frame = events(("dev-1", -2.0, 1.5), ("dev-2", -0.001, 3600.000001))
    rows = spark.createDataFrame(
        frame.assign(event_time=pd.to_datetime(frame.event_time_us, unit="us", utc=True), rule_id="negative_frequency")
    )
    got = rows.select("device_id", "event_time_us", alerts.alert_id_column().alias("id")).collect()
    assert {(r.device_id, r.id) for r in got} == {
        (r.device_id, alerts.alert_id(r.device_id, r.event_time_us, "negative_frequency")) for r in got
    }
    assert len({r.id for r in got}) == 2 and all(len(r.id) == 32 for r in got)


def test_each_anomaly_becomes_one_alert_with_its_fields(spark, settings, tmp_path):
    create_topics(settings.kafka_bootstrap_servers, [settings.alerts_topic])
    batches = [
        events(("a", -1.5, 10), ("b", 0.0, 11), ("c", 3.0, 12)),
        events(("d", -4.0, 200)),
        events(("a", -2.5, 5)),
    ]  # 195 s behind: far too late for windows, still an alert
    write_batches(tmp_path / "in", batches)
    settings = settings.replace(alerts_trigger="availableNow")
    alerts.start_alerts(
        spark, settings, events=batch_stream(spark, tmp_path / "in").withColumn("kafka_timestamp", F.col("event_time"))
    )
    alerts.start_anomalies(spark, settings)
    records = consume_all(settings.kafka_bootstrap_servers, settings.alerts_topic)
    by_id = {value["alert_id"]: (key, value) for key, value in records}
    expected = {
        alerts.alert_id(d, T0_US + int(s * 1e6), "negative_frequency"): (d, f)
        for d, f, s in [("a", -1.5, 10), ("d", -4.0, 200), ("a", -2.5, 5)]
    }
    assert len(records) == 3 and set(by_id) == set(expected)
    for alert_id, (key, value) in by_id.items():
        assert key.decode() == value["device_id"] == expected[alert_id][0]
        assert value["sensor_freq"] == expected[alert_id][1] and value["rule"] == "sensor_freq < 0"
        assert (value["rule_id"], value["rule_version"]) == ("negative_frequency", 1)
        assert set(value) == set(alerts.ALERT_FIELDS)
    anomalies = delta_frame(settings.table_path("anomalies"))
    assert sorted(anomalies.alert_id) == sorted(expected)
    assert (anomalies.detected_at > anomalies.event_time).all(), "detected_at: when the alert record reached Kafka"


#: a crash of the alert path (a cold JVM in a subprocess), in make extended beside the fault test, which kills its
#: anomalies query before and after its MERGE and its Kafka sink while it writes (decisions 0040, 0063)
@pytest.mark.extended
def test_crash_and_restart_alerts_every_anomaly_with_stable_ids(spark, settings):
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic, settings.alerts_topic])
    sim = simulator.generate(
        simulator.SimulationConfig(events=6_000, devices=30, seed=21, start=T0, rate=50, anomaly_share=0.05)
    )
    simulator.produce(sim, settings.kafka_bootstrap_servers, settings.events_topic)
    settings = settings.replace(alerts_trigger="availableNow", max_offsets_per_trigger=500)
    kill_after_first_commit("pipeline.alerts.run_alert_path", settings, "anomalies")
    alerts.run_alert_path(spark, settings)
    alerts.start_anomalies(spark, settings.replace(query_suffix="_replay"))  # a new checkpoint replays every alert

    anomalous = sim.valid[sim.valid.sensor_freq < 0]  # every anomalous record, re-sent copies included
    expected = {
        alerts.alert_id(d, int(t.value // 1000), "negative_frequency")
        for d, t in zip(anomalous.device_id, anomalous.event_time, strict=False)
    }
    records = consume_all(settings.kafka_bootstrap_servers, settings.alerts_topic)
    assert {v["alert_id"] for _, v in records} == expected, "every anomaly alerted at least once"
    stable = {}
    for _, value in records:  # a re-sent alert is the same alert: same id, same event
        event = (value["device_id"], value["sensor_freq"], value["event_time"])
        assert stable.setdefault(value["alert_id"], event) == event
    assert len(records) >= len(anomalous)
    anomalies = delta_frame(settings.table_path("anomalies"))
    assert sorted(anomalies.alert_id) == sorted(expected), "Delta: each distinct anomaly exactly once"
    assert len(anomalous) > len(expected)  # the simulation re-sent some anomalous events: they left one row each


def test_realtime_alerts_equal_the_anomalies_of_a_fixed_input(spark, settings):
    """Real-time mode (long-running tasks, records processed as they arrive) alerts exactly the valid anomalies."""
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic, settings.alerts_topic])
    sim = simulator.generate(
        simulator.SimulationConfig(
            events=4_000, devices=30, seed=33, start=T0, rate=50, anomaly_share=0.05, malformed_share=0.05
        )
    )
    simulator.produce(sim, settings.kafka_bootstrap_servers, settings.events_topic)
    settings = settings.replace(alerts_trigger="realtime:5 seconds")
    started = time.monotonic()
    query = alerts.start_alerts(spark, settings, wait=False)
    assert query.isActive
    stop_when_caught_up(
        query, {settings.events_topic: topic_end_offsets(settings.kafka_bootstrap_servers, settings.events_topic)}
    )
    ran_s = time.monotonic() - started

    anomalous = sim.valid[sim.valid.sensor_freq < 0]
    expected = {
        alerts.alert_id(d, int(t.value // 1000), "negative_frequency")
        for d, t in zip(anomalous.device_id, anomalous.event_time, strict=False)
    }
    got = [v["alert_id"] for _, v in consume_all(settings.kafka_bootstrap_servers, settings.alerts_topic)]
    assert set(got) == expected and len(expected) > 50  # malformed records (5% of the input) never alert
    assert len(sim.malformed) > 100
    # however long the run took on this machine: one long-running batch per 5-second checkpoint interval (and the one
    # cut short by the stop), not a micro-batch per trigger
    assert 1 <= len(query.recentProgress) <= ran_s // 5 + 1, (len(query.recentProgress), ran_s)


#: in make extended (decision 0063): make test's tests/unit/test_queries.py checks the pool each query declares
@pytest.mark.extended
def test_alert_and_sampling_queries_run_side_by_side_in_their_pools(spark, settings):
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic])
    sim = simulator.generate(simulator.SimulationConfig(events=3_000, devices=20, seed=4, start=T0, rate=50))
    simulator.produce(sim, settings.kafka_bootstrap_servers, settings.events_topic)
    settings = settings.replace(alerts_trigger="availableNow", max_offsets_per_trigger=300)
    from sensorcep.pipeline.ingest import valid_event_stream

    pools: dict[str, set] = {"alerts": set(), "sampling": set()}
    both_running = []

    def recorder(name):
        def record(batch, batch_id):
            pools[name].add(spark.sparkContext.getLocalProperty("spark.scheduler.pool"))
            both_running.append(len(spark.streams.active) == 2)
            batch.count()

        return record

    events_ = valid_event_stream(spark, settings)
    rules = catalog.rules_in_force(spark, settings)
    alert_q = start_query(
        alerts.alert_stream(events_, rules), settings, "alerts", pool="alerts", foreach_batch=recorder("alerts")
    )
    sample_q = start_query(
        sampling.sample_stream(events_, settings),
        settings,
        "sampling",
        pool="sampling",
        foreach_batch=recorder("sampling"),
    )
    finish(alert_q, settings)
    finish(sample_q, settings)
    assert pools == {"alerts": {"alerts"}, "sampling": {"sampling"}}
    assert any(both_running), "a batch of one query ran while the other query was active beside it"
    scheduler = spark.sparkContext._jsc.sc().getPoolForName("alerts").get()
    assert scheduler.weight() == 2 and spark.sparkContext._jsc.sc().getPoolForName("sampling").get().weight() == 1


def test_a_switch_between_real_time_and_micro_batch_alerts_sends_no_alert_twice(spark, settings):
    """The hourly job (micro-batch alerts) and the always-on job (real-time) keep separate checkpoints; each start
    begins where the other mode ended, both ways, so the topic holds every anomaly's alert exactly once."""
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic, settings.alerts_topic])
    expected: set[str] = set()

    def produce(seed: int, minutes: int) -> None:
        sim = simulator.generate(
            simulator.SimulationConfig(
                events=600,
                devices=10,
                seed=seed,
                start=T0 + pd.Timedelta(minutes=minutes),
                rate=50,
                anomaly_share=0.1,
                duplicate_share=0.0,  # a re-sent event alerts again (same id): here each alert is sent once
            )
        )
        simulator.produce(sim, settings.kafka_bootstrap_servers, settings.events_topic)
        anomalous = sim.valid[sim.valid.sensor_freq < 0].drop_duplicates(["device_id", "event_time"])
        expected.update(
            alerts.alert_id(d, int(t.value // 1000), "negative_frequency")
            for d, t in zip(anomalous.device_id, anomalous.event_time, strict=False)
        )

    def sent() -> list[str]:
        return [value["alert_id"] for _, value in consume_all(settings.kafka_bootstrap_servers, settings.alerts_topic)]

    micro_batch = settings.replace(alerts_trigger="availableNow")
    realtime = settings.replace(alerts_trigger="realtime:5 seconds")
    produce(seed=51, minutes=0)
    finish(alerts.start_alerts(spark, micro_batch), micro_batch)  # the hourly job
    first = len(sent())
    assert first == len(expected) > 10

    produce(seed=52, minutes=30)  # then the always-on job: a new real-time checkpoint
    end = topic_end_offsets(settings.kafka_bootstrap_servers, settings.events_topic)
    stop_when_caught_up(alerts.start_alerts(spark, realtime, wait=False), {settings.events_topic: end})
    assert len(sent()) > first and sorted(sent()) == sorted(expected), "real-time: only the new events' alerts"

    produce(seed=53, minutes=60)  # and back to the hourly job: its own checkpoint is behind, set aside
    finish(alerts.start_alerts(spark, micro_batch), micro_batch)
    assert sorted(sent()) == sorted(expected), "micro-batch again: only the newest events' alerts, none twice"
    checkpoints = Path(settings.checkpoint_path("alerts")).parent
    assert [p.name for p in checkpoints.glob("alerts.superseded-*")], "the superseded checkpoint is kept aside"
