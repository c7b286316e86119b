"""Following running queries: one line per query (the runner's terminal), a table refreshed in place (notebooks)."""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import datetime

import pandas as pd

from sensorcep.io.kafka import last_records
from sensorcep.observability.progress import offsets_behind, progress_dict, progress_row
from sensorcep.settings import Settings

log = logging.getLogger(__name__)


def progress_line(query) -> str:
    """One line on a running query: batch, input and processing rate, batch time, Kafka records behind."""
    if not query.isActive:
        error = query.exception()
        return f"{query.name:<16} stopped" + (f": {str(error).splitlines()[0]}" if error else "")
    last = query.lastProgress
    if last is None:
        return f"{query.name:<16} {query.status.get('message', '')}"
    progress = progress_dict(last)
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
        row = progress_row(progress_dict(last)) if last is not None else {}
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
            from IPython import get_ipython  # noqa: PLC0415 - only inside a notebook
            from IPython.display import display  # noqa: PLC0415 - only inside a notebook

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


class RealtimeAlertsLine:
    """What a real-time-mode alert query is doing between its checkpoints (it reports progress only there), read
    from the alerts topic: the alerts written since the last line, and how long after its event reached Kafka the
    newest alert was written (Kafka timestamps, the broker's clock on both)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.seen: int | None = None

    def __call__(self, name: str) -> str:
        total, last = last_records(self.settings, self.settings.alerts_topic)
        written = None if self.seen is None else total - self.seen
        self.seen = total
        newest = max(last, key=lambda m: m.timestamp()[1], default=None)
        lag = None
        if newest is not None:
            event_ms = _event_kafka_ms(newest.value())
            lag = None if event_ms is None else newest.timestamp()[1] - event_ms
        return (
            f"{name:<16} real-time: {'-' if written is None else f'{written:,}'} alerts since the last line "
            f"({total:,} in all); newest alert {'-' if lag is None else f'{lag:,} ms'} after its event"
        )


def _event_kafka_ms(value: bytes | None) -> int | None:
    """An alert's ``kafka_timestamp`` (its event's Kafka time) in epoch milliseconds."""
    try:
        stamp = json.loads(value or b"{}").get("kafka_timestamp")
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000) if stamp else None
    except (ValueError, AttributeError):
        return None
