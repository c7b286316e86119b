"""Device activity: first seen, last seen, event count and online/offline status per device.

A :class:`DeviceActivity` processor keeps each device's activity and, in effect, an event-time timer at
``last_seen + device_timeout`` (its state and timers are kept per bucket of devices: decision 0045). It emits a row
per status change:

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

import json
from collections.abc import Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from sensorcep.io.lake import batch_writer
from sensorcep.pipeline import lateness, queries, timers
from sensorcep.pipeline.ingest import bronze_event_stream
from sensorcep.pipeline.streaming import launch, writer_id
from sensorcep.runtime import TRANSFORM_WITH_STATE, require
from sensorcep.settings import Settings, parse_duration

#: a key's state: its devices' activity as JSON (:class:`DeviceActivity`)
STATE_SCHEMA = "devices string"
PROCESSOR_OUTPUT = (
    "device_id string, status_event string, status string, changed_at_ms long, first_seen_ms long, "
    "last_seen_ms long, event_count long"
)
#: the columns of the Delta table ``device_status``
STATUS_COLUMNS = ["device_id", "status_event", "status", "changed_at", "first_seen", "last_seen", "event_count"]


class DeviceActivity(StatefulProcessor):
    """Keyed by a bucket of devices (:func:`timers.device_bucket`); all times are event-time milliseconds. The key keeps
    its devices' activity as JSON {device: [first_seen, last_seen, event count, online]} and one timer, at the
    earliest ``last_seen + device_timeout`` of its online devices: when the watermark passes it, every online device
    of the key whose own moment has passed goes offline, as a timer per device did (decision 0045)."""

    def __init__(self, timeout_ms: int):
        self.timeout_ms = timeout_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("activity", STATE_SCHEMA)

    def _load(self) -> dict[str, list]:
        held = self.state.get()
        return json.loads(held[0]) if held else {}

    def _next_offline(self, devices: dict[str, list]) -> int | None:
        return min((last + self.timeout_ms for _, last, _, online in devices.values() if online), default=None)

    def _store(self, devices: dict[str, list], timer_before: int | None) -> None:
        self.state.update((json.dumps(devices),))
        timer = self._next_offline(devices)
        if timer != timer_before:
            if timer_before is not None:
                self.handle.deleteTimer(timer_before)
            if timer is not None:
                self.handle.registerTimer(timer)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True)
        devices = self._load()
        timer_before = self._next_offline(devices)
        out = []
        for device, times in frame.groupby("device_id", sort=False).event_time_ms:
            devices[device], changes = self._advance(devices.get(device), np.sort(times.to_numpy(dtype="int64")))
            if changes:
                out.append(_rows(device, changes, *devices[device][:3]))
        self._store(devices, timer_before)
        if out:
            yield pd.concat(out, ignore_index=True)

    def _advance(self, prior: list | None, times: np.ndarray) -> tuple[list, list]:
        """A device's activity after its events of a batch (sorted), and the status changes they make."""
        changes = []
        if prior is None:
            first = last = int(times[0])
            count, online = 0, True
            changes.append(("device_first_seen", "online", first))
        else:
            first, last, count, online = prior
            first = min(first, int(times[0]))
        for t in times[times > last].tolist():
            if online and t - last > self.timeout_ms:
                changes.append(("device_offline", "offline", last + self.timeout_ms))
                online = False
            if not online:
                changes.append(("device_online", "online", t))
                online = True
            last = t
        return [first, last, count + len(times), online], changes

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        watermark_ms = timerValues.getCurrentWatermarkInMs()
        devices = self._load()
        out = []
        for device, (first, last, count, online) in devices.items():
            if online and last + self.timeout_ms <= watermark_ms:
                devices[device] = [first, last, count, False]
                out.append(_rows(device, [("device_offline", "offline", last + self.timeout_ms)], first, last, count))
        # the expired timer is gone: the next one, if any device is still online
        self._store(devices, None)
        if out:
            yield pd.concat(out, ignore_index=True)

    def close(self) -> None:
        pass


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


def status_stream(events: DataFrame, settings: Settings, *, keep_late: bool = False) -> DataFrame:
    """Parsed valid events, each (device, event time) once as bronze holds them -> ``device_status`` rows (status
    changes). Events behind the watermark are dropped by Spark's late-row filter (and kept with ``keep_late``).

    ``keep_late``: the stream also carries the input rows, for :func:`lateness.late_event_writer`.
    """
    require(TRANSFORM_WITH_STATE, events.sparkSession)  # one sentence where the runtime lacks it
    timeout_ms = int(parse_duration(settings.device_timeout) * 1000)
    timed = events.withWatermark("event_time", settings.interval("watermark_delay"))
    changes = (
        timed.select(
            "device_id", "event_time", F.unix_millis("event_time").alias("event_time_ms"), timers.device_bucket()
        )
        .groupBy("device_bucket")
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
