"""Progress capture for every streaming query: a listener that appends to Delta ``stream_progress``.

(The row schema and its figures: :mod:`.progress`; reading them back, summaries and plots: :mod:`.reports`; the live
view: :mod:`.live`.)

The listener never blocks a query: progress events are buffered in memory and flushed to Delta in
batches (every ``FLUSH_EVERY`` events) and whenever a query terminates; :func:`flush_progress` lets
a caller wait until a stopped query's last events are on disk.
"""

from __future__ import annotations

import json
import logging
import threading
from types import SimpleNamespace

import pyarrow as pa
from pyspark import SparkContext
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener

from sensorcep.io.lake import Tables
from sensorcep.io.tables import table
from sensorcep.observability.progress import PROGRESS_SCHEMA, progress_row
from sensorcep.runtime import session_alive, session_key
from sensorcep.settings import Settings

log = logging.getLogger(__name__)
FLUSH_EVERY = 50
#: failed writes of one batch of progress rows before the listener gives them up (and says how many)
WRITE_ATTEMPTS = 3


class DeltaProgressListener(StreamingQueryListener):
    """One per session (:func:`ensure_progress_listener`). Each project query is routed (by name, before it
    starts) to the ``stream_progress`` table of the settings that started it; other queries are ignored.

    Callbacks run on Spark's listener bus thread and only buffer: a Spark job (the Delta write) started from
    that thread would wait for the very bus it blocks. A background thread writes the buffers every
    ``FLUSH_EVERY`` events and when a query terminates; :func:`flush_progress` writes from the caller's thread.
    """

    def __init__(self, spark):
        self._spark = spark  # the session whose queries it hears and whose Delta writer it uses
        self._routes: dict[str, Settings] = {}  # query name -> the settings whose stream_progress it goes to
        self._buffers: dict[Settings, list[dict]] = {}  # settings -> rows not yet written to their table
        self._lock = threading.Lock()
        self._terminated: dict[str, threading.Event] = {}
        self._wake = threading.Event()
        self._writing = threading.Lock()  # one flush at a time: the first write creates the table
        self._failures: dict[Settings, int] = {}  # settings -> consecutive failed writes of their buffered rows
        self.rows_lost = 0  # rows given up after WRITE_ATTEMPTS failed writes
        threading.Thread(target=self._flush_when_woken, name="stream-progress-writer", daemon=True).start()

    def _flush_when_woken(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self.flush()

    @property
    def _jlistener(self):
        """The JVM side of the listener on a classic session: PySpark's, fed by :class:`_JsonProgressBridge` (Spark
        Connect does not use it: its client hands over events parsed from JSON)."""
        if not hasattr(self, "_jlistenerobj"):
            self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_JsonProgressBridge(self))
        return self._jlistenerobj

    def route(self, query_name: str, settings: Settings) -> None:
        with self._lock:
            self._routes[query_name] = settings

    def onQueryStarted(self, event) -> None:
        self._terminated.setdefault(str(event.runId), threading.Event())

    def onQueryProgress(self, event) -> None:
        progress = json.loads(event.progress.json)
        with self._lock:
            target = self._routes.get(progress.get("name"))
            if target is None:
                return
            buffer = self._buffers.setdefault(target, [])
            buffer.append(progress_row(progress))
            full = len(buffer) >= FLUSH_EVERY
        if full:
            self._wake.set()

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        # its last progress is buffered by now. By run: a query restarted from its checkpoint keeps its id, and the
        # first run's end must not pass for the next one's
        self._terminated.setdefault(str(event.runId), threading.Event()).set()
        self._wake.set()

    def flush(self) -> int:
        """Write every buffered row; rows that fail to write stay buffered for the next flush (up to
        ``WRITE_ATTEMPTS`` failures, then they are given up and counted in ``rows_lost``)."""

        with self._writing:
            if not session_alive(self._spark):  # the application is shutting down
                return 0
            return self._write_buffers()

    def _write_buffers(self) -> int:
        with self._lock:
            buffers, self._buffers = self._buffers, {}
        written = 0
        for target, rows in buffers.items():
            if not rows:
                continue
            try:
                _append_progress(self._spark, target, rows)
                written += len(rows)
                self._failures.pop(target, None)
            except Exception as exc:  # a monitoring failure must never take a query down
                self._failed(target, rows, exc)
        return written

    def _failed(self, target: Settings, rows: list[dict], exc: Exception) -> None:
        """Keep the rows for the next flush, up to ``WRITE_ATTEMPTS`` failures in a row; then give them up and
        say how many, so a table that cannot be written costs a bounded buffer, not a growing one."""
        failures = self._failures[target] = self._failures.get(target, 0) + 1
        where = table(target, "stream_progress")
        if failures < WRITE_ATTEMPTS:
            log.warning(
                "could not write %d progress rows to %s (attempt %d of %d): %s",
                len(rows),
                where,
                failures,
                WRITE_ATTEMPTS,
                exc,
            )
            with self._lock:
                self._buffers[target] = rows + self._buffers.get(target, [])
            return
        self._failures.pop(target)
        self.rows_lost += len(rows)
        log.error(
            "gave up %d progress rows for %s after %d failed writes (%d lost so far): %s",
            len(rows),
            where,
            WRITE_ATTEMPTS,
            self.rows_lost,
            exc,
        )

    def wait_terminated(self, run_id: str, timeout: float = 30.0) -> bool:
        """Until the listener has heard that the query run ``run_id`` ended (False: not within ``timeout``)."""
        return self._terminated.setdefault(str(run_id), threading.Event()).wait(timeout)


class _JsonProgressBridge(JStreamingQueryListener):
    """What the JVM calls on a classic session, handing the listener only what it reads: the progress' JSON and the
    run id. PySpark's own bridge converts every event field by field first: hundreds of py4j calls per progress, and
    each Java map it iterates ends in an exception that PySpark converts through a dozen failing class lookups over
    the ~300 jars on the classpath (Java Flight Recorder, docs/decisions/0021-cold-starts-and-py4j.md: the test
    JVM's CPU over tests/kafka/test_stateful_rules.py went from 239 s to 230 s). The events it passes hold only
    ``runId`` and ``progress.json``, all the listener reads; under Spark Connect the listener gets PySpark's full
    events, so a field read beyond these two must be added here too (tests/unit/test_progress_bridge.py)."""

    def onQueryStarted(self, jevent) -> None:
        self.pylistener.onQueryStarted(SimpleNamespace(runId=jevent.runId().toString()))

    def onQueryProgress(self, jevent) -> None:
        self.pylistener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=jevent.progress().json())))

    def onQueryIdle(self, jevent) -> None:
        pass

    def onQueryTerminated(self, jevent) -> None:
        self.pylistener.onQueryTerminated(SimpleNamespace(runId=jevent.runId().toString()))


def _append_progress(spark, settings: Settings, rows: list[dict]) -> None:

    frame = pa.Table.from_pylist(rows, schema=PROGRESS_SCHEMA)
    Tables(spark, settings).write(spark.createDataFrame(frame), "stream_progress", partition_by=["part_date"])


_listeners: dict[str, DeltaProgressListener] = {}


def ensure_progress_listener(spark, settings: Settings, query: str | None = None) -> DeltaProgressListener:
    """The application's progress listener (registered on first use); with ``query``, route that query's
    progress to ``stream_progress`` under ``settings``. :func:`streaming.start_query` calls this for
    every query of the project, before the query starts."""

    key = session_key(spark)
    if key not in _listeners:
        listener = DeltaProgressListener(spark)
        spark.streams.addListener(listener)
        _listeners[key] = listener
    if query is not None:
        _listeners[key].route(settings.query_name(query), settings)
    return _listeners[key]


def flush_progress(spark, settings: Settings, query=None, timeout: float = 30.0) -> None:
    """Make sure every progress event of a stopped ``query`` (or all so far) is in Delta."""
    listener = ensure_progress_listener(spark, settings)
    if query is not None:
        if not listener.wait_terminated(str(query.runId), timeout):
            log.warning(
                "query %s: its end did not reach the progress listener within %.0f s: its last progress "
                "rows may be written later",
                query.name,
                timeout,
            )
    listener.flush()


def stop_progress_listener(spark) -> None:
    """Flush the session's progress listener and unregister it. Call it before a script's end under Spark Connect:
    PySpark's client-side listener thread is not a daemon, so a process with a listener never exits."""

    listener = _listeners.pop(session_key(spark), None)
    if listener is not None:
        spark.streams.removeListener(listener)  # under Connect: returns once the events sent so far are handled
        listener.flush()


def stop_session(spark) -> None:
    """Stop the session after writing every buffered progress row: the end of a script or a local job. Stopping
    the session first leaves the listener's last rows with no session to write them."""
    stop_progress_listener(spark)
    spark.stop()
