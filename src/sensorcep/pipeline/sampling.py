"""02 sampling: the first, middle and last event of every sliding event-time window, plus every anomaly.

The rule (:func:`pick_samples`, :func:`window_samples` for many windows at once) is pure pandas; the
streaming part (:class:`WindowSampler`) keeps each event once and applies the rule when the watermark
passes window ends:

* the grouping key is the sampling scope: one key for all devices (``sample_scope = window``) or
  the device id (``sample_scope = device``). Each event enters the processor once, not once per
  overlapping window (a 60 s window sliding by 20 s would otherwise hold every event three times);
* ``handleInputRows`` adds ONE map-state entry per key and micro-batch, the batch's events as an
  Arrow IPC "chunk" keyed by (chunk number, first and last slide bucket it spans), and registers one
  event-time timer, at the first window end holding them. Nothing already held is read or re-written:
  a batch costs the same whether the windows hold 10 or 100,000 events;
* the key's first expiring timer of a batch emits every window ending up to the watermark in one
  pass (one read of the chunks they need, one sort), frees the chunks no open window needs and
  registers the next window end. A window is emitted once and never again: any later event for it is
  older than the watermark, i.e. dropped as too late by Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from sensorcep.io.lake import batch_writer
from sensorcep.observability.reports import state_variable
from sensorcep.pipeline import lateness, queries
from sensorcep.pipeline.ingest import bronze_event_stream
from sensorcep.pipeline.streaming import launch, query_conf, writer_id
from sensorcep.runtime import TRANSFORM_WITH_STATE, require
from sensorcep.settings import Settings

ORDER = ["event_time_us", "device_id", "sensor_freq"]
#: what the processor emits (times as integers; :func:`sample_stream` turns them into timestamps)
PROCESSOR_OUTPUT = (
    "window_start_ms long, window_end_ms long, device_id string, sensor_freq double, "
    "event_time_us long, roles array<string>, is_anomalous int"
)
#: the columns of the Delta table ``sensor_samples``
SAMPLE_COLUMNS = [
    "device_id",
    "sensor_freq",
    "event_time",
    "window_start",
    "window_end",
    "roles",
    "is_anomalous",
    "part_date",
]
CHUNK_SCHEMA = StructType([StructField("events", BinaryType())])
CHUNK_KEY_SCHEMA = StructType(
    [
        StructField("chunk", LongType()),
        StructField("first_bucket_ms", LongType()),
        StructField("last_bucket_ms", LongType()),
    ]
)
_CHUNK_ARROW_SCHEMA = pa.schema(
    [("device_id", pa.string()), ("sensor_freq", pa.float64()), ("event_time_us", pa.int64())]
)


def pick_samples(events: pd.DataFrame | pa.Table, anomaly_threshold: float = 0.0) -> pd.DataFrame:
    """The samples of one window (or one device's window).

    ``events``: columns ``device_id``, ``sensor_freq``, ``event_time_us`` in any order, duplicates
    allowed. Duplicates (same device_id and event_time) count once (the copy with the smallest
    sensor_freq is kept, so the choice does not depend on arrival order). In the order
    (event_time, device_id, sensor_freq) the events at index 0, n // 2 and n - 1 are first, middle
    and last; every event with sensor_freq < ``anomaly_threshold`` is an anomaly. Each chosen event
    appears once with all its roles, in window order.
    """
    ordered = in_window_order(events)
    anomalous = ordered["sensor_freq"].to_numpy() < anomaly_threshold
    chosen, roles = _picked(anomalous, 0, ordered.num_rows)
    return _rows(ordered, anomalous, [chosen], roles)


def window_samples(
    events: pd.DataFrame | pa.Table, ends: Iterable[int], window_ms: int, anomaly_threshold: float = 0.0
) -> pd.DataFrame | None:
    """:func:`pick_samples` of every window ``[end - window_ms, end)`` (ms) in ``ends`` that holds events, with
    ``window_start_ms`` and ``window_end_ms``: one sort for all of them (a window of the sorted events is a slice)."""
    ordered = in_window_order(events)
    times = ordered["event_time_us"].to_numpy()
    anomalous = ordered["sensor_freq"].to_numpy() < anomaly_threshold
    chosen, roles, windows = [], [], []
    for end in ends:
        lo, hi = np.searchsorted(times, [(end - window_ms) * 1000, end * 1000]).tolist()
        if hi > lo:
            these, their_roles = _picked(anomalous, lo, hi)
            chosen.append(these)
            roles += their_roles
            windows.append((end, len(these)))
    if not windows:
        return None
    samples = _rows(ordered, anomalous, chosen, roles)
    samples.insert(0, "window_end_ms", np.repeat([end for end, _ in windows], [n for _, n in windows]))
    samples.insert(0, "window_start_ms", samples["window_end_ms"] - window_ms)
    return samples


def in_window_order(events: pd.DataFrame | pa.Table) -> pa.Table:
    """Events sorted by (event_time, device_id, sensor_freq), each (device_id, event_time) once (smallest freq), as
    one Arrow table. Arrow sorts the strings natively: a window pass's 2.4 million events in about 0.3 s, where pandas'
    sort of its Python strings took 2.1 s (``benchmarks/sampling_pass.py``: a whole pass 0.58 s against 2.77 s;
    decision 0056)."""
    table = events if isinstance(events, pa.Table) else pa.Table.from_pandas(events[ORDER], preserve_index=False)
    ordered = table.select(ORDER).sort_by([(name, "ascending") for name in ORDER]).combine_chunks()
    if ordered.num_rows < 2:
        return ordered
    times = ordered["event_time_us"].to_numpy()
    devices = ordered["device_id"].combine_chunks().dictionary_encode().indices.to_numpy(zero_copy_only=False)
    again = (times[1:] == times[:-1]) & (devices[1:] == devices[:-1])  # the same event as the row before
    return ordered.filter(np.concatenate([[True], ~again])) if again.any() else ordered


def _picked(anomalous: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, list[list[str]]]:
    """The rows of the window ``[lo, hi)`` of the ordered events that are samples, and each one's roles."""
    n = hi - lo
    if n == 0:
        return np.array([], dtype=np.int64), []
    positions = {"first": lo, "middle": lo + n // 2, "last": hi - 1}
    chosen = np.union1d(list(positions.values()), lo + np.flatnonzero(anomalous[lo:hi]))
    roles = []
    for i in chosen.tolist():
        these = [role for role, at in positions.items() if at == i]
        if anomalous[i]:
            these.append("anomaly")
        roles.append(these)
    return chosen, roles


def _rows(ordered: pa.Table, anomalous: np.ndarray, chosen: list[np.ndarray], roles: list[list[str]]) -> pd.DataFrame:
    """The ``chosen`` rows of the ordered events (only they become pandas rows) with their roles."""
    at = np.concatenate(chosen).astype(np.int64)  # a list of one array at least: an empty window gives an empty one
    samples = ordered.take(at).to_pandas()
    samples["roles"] = pd.Series(roles, dtype=object)
    samples["is_anomalous"] = anomalous[at].astype("int32")
    return samples


# ------------------------------------------------------------------------------------ chunks
def encode_chunk(events: pd.DataFrame) -> bytes:
    table = pa.Table.from_pandas(
        events[["device_id", "sensor_freq", "event_time_us"]], schema=_CHUNK_ARROW_SCHEMA, preserve_index=False
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, _CHUNK_ARROW_SCHEMA) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def decode_chunks(chunks: Iterator[bytes]) -> pa.Table:
    tables = [pa.ipc.open_stream(chunk).read_all() for chunk in chunks]
    return pa.concat_tables(tables) if tables else _CHUNK_ARROW_SCHEMA.empty_table()


# ------------------------------------------------------------------------------------ processor
class WindowSampler(StatefulProcessor):
    """Keyed by scope (one key for all devices, or the device): each event enters once, in its micro-batch's chunk.

    State, per key: ``chunks``, a map from (chunk number, first slide bucket, last slide bucket) to the
    events of one micro-batch as an Arrow chunk. Timers: one pending per key, at the end of the next window
    that holds events.
    """

    def __init__(self, window_ms: int, slide_ms: int, anomaly_threshold: float):
        if window_ms % slide_ms:
            raise ValueError(f"the slide ({slide_ms} ms) must divide the window ({window_ms} ms)")
        self.window_ms = window_ms
        self.slide_ms = slide_ms
        self.anomaly_threshold = anomaly_threshold

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.chunks = handle.getMapState("chunks", CHUNK_KEY_SCHEMA, CHUNK_SCHEMA)
        self._closed: set[tuple] = set()  # (key, batch, watermark) whose windows this task has emitted

    def _bucket(self, ms: int) -> int:
        return ms - ms % self.slide_ms

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        frames = list(rows)  # Arrow hands a group over in pieces of maxRecordsPerBatch rows
        events = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        chunk = max((k[0] for k in self.chunks.keys()), default=-1) + 1
        times_ms = events.event_time_us.to_numpy() // 1000
        first, last = self._bucket(int(times_ms.min())), self._bucket(int(times_ms.max()))
        self.chunks.updateValue((chunk, first, last), (encode_chunk(events),))
        self.handle.registerTimer(first + self.slide_ms)  # the first window end holding these events
        return iter([])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        # All of a key's timers up to the watermark expire in this batch, oldest first. The first one does the work
        # for all: it emits every window ending between its own time and the watermark (none of them was emitted
        # before: earlier batches emitted everything up to their watermark, and every timer is later than that),
        # frees the chunks no open window needs, and registers the next window end. The others find nothing to do.
        watermark = timerValues.getCurrentWatermarkInMs()
        this_pass = (tuple(key), timerValues.getCurrentProcessingTimeInMs(), watermark)
        if this_pass in self._closed:
            return
        self._closed.add(this_pass)
        first_end = expiredTimerInfo.getExpiryTimeInMs()
        held = list(self.chunks.keys())
        since, until = first_end - self.window_ms, watermark  # the events of the windows to emit
        needed = [k for k in held if k[1] < until and k[2] + self.slide_ms > since]
        events = decode_chunks(self.chunks.getValue(k)[0] for k in needed)
        samples = window_samples(
            events, range(first_end, watermark + 1, self.slide_ms), self.window_ms, self.anomaly_threshold
        )
        left = []
        for k in held:
            if k[2] + self.window_ms <= watermark:  # the last window holding its last bucket was emitted
                self.chunks.removeKey(k)
            else:
                left.append(k)
        if left:
            after = self._bucket(watermark) + self.slide_ms
            self.handle.registerTimer(min(max(k[1] + self.slide_ms, after) for k in left))
        if samples is not None:
            yield samples

    def close(self) -> None:
        pass


def scoped_events(events: DataFrame, settings: Settings) -> DataFrame:
    """Valid events with a watermark on event_time, each once, with the processor's key (``scope``)."""
    return _scoped(events.withWatermark("event_time", settings.interval("watermark_delay")), settings)


def _scoped(timed: DataFrame, settings: Settings) -> DataFrame:
    scope = F.lit("all") if settings.sample_scope == "window" else F.col("device_id")
    return timed.select(
        scope.alias("scope"),
        "device_id",
        "sensor_freq",
        "event_time",
        F.unix_micros("event_time").alias("event_time_us"),
    )


def sample_stream(events: DataFrame, settings: Settings, *, keep_late: bool = False) -> DataFrame:
    """Parsed valid events -> the rows of ``sensor_samples`` (a window's rows appear once it closes).

    ``keep_late``: the stream also carries the input rows, for :func:`lateness.late_event_writer` to keep the ones
    too late for the windows (see :mod:`sensorcep.pipeline.lateness`).
    """
    require(TRANSFORM_WITH_STATE, events.sparkSession)  # one sentence where the runtime lacks it
    sampler = WindowSampler(settings.window_seconds * 1000, settings.slide_seconds * 1000, settings.anomaly_threshold)
    timed = events.withWatermark("event_time", settings.interval("watermark_delay"))
    sampled = (
        _scoped(timed, settings)
        .groupBy("scope")
        .transformWithStateInPandas(
            statefulProcessor=sampler,
            outputStructType=PROCESSOR_OUTPUT,
            outputMode="Append",
            timeMode="EventTime",
        )
    )
    rows = to_sample_rows(sampled)
    return lateness.with_input(rows, timed) if keep_late else rows


def to_sample_rows(processor_output: DataFrame) -> DataFrame:
    """Processor output (integer times) -> the ``sensor_samples`` columns."""
    event_time = F.timestamp_micros("event_time_us")
    return processor_output.select(
        "device_id",
        "sensor_freq",
        event_time.alias("event_time"),
        F.timestamp_millis("window_start_ms").alias("window_start"),
        F.timestamp_millis("window_end_ms").alias("window_end"),
        "roles",
        "is_anomalous",
        F.to_date(event_time).alias("part_date"),
    )


QUERY = "sampling"


@queries.declare(
    QUERY,
    task="sampling_state",
    writes="sensor_samples, late_events",
    trigger_setting="records_trigger",
    pool="sampling",
    reads_bronze=True,
    fixed_settings="window_duration, slide_duration, watermark_delay, sample_scope",
    rewritten_from_start="sensor_samples",
)
def start_sampling(spark, settings: Settings, *, wait: bool = True, events: DataFrame | None = None):
    """Run (availableNow) or start the sampling query: events -> ``sensor_samples`` (idempotent per batch).

    ``events`` defaults to ``bronze_events`` as a Delta stream (parsed and deduplicated once, by 01); tests pass a
    controlled stream.
    """

    events = events if events is not None else bronze_event_stream(spark, settings)
    samples = batch_writer(settings, "sensor_samples", lambda: writer_id(settings, QUERY), ["part_date"])
    writer = lateness.late_event_writer(settings, QUERY, samples)
    stream = sample_stream(events, settings, keep_late=True)
    with query_conf(spark, state_partitions(spark, settings)):
        return launch(stream, settings, start_sampling.query, wait=wait, foreach_batch=writer)


def state_partitions(spark, settings: Settings) -> dict[str, str]:
    """The sampling state's partitions: one for ``sample_scope = window``, whose only key lives in one partition
    (every other partition would cost a task, a state store and a commit per batch for nothing); the session's
    count for ``device``. Fixed by the query's first start (the checkpoint keeps it)."""
    if settings.sample_scope == "window":
        return {"spark.sql.shuffle.partitions": "1"}
    return {}


def window_summary(samples: DataFrame) -> DataFrame:
    """``sensor_samples`` -> one row per emitted window: samples and anomalies in it."""
    return (
        samples.groupBy("window_start", "window_end")
        .agg(F.count("*").alias("samples"), F.sum("is_anomalous").alias("anomalies"))
        .orderBy("window_start")
    )


# ------------------------------------------------------------------------------ its state, read back
def state_chunks(spark, settings: Settings) -> pd.DataFrame:
    """What the sampling processor holds: one row per scope key and chunk (the events one micro-batch brought),
    with the slide buckets it spans and its Arrow bytes. A chunk is freed once the last window holding its last
    bucket has closed."""

    chunks = state_variable(spark, settings, "sampling", "chunks")
    return (
        chunks.select(
            F.col("key.scope").alias("scope"),
            F.col("user_map_key.chunk").alias("chunk"),
            F.timestamp_millis("user_map_key.first_bucket_ms").alias("first_bucket"),
            F.timestamp_millis("user_map_key.last_bucket_ms").alias("last_bucket"),
            F.length("user_map_value.events").alias("bytes"),
        )
        .orderBy("scope", "chunk")
        .toPandas()
    )
