"""The alert lifecycle query: alerts topic + acks topic -> ``alert_events`` (every transition, once) and
``alert_escalations``.

Alerts (read back from the alerts topic: the real-time query's and the stateful rules') and acks (the acks topic) in
one stream, in event time (an alert at its event's time, an ack at its ``ack_time``), behind one watermark, keyed by
a bucket of devices (:func:`~sensorcep.pipeline.timers.device_bucket`) into ``transformWithStateInPandas``. Per
(rule, device) the processor holds the open incident and the inputs the watermark has not passed yet; a timer at the
oldest of them, and at the incident's next deadline (escalation, end of a snooze, quiet close), releases them in
event-time order through :func:`sensorcep.rules.lifecycle.advance`: so the transitions do not depend on the
micro-batches or the arrival order. What each transition means:
:mod:`sensorcep.rules.lifecycle`.

An ack is a JSON object ``{"alert_id", "device_id", "rule_id", "ack_time", "acked_by", "action", "until"}``:
``device_id`` and ``rule_id`` (both on every alert record) name the incident it closes; ``action`` is ``ack`` (the
default) or ``snooze`` (with ``until``, a time). An ack that is not such an object, or whose ``ack_time`` is further
ahead of its Kafka timestamp than ``max_future`` (a client clock running ahead would move the watermark and close
everyone's deadlines), is refused into ``quarantine_events`` with the reason. Alerts and acks too late for the
watermark are kept in ``late_events`` (an ack there has no sensor_freq and its ack_time as event_time).

Writes: ``alert_events`` (appended once per micro-batch: a replayed batch adds nothing), the escalated incidents to
``alert_escalations`` (MERGE on the opening alert's ``alert_id``) and to ``escalations_topic`` when set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from sensorcep.io.kafka import read_kafka, write_kafka
from sensorcep.io.lake import Tables
from sensorcep.pipeline import lateness, queries, timers
from sensorcep.pipeline.alerts import ALERT_SCHEMA, ANOMALY_FIELDS
from sensorcep.pipeline.parsing import (
    KAFKA_COORDINATES,
    RECORD_KEY,
    future_limit,
    record_columns,
    seconds_interval,
)
from sensorcep.pipeline.streaming import launch, materialized, writer_id
from sensorcep.rules import catalog, lifecycle
from sensorcep.rules.catalog import VersionedRule
from sensorcep.rules.model import DEFAULT_LATCH, DEFAULT_SUPPRESS_FOR
from sensorcep.runtime import TRANSFORM_WITH_STATE, require
from sensorcep.settings import Settings, parse_duration

QUERY = "alert_lifecycle"
ACK_SCHEMA = (
    "alert_id string, device_id string, rule_id string, acked_by string, ack_time timestamp, action string, "
    "until timestamp"
)
ACTIONS = ("ack", "snooze")
#: the longest snooze an ack may ask for (a longer one is quarantined: an until given in epoch milliseconds, which
#: Spark reads as seconds, is a date tens of millennia ahead)
LONGEST_SNOOZE_DAYS = 366
#: the processor's input: alerts and acks in one shape (event_time: the alert's event time, or the ack's ack_time)
INPUT_COLUMNS = ["rule_id", "device_id", "at_us", "kind", "alert_id", "action", "until_us", "actor", "alert"]
OUTPUT_SCHEMA = (
    "incident_id string, rule_id string, device_id string, transition string, at_us long, cause_id string, "
    "state string, alerts long, actor string, detail string, alert string"
)
OUTPUT_COLUMNS = [part.split()[0] for part in OUTPUT_SCHEMA.split(", ")]
#: the columns of ``alert_events``
EVENT_COLUMNS = [
    "event_id",
    "incident_id",
    "rule_id",
    "device_id",
    "transition",
    "at",
    "cause_id",
    "pages",
    "state",
    "alerts",
    "actor",
    "detail",
    "batch_id",
    "part_date",
]
#: a chunk of a key's pending inputs: the earliest input time (µs), and the inputs as JSON [[rule_id, device_id,
#: input], ...] (an input: :class:`lifecycle.Input`'s fields)
PENDING_CHUNK = "earliest long, inputs string"


def policies(rules: list[VersionedRule], settings: Settings) -> dict[str, lifecycle.Policy]:
    """Each rule's lifecycle policy by rule id; ``""``: the policy of an alert whose rule is not in force."""
    escalate_us = settings.ack_timeout_seconds * 1_000_000
    text = f"not acknowledged within {settings.ack_timeout}"
    out = {r.id: lifecycle.Policy(r.rule.latched, r.rule.suppress_us, escalate_us, text) for r in rules}
    out[""] = lifecycle.Policy(DEFAULT_LATCH, int(parse_duration(DEFAULT_SUPPRESS_FOR) * 1e6), escalate_us, text)
    return out


class IncidentMachine(StatefulProcessor):
    """Keyed by a bucket of devices (:func:`timers.device_bucket`): ``pending``, the inputs the watermark has not passed
    yet, as a list of chunks (one per micro-batch that brought some, :data:`PENDING_CHUNK`), and ``incidents``, the open
    incident of each (rule, device) of the bucket, as JSON ``[[rule_id, device_id, incident], ...]``.

    A batch's inputs are appended as one chunk. A timer at the earliest pending input (and at the earliest deadline of
    an incident: escalation, end of a snooze, quiet close) releases, per (rule, device), every input at or before the
    watermark through :func:`lifecycle.advance`, as the timer of a key per (rule, device) did; only the chunks that hold
    such inputs are parsed, each replaced by what of it remains (the list is written again only then). A key may hold
    a later timer too (one armed before an earlier one): when it fires with nothing due, it arms the next."""

    def __init__(self, by_rule: dict[str, lifecycle.Policy]):
        self.by_rule = by_rule

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.pending = handle.getListState("pending", PENDING_CHUNK)
        self.incidents = handle.getValueState("incidents", "incidents string")
        self.passes = timers.Passes()

    def _policy(self, rule_id: str) -> lifecycle.Policy:
        return self.by_rule.get(rule_id, self.by_rule[""])

    def _deadline(self, incident_key: tuple[str, str], incident: dict) -> int:
        found = lifecycle.next_deadline_us(incident, self._policy(incident_key[0]))
        return timers.NO_DEADLINE if found is None else found

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        inputs = []
        for frame in rows:
            for row in frame[INPUT_COLUMNS].itertuples(index=False):
                item = {
                    "at_us": int(row.at_us),
                    "kind": row.kind,
                    "alert_id": row.alert_id,
                    "action": row.action or "ack",
                    "until_us": None if pd.isna(row.until_us) else int(row.until_us),
                    "actor": None if pd.isna(row.actor) else row.actor,
                    "alert": json.loads(row.alert) if isinstance(row.alert, str) else {},
                }
                inputs.append([row.rule_id, row.device_id, item])
        if inputs:
            earliest = min(item["at_us"] for _, _, item in inputs)
            self.pending.appendValue((earliest, json.dumps(inputs)))
            timers.arm_before(self.handle, earliest)
        return iter([])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        watermark_ms = self.passes.first(key, timerValues)
        if watermark_ms is None:
            return
        watermark_us = watermark_ms * 1000
        final: dict[tuple[str, str], list[lifecycle.Input]] = {}

        def take(text: str) -> tuple[int, str] | None:
            rest = []
            for rule_id, device_id, item in json.loads(text):
                if item["at_us"] <= watermark_us:
                    final.setdefault((rule_id, device_id), []).append(lifecycle.Input(**item))
                else:
                    rest.append([rule_id, device_id, item])
            return (min(item["at_us"] for _, _, item in rest), json.dumps(rest)) if rest else None

        waiting = timers.release_chunks(self.pending, watermark_us, take)
        held = self.incidents.get()  # None when the key has none: one round trip to the JVM, not two
        incidents = {(rule_id, device_id): found for rule_id, device_id, found in json.loads(held[0])} if held else {}
        due = [k for k, found in incidents.items() if k not in final and self._deadline(k, found) <= watermark_us]
        rows = []
        for rule_id, device_id in [*final, *due]:
            steps, incident = lifecycle.advance(
                incidents.get((rule_id, device_id)),
                final.get((rule_id, device_id), []),
                watermark_us,
                self._policy(rule_id),
            )
            if incident:
                incidents[(rule_id, device_id)] = incident
            else:
                incidents.pop((rule_id, device_id), None)
            rows += [output_row(rule_id, device_id, step) for step in steps]
        if final or due:
            if incidents:
                self.incidents.update((json.dumps([[r, d, found] for (r, d), found in incidents.items()]),))
            else:
                self.incidents.clear()
        deadlines = waiting + [self._deadline(k, found) for k, found in incidents.items()]
        timers.arm(self.handle, [d for d in deadlines if d != timers.NO_DEADLINE])
        if rows:
            yield pd.DataFrame(rows, columns=OUTPUT_COLUMNS)

    def close(self) -> None:
        pass


def output_row(rule_id: str, device_id: str, step: lifecycle.Transition) -> dict:
    return {
        "incident_id": step.incident_id,
        "rule_id": rule_id,
        "device_id": device_id,
        "transition": step.transition,
        "at_us": step.at_us,
        "cause_id": step.cause_id,
        "state": step.state,
        "alerts": step.alerts,
        "actor": step.actor,
        "detail": step.detail,
        "alert": json.dumps(step.alert) if step.alert else None,
    }


def read_acks(spark: SparkSession, settings: Settings) -> DataFrame:
    """The acks topic as acks (:data:`ACK_SCHEMA`) with their record (key, value, Kafka coordinates) and ``reason``:
    null for a usable ack, else why it is refused."""
    raw = read_kafka(spark, settings, settings.acks_topic)
    parsed = raw.select(F.from_json(F.col("value").cast("string"), ACK_SCHEMA).alias("r"), *record_columns()).select(
        "r.*", "key", "value", *KAFKA_COORDINATES
    )
    limit = future_limit(settings)
    ahead = f"ack_time more than {settings.max_future} ahead of its Kafka timestamp or of the ingest clock"
    longest = f"a snooze until more than {LONGEST_SNOOZE_DAYS} days after its ack_time"
    action = F.coalesce(F.col("action"), F.lit("ack"))
    reason = (
        F.when(
            F.col("alert_id").isNull() | F.col("ack_time").isNull(),
            F.lit("ack is not a JSON object with alert_id and ack_time"),
        )
        .when(
            F.col("device_id").isNull() | F.col("rule_id").isNull(),
            F.lit("ack names no device_id and rule_id (every alert record carries both)"),
        )
        .when(~action.isin(*ACTIONS), F.lit(f"ack action is not one of {', '.join(ACTIONS)}"))
        .when((action == "snooze") & F.col("until").isNull(), F.lit("a snooze without until"))
        .when(F.col("ack_time") > limit, F.lit(ahead))
        .when(
            (action == "snooze")
            & (F.col("until") > F.col("ack_time") + seconds_interval(LONGEST_SNOOZE_DAYS * 86_400)),
            F.lit(longest),  # epoch milliseconds given for until read as seconds: a date tens of millennia ahead
        )
    )
    return parsed.select("*", reason.alias("reason"))


def read_alert_records(spark: SparkSession, settings: Settings) -> tuple[DataFrame, DataFrame]:
    """The alerts topic as the lifecycle takes it: its usable alerts (:data:`ANOMALY_FIELDS`, as
    :func:`~sensorcep.pipeline.alerts.read_alerts` gives them) and, beside them, the records it cannot take, with the
    reason (:data:`lateness.QUARANTINE_INPUT`, for ``quarantine_events``): not a JSON alert, no device, no usable
    event time, or an event time further ahead of the record's Kafka timestamp (or the ingest clock) than
    ``max_future``, which would move the lifecycle's watermark past every open incident's deadline."""
    raw = read_kafka(spark, settings, settings.alerts_topic)
    record_time = F.col("_record_time")
    parsed = raw.select(
        F.from_json(F.col("value").cast("string"), ALERT_SCHEMA).alias("r"),
        "key",
        "value",
        *RECORD_KEY,
        F.col("timestamp").alias("_record_time"),
    )
    reason = (
        F.when(
            F.col("r").isNull() | F.col("r.alert_id").isNull() | F.col("r.rule_id").isNull(),
            F.lit("alert is not a JSON object with alert_id and rule_id"),
        )
        .when(F.col("r.device_id").isNull(), F.lit("alert names no device_id (an incident is per rule and device)"))
        .when(F.col("r.event_time").isNull(), F.lit("alert has no event_time that reads as a time"))
        .when(
            F.col("r.event_time") > future_limit(settings, record_time),
            F.lit(f"alert event_time more than {settings.max_future} ahead of its Kafka timestamp or the ingest clock"),
        )
    )
    judged = parsed.select("*", reason.alias("reason"))
    alerts = judged.where(F.col("reason").isNull()).select("r.*", record_time.alias("detected_at"))
    refused = judged.where(F.col("reason").isNotNull()).select(
        "key", "value", *RECORD_KEY, record_time.alias("kafka_timestamp"), "reason"
    )
    return alerts, refused


def lifecycle_inputs(alerts: DataFrame, acks: DataFrame) -> DataFrame:
    """Alerts (:func:`read_alert_records`) and usable acks (:func:`read_acks`, ``reason`` null) in one stream:
    :data:`INPUT_COLUMNS` plus ``event_time`` (the alert's event time, or the ack time) and ``sensor_freq``."""
    a = alerts.where(
        F.col("alert_id").isNotNull()
        & F.col("event_time").isNotNull()
        & F.col("rule_id").isNotNull()
        & F.col("device_id").isNotNull()  # an incident is per rule and device (and the page and the routes name it)
    )
    from_alerts = a.select(
        "rule_id",
        "device_id",
        "event_time",
        F.lit("alert").alias("kind"),
        "alert_id",
        F.lit(None).cast("string").alias("action"),
        F.lit(None).cast("long").alias("until_us"),
        F.lit(None).cast("string").alias("actor"),
        F.to_json(F.struct(*ANOMALY_FIELDS)).alias("alert"),
        "sensor_freq",
    )
    from_acks = acks.where(F.col("reason").isNull()).select(
        "rule_id",
        "device_id",
        F.col("ack_time").alias("event_time"),
        F.lit("ack").alias("kind"),
        "alert_id",
        F.coalesce("action", F.lit("ack")).alias("action"),
        F.unix_micros("until").alias("until_us"),
        F.col("acked_by").alias("actor"),
        F.lit(None).cast("string").alias("alert"),
        F.lit(None).cast("double").alias("sensor_freq"),
    )
    return from_alerts.unionByName(from_acks)


def lifecycle_stream(
    alerts: DataFrame,
    acks: DataFrame,
    settings: Settings,
    by_rule: dict[str, lifecycle.Policy],
    *,
    keep_late=False,
    refused_alerts: DataFrame | None = None,
) -> DataFrame:
    """Alerts and acks -> transitions (:data:`OUTPUT_SCHEMA`). ``keep_late``: the stream also carries its input
    (for :func:`lateness.late_event_writer` to keep what was too late), the refused acks and ``refused_alerts``
    (:func:`read_alert_records`)."""
    timed = lifecycle_inputs(alerts, acks).withWatermark("event_time", settings.interval("watermark_delay"))
    transitions = transitions_of(timed, by_rule)
    if not keep_late:
        return transitions
    refused = acks.where(F.col("reason").isNotNull()).select(*lateness.QUARANTINE_INPUT)
    if refused_alerts is not None:
        refused = refused.unionByName(refused_alerts.select(*lateness.QUARANTINE_INPUT))
    return lateness.with_input(transitions, timed, rejected=refused)


def transitions_of(timed: DataFrame, by_rule: dict[str, lifecycle.Policy]) -> DataFrame:
    """:func:`lifecycle_inputs`' stream behind its watermark -> transitions (:data:`OUTPUT_SCHEMA`)."""
    require(TRANSFORM_WITH_STATE, timed.sparkSession)
    # the alerts topic is written at least once: a re-sent alert is dropped here; so are the rows behind the watermark
    # (Spark's Python transformWithState passes them on: lateness.py keeps them)
    record = F.concat_ws("|", "kind", "alert_id", "action", F.coalesce(F.col("until_us").cast("string"), F.lit("")))
    return (
        timed.withColumn("record_id", record)
        .dropDuplicates(["record_id", "event_time"])
        .select(
            *INPUT_COLUMNS[:2], F.unix_micros("event_time").alias("at_us"), *INPUT_COLUMNS[3:], timers.device_bucket()
        )
        .groupBy("device_bucket")
        .transformWithStateInPandas(
            statefulProcessor=IncidentMachine(by_rule),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="EventTime",
        )
    )


def event_rows(transitions: DataFrame, batch_id: int) -> DataFrame:
    """Transitions -> ``alert_events`` rows (:data:`EVENT_COLUMNS`); ``event_id`` is derived from the transition."""
    at = F.timestamp_micros("at_us")
    key = F.concat_ws(
        "|", F.coalesce("incident_id", F.lit("")), "rule_id", "device_id", "transition", "at_us", "cause_id"
    )
    pages = F.col("transition").isin(*[name for name, paging in lifecycle.PAGES.items() if paging])
    return transitions.select(
        F.substring(F.sha2(key, 256), 1, 32).alias("event_id"),
        "incident_id",
        "rule_id",
        "device_id",
        "transition",
        at.alias("at"),
        "cause_id",
        pages.alias("pages"),
        "state",
        "alerts",
        "actor",
        "detail",
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.to_date(at).alias("part_date"),
    )


def escalation_rows(transitions: DataFrame, settings: Settings) -> DataFrame:
    """The escalated transitions -> ``alert_escalations`` rows: the incident's first alert (:data:`ANOMALY_FIELDS`),
    its ``ack_deadline``, ``escalated_at`` (wall clock) and ``reason``."""
    first = F.from_json("alert", f"{ALERT_SCHEMA}, detected_at timestamp")
    escalated = transitions.where(F.col("transition") == "escalated").select(first.alias("a"), "detail")
    return escalated.select(
        *[F.col(f"a.{name}").alias(name) for name in ANOMALY_FIELDS],
        (F.col("a.event_time") + seconds_interval(settings.ack_timeout_seconds)).alias("ack_deadline"),
        F.current_timestamp().alias("escalated_at"),
        F.col("detail").alias("reason"),
    )


def write_transitions_batch(settings: Settings):
    """foreachBatch: transitions -> ``alert_events`` (exactly once per batch); escalations -> ``alert_escalations``
    (one row per incident: MERGE, insert if new) and the new ones to ``escalations_topic`` when set (at least once:
    a batch cut short between the two sends again)."""

    def write(batch: DataFrame, batch_id: int) -> None:
        lake = Tables(batch.sparkSession, settings)
        with materialized(batch) as transitions:
            lake.append_batch(
                event_rows(transitions, batch_id),
                "alert_events",
                writer_id(settings, QUERY, "events"),
                batch_id,
                ["part_date"],
            )
            escalated = escalation_rows(transitions, settings)
            columns = [*escalated.columns, "part_date"]
            out = escalated.dropDuplicates(["alert_id"]).select(
                "*",
                F.to_date("event_time").alias("part_date"),
                F.col("device_id").alias("key"),
                F.to_json(F.struct(*escalated.columns)).alias("value"),
            )
            with materialized(out) as rows:
                if rows.isEmpty():
                    return
                if lake.exists("alert_escalations"):
                    rows = rows.join(lake.read("alert_escalations").select("alert_id"), "alert_id", "left_anti")
                if settings.escalations_topic:
                    write_kafka(rows.select(["key", "value"]), settings, settings.escalations_topic)
                lake.merge_new_rows(rows.select(columns), "alert_escalations", "alert_id", ["part_date"])

    return write


@queries.declare(
    QUERY,
    task="alert_records",
    writes="alert_events, alert_escalations, quarantine_events, escalations topic, late_events",
    rewritten_from_start="alert_events",
    pool="alerts",
    reload_when=catalog.fingerprint,
    fixed_settings="watermark_delay, ack_timeout",
)
def start_alert_lifecycle(spark: SparkSession, settings: Settings, *, wait: bool = True):
    """Alerts topic + acks topic -> ``alert_events`` and ``alert_escalations`` (micro-batches, ``trigger``). The rules'
    ``latch`` and ``suppress_for`` are read when the query starts; the always-on job restarts it when they change."""
    by_rule = policies(catalog.rules_in_force(spark, settings), settings)
    (alerts, refused), acks = read_alert_records(spark, settings), read_acks(spark, settings)
    # the alerts topic is written at least once: a late alert can arrive twice, and is kept once
    writer = lateness.late_event_writer(settings, QUERY, write_transitions_batch(settings), input_repeats=True)
    stream = lifecycle_stream(alerts, acks, settings, by_rule, keep_late=True, refused_alerts=refused)
    return launch(stream, settings, start_alert_lifecycle.query, wait=wait, foreach_batch=writer)


def open_alerts(spark: SparkSession, settings: Settings) -> pd.DataFrame:
    """The incidents open now (their latest transition is not a close), newest first, from ``alert_events``."""
    events = Tables(spark, settings).read("alert_events").where(F.col("incident_id").isNotNull()).toPandas()
    if events.empty:
        return events
    latest = events.sort_values(["at", "event_id"]).groupby("incident_id").tail(1)
    opened = events[events.transition == "opened"].set_index("incident_id")["at"]
    still = latest[latest.state != lifecycle.CLOSED].assign(opened_at=lambda f: f.incident_id.map(opened))
    columns = ["incident_id", "rule_id", "device_id", "state", "alerts", "opened_at", "at", "transition"]
    return (
        still[columns]
        .rename(columns={"at": "last_change", "transition": "last"})
        .sort_values("opened_at", ascending=False)
    )
