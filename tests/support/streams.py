"""Controlled micro-batches for streaming tests: one Parquet file per batch, read one file per trigger."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

T0 = datetime(2026, 1, 5, 0, 0, tzinfo=timezone.utc)  # a multiple of every window / slide used
T0_US = int(T0.timestamp() * 1_000_000)
EVENT_SCHEMA = "device_id string, sensor_freq double, event_time timestamp"
#: event fields a test keeps as through ``extra_fields``: written to batch files as text when a batch has them
EXTRA_FIELDS = ("voltage",)


def events(*rows: tuple[str, float, float]) -> pd.DataFrame:
    """(device_id, sensor_freq, seconds after T0) -> an event batch (``event_time_us`` as the oracle wants)."""
    frame = pd.DataFrame(rows, columns=["device_id", "sensor_freq", "seconds"])
    frame["event_time_us"] = T0_US + (frame.pop("seconds") * 1_000_000).round().astype("int64")
    return frame.astype({"sensor_freq": "float64"})


def write_batches(folder: Path, batches: list[pd.DataFrame], first_index: int = 0) -> None:
    """Append batch files; modification times order them, one file per micro-batch."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, batch in enumerate(batches, start=first_index):
        path = folder / f"batch-{i:04d}.parquet"
        out = batch.assign(event_time=pd.to_datetime(batch.event_time_us, unit="us", utc=True))
        extra = [c for c in EXTRA_FIELDS if c in out.columns]
        columns = ["device_id", "sensor_freq", "event_time", *extra]
        out[columns].astype({c: "string" for c in extra}).to_parquet(path, index=False, coerce_timestamps="us")
        stamp = 1_700_000_000 + i
        os.utime(path, (stamp, stamp))


def batch_stream(spark, folder: Path, extra: tuple[str, ...] = ()):
    """The batch files as a stream, one file per micro-batch; ``extra``: fields kept through extra_fields (text)."""
    schema = EVENT_SCHEMA + "".join(f", {name} string" for name in extra)
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(folder))


def delta_frame(path: str, columns: list[str] | None = None, version: int | None = None) -> pd.DataFrame:
    """A Delta table read with Delta's Spark connector (the test session's), as pandas; timestamps UTC-aware."""
    from sensorcep.io import delta
    from sensorcep.runtime import get_spark

    df = delta.read_table(get_spark(), str(path), version)
    frame = (df.select(*columns) if columns else df).toPandas()
    for name in frame.columns:
        if pd.api.types.is_datetime64_dtype(frame[name]) and frame[name].dt.tz is None:
            frame[name] = frame[name].dt.tz_localize("UTC")
    return frame


def delta_version(path: str) -> int:
    """The newest version of a Delta table (its history's head)."""
    from delta.tables import DeltaTable

    from sensorcep.runtime import get_spark

    return DeltaTable.forPath(get_spark(), str(path)).history(1).collect()[0]["version"]


def sample_rows(settings) -> list[tuple]:
    """``sensor_samples`` as comparable tuples, in the oracle's integer time units."""
    return sample_tuples(delta_frame(settings.table_path("sensor_samples")))


def sample_tuples(table: pd.DataFrame) -> list[tuple]:
    """``sensor_samples`` rows (a frame of the table) as comparable tuples, in the oracle's integer time units."""
    us = lambda t: pd.Timestamp(t).value // 1000  # noqa: E731 - naive or UTC, both mean UTC here
    return sorted(
        (
            us(r.window_start) // 1000,
            us(r.window_end) // 1000,
            r.device_id,
            float(r.sensor_freq),
            us(r.event_time),
            tuple(r.roles),
            int(r.is_anomalous),
        )
        for r in table.itertuples(index=False)
    )


def late_rows(settings, query: str) -> list[tuple]:
    """``late_events`` of one query as (device_id, sensor_freq, event_time_us, watermark_ms), the oracle's units."""
    from sensorcep.io import delta
    from sensorcep.runtime import get_spark

    path = settings.table_path("late_events")
    if not delta.table_exists(path, get_spark()):
        return []
    table = delta_frame(path)
    table = table[table["query"] == settings.query_name(query)]
    us = lambda t: pd.Timestamp(t).value // 1000  # noqa: E731
    rows = [(r.device_id, float(r.sensor_freq), us(r.event_time), us(r.watermark) // 1000) for r in table.itertuples()]
    assert all(table.late_by_s >= 0), "a late event is at or before the watermark it missed"
    return sorted(rows)


def oracle_rows(frame: pd.DataFrame) -> list[tuple]:
    return sorted(
        (
            int(r.window_start_ms),
            int(r.window_end_ms),
            r.device_id,
            float(r.sensor_freq),
            int(r.event_time_us),
            tuple(r.roles),
            int(r.is_anomalous),
        )
        for r in frame.itertuples(index=False)
    )


def topic_end_offsets(bootstrap: str, topic: str) -> dict[str, int]:
    """{partition: end offset} of a topic now (what a query must have read to have read everything)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets", "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {str(p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        consumer.close()


def topic_records(bootstrap: str, topic: str) -> list[tuple[int, int, bytes, bytes]]:
    """Every record of a topic, all partitions: (partition, offset, key, value), in partition then offset order."""
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "receive.message.max.bytes": 1_000_000_000,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ranges = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions}
        consumer.assign([TopicPartition(topic, p, low) for p, (low, _) in ranges.items()])
        expected = sum(high - low for low, high in ranges.values())
        records: dict[tuple[int, int], tuple] = {}
        while len(records) < expected:
            # no more than the records still missing: consume returns as soon as they are in, not at its timeout
            for message in consumer.consume(min(1_000, expected - len(records)), 5.0):
                if message.error() is None:
                    key = (message.partition(), message.offset())
                    records[key] = (*key, message.key(), message.value())
        return [records[k] for k in sorted(records)]
    finally:
        consumer.close()


def drained(settings):
    """Stop condition: every query has read its source to the end (the alert readers: once the alerts are out; the
    bronze readers: once ingest has committed everything), and every micro-batch query has run a batch without new
    rows after that (the one that applies the new watermark); and the notifier, when it runs, has read the lifecycle's
    last commit to ``alert_events`` and passed twice since (an incident that joined a group already told is told at
    the next pass)."""
    from sensorcep.pipeline.streaming import caught_up

    events_end = {settings.events_topic: topic_end_offsets(settings.kafka_bootstrap_servers, settings.events_topic)}
    read_all: dict[str, int] = {}  # the alert_events version the notifier has read up to, and the batch that read it
    ingested: list[pd.Timestamp] = []  # when ingest's last data batch ended, once it has read to the end

    def idle(query) -> bool:
        return query.lastProgress is not None and query.lastProgress.numInputRows == 0

    def after_ingest(query) -> bool:
        """An idle report from a batch that started after ingest's last data batch had committed to bronze."""
        return idle(query) and pd.Timestamp(query.lastProgress.timestamp) > ingested[0]

    def done(queries) -> bool:
        by_name = {q.name: q for q in queries}
        if not caught_up(by_name["alerts"], events_end):
            return False
        ingest = by_name["ingest"]
        # read once (the caller asks several times a second): once ingest has read to the end, its last batch is final
        if not ingested:
            if not (caught_up(ingest, events_end) and idle(ingest)):
                return False
            data = [p for p in ingest.recentProgress if p.numInputRows]
            ingested.append(max(pd.Timestamp(p.timestamp) + pd.Timedelta(milliseconds=p.batchDuration) for p in data))
        bronze_readers = [name for name in ("sampling", "device_activity", "stateful_rules") if name in by_name]
        if not all(after_ingest(by_name[name]) for name in bronze_readers):  # stateful rules: alerts too
            return False
        alerts_end = {settings.alerts_topic: topic_end_offsets(settings.kafka_bootstrap_servers, settings.alerts_topic)}
        if not all(
            caught_up(by_name[name], alerts_end) and idle(by_name[name]) for name in ("anomalies", "alert_lifecycle")
        ):
            return False
        return "notifier" not in by_name or told(by_name["notifier"])

    def told(notifier) -> bool:
        last = notifier.lastProgress
        if last is None:
            return False
        log = Path(settings.table_path("alert_events")) / "_delta_log"
        latest = max(int(p.stem) for p in log.glob("*.json"))
        if read_all.get("version") != latest:
            sources = json.loads(last.json)["sources"]  # offsets as JSON (``SourceProgress.endOffset`` is a repr)
            end = next(s["endOffset"] for s in sources if s["description"].startswith("DeltaSource"))
            # (v, -1) is before version v's first file: the latest version is read once past it or inside it
            if end is None or (end["reservoirVersion"], end["index"]) < (latest, 0):
                return False
            read_all.update(version=latest, batch=last.batchId)
        return last.batchId >= read_all["batch"] + 2

    return done


def produce_events(
    bootstrap: str, topic: str, rows: list[tuple[str, float, float]], extra: list[dict] | None = None
) -> pd.DataFrame:
    """Events as the fleet sends them (JSON on Kafka, stamped at their event time); returns them as a frame.
    ``extra``: more fields of each event (e.g. ``{"voltage": 230}``), one mapping per row."""
    from sensorcep.local import simulator

    frame = events(*rows)
    stamps = pd.to_datetime(frame.event_time_us, unit="us", utc=True)
    values = [
        json.dumps(
            {"device_id": d, "sensor_freq": f, "event_time": t.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), **more}
        ).encode()
        for d, f, t, more in zip(frame.device_id, frame.sensor_freq, stamps, extra or [{}] * len(frame), strict=True)
    ]
    records = pd.DataFrame({"key": [d.encode() for d in frame.device_id], "value": values})
    simulator.produce_records(records.assign(timestamp_ms=(frame.event_time_us // 1000).tolist()), bootstrap, topic)
    return frame


def alerts_on_topic(settings) -> set[tuple]:
    """(alert_id, rule_id, rule_version) of every alert on the settings' alerts topic."""
    found = set()
    for _, _, _, value in topic_records(settings.kafka_bootstrap_servers, settings.alerts_topic):
        alert = json.loads(value)
        found.add((alert["alert_id"], alert["rule_id"], alert["rule_version"]))
    return found
