"""Progress capture for every streaming query: a listener that appends to Delta ``stream_progress``.

The listener never blocks a query: progress events are buffered in memory and flushed to Delta in
batches (every ``FLUSH_EVERY`` events) and whenever a query terminates; :func:`flush_progress` lets
a caller wait until a stopped query's last events are on disk.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import datetime

import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming import StreamingQueryListener

from sensorcep.io import tables
from sensorcep.io.tables import Table
from sensorcep.settings import Settings

log = logging.getLogger(__name__)
FLUSH_EVERY = 50
#: failed writes of one batch of progress rows before the listener gives them up (and says how many)
WRITE_ATTEMPTS = 3

PROGRESS_SCHEMA = pa.schema(
    [
        ("query_name", pa.string()),
        ("query_id", pa.string()),
        ("run_id", pa.string()),
        ("batch_id", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("num_input_rows", pa.int64()),
        ("input_rows_per_second", pa.float64()),
        ("processed_rows_per_second", pa.float64()),
        ("batch_duration_ms", pa.int64()),
        ("trigger_execution_ms", pa.int64()),
        ("add_batch_ms", pa.int64()),
        ("latest_offset_ms", pa.int64()),
        ("watermark", pa.timestamp("us", tz="UTC")),
        ("event_time_max", pa.timestamp("us", tz="UTC")),
        ("state_rows_total", pa.int64()),
        ("state_memory_bytes", pa.int64()),
        ("state_commit_ms", pa.int64()),
        ("rows_dropped_by_watermark", pa.int64()),
        ("source_end_offset", pa.string()),
        ("kafka_records_skipped", pa.int64()),
        ("progress_json", pa.string()),
        ("part_date", pa.date32()),
    ]
)


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
        "query_name": progress.get("name"),
        "query_id": progress.get("id"),
        "run_id": progress.get("runId"),
        "batch_id": progress.get("batchId"),
        "timestamp": ts,
        "num_input_rows": progress.get("numInputRows"),
        "input_rows_per_second": _finite(progress.get("inputRowsPerSecond")),
        "processed_rows_per_second": _finite(progress.get("processedRowsPerSecond")),
        "batch_duration_ms": progress.get("batchDuration"),
        "trigger_execution_ms": durations.get("triggerExecution"),
        "add_batch_ms": durations.get("addBatch"),
        "latest_offset_ms": durations.get("latestOffset"),
        "watermark": _ts(event_time.get("watermark")),
        "event_time_max": _ts(event_time.get("max")),
        "state_rows_total": sum(o.get("numRowsTotal", 0) for o in ops) if ops else None,
        "state_memory_bytes": sum(o.get("memoryUsedBytes", 0) for o in ops) if ops else None,
        "state_commit_ms": sum(o.get("commitTimeMs", 0) for o in ops) if ops else None,
        "rows_dropped_by_watermark": sum(o.get("numRowsDroppedByWatermark", 0) for o in ops) if ops else None,
        "source_end_offset": json.dumps(sources[0].get("endOffset")) if sources else None,
        "kafka_records_skipped": kafka_records_skipped(progress),
        "progress_json": json.dumps(progress),
        "part_date": ts.date() if ts else None,
    }


def _kafka_offsets(value) -> dict | None:
    value = json.loads(value) if isinstance(value, str) and value.startswith("{") else value
    return value if isinstance(value, dict) else None


def kafka_records_skipped(progress: dict) -> int | None:
    """Kafka records inside a batch's offset range that it did not read: deleted before it got to them (only
    possible with ``accept_data_loss``). None when no Kafka source has a known start (a query's first batch)."""
    skipped = None
    for source in progress.get("sources") or []:
        start, end = _kafka_offsets(source.get("startOffset")), _kafka_offsets(source.get("endOffset"))
        if not (source.get("description", "").startswith("KafkaV2") and start and end):
            continue
        span = sum(
            int(o) - int(start[topic][p])
            for topic, parts in end.items()
            for p, o in parts.items()
            if p in start.get(topic, {})
        )
        skipped = (skipped or 0) + max(0, span - int(source.get("numInputRows") or 0))
    return skipped


def _finite(value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if value == value and abs(value) != float("inf") else None


class DeltaProgressListener(StreamingQueryListener):
    """One per session (:func:`ensure_progress_listener`). Each project query is routed (by name, before it
    starts) to the ``stream_progress`` table of the settings that started it; other queries are ignored.

    Callbacks run on Spark's listener bus thread and only buffer: a Spark job (the Delta write) started from
    that thread would wait for the very bus it blocks. A background thread writes the buffers every
    ``FLUSH_EVERY`` events and when a query terminates; :func:`flush_progress` writes from the caller's thread.
    """

    def __init__(self, spark):
        self._spark = spark  # the session whose queries it hears and whose Delta writer it uses
        self._routes: dict[str, Table] = {}  # query name -> its stream_progress table
        self._buffers: dict[Table, list[dict]] = {}  # table -> rows not yet written
        self._lock = threading.Lock()
        self._terminated: dict[str, threading.Event] = {}
        self._wake = threading.Event()
        self._writing = threading.Lock()  # one flush at a time: the first write creates the table
        self._failures: dict[Table, int] = {}  # table -> consecutive failed writes of its buffered rows
        self.rows_lost = 0  # rows given up after WRITE_ATTEMPTS failed writes
        threading.Thread(target=self._flush_when_woken, name="stream-progress-writer", daemon=True).start()

    def _flush_when_woken(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self.flush()

    def route(self, query_name: str, table: Table) -> None:
        with self._lock:
            self._routes[query_name] = table

    def onQueryStarted(self, event) -> None:
        self._terminated.setdefault(str(event.id), threading.Event())

    def onQueryProgress(self, event) -> None:
        progress = json.loads(event.progress.json)
        with self._lock:
            table = self._routes.get(progress.get("name"))
            if table is None:
                return
            buffer = self._buffers.setdefault(table, [])
            buffer.append(progress_row(progress))
            full = len(buffer) >= FLUSH_EVERY
        if full:
            self._wake.set()

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        self._terminated.setdefault(str(event.id), threading.Event()).set()  # its last progress is buffered by now
        self._wake.set()

    def flush(self) -> int:
        """Write every buffered row; rows that fail to write stay buffered for the next flush (up to
        ``WRITE_ATTEMPTS`` failures, then they are given up and counted in ``rows_lost``)."""
        from sensorcep.runtime import session_alive

        with self._writing:
            if not session_alive(self._spark):  # the application is shutting down
                return 0
            return self._write_buffers()

    def _write_buffers(self) -> int:
        with self._lock:
            buffers, self._buffers = self._buffers, {}
        written = 0
        for table, rows in buffers.items():
            if not rows:
                continue
            try:
                _append_progress(self._spark, table, rows)
                written += len(rows)
                self._failures.pop(table, None)
            except Exception as exc:  # a monitoring failure must never take a query down
                self._failed(table, rows, exc)
        return written

    def _failed(self, table: Table, rows: list[dict], exc: Exception) -> None:
        """Keep the rows for the next flush, up to ``WRITE_ATTEMPTS`` failures in a row; then give them up and
        say how many, so a table that cannot be written costs a bounded buffer, not a growing one."""
        failures = self._failures[table] = self._failures.get(table, 0) + 1
        if failures < WRITE_ATTEMPTS:
            log.warning(
                "could not write %d progress rows to %s (attempt %d of %d): %s",
                len(rows),
                table,
                failures,
                WRITE_ATTEMPTS,
                exc,
            )
            with self._lock:
                self._buffers[table] = rows + self._buffers.get(table, [])
            return
        self._failures.pop(table)
        self.rows_lost += len(rows)
        log.error(
            "gave up %d progress rows for %s after %d failed writes (%d lost so far): %s",
            len(rows),
            table,
            WRITE_ATTEMPTS,
            self.rows_lost,
            exc,
        )

    def wait_terminated(self, query_id: str, timeout: float = 30.0) -> bool:
        return self._terminated.setdefault(str(query_id), threading.Event()).wait(timeout)


def _append_progress(spark, table: Table, rows: list[dict]) -> None:
    from sensorcep.io import delta

    frame = pa.Table.from_pylist(rows, schema=PROGRESS_SCHEMA)
    delta.write_table(spark.createDataFrame(frame), table, mode="append", partition_by=["part_date"])


_listeners: dict[str, DeltaProgressListener] = {}


def ensure_progress_listener(spark, settings: Settings, query: str | None = None) -> DeltaProgressListener:
    """The application's progress listener (registered on first use); with ``query``, route that query's
    progress to ``stream_progress`` under ``settings``. :func:`streaming.start_query` calls this for
    every query of the project, before the query starts."""
    from sensorcep.runtime import session_key

    key = session_key(spark)
    if key not in _listeners:
        listener = DeltaProgressListener(spark)
        spark.streams.addListener(listener)
        _listeners[key] = listener
    if query is not None:
        _listeners[key].route(settings.query_name(query), tables.table(settings, "stream_progress"))
    return _listeners[key]


def flush_progress(spark, settings: Settings, query=None, timeout: float = 30.0) -> None:
    """Make sure every progress event of a stopped ``query`` (or all so far) is in Delta."""
    listener = ensure_progress_listener(spark, settings)
    if query is not None:
        listener.wait_terminated(str(query.id), timeout)
    listener.flush()


def stop_progress_listener(spark) -> None:
    """Flush the session's progress listener and unregister it. Call it before a script's end under Spark Connect:
    PySpark's client-side listener thread is not a daemon, so a process with a listener never exits."""
    from sensorcep.runtime import session_key

    listener = _listeners.pop(session_key(spark), None)
    if listener is not None:
        spark.streams.removeListener(listener)  # under Connect: returns once the events sent so far are handled
        listener.flush()


def stop_session(spark) -> None:
    """Stop the session after writing every buffered progress row: the end of a script or a local job. Stopping
    the session first leaves the listener's last rows with no session to write them."""
    stop_progress_listener(spark)
    spark.stop()


def progress_frame(
    query,
    columns=(
        "batch_id",
        "num_input_rows",
        "batch_duration_ms",
        "watermark",
        "state_rows_total",
        "rows_dropped_by_watermark",
    ),
):
    """A query's recent progress as a small pandas table (one row per micro-batch)."""

    rows = [progress_row(json.loads(p.json)) for p in query.recentProgress]
    return pd.DataFrame(rows, columns=list(columns)) if rows else pd.DataFrame(columns=list(columns))


# ------------------------------------------------------------------------------ reading it back
def read_progress(spark, settings: Settings):
    """Delta ``stream_progress`` as a pandas frame (empty, with the columns, when nothing was recorded yet)."""

    from sensorcep.io import delta

    progress = tables.table(settings, "stream_progress")
    if not delta.table_exists(progress, spark):
        return PROGRESS_SCHEMA.empty_table().to_pandas()
    frame = delta.read_table(spark, progress).toPandas()
    return frame.sort_values(["query_name", "timestamp", "batch_id"]).reset_index(drop=True) if len(frame) else frame


def trigger_intervals(settings: Settings) -> dict[str, int]:
    """Each project query's trigger interval in ms (0 = as fast as possible), for the health rules."""
    from sensorcep.observability.health import trigger_interval_ms

    queries = {
        "ingest": settings.trigger,
        "sampling": settings.trigger,
        "device_activity": settings.trigger,
        "alerts": settings.alerts_trigger,
        "anomalies": settings.trigger,
        "escalations": settings.trigger,
    }
    return {settings.query_name(q): trigger_interval_ms(t) for q, t in queries.items()}


def progress_summary(progress: pd.DataFrame) -> pd.DataFrame:
    """``stream_progress`` -> one row per query: runs, batches, input rows and the p95 batch duration."""
    return progress.groupby("query_name").agg(
        runs=("run_id", "nunique"),
        batches=("batch_id", "count"),
        rows=("num_input_rows", "sum"),
        p95_batch_ms=("batch_duration_ms", lambda durations: durations.quantile(0.95)),
    )


def save_progress_plots(progress: pd.DataFrame, intervals: dict[str, int], settings: Settings) -> list[str]:
    """One progress figure per query (rates, batch time vs trigger, state, watermark lag), saved as PNG."""
    from sensorcep.observability.plots import plot_query_progress

    return [
        save_figure(plot_query_progress(progress, query, intervals.get(query, 0)), f"progress_{query}", settings)
        for query in sorted(progress.query_name.unique())
    ]


def save_figure(fig, name: str, settings: Settings) -> str:
    """Save a plot as PNG: next to the executed notebook in the local runner's run folder (``SENSORCEP_RUN_DIR``),
    else under ``<base_path>/plots`` (on Databricks the deployment's volume: the bundle's own folder is replaced at
    every deploy and is not the place for data)."""
    import os

    folder = os.environ.get("SENSORCEP_RUN_DIR") or f"{settings.base_path.rstrip('/')}/plots"
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.png")
    fig.savefig(path, dpi=90, bbox_inches="tight")
    return path


# ------------------------------------------------------------------------------ operator state
def state_metadata(spark, settings: Settings, query: str):
    """The stateful operators of a query's checkpoint (Spark's ``state-metadata`` source)."""
    return spark.read.format("state-metadata").load(settings.checkpoint_path(query))


def state_variable(spark, settings: Settings, query: str, state_var: str, operator_id: int = 0):
    """The rows of one transformWithState state variable (``statestore`` source; list elements one per row)."""
    return (
        spark.read.format("statestore")
        .option("operatorId", operator_id)
        .option("stateVarName", state_var)
        .load(settings.checkpoint_path(query))
    )


def sampling_chunks(spark, settings: Settings) -> pd.DataFrame:
    """What the sampling processor holds: one row per scope key and chunk (the events one micro-batch brought),
    with the slide buckets it spans and its Arrow bytes. A chunk is freed once the last window holding its last
    bucket has closed."""
    from pyspark.sql import functions as F

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


# ------------------------------------------------------------------------------ live view
def offsets_behind(progress: dict) -> int | None:
    """Records the query's Kafka sources were behind the topics' ends at its last batch (None: no Kafka source)."""
    behind = [
        int(float(m["maxOffsetsBehindLatest"]))
        for source in progress.get("sources") or []
        if "maxOffsetsBehindLatest" in (m := source.get("metrics") or {})
    ]
    return sum(behind) if behind else None


def progress_line(query) -> str:
    """One line on a running query: batch, input and processing rate, batch time, Kafka records behind."""
    if not query.isActive:
        error = query.exception()
        return f"{query.name:<16} stopped" + (f": {str(error).splitlines()[0]}" if error else "")
    last = query.lastProgress
    if last is None:
        return f"{query.name:<16} {query.status.get('message', '')}"
    progress = json.loads(last.json)
    row = progress_row(progress)
    behind = offsets_behind(progress)
    return (
        f"{query.name:<16} batch {row['batch_id']:>5}  in {row['input_rows_per_second'] or 0:>9,.0f}/s  "
        f"done {row['processed_rows_per_second'] or 0:>9,.0f}/s  batch {row['batch_duration_ms'] or 0:>7,} ms  "
        f"behind {'-' if behind is None else f'{behind:,}'}"
    )


LIVE_COLUMNS = ["query", "status", "batch", "input rows/s", "processed rows/s", "batch ms", "state rows", "watermark"]


def live_table(queries):
    """One row per query from its last progress: rates, batch time, state rows, watermark."""

    rows = []
    for query in queries:
        last = query.lastProgress
        row = progress_row(json.loads(last.json)) if last is not None else {}
        status = query.status if query.isActive else {"message": "stopped"}
        rows.append(
            [
                query.name,
                status.get("message", ""),
                row.get("batch_id"),
                round(row["input_rows_per_second"] or 0) if row else None,
                round(row["processed_rows_per_second"] or 0) if row else None,
                row.get("batch_duration_ms"),
                row.get("state_rows_total"),
                row["watermark"].strftime("%H:%M:%S") if row.get("watermark") else None,
            ]
        )
    return pd.DataFrame(rows, columns=LIVE_COLUMNS)


class LiveView:
    """Refresh a compact progress table of ``queries`` every ``every_s`` seconds while they run.

    Use it around whatever keeps the queries going::

        with LiveView([alerts_query, samples_query]):
            for query in (alerts_query, samples_query):
                streaming.finish(query, settings)       # or: time.sleep(300) for continuous queries

    In a notebook the table updates in place (one display handle); elsewhere it prints when it changes.
    """

    def __init__(self, queries, every_s: float = 3.0):
        self.queries = list(queries)
        self.every_s = every_s
        self.refreshes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="sensorcep-live-view")
        self._handle = None
        self._last_text = None

    def watch(self, seconds: float) -> None:
        """Follow running (interval-trigger) queries for ``seconds``, or until they all stop; they keep running."""
        with self:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and any(q.isActive for q in self.queries):
                time.sleep(min(self.every_s, max(0.0, deadline - time.monotonic())))

    def render(self):
        table = live_table(self.queries)
        self.refreshes += 1
        if self._handle is not None:
            self._handle.update(table)
        elif (text := table.to_string(index=False)) != self._last_text:
            print(text, flush=True)
            self._last_text = text
        return table

    def _loop(self):
        while not self._stop.wait(self.every_s):
            try:
                self.render()
            except Exception:  # a display hiccup must not kill the view (or the queries)
                log.exception("live view refresh failed")

    def __enter__(self):
        try:
            from IPython import get_ipython
            from IPython.display import display

            if get_ipython() is not None:
                self._handle = display(live_table(self.queries), display_id=True)
        except ImportError:
            pass
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.render()  # the final state
