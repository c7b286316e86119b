"""Controlled micro-batches for streaming tests: one Parquet file per batch, read one file per trigger."""
from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
from deltalake import DeltaTable

T0 = datetime(2026, 1, 5, 0, 0, tzinfo=timezone.utc)  # a multiple of every window / slide used
T0_US = int(T0.timestamp() * 1_000_000)
EVENT_SCHEMA = "device_id string, sensor_freq double, event_time timestamp"


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
        out[["device_id", "sensor_freq", "event_time"]].to_parquet(path, index=False, coerce_timestamps="us")
        stamp = 1_700_000_000 + i
        os.utime(path, (stamp, stamp))


def batch_stream(spark, folder: Path):
    return spark.readStream.schema(EVENT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(folder))


def sample_rows(settings) -> list[tuple]:
    """``sensor_samples`` as comparable tuples, in the oracle's integer time units."""
    table = DeltaTable(settings.table_path("sensor_samples")).to_pandas()
    us = lambda t: pd.Timestamp(t).value // 1000  # noqa: E731 - naive or UTC, both mean UTC here
    return sorted(
        (us(r.window_start) // 1000, us(r.window_end) // 1000, r.device_id, float(r.sensor_freq), us(r.event_time),
         tuple(r.roles), int(r.is_anomalous))
        for r in table.itertuples(index=False)
    )


def oracle_rows(frame: pd.DataFrame) -> list[tuple]:
    return sorted(
        (int(r.window_start_ms), int(r.window_end_ms), r.device_id, float(r.sensor_freq), int(r.event_time_us),
         tuple(r.roles), int(r.is_anomalous))
        for r in frame.itertuples(index=False)
    )


def topic_records(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    """Every record of a one-partition topic: (offset, key, value)."""
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "receive.message.max.bytes": 1_000_000_000})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        records: dict[int, tuple] = {}
        while len(records) < high - low:
            for message in consumer.consume(1_000, 5.0):
                if message.error() is None:
                    records[message.offset()] = (message.offset(), message.key(), message.value())
        return [records[o] for o in sorted(records)]
    finally:
        consumer.close()
