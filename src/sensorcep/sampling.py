"""02 sampling: the first, middle and last event of every sliding event-time window, plus every anomaly.

The rule (:func:`pick_samples`) is a pure pandas function; the streaming part
(:class:`WindowSampler`) keeps each event once, in its slide bucket, and calls the rule once per
window, when the watermark passes the window's end:

* the grouping key is the sampling scope: one key for all devices (``sample_scope = window``) or
  the device id (``sample_scope = device``). Each event enters the processor once, not once per
  overlapping window (a 60 s window sliding by 20 s would otherwise hold every event three times);
* ``handleInputRows`` splits the batch by slide bucket (``event_time - event_time % slide``) and
  adds ONE map-state entry per bucket and micro-batch, the bucket's events as an Arrow IPC "chunk",
  then registers an event-time timer at the end of every window holding that bucket (registering the
  same time twice is a no-op). Nothing already held is read or re-written: a batch costs the same
  whether the windows hold 10 or 100,000 events;
* a window's timer reads the chunks of its ``window / slide`` buckets, picks the samples and frees
  the oldest bucket, which no later window contains. A window is emitted once and never again: its
  timer is gone, and any later event for it is older than the watermark, i.e. dropped as too late by
  Spark.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from .settings import Settings

ORDER = ["event_time_us", "device_id", "sensor_freq"]
#: what the processor emits (times as integers; :func:`sample_stream` turns them into timestamps)
PROCESSOR_OUTPUT = (
    "window_start_ms long, window_end_ms long, device_id string, sensor_freq double, "
    "event_time_us long, roles array<string>, is_anomalous int"
)
#: the columns of the Delta table ``sensor_samples``
SAMPLE_COLUMNS = ["device_id", "sensor_freq", "event_time", "window_start", "window_end", "roles", "is_anomalous",
                  "part_date"]
CHUNK_SCHEMA = StructType([StructField("events", BinaryType())])
BUCKET_KEY_SCHEMA = StructType([StructField("bucket_start_ms", LongType()), StructField("chunk", LongType())])
NEXT_CHUNK_SCHEMA = StructType([StructField("chunk", LongType())])
_CHUNK_ARROW_SCHEMA = pa.schema([("device_id", pa.string()), ("sensor_freq", pa.float64()),
                                 ("event_time_us", pa.int64())])


def pick_samples(events: pd.DataFrame, anomaly_threshold: float = 0.0) -> pd.DataFrame:
    """The samples of one window (or one device's window).

    ``events``: columns ``device_id``, ``sensor_freq``, ``event_time_us`` in any order, duplicates
    allowed. Duplicates (same device_id and event_time) count once (the copy with the smallest
    sensor_freq is kept, so the choice does not depend on arrival order). In the order
    (event_time, device_id, sensor_freq) the events at index 0, n // 2 and n - 1 are first, middle
    and last; every event with sensor_freq < ``anomaly_threshold`` is an anomaly. Each chosen event
    appears once with all its roles, in window order.
    """
    ordered = (
        events[ORDER].sort_values(ORDER, kind="mergesort")
        .drop_duplicates(["device_id", "event_time_us"], keep="first")
        .reset_index(drop=True)
    )
    n = len(ordered)
    if n == 0:
        return ordered.assign(roles=pd.Series([], dtype=object), is_anomalous=pd.Series([], dtype="int32"))
    anomalous = (ordered.sensor_freq.to_numpy() < anomaly_threshold)
    chosen = np.union1d([0, n // 2, n - 1], np.flatnonzero(anomalous))
    positions = {"first": 0, "middle": n // 2, "last": n - 1}
    roles = []
    for i in chosen.tolist():
        these = [role for role, at in positions.items() if at == i]
        if anomalous[i]:
            these.append("anomaly")
        roles.append(these)
    samples = ordered.iloc[chosen].reset_index(drop=True)
    samples["roles"] = roles
    samples["is_anomalous"] = anomalous[chosen].astype("int32")
    return samples


# ------------------------------------------------------------------------------------ chunks
def encode_chunk(events: pd.DataFrame) -> bytes:
    table = pa.Table.from_pandas(events[["device_id", "sensor_freq", "event_time_us"]], schema=_CHUNK_ARROW_SCHEMA,
                                 preserve_index=False)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, _CHUNK_ARROW_SCHEMA) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def decode_chunks(chunks: Iterator[bytes]) -> pd.DataFrame:
    tables = [pa.ipc.open_stream(chunk).read_all() for chunk in chunks]
    if not tables:
        return _CHUNK_ARROW_SCHEMA.empty_table().to_pandas()
    return pa.concat_tables(tables).to_pandas()


# ------------------------------------------------------------------------------------ processor
class WindowSampler(StatefulProcessor):
    """Keyed by scope (one key for all devices, or the device): each event enters once, into its slide bucket.

    State, per key: ``buckets``, a map from (bucket start ms, chunk number) to one Arrow chunk, and
    ``next_chunk``, the number the next chunk gets. Timers: one per window end that holds events.
    """

    def __init__(self, window_ms: int, slide_ms: int, anomaly_threshold: float):
        if window_ms % slide_ms:
            raise ValueError(f"the slide ({slide_ms} ms) must divide the window ({window_ms} ms)")
        self.window_ms = window_ms
        self.slide_ms = slide_ms
        self.anomaly_threshold = anomaly_threshold

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.buckets = handle.getMapState("buckets", BUCKET_KEY_SCHEMA, CHUNK_SCHEMA)
        self.next_chunk = handle.getValueState("next_chunk", NEXT_CHUNK_SCHEMA)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        frames = list(rows)  # Arrow hands a group over in pieces of maxRecordsPerBatch rows
        events = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        chunk = self.next_chunk.get()[0] if self.next_chunk.exists() else 0
        event_ms = events.event_time_us.to_numpy() // 1000
        bucket_of = event_ms - event_ms % self.slide_ms
        buckets, ends = np.unique(bucket_of).tolist(), set()
        for bucket in buckets:
            part = events if len(buckets) == 1 else events[bucket_of == bucket]
            self.buckets.updateValue((bucket, chunk), (encode_chunk(part),))
            ends.update(range(bucket + self.slide_ms, bucket + self.window_ms + 1, self.slide_ms))
        for end in sorted(ends):  # every window holding the bucket; registering a time twice is a no-op
            self.handle.registerTimer(end)
        self.next_chunk.update((chunk + 1,))
        return iter([])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        # Timers expire in time order, so the windows of a bucket close oldest first: once the window starting at
        # bucket b is emitted, no later window needs b.
        end = expiredTimerInfo.getExpiryTimeInMs()
        start = end - self.window_ms
        held = sorted(self.buckets.keys())
        inside = [k for k in held if start <= k[0] < end]
        events = decode_chunks(self.buckets.getValue(k)[0] for k in inside)
        done = [k for k in held if k[0] < start + self.slide_ms]
        for k in done:
            self.buckets.removeKey(k)
        if len(done) == len(held):
            self.next_chunk.clear()  # nothing held: the key leaves no state behind
        samples = pick_samples(events, self.anomaly_threshold)
        if samples.empty:
            return
        samples.insert(0, "window_end_ms", end)
        samples.insert(0, "window_start_ms", start)
        yield samples[["window_start_ms", "window_end_ms", "device_id", "sensor_freq", "event_time_us", "roles",
                       "is_anomalous"]]

    def close(self) -> None:
        pass


def scoped_events(events: DataFrame, settings: Settings) -> DataFrame:
    """Valid events with a watermark on event_time, each once, with the processor's key (``scope``)."""
    scope = F.lit("all") if settings.sample_scope == "window" else F.col("device_id")
    return (
        events.withWatermark("event_time", settings.watermark_delay)
        .select(scope.alias("scope"), "device_id", "sensor_freq", "event_time",
                F.unix_micros("event_time").alias("event_time_us"))
    )


def sample_stream(events: DataFrame, settings: Settings) -> DataFrame:
    """Parsed valid events -> the rows of ``sensor_samples`` (a window's rows appear once it closes)."""
    sampler = WindowSampler(settings.window_seconds * 1000, settings.slide_seconds * 1000, settings.anomaly_threshold)
    sampled = scoped_events(events, settings).groupBy("scope").transformWithStateInPandas(
        statefulProcessor=sampler, outputStructType=PROCESSOR_OUTPUT, outputMode="Append", timeMode="EventTime",
    )
    return to_sample_rows(sampled)


def to_sample_rows(processor_output: DataFrame) -> DataFrame:
    """Processor output (integer times) -> the ``sensor_samples`` columns."""
    event_time = F.timestamp_micros("event_time_us")
    return processor_output.select(
        "device_id", "sensor_freq", event_time.alias("event_time"),
        F.timestamp_millis("window_start_ms").alias("window_start"),
        F.timestamp_millis("window_end_ms").alias("window_end"),
        "roles", "is_anomalous", F.to_date(event_time).alias("part_date"),
    )


QUERY = "sampling"


def start_sampling(spark, settings: Settings, *, wait: bool = True, events: DataFrame | None = None):
    """Run (availableNow) or start the sampling query: events -> ``sensor_samples`` (idempotent per batch).

    ``events`` defaults to ``bronze_events`` as a Delta stream (parsed and deduplicated once, by 01); tests pass a
    controlled stream.
    """
    from . import delta
    from .ingest import bronze_event_stream
    from .streaming import run_available_now, start_query, writer_id

    events = events if events is not None else bronze_event_stream(spark, settings)
    writer = delta.batch_writer(settings.table_path("sensor_samples"), lambda: writer_id(settings, QUERY), ["part_date"])
    runner = run_available_now if wait else start_query
    return runner(sample_stream(events, settings), settings, QUERY, foreach_batch=writer, pool="sampling")


def window_summary(samples: DataFrame) -> DataFrame:
    """``sensor_samples`` -> one row per emitted window: samples and anomalies in it."""
    return (samples.groupBy("window_start", "window_end")
            .agg(F.count("*").alias("samples"), F.sum("is_anomalous").alias("anomalies"))
            .orderBy("window_start"))
