"""The group rules (``kind: group``): the alerts topic -> one alert per group of devices that fire together.

The alerts of the rules that group rules name are read back from the alerts topic (whichever query fired them: the
real-time threshold query or the stateful rules), labelled with the device's ``site`` / ``sensor_type`` from the
``devices`` table, deduplicated on ``alert_id`` (the topic is at least once) behind a watermark, and keyed by (group
rule, group) into ``transformWithStateInPandas`` in event time. Per group the processor holds the alerts the
watermark has not passed yet and the devices counting (:mod:`sensorcep.rules.grouping`); a timer at the oldest
pending alert releases, once the watermark passes it, every alert at or before it in (time, device) order, so what
fires does not depend on how the alerts were cut into micro-batches or in what order they arrived.

The watermark trails the newest alert by twice ``watermark_delay``: a stateful rule's alert comes out once its own
query's watermark passes the event, up to ``watermark_delay`` after a threshold alert of the same moment. Alerts too
late even for that are kept in ``late_events`` (query ``group_rules``), not dropped.

A group alert goes to the alerts topic like any other (``device_id`` = the group's label, e.g. ``site=plant-1``,
``sensor_freq`` null), so ``anomalies`` and the alert lifecycle take it: a site-wide fault is one incident. The query
starts only when a group rule is in force; the always-on job restarts it when the rules change.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sensorcep.io.kafka import write_kafka
from sensorcep.pipeline import lateness, queries, timers
from sensorcep.pipeline.alerts import alert_id_column, kafka_columns, read_alerts
from sensorcep.pipeline.ingest import load_devices
from sensorcep.pipeline.streaming import launch
from sensorcep.rules import catalog, grouping
from sensorcep.rules.catalog import VersionedRule
from sensorcep.rules.model import GROUP_LABELS
from sensorcep.runtime import TRANSFORM_WITH_STATE, require
from sensorcep.settings import Settings, parse_duration

log = logging.getLogger(__name__)

QUERY = "group_rules"
OUTPUT_SCHEMA = "device_id string, event_time_us long, rule_id string, rule_version int, rule string"
#: how much further behind the newest alert the query's watermark is than ``watermark_delay``
DELAY_FACTOR = 2


class GroupMachine(timers.PendingAndMemory):
    """Keyed by (group rule id, group): ``state`` = (pending alerts as JSON [[t_us, device], ...], the devices
    counting as JSON {device: t_us})."""

    def __init__(self, rules: list[VersionedRule]):
        self.rules = {r.id: r for r in rules}

    def _save(self, rule: VersionedRule, pending: list, memory: dict) -> None:
        self._store(pending, memory)
        deadlines = [min(a[0] for a in pending)] if pending else []
        expiry = grouping.next_expiry_us(rule.rule, memory)
        timers.arm(self.handle, deadlines + ([expiry] if expiry is not None else []))

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        rule = self.rules.get(key[0])
        if rule is None:
            return iter([])
        pending, memory = self._load()
        for frame in rows:
            pending += [[int(t), str(d)] for t, d in zip(frame.event_time_us, frame.device_id, strict=True)]
        self._save(rule, pending, memory)
        return iter([])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        watermark_ms = self.passes.first(key, timerValues)
        rule = self.rules.get(key[0])
        if watermark_ms is None or rule is None:
            return
        pending, memory = self._load()
        watermark_us = watermark_ms * 1000
        final = sorted((t, d) for t, d in pending if t <= watermark_us)
        fired, memory = grouping.advance(rule.rule, memory, final)
        memory = grouping.forget(rule.rule, memory, watermark_us)
        self._save(rule, [a for a in pending if a[0] > watermark_us], memory)
        if fired:
            yield pd.DataFrame(
                [{"device_id": key[1], "event_time_us": t, "rule_id": rule.id, "rule_version": rule.version,
                  "rule": rule.rule.text} for t in fired],
                columns=[part.split()[0] for part in OUTPUT_SCHEMA.split(", ")],
            )  # fmt: skip


def group_rules(spark: SparkSession, settings: Settings) -> list[VersionedRule]:
    """The group rules in force."""
    return [r for r in catalog.rules_in_force(spark, settings) if r.rule.over_alerts]


def grouped_alerts(alerts: DataFrame, devices: DataFrame, rules: list[VersionedRule]) -> DataFrame:
    """Alerts (device_id, event_time, rule_id, alert_id, sensor_freq) -> one row per (group rule, alert of the rule it
    names, the device's group): group_rule, group, alert_id, device_id, event_time, sensor_freq. A device without the
    label is in no group."""
    labels = [c for c in GROUP_LABELS if c in devices.columns]
    usable = [r for r in rules if r.rule.by in labels]
    if not usable:  # the devices table has none of the labels the rules group by: no alert is in a group
        return alerts.select(
            F.lit(None).cast("string").alias("group_rule"), F.lit(None).cast("string").alias("group"),
            "alert_id", "device_id", "event_time", "sensor_freq",
        ).where(F.lit(False))  # fmt: skip
    timed = alerts.where(F.col("event_time").isNotNull())  # an alert record without a usable time is in no group
    labelled = timed.join(F.broadcast(devices.select("device_id", *labels)), "device_id", "left")
    picks = F.array(
        *[
            F.when(
                (F.col("rule_id") == r.rule.rule) & F.col(r.rule.by).isNotNull() & (F.col(r.rule.by) != ""),
                F.struct(
                    F.lit(r.id).alias("group_rule"), F.concat(F.lit(f"{r.rule.by}="), F.col(r.rule.by)).alias("group")
                ),
            )
            for r in usable
        ]
    )
    return (
        labelled.select("*", F.explode(picks).alias("_g"))
        .where(F.col("_g").isNotNull())
        .select("_g.group_rule", "_g.group", "alert_id", "device_id", "event_time", "sensor_freq")
    )


def group_alert_stream(alerts: DataFrame, devices: DataFrame, settings: Settings, rules: list[VersionedRule]):
    """The alerts topic's alerts -> the group alerts and the alerts too late for them (:func:`lateness.with_input`)."""
    require(TRANSFORM_WITH_STATE, alerts.sparkSession)
    delay = f"{DELAY_FACTOR * parse_duration(settings.watermark_delay):g} seconds"
    timed = grouped_alerts(alerts, devices, rules).withWatermark("event_time", delay)
    fired = (
        # a re-sent alert counts once; the deduplication also applies Spark's late-row filter (see stateful_rules)
        timed.dropDuplicates(["group_rule", "alert_id", "event_time"])
        .select("group_rule", "group", F.unix_micros("event_time").alias("event_time_us"), "device_id")
        .groupBy("group_rule", "group")
        .transformWithStateInPandas(
            statefulProcessor=GroupMachine(rules),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="EventTime",
        )
    )
    return lateness.with_input(as_alerts(fired), timed)


def as_alerts(fired: DataFrame) -> DataFrame:
    """The processor's rows (:data:`OUTPUT_SCHEMA`) -> the alert fields, with the ``alert_id`` of each."""
    timed = fired.select(
        "device_id",
        F.lit(None).cast("double").alias("sensor_freq"),
        F.timestamp_micros("event_time_us").alias("event_time"),
        F.lit(None).cast("timestamp").alias("kafka_timestamp"),
        "rule_id",
        "rule_version",
        "rule",
        F.lit(None).cast("string").alias("detail"),
    )
    return timed.select(alert_id_column().alias("alert_id"), *timed.columns)


def group_alerts_batch(
    alerts: DataFrame, devices: DataFrame | None, settings: Settings, rules: list[VersionedRule]
) -> DataFrame:
    """The same rules over a batch of alerts (a backtest): each group's alerts through the processor's own logic
    (:func:`grouping.advance`) in one pass, up to the watermark a live run would reach at the end of them (the newest
    alert's time - twice ``watermark_delay``). Returns the alert fields, like :func:`group_alert_stream`."""
    newest = alerts.agg(F.max("event_time")).first()[0]
    if not rules or newest is None or devices is None:
        return as_alerts(alerts.sparkSession.createDataFrame([], OUTPUT_SCHEMA))
    watermark_us = int(pd.Timestamp(newest).value // 1000) - DELAY_FACTOR * settings.watermark_seconds * 1_000_000
    by_id = {r.id: r for r in rules}
    columns = [part.split()[0] for part in OUTPUT_SCHEMA.split(", ")]

    def judge(frame: pd.DataFrame) -> pd.DataFrame:
        rule = by_id[frame.group_rule.iloc[0]]
        final = sorted((int(t), str(d)) for t, d in zip(frame.event_time_us, frame.device_id, strict=True))
        fired, _ = grouping.advance(rule.rule, {}, [a for a in final if a[0] <= watermark_us])
        rows = [(frame.group.iloc[0], t, rule.id, rule.version, rule.rule.text) for t in fired]
        return pd.DataFrame(rows, columns=columns)

    fired = (
        grouped_alerts(alerts, devices, rules)
        .dropDuplicates(["group_rule", "alert_id"])
        .select("group_rule", "group", F.unix_micros("event_time").alias("event_time_us"), "device_id")
        .groupBy("group_rule", "group")
        .applyInPandas(judge, OUTPUT_SCHEMA)
    )
    return as_alerts(fired)


def send_group_alerts(settings: Settings):
    """foreachBatch: a batch's group alerts to the alerts topic (at least once: the ids are stable)."""

    def write(batch: DataFrame, batch_id: int) -> None:
        write_kafka(batch.select(*kafka_columns()), settings, settings.alerts_topic)

    return write


@queries.declare(
    QUERY,
    task="alert_records",
    writes="alerts topic, late_events",
    reload_when=catalog.fingerprint,
    fixed_settings="watermark_delay",
)
def start_group_rules(spark: SparkSession, settings: Settings, *, wait: bool = True):
    """Run (availableNow) or start the group rules query; None when no group rule is in force (or no ``devices``
    table gives the devices' groups: then it says so)."""
    rules = group_rules(spark, settings)
    if not rules:
        return None
    devices = load_devices(spark, settings)
    if devices is None:
        names = ", ".join(r.id for r in rules)
        log.warning("group rules %s: no devices table, so no device has a group; they fire nothing", names)
        return None
    unlabelled = [f"{r.id} (by {r.rule.by})" for r in rules if r.rule.by not in devices.columns]
    if unlabelled:
        log.warning("group rules %s: the devices table has no such column; they fire nothing", ", ".join(unlabelled))
    writer = lateness.late_event_writer(settings, QUERY, send_group_alerts(settings), input_repeats=True)
    return launch(
        group_alert_stream(read_alerts(spark, settings), devices, settings, rules),
        settings,
        start_group_rules.query,
        wait=wait,
        foreach_batch=writer,
    )
