"""Progress capture for every streaming query: a listener that appends to Delta ``stream_progress``.

The listener never blocks a query: progress events are buffered in memory and flushed to Delta in
batches (every ``FLUSH_EVERY`` events) and whenever a query terminates; :func:`flush_progress` lets
a caller wait until a stopped query's last events are on disk.
"""
from __future__ import annotations

import json
import logging
import threading
from datetime import datetime

import pyarrow as pa
from pyspark.sql.streaming import StreamingQueryListener

from .settings import Settings

log = logging.getLogger(__name__)
FLUSH_EVERY = 50

PROGRESS_SCHEMA = pa.schema([
    ("query_name", pa.string()), ("query_id", pa.string()), ("run_id", pa.string()),
    ("batch_id", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
    ("num_input_rows", pa.int64()), ("input_rows_per_second", pa.float64()),
    ("processed_rows_per_second", pa.float64()), ("batch_duration_ms", pa.int64()),
    ("trigger_execution_ms", pa.int64()), ("add_batch_ms", pa.int64()), ("latest_offset_ms", pa.int64()),
    ("watermark", pa.timestamp("us", tz="UTC")), ("event_time_max", pa.timestamp("us", tz="UTC")),
    ("state_rows_total", pa.int64()), ("state_memory_bytes", pa.int64()), ("state_commit_ms", pa.int64()),
    ("rows_dropped_by_watermark", pa.int64()), ("source_end_offset", pa.string()),
    ("progress_json", pa.string()), ("part_date", pa.date32()),
])


def _ts(text: str | None):
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def progress_row(progress: dict) -> dict:
    """One StreamingQueryProgress (as a dict) -> one ``stream_progress`` row."""
    ops = progress.get("stateOperators") or []
    durations = progress.get("durationMs") or {}
    event_time = progress.get("eventTime") or {}
    sources = progress.get("sources") or [{}]
    ts = _ts(progress.get("timestamp"))
    return {
        "query_name": progress.get("name"), "query_id": progress.get("id"), "run_id": progress.get("runId"),
        "batch_id": progress.get("batchId"), "timestamp": ts,
        "num_input_rows": progress.get("numInputRows"),
        "input_rows_per_second": _finite(progress.get("inputRowsPerSecond")),
        "processed_rows_per_second": _finite(progress.get("processedRowsPerSecond")),
        "batch_duration_ms": progress.get("batchDuration"),
        "trigger_execution_ms": durations.get("triggerExecution"),
        "add_batch_ms": durations.get("addBatch"), "latest_offset_ms": durations.get("latestOffset"),
        "watermark": _ts(event_time.get("watermark")), "event_time_max": _ts(event_time.get("max")),
        "state_rows_total": sum(o.get("numRowsTotal", 0) for o in ops) if ops else None,
        "state_memory_bytes": sum(o.get("memoryUsedBytes", 0) for o in ops) if ops else None,
        "state_commit_ms": sum(o.get("commitTimeMs", 0) for o in ops) if ops else None,
        "rows_dropped_by_watermark": sum(o.get("numRowsDroppedByWatermark", 0) for o in ops) if ops else None,
        "source_end_offset": json.dumps(sources[0].get("endOffset")) if sources else None,
        "progress_json": json.dumps(progress),
        "part_date": ts.date() if ts else None,
    }


def _finite(value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if value == value and abs(value) != float("inf") else None


class DeltaProgressListener(StreamingQueryListener):
    def __init__(self, settings: Settings):
        self.path = settings.table_path("stream_progress")
        self._buffer: list[dict] = []
        self._lock = threading.Lock()
        self._terminated: dict[str, threading.Event] = {}

    def onQueryStarted(self, event) -> None:
        self._terminated.setdefault(str(event.id), threading.Event())

    def onQueryProgress(self, event) -> None:
        with self._lock:
            self._buffer.append(progress_row(json.loads(event.progress.json)))
            full = len(self._buffer) >= FLUSH_EVERY
        if full:
            self.flush()

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        self.flush()
        self._terminated.setdefault(str(event.id), threading.Event()).set()

    def flush(self) -> int:
        with self._lock:
            rows, self._buffer = self._buffer, []
        if not rows:
            return 0
        try:
            _append_progress(self.path, rows)
        except Exception:  # a monitoring failure must never take a query down
            log.exception("could not write %d progress rows to %s", len(rows), self.path)
            with self._lock:
                self._buffer = rows + self._buffer
            return 0
        return len(rows)

    def wait_terminated(self, query_id: str, timeout: float = 30.0) -> bool:
        return self._terminated.setdefault(str(query_id), threading.Event()).wait(timeout)


def _append_progress(path: str, rows: list[dict]) -> None:
    from .runtime import is_databricks

    table = pa.Table.from_pylist(rows, schema=PROGRESS_SCHEMA)
    if is_databricks():
        from .runtime import get_spark

        get_spark().createDataFrame(table.to_pandas()).write.format("delta").mode("append") \
            .option("mergeSchema", "true").partitionBy("part_date").save(path)
        return
    from deltalake import write_deltalake

    write_deltalake(path, table, mode="append", partition_by=["part_date"], schema_mode="merge")


_listeners: dict[str, DeltaProgressListener] = {}


def ensure_progress_listener(spark, settings: Settings) -> DeltaProgressListener:
    """Register (once per Spark application and progress table) the Delta progress listener."""
    key = f"{spark.sparkContext.applicationId}:{settings.table_path('stream_progress')}"
    if key not in _listeners:
        listener = DeltaProgressListener(settings)
        spark.streams.addListener(listener)
        _listeners[key] = listener
    return _listeners[key]


def flush_progress(spark, settings: Settings, query=None, timeout: float = 30.0) -> None:
    """Make sure every progress event of a stopped ``query`` (or all so far) is in Delta."""
    listener = ensure_progress_listener(spark, settings)
    if query is not None:
        listener.wait_terminated(str(query.id), timeout)
    listener.flush()


def progress_frame(query, columns=("batch_id", "num_input_rows", "batch_duration_ms", "watermark",
                                   "state_rows_total", "rows_dropped_by_watermark")):
    """A query's recent progress as a small pandas table (one row per micro-batch)."""
    import pandas as pd

    rows = [progress_row(json.loads(p.json)) for p in query.recentProgress]
    return pd.DataFrame(rows, columns=list(columns)) if rows else pd.DataFrame(columns=list(columns))
