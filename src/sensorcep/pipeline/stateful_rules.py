"""The stateful alert rules (rate, count, absence, sequence, baseline, aggregate, pattern): bronze -> alerts topic.

``bronze_events`` (a Delta stream: each event once) behind the watermark, keyed by a bucket of devices
(:func:`~sensorcep.pipeline.timers.device_bucket`), into ``transformWithStateInPandas`` in event time. Per device the
processor holds the events the watermark has not passed yet (``pending``) and each rule's small memory
(:mod:`sensorcep.rules.sequential`). A timer at the oldest pending event (and at the next absence deadline) releases,
once the watermark passes it, every event at or before the watermark in event-time order, device by device, so the
alerts are the same whatever the batches and the arrival order were; events too late for the watermark are kept in
``late_events`` (:mod:`sensorcep.pipeline.lateness`). State per device is bounded: the events within
``watermark_delay`` of the newest, and per rule a few numbers (:mod:`sensorcep.rules.sequential`).

Alerts go to the alerts topic in the real-time query's record format (with the rule id and version), so
``anomalies`` and the alert lifecycle take them like any other alert; their ``alert_id`` is derived the same way. The
query starts only when rules of these kinds are in force; the always-on job starts or restarts it when they change.
Baseline rules also append each device's baseline, as each batch leaves it, to ``device_baselines``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from sensorcep.io.kafka import write_kafka
from sensorcep.io.lake import FencedAppends, Tables
from sensorcep.pipeline import lateness, queries, timers
from sensorcep.pipeline.alerts import alert_id_column, kafka_columns
from sensorcep.pipeline.ingest import bronze_event_stream
from sensorcep.pipeline.streaming import launch
from sensorcep.rules import catalog, evaluate, sequential
from sensorcep.rules.catalog import VersionedRule
from sensorcep.runtime import TRANSFORM_WITH_STATE, require
from sensorcep.settings import Settings

QUERY = "stateful_rules"
OUTPUT_SCHEMA = (
    "device_id string, sensor_freq double, event_time_us long, kafka_timestamp_us long, "
    "rule_id string, rule_version int, rule string, detail string, "
    "row_kind string, events long, mean double, spread double"
)  # row_kind: alert, or baseline (a device's baseline after the batch: events, mean, spread, as of event_time_us)
#: the columns of ``device_baselines``: one row per (device, baseline rule) per micro-batch that moved it
BASELINE_COLUMNS = ["device_id", "rule_id", "rule_version", "events", "mean", "spread", "as_of", "batch_id"]
OUTPUT_COLUMNS = [part.split()[0] for part in OUTPUT_SCHEMA.split(", ")]


#: a chunk of a key's pending events: the earliest event time (µs), and the events by device as JSON {device: [[t_us,
#: value, kafka_us(, other fields)], ...]}
PENDING_CHUNK = "earliest long, events string"


class RuleMachine(StatefulProcessor):
    """Keyed by a bucket of devices (:func:`timers.device_bucket`): ``pending``, the events the watermark has not passed
    yet, as a list of chunks (one per micro-batch that brought some, :data:`PENDING_CHUNK`), and ``memory``, each
    device's rule memory, as JSON {device: memory}.

    A batch's events are appended as one chunk: the events already pending are neither read nor written again. A timer
    at the earliest pending event (and at the earliest deadline of a device's absence, window or pattern) releases, per
    device, every event at or before the watermark, as one timer a device did; only the chunks that hold such events
    are parsed, each replaced by what of it remains (the list is written again only then)."""

    def __init__(self, rules: list[VersionedRule], scoped: dict[tuple, list[str]]):
        self.rules, self.scoped, self.fields = rules, scoped, extra_fields_read(rules)
        self.applies: dict[str, bool] = {}

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.pending = handle.getListState("pending", PENDING_CHUNK)
        self.memory = handle.getValueState("memory", "memory string")
        self.passes = timers.Passes()

    def _runs_for(self, device: str) -> bool:
        found = self.applies.get(device)
        if found is None:
            found = self.applies[device] = any(sequential.applies(r, device, self.scoped) for r in self.rules)
        return found

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        by_device: dict[str, list] = {}
        for frame in rows:
            for device, event in zip(frame.device_id.tolist(), event_tuples(frame, self.fields), strict=True):
                if self._runs_for(device):
                    by_device.setdefault(device, []).append(event)
        if by_device:
            earliest = min(e[0] for events in by_device.values() for e in events)
            self.pending.appendValue((earliest, json.dumps(by_device)))
            timers.arm_before(self.handle, earliest)
        return iter([])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        watermark_ms = self.passes.first(key, timerValues)
        if watermark_ms is None:
            return
        watermark_us = watermark_ms * 1000
        final: dict[str, list] = {}

        def take(text: str) -> tuple[int, str] | None:
            rest: dict[str, list] = {}
            for device, events in json.loads(text).items():
                for event in events:
                    (final if event[0] <= watermark_us else rest).setdefault(device, []).append(event)
            return (min(e[0] for events in rest.values() for e in events), json.dumps(rest)) if rest else None

        waiting = timers.release_chunks(self.pending, watermark_us, take)
        held = self.memory.get()
        memories = json.loads(held[0]) if held else {}
        due = [d for d, memory in memories.items() if d not in final and _deadline(self.rules, memory) <= watermark_us]
        rows = []
        for device in [*final, *due]:
            fired, memory = sequential.advance(
                self.rules, device, memories.get(device, {}), final.get(device, []), watermark_us, self.scoped
            )
            if memory:
                memories[device] = memory
            else:
                memories.pop(device, None)
            rows += [{**f.__dict__, "row_kind": "alert"} for f in fired]
            if device in final:  # the baselines its events moved
                rows += [
                    {"device_id": device, "event_time_us": as_of, "rule_id": r.id, "rule_version": r.version,
                     "rule": r.rule.text, "detail": "", "row_kind": "baseline", "events": n, "mean": mean,
                     "spread": spread}
                    for r, n, mean, spread, as_of in sequential.baselines(self.rules, memory)
                ]  # fmt: skip
        if memories:
            self.memory.update((json.dumps(memories),))
        else:
            self.memory.clear()
        deadlines = waiting + [_deadline(self.rules, m) for m in memories.values()]
        timers.arm(self.handle, [d for d in deadlines if d != timers.NO_DEADLINE])
        if rows:
            yield pd.DataFrame(rows, columns=OUTPUT_COLUMNS)

    def close(self) -> None:
        pass


def _deadline(rules: list[VersionedRule], memory: dict) -> int:
    found = sequential.next_deadline_us(rules, memory)
    return timers.NO_DEADLINE if found is None else found


def extra_fields_read(rules: list[VersionedRule]) -> list[str]:
    """The event fields kept through ``extra_fields`` that the rules read (beside ``sensor_freq``)."""
    return sorted(set().union(*(r.rule.fields for r in rules)) - {"sensor_freq"})


def event_tuples(frame: pd.DataFrame, fields: list[str], until_us: int | None = None) -> list[list]:
    """A frame of events -> [event_time_us, sensor_freq, kafka_timestamp_us(, {field: text})], as
    :func:`sequential.advance` takes them (the other fields only when the rules read some); up to ``until_us``."""
    kafka = frame.kafka_timestamp_us.astype("Int64")
    others = [frame[name].astype(object).where(frame[name].notna(), None).tolist() for name in fields]
    found = []
    for index, (t, v, k) in enumerate(zip(frame.event_time_us, frame.sensor_freq, kafka, strict=True)):
        if until_us is not None and t > until_us:
            continue
        event = [int(t), float(v), None if pd.isna(k) else int(k)]
        if fields:
            event.append({name: column[index] for name, column in zip(fields, others, strict=True)})
        found.append(event)
    return found


def stateful_rules(spark: SparkSession, settings: Settings) -> list[VersionedRule]:
    """The rules in force that need state over a device's events (every kind but threshold, and group rules, which
    run over other rules' alerts: :mod:`sensorcep.pipeline.group_rules`)."""
    return [r for r in catalog.rules_in_force(spark, settings) if not r.rule.stateless and not r.rule.over_alerts]


def rule_alert_stream(
    events: DataFrame,
    settings: Settings,
    rules: list[VersionedRule],
    scoped: dict,
    *,
    keep_late: bool = False,
    baselines: bool = False,
) -> DataFrame:
    """Valid events (device_id, sensor_freq, event_time, kafka_timestamp), each (device, event time) once as bronze
    holds them -> alerts (the alert fields). Events behind the watermark are dropped by Spark's late-row filter (and
    kept with ``keep_late``).

    ``baselines``: also the baseline rows (``row_kind`` says which; the alert fields plus events, mean, spread)."""
    require(TRANSFORM_WITH_STATE, events.sparkSession)
    timed = events.withWatermark("event_time", settings.interval("watermark_delay"))
    # the watermarked event_time goes in with the processor's columns: transformWithState applies Spark's late-row
    # filter only to an input that carries it (without it, late rows reached the processor). No deduplication in front:
    # bronze holds each (device, event time) once, and keeping every event's key for the watermark delay was the
    # query's largest state (decision 0037)
    fired = (
        timed.select(
            "device_id",
            "event_time",
            "sensor_freq",
            F.unix_micros("event_time").alias("event_time_us"),
            F.unix_micros("kafka_timestamp").alias("kafka_timestamp_us"),
            *(F.col(name).cast("string") for name in extra_fields_read(rules)),
            timers.device_bucket(),
        )
        .groupBy("device_bucket")
        .transformWithStateInPandas(
            statefulProcessor=RuleMachine(rules, scoped),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="EventTime",
        )
    )
    alerts = as_alerts(fired, extra=["row_kind", "events", "mean", "spread"]) if baselines else as_alerts(fired)
    return lateness.with_input(alerts, timed) if keep_late else alerts


def rule_alerts_batch(events: DataFrame, settings: Settings, rules: list[VersionedRule], scoped: dict) -> DataFrame:
    """The same rules over a batch of events (a backtest): each device's events through the processor's own logic
    (:func:`sequential.advance`) in one pass, with the watermark a live run would reach at the end of them (the
    newest event time - ``watermark_delay``). Returns the alert fields, like :func:`rule_alert_stream`."""
    newest = events.agg(F.max("event_time")).first()[0]
    if not rules or newest is None:
        return as_alerts(events.sparkSession.createDataFrame([], OUTPUT_SCHEMA))
    watermark_us = int(pd.Timestamp(newest).value // 1000) - settings.watermark_seconds * 1_000_000

    def judge(frame: pd.DataFrame) -> pd.DataFrame:
        final = event_tuples(frame, fields, until_us=watermark_us)
        fired, _ = sequential.advance(rules, frame.device_id.iloc[0], {}, final, watermark_us, scoped)
        return pd.DataFrame([{**f.__dict__, "row_kind": "alert"} for f in fired], columns=OUTPUT_COLUMNS)

    fields = extra_fields_read(rules)
    fired = (
        events.select(
            "device_id",
            "sensor_freq",
            F.unix_micros("event_time").alias("event_time_us"),
            F.unix_micros("kafka_timestamp").alias("kafka_timestamp_us"),
            *(F.col(name).cast("string") for name in fields),
        )
        .groupBy("device_id")
        .applyInPandas(judge, OUTPUT_SCHEMA)
    )
    return as_alerts(fired)


def as_alerts(fired: DataFrame, extra: list[str] | None = None) -> DataFrame:
    """The processor's alert rows (:data:`OUTPUT_SCHEMA`) -> the alert fields, with the ``alert_id`` of each; with
    ``extra`` columns, every row (baselines too) and those columns."""
    if extra is None:
        fired = fired.where(F.col("row_kind") == "alert")
    timed = fired.select(
        "device_id",
        "sensor_freq",
        F.timestamp_micros("event_time_us").alias("event_time"),
        F.timestamp_micros("kafka_timestamp_us").alias("kafka_timestamp"),
        "rule_id",
        "rule_version",
        "rule",
        F.when(F.col("detail") != "", F.col("detail")).alias("detail"),  # null where the kind has none
        *(extra or []),
    )
    return timed.select(alert_id_column().alias("alert_id"), *timed.columns)


def send_alerts(settings: Settings, rules: list[VersionedRule]):
    """foreachBatch: a batch's alerts to the alerts topic (at least once: the ids are stable, consumers dedupe), and
    the baselines it moved to ``device_baselines`` (exactly once per batch: :class:`FencedAppends`, decision 0052)."""

    # each batch's baselines once, as a blind append fenced by batch id (the query is the table's one writer)
    baselines = FencedAppends("device_baselines", check_empty=True)

    def write(batch: DataFrame, batch_id: int) -> None:
        write_kafka(batch.where(F.col("row_kind") == "alert").select(*kafka_columns()), settings, settings.alerts_topic)
        moved = batch.where(F.col("row_kind") == "baseline").select(
            "device_id",
            "rule_id",
            "rule_version",
            "events",
            "mean",
            "spread",
            F.col("event_time").alias("as_of"),
            F.lit(batch_id).cast("long").alias("batch_id"),
        )
        if any(r.rule.kind == "baseline" for r in rules):
            baselines.once(Tables(batch.sparkSession, settings), moved, batch_id)

    return write


@queries.declare(
    QUERY,
    task="sampling_state",
    writes="alerts topic, device_baselines, late_events",
    pool="sampling",
    reads_bronze=True,
    reload_when=catalog.fingerprint,
    fixed_settings="watermark_delay",
    rewritten_from_start="device_baselines",
)
def start_stateful_rules(
    spark: SparkSession, settings: Settings, *, wait: bool = True, events: DataFrame | None = None
):
    """Run (availableNow) or start the stateful rules query; None when no rule of a stateful kind is in force."""
    rules = stateful_rules(spark, settings)
    if not rules:
        return None
    scoped = evaluate.scope_devices(spark, settings, rules)
    events = events if events is not None else bronze_event_stream(spark, settings, extra_fields_read(rules))
    writer = lateness.late_event_writer(settings, QUERY, send_alerts(settings, rules))
    stream = rule_alert_stream(events, settings, rules, scoped, keep_late=True, baselines=True)
    return launch(stream, settings, start_stateful_rules.query, wait=wait, foreach_batch=writer)
