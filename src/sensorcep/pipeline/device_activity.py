"""Device activity: first seen, last seen, event count and online/offline status per device.

A :class:`DeviceActivity` processor keyed by device id keeps one value per device and an
event-time timer at ``last_seen + device_timeout``. It emits a row per status change:

* ``device_first_seen`` - the device's first event;
* ``device_offline`` - the watermark passed ``last_seen + device_timeout`` with no event from it
  (``changed_at`` = that moment), or a gap longer than the timeout shows up between two of its
  events seen together;
* ``device_online`` - its first event after being offline (``changed_at`` = that event's time).

Transitions are decided from the events seen so far; an out-of-order event arriving later (but
within the watermark) does not retract one already emitted. The latest row per device is its
current status (``current_status``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from sensorcep.io.lake import batch_writer
from sensorcep.pipeline import lateness, queries
from sensorcep.pipeline.ingest import bronze_event_stream
from sensorcep.pipeline.streaming import launch, writer_id
from sensorcep.runtime import TRANSFORM_WITH_STATE, require
from sensorcep.settings import Settings, parse_duration

STATE_SCHEMA = "first_seen_ms long, last_seen_ms long, event_count long, online boolean"
PROCESSOR_OUTPUT = (
    "device_id string, status_event string, status string, changed_at_ms long, first_seen_ms long, "
    "last_seen_ms long, event_count long"
)
#: the columns of the Delta table ``device_status``
STATUS_COLUMNS = ["device_id", "status_event", "status", "changed_at", "first_seen", "last_seen", "event_count"]


class DeviceActivity(StatefulProcessor):
    """Keyed by device id; all times are event-time milliseconds."""

    def __init__(self, timeout_ms: int):
        self.timeout_ms = timeout_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("activity", STATE_SCHEMA)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        times = np.sort(np.concatenate([frame.event_time_ms.to_numpy(dtype="int64") for frame in rows]))
        prior = self.state.get()
        changes = []
        if prior is None:
            first = last = int(times[0])
            count, online, old_last = 0, True, None
            changes.append(("device_first_seen", "online", first))
        else:
            first, last, count, online = int(prior[0]), int(prior[1]), int(prior[2]), bool(prior[3])
            first, old_last = min(first, int(times[0])), last
        for t in times[times > last].tolist():
            if online and t - last > self.timeout_ms:
                changes.append(("device_offline", "offline", last + self.timeout_ms))
                online = False
            if not online:
                changes.append(("device_online", "online", t))
                online = True
            last = t
        count += len(times)
        if last != old_last:
            if old_last is not None:
                self.handle.deleteTimer(old_last + self.timeout_ms)
            self.handle.registerTimer(last + self.timeout_ms)
        self.state.update((first, last, count, online))
        if changes:
            yield self._rows(key[0], changes, first, last, count)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        first, last, count, online = self.state.get()
        if online:
            self.state.update((first, last, count, False))
            yield self._rows(key[0], [("device_offline", "offline", int(last) + self.timeout_ms)], first, last, count)

    @staticmethod
    def _rows(device, changes, first, last, count) -> pd.DataFrame:
        events, statuses, at = zip(*changes, strict=False)
        return pd.DataFrame(
            {
                "device_id": device,
                "status_event": list(events),
                "status": list(statuses),
                "changed_at_ms": list(at),
                "first_seen_ms": int(first),
                "last_seen_ms": int(last),
                "event_count": int(count),
            }
        )

    def close(self) -> None:
        pass


def status_stream(events: DataFrame, settings: Settings, *, keep_late: bool = False) -> DataFrame:
    """Parsed valid events, each (device, event time) once as bronze holds them -> ``device_status`` rows (status
    changes). Events behind the watermark are dropped by Spark's late-row filter (and kept with ``keep_late``).

    ``keep_late``: the stream also carries the input rows, for :func:`lateness.late_event_writer`.
    """
    require(TRANSFORM_WITH_STATE, events.sparkSession)  # one sentence where the runtime lacks it
    timeout_ms = int(parse_duration(settings.device_timeout) * 1000)
    timed = events.withWatermark("event_time", settings.interval("watermark_delay"))
    changes = (
        timed.select("device_id", "event_time", F.unix_millis("event_time").alias("event_time_ms"))
        .groupBy("device_id")
        .transformWithStateInPandas(
            statefulProcessor=DeviceActivity(timeout_ms),
            outputStructType=PROCESSOR_OUTPUT,
            outputMode="Append",
            timeMode="EventTime",
        )
    )
    rows = changes.select(
        "device_id",
        "status_event",
        "status",
        F.timestamp_millis("changed_at_ms").alias("changed_at"),
        F.timestamp_millis("first_seen_ms").alias("first_seen"),
        F.timestamp_millis("last_seen_ms").alias("last_seen"),
        "event_count",
    )
    return lateness.with_input(rows, timed) if keep_late else rows


def current_status(status: DataFrame) -> DataFrame:
    """The latest row per device of a ``device_status`` table: each device's current status."""
    latest = Window.partitionBy("device_id").orderBy(F.desc("changed_at"), F.desc("event_count"))
    return status.withColumn("_n", F.row_number().over(latest)).where("_n = 1").drop("_n")


def status_counts(status: DataFrame) -> dict[str, int]:
    """Devices by current status (e.g. ``{"online": 41, "offline": 9}``)."""
    counts = current_status(status).groupBy("status").count().collect()
    return {row["status"]: row["count"] for row in sorted(counts, key=lambda row: row["status"])}


QUERY = "device_activity"


@queries.declare(
    QUERY,
    task="sampling_state",
    writes="device_status, late_events",
    trigger_setting="records_trigger",
    pool="sampling",
    reads_bronze=True,
    fixed_settings="watermark_delay, device_timeout",
    rewritten_from_start="device_status",
)
def start_device_activity(spark, settings: Settings, *, wait: bool = True, events: DataFrame | None = None):
    """Run (availableNow) or start the device activity query: events (default: ``bronze_events`` as a Delta stream)
    -> ``device_status``."""

    events = events if events is not None else bronze_event_stream(spark, settings)
    status = batch_writer(settings, "device_status", lambda: writer_id(settings, QUERY))
    writer = lateness.late_event_writer(settings, QUERY, status)
    return launch(
        status_stream(events, settings, keep_late=True),
        settings,
        start_device_activity.query,
        wait=wait,
        foreach_batch=writer,
    )
