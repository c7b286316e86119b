"""The always-on job, run locally from its bundle definition: it runs, stops cleanly and resumes from its
checkpoints with nothing lost and nothing doubled; each query writes only the tables it declares, and no table is
created by a first write."""

from __future__ import annotations

import pandas as pd
import pytest
from support.streams import T0, delta_frame, drained
from support.writes import record_writes

from sensorcep.io.lake import Tables
from sensorcep.local import jobs, simulator
from sensorcep.local.broker import create_topics
from sensorcep.pipeline import alerts, registry


def _params(settings) -> dict[str, str]:
    return {
        "kafka_bootstrap_servers": settings.kafka_bootstrap_servers,
        "events_topic": settings.events_topic,
        "alerts_topic": settings.alerts_topic,
        "acks_topic": settings.acks_topic,
        "base_path": settings.base_path,
        "trigger": "2 seconds",
        "records_trigger": "4 seconds",  # the table-only queries at their own, longer interval
        "alerts_trigger": "realtime:5 seconds",
        "max_offsets_per_trigger": "2000",
    }


def _expected_alert_ids(sim) -> set[str]:
    anomalous = sim.valid[sim.valid.sensor_freq < 0]
    return {
        alerts.alert_id(d, int(t.value // 1000), "negative_frequency")
        for d, t in zip(anomalous.device_id, anomalous.event_time, strict=False)
    }


def _watch_creation(create, created_up_front: list):
    """Tables.create that records the tables it created."""

    def watched(self, names, extra_columns=None):
        made = create(self, names, extra_columns)
        created_up_front.extend(made)
        return made

    return watched


def _from_a_restarted_start(error: str, lines: list[str]) -> bool:
    """Whether a JVM ERROR line is a query's failed first start that the job then started again (its Python worker
    did not connect back in time on a busy machine: the job's ``↻`` line names the query)."""
    restarted = {line.split()[1].rstrip(":") for line in lines if "a Python worker did not start in time" in line}
    return bool(restarted) and ("PythonPreInitRunner" in error or any(f"Query {name} [" in error for name in restarted))


#: in make extended (decision 0063): make test's notebooks and kafka tests run each of the job's queries; this runs the
#: whole job from its bundle definition, stops it and resumes it
@pytest.mark.extended
def test_always_on_job_runs_stops_and_resumes_without_loss_or_doubles(spark, settings, capfd, monkeypatch):
    written = record_writes(monkeypatch, spark)
    created_up_front: list[str] = []
    monkeypatch.setattr(Tables, "create", _watch_creation(Tables.create, created_up_front))
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic, settings.alerts_topic, settings.acks_topic])
    first = simulator.generate(
        simulator.SimulationConfig(events=3_000, devices=20, seed=51, start=T0, rate=50, anomaly_share=0.03)
    )
    simulator.produce(first, settings.kafka_bootstrap_servers, settings.events_topic)
    lines: list[str] = []
    queries = jobs.run_always_on(
        params=_params(settings), until=drained(settings), minutes=5, every_s=5, out=lines.append, spark=spark
    )
    assert sorted(q.name for q in queries) == sorted(
        ["ingest", "sampling", "device_activity", "alerts", "alert_lifecycle", "anomalies"]
    )
    assert not any(q.isActive for q in queries), "stopped cleanly"
    by_queries = {name: tables for name, tables in written.items() if name != "-"}  # "-": the progress listener
    assert set(by_queries) == {"ingest", "sampling", "device_activity", "alert_lifecycle", "anomalies"}, written
    for name, tables in by_queries.items():
        assert tables <= set(registry.query(name).tables), f"{name} writes {tables}, declares {registry.query(name)}"
    by_a_write = set().union(*by_queries.values()) - set(created_up_front)  # a fresh schema: nothing existed before
    assert not by_a_write, f"tables created by a first write, not up front: {by_a_write}"
    assert lines[-1].startswith("✔ stopped 6 queries")
    realtime = [line for line in lines if "alerts since the last line" in line]  # between its checkpoints
    assert realtime and all("real-time:" in line and "newest alert" in line for line in realtime)
    console = capfd.readouterr()  # the JVM's console too: the real-time query's interrupted Kafka writes
    errors = [line for line in console.err.splitlines() if " ERROR " in line]
    assert not [line for line in errors if not _from_a_restarted_start(line, lines)], "a clean stop prints no ERROR"
    bronze_after_first = len(delta_frame(settings.table_path("bronze_events")))
    assert bronze_after_first == len(first.distinct_valid)

    second = simulator.generate(
        simulator.SimulationConfig(
            events=6_000, devices=20, seed=52, rate=50, anomaly_share=0.03, start=T0 + pd.Timedelta(minutes=2)
        )
    )
    simulator.produce(second, settings.kafka_bootstrap_servers, settings.events_topic)
    jobs.run_always_on(params=_params(settings), until=drained(settings), minutes=5, out=lines.append, spark=spark)

    bronze = delta_frame(settings.table_path("bronze_events"))
    both = pd.concat([first.valid, second.valid])
    assert len(bronze) == len(both.drop_duplicates(["device_id", "event_time"])), "every valid event once"
    assert not bronze.duplicated(["partition", "offset"]).any()
    anomalies = delta_frame(settings.table_path("anomalies"))
    assert sorted(anomalies.alert_id) == sorted(_expected_alert_ids(first) | _expected_alert_ids(second))
    samples = delta_frame(settings.table_path("sensor_samples"))
    assert not samples.duplicated(["window_start", "device_id", "event_time"]).any(), "no window emitted twice"
    ontime = both[both.kind == "ontime"].event_time
    watermark = ontime.max() - pd.Timedelta(seconds=30)
    starts = {t.floor("30s") - pd.Timedelta(seconds=k) for t in ontime for k in (0, 30)}
    closed = {s for s in starts if s + pd.Timedelta(seconds=60) <= watermark}
    assert closed <= set(samples.window_start), "every window the final watermark closed, from both runs"
    assert min(closed) < T0 and max(closed) >= T0 + pd.Timedelta(minutes=2), "windows of both data sets"
