"""03 anomaly alerts: every event that fires a rule to Kafka as an alert, fast, and recorded in ``anomalies``.

* :func:`alert_stream` is stateless: a valid event (the rules of 01's parser) that fires an alert rule in force
  (the ``alert_rules`` table, :mod:`sensorcep.rules`) becomes an alert, one per rule it fires, whatever its
  lateness. Each alert carries the ``rule_id`` and ``rule_version`` that fired it; its ``alert_id`` is derived
  from the event and the rule (device, event time in microseconds, rule id), so a replayed batch re-sends the
  *same* alert and consumers dedupe on it: Kafka delivery is at least once. :func:`start_alerts` writes the
  alerts topic and nothing else (Spark's Kafka sink, no foreachBatch), so it runs in any trigger: ``realtime``
  (Spark's real-time mode, records processed as they arrive), an interval, or ``availableNow``. When the alert
  was produced is the alert record's own Kafka timestamp (``detected_at`` once read back).
* :func:`start_anomalies` records alerts off the latency path: a micro-batch query reads the alerts
  topic back and MERGEs each batch into the Delta table ``anomalies`` on ``alert_id``, so an event sent
  twice, a replayed batch and a re-sent alert each leave one row.
* What happens to an alert after it is sent (one incident per rule and device, acks, snoozes, escalation) is the
  lifecycle query's: :mod:`sensorcep.pipeline.alert_lifecycle`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from sensorcep.io.kafka import read_kafka, sink_options, topic_partitions
from sensorcep.io.lake import Tables
from sensorcep.pipeline import checkpoint_log, queries
from sensorcep.pipeline.ingest import valid_events
from sensorcep.pipeline.streaming import launch
from sensorcep.rules import catalog, evaluate
from sensorcep.rules.catalog import VersionedRule
from sensorcep.settings import Settings, is_realtime

log = logging.getLogger(__name__)

QUERY = "alerts"
ANOMALIES_QUERY = "anomalies"
#: the alert record (JSON value on the alerts topic, key = device id); kafka_timestamp = when the event reached Kafka
ALERT_FIELDS = [
    "alert_id",
    "device_id",
    "sensor_freq",
    "event_time",
    "kafka_timestamp",
    "rule_id",
    "rule_version",
    "rule",
    "detail",  # what the alert's events were (a pattern: its steps' event times); null for a threshold rule
]
ALERT_SCHEMA = (
    "alert_id string, device_id string, sensor_freq double, event_time timestamp, "
    "kafka_timestamp timestamp, rule_id string, rule_version int, rule string, detail string"
)
#: an alert read back from the topic: its fields + detected_at (the alert record's Kafka timestamp)
ANOMALY_FIELDS = [*ALERT_FIELDS, "detected_at"]


def alert_id(device_id: str, event_time_us: int, rule_id: str) -> str:
    """The alert id of an event and the rule it fires, in plain Python (simulator, consumers, tests); equals
    :func:`alert_id_column`. The rule's version is not part of it: a changed threshold that still fires for an event
    names the same alert (a backtest keeps it)."""
    return hashlib.sha256(f"{device_id}|{event_time_us}|{rule_id}".encode()).hexdigest()[:32]


def alert_id_column() -> Column:
    key = F.concat_ws("|", F.col("device_id"), F.unix_micros("event_time").cast("string"), F.col("rule_id"))
    return F.substring(F.sha2(key, 256), 1, 32)


def alert_stream(events: DataFrame, rules: list[VersionedRule], devices: dict | None = None) -> DataFrame:
    """Valid events -> alerts (:data:`ALERT_FIELDS`), one per (event, rule it fires). No watermark, no state: late
    events alert too. ``devices``: the device ids of site/sensor_type scopes (:func:`evaluate.scope_devices`)."""
    fired = evaluate.fire(events, rules, devices)
    return fired.select(
        alert_id_column().alias("alert_id"),
        "device_id",
        "sensor_freq",
        "event_time",
        "kafka_timestamp",
        *evaluate.FIRED_COLUMNS,
        F.lit(None).cast("string").alias("detail"),
    )


def compiled_alerts(spark: SparkSession, settings: Settings, events: DataFrame) -> DataFrame:
    """:func:`alert_stream` with the rules in force now (``alert_rules``, seeded on first use)."""
    rules = [r for r in catalog.rules_in_force(spark, settings) if r.rule.stateless]
    named = ", ".join(f"{r.id} v{r.version} ({r.rule.text})" for r in rules[:5]) or "none"
    more = f" and {len(rules) - 5} more" if len(rules) > 5 else ""
    log.warning("%d alert rule(s) in force: %s%s", len(rules), named, more)
    return alert_stream(events, rules, evaluate.scope_devices(spark, settings, rules))


def kafka_columns() -> list[Column]:
    """Alert -> Kafka record columns: key = device_id, value = JSON of the alert fields."""
    value = F.to_json(F.struct(*ALERT_FIELDS), {"ignoreNullFields": "false"})  # every field, null ones too
    return [F.col("device_id").alias("key"), value.alias("value")]


@queries.declare(
    QUERY,
    task="alerts",
    writes="alerts topic",
    trigger_setting="alerts_trigger",
    pool="alerts",
    reload_when=catalog.fingerprint,
)
def start_alerts(spark: SparkSession, settings: Settings, *, wait: bool = True, events: DataFrame | None = None):
    """Run (availableNow) or start (``realtime`` or an interval: ``alerts_trigger``) the alert query, pool ``alerts``.

    Events topic -> 01's parser, valid events only -> the rules in force -> alerts topic, through Spark's Kafka sink.
    The rules are compiled into the query when it starts; the always-on job restarts it when ``alert_rules`` changes.
    A switch between real-time and micro-batch alerts starts where the other mode's checkpoint ended
    (:func:`starting_offsets`): no alert is sent twice.
    """

    if events is None:
        realtime = is_realtime(settings.alerts_trigger)
        starting = starting_offsets(spark, settings, realtime=realtime)
        raw = read_kafka(spark, settings, settings.events_topic, starting_offsets=starting, realtime=realtime)
        events = valid_events(raw, settings)
    return launch(
        compiled_alerts(spark, settings, events).select(*kafka_columns()),
        settings,
        start_alerts.query,
        wait=wait,
        sink=("kafka", sink_options(settings, settings.alerts_topic)),
    )


def starting_offsets(spark: SparkSession, settings: Settings, *, realtime: bool) -> str:
    """Where the alert query starts reading when the other mode's checkpoint got further than its own.

    A real-time run and a micro-batch run keep separate checkpoints (``alerts-realtime`` and ``alerts``: runtimes refuse
    one mode's checkpoint in the other), and the hourly and always-on jobs use one each. A new checkpoint would start
    at ``earliest`` and re-send an alert for every rule-firing event the topic still holds; an old one would re-send
    what the other mode sent since. So when the other checkpoint committed past this one's last commit, this one is
    superseded: it is set aside (renamed ``<checkpoint>.superseded-<time>``, kept for inspection) and the query starts
    at the other's committed end offsets (a partition it never read: at the earliest record). Otherwise ``earliest``,
    which Spark ignores when the checkpoint exists. The jobs run one alert mode at a time (the bundle's rule).
    """
    own = settings.checkpoint_path(QUERY, realtime=realtime)
    other = checkpoint_log.committed_offsets(spark, settings.checkpoint_path(QUERY, realtime=not realtime))
    if other is None or settings.events_topic not in other:  # nothing read, or another topic's
        return "earliest"
    if not checkpoint_log.is_ahead(other, checkpoint_log.committed_offsets(spark, own)):
        return "earliest"
    if os.path.isdir(own):
        aside = f"{own.rstrip('/')}.superseded-{time.strftime('%Y%m%dT%H%M%S')}"
        os.replace(own, aside)
        log.warning("alert checkpoint %s is behind the other mode's: set aside as %s", own, aside)
    offsets = other.get(settings.events_topic, {})
    partitions = {str(p) for p in topic_partitions(settings, settings.events_topic, spark=spark)} | set(offsets)
    return json.dumps({settings.events_topic: {p: offsets.get(p, -2) for p in sorted(partitions, key=int)}})


def read_alerts(spark: SparkSession, settings: Settings) -> DataFrame:
    """The alerts topic as a stream of alerts (:data:`ANOMALY_FIELDS`)."""
    return parse_json_records(read_kafka(spark, settings, settings.alerts_topic), ALERT_SCHEMA).withColumnRenamed(
        "timestamp", "detected_at"
    )


def merge_anomalies_batch(settings: Settings):
    """foreachBatch: alerts read back from the topic -> MERGE into ``anomalies`` on ``alert_id`` (insert if new).

    The merge is idempotent by itself: a replayed batch or a re-sent alert finds its row and adds nothing (the
    first copy's ``detected_at`` stays). A record that is no alert (no id, rule, device or event time: another writer
    of the topic) is left out; the alert lifecycle, which reads the same topic, quarantines it with the reason.
    """

    def write(batch: DataFrame, batch_id: int) -> None:
        rows = (
            batch.dropna(subset=["alert_id", "rule_id", "device_id", "event_time"])
            .dropDuplicates(["alert_id"])
            .select(*ANOMALY_FIELDS, F.to_date("event_time").alias("part_date"))
        )
        Tables(batch.sparkSession, settings).merge_new_rows(rows, "anomalies", "alert_id", ["part_date"])

    return write


@queries.declare(ANOMALIES_QUERY, task="alert_records", writes="anomalies", trigger_setting="records_trigger")
def start_anomalies(spark: SparkSession, settings: Settings, *, wait: bool = True):
    """Run (availableNow) or start (``records_trigger``) the query recording alerts in ``anomalies``, off the latency
    path."""

    return launch(
        read_alerts(spark, settings),
        settings,
        start_anomalies.query,
        wait=wait,
        foreach_batch=merge_anomalies_batch(settings),
    )


def run_alert_path(spark: SparkSession, settings: Settings):
    """Alerts, then their record in ``anomalies`` (availableNow: both to the end of their topics)."""
    return start_alerts(spark, settings), start_anomalies(spark, settings)


def alert_latency(spark: SparkSession, settings: Settings, since=None):
    """``anomalies`` rows detected since ``since`` (all if None) with ``latency_s`` = detected_at - kafka_timestamp:
    from the event reaching Kafka to its alert reaching Kafka. Over a backlog that is the catch-up time; over live
    traffic, the alert path's end-to-end latency."""
    rows = Tables(spark, settings).read("anomalies").select("alert_id", "kafka_timestamp", "detected_at")
    if since is not None:
        rows = rows.where(F.col("detected_at") >= F.lit(since))
    frame = rows.toPandas()
    frame["latency_s"] = (frame.detected_at - frame.kafka_timestamp).dt.total_seconds()
    return frame


def parse_json_records(raw: DataFrame, schema: str) -> DataFrame:
    return raw.select(F.from_json(F.col("value").cast("string"), schema).alias("r"), "timestamp").select(
        "r.*", "timestamp"
    )
