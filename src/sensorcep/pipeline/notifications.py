"""The notifier query: the alert lifecycle's transitions -> messages to the routes' receivers, and a ledger row for
every message and every muted page (``notifications``).

It reads ``alert_events`` as a Delta stream (each commit's new transitions) beside a heartbeat (Spark's rate source,
one row a second), so a pass runs at every trigger even while no incident changes: a group's first message is due
``group_wait`` after its first incident whether or not anything else happens. Each micro-batch is one pass of
:func:`sensorcep.routes.notifier.notify` at the batch's own time (Spark's batch timestamp, which the checkpoint's
offset log keeps: a replayed batch passes at the same time). Paging transitions (``opened``, ``escalated``) join
groups at that time, closing ones (``acked``, ``resolved``) leave them, what is due is sent (retries, then a dead
letter: a receiver that is down never stops the query) and every message and muted page becomes a row.

What is exactly once and what is at least once:

* the groups after each pass are a row of ``notifier_state``, appended with the ledger's rows, each exactly once per
  batch (Delta's ``txnAppId``/``txnVersion``); a pass starts from the groups of the batch before it, so a replayed
  batch makes the same messages, with the same ids, and the ledger holds each once;
* a message is sent at least once: a crash between sending and the ledger's append replays the batch, which sends it
  again with the same notification id, the receivers' idempotency key (the webhook's ``Idempotency-Key``,
  PagerDuty's ``dedup_key``).

Labels: ``rule_id`` and ``device_id`` from the transition, ``severity`` from the rule in force (``warning`` when it
does not say), ``site`` and ``sensor_type`` from the ``devices`` table when there is one. The routes, the rules'
severities and the devices are read when the query starts. The query runs only when ``routes_file`` names a routes
file: with no routes nobody is told, and nothing runs (docs/routes.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sensorcep.io.lake import Tables
from sensorcep.pipeline import queries
from sensorcep.pipeline.streaming import create_tables, launch, writer_id
from sensorcep.routes import silences
from sensorcep.routes.delivery import Message, Outcome, deliver, scope_secrets
from sensorcep.routes.dispatch import CLOSING, PAGING, Change
from sensorcep.routes.model import RouteSet, load_routes
from sensorcep.routes.notifier import notify
from sensorcep.routes.planning import Incident, Silence
from sensorcep.rules import catalog
from sensorcep.schemas import BY_NAME
from sensorcep.settings import Settings, parse_duration

QUERY = "notifier"
#: the transitions a pass reads: those that page, and those that close an incident
READ = (*PAGING, *CLOSING)
#: the columns of a pass' input: a transition, or a heartbeat (every column null but ``pass_at``)
INPUT_COLUMNS = ["incident_id", "rule_id", "device_id", "transition", "at"]
#: the heartbeat's rows per second (the rate source's least): one pass per trigger when nothing else happens
HEARTBEAT_ROWS_PER_S = 1


def notifier_input(spark: SparkSession, settings: Settings) -> DataFrame:
    """New transitions of ``alert_events`` and the heartbeat, each row with the batch's time (``pass_at``)."""
    transitions = (
        Tables(spark, settings)
        .stream("alert_events")
        .where(F.col("incident_id").isNotNull() & F.col("transition").isin(*READ))
        .select(*INPUT_COLUMNS)
    )
    ticks = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", HEARTBEAT_ROWS_PER_S)
        .load()
        .select(
            *[F.lit(None).cast("string").alias(name) for name in INPUT_COLUMNS[:-1]],
            F.lit(None).cast("timestamp").alias("at"),
        )
    )
    # current_timestamp() in a streaming query is the micro-batch's timestamp, recorded in the offset log
    return transitions.unionByName(ticks).withColumn("pass_at", F.current_timestamp())


def label_source(spark: SparkSession, settings: Settings) -> Callable[[str, str], dict[str, str]]:
    """labels(rule_id, device_id): an incident's routing labels (:data:`sensorcep.routes.model.LABELS`)."""
    severity = {rule.id: rule.rule.level for rule in catalog.rules_in_force(spark, settings)}
    lake = Tables(spark, settings)
    devices: dict[str, dict[str, str]] = {}
    if lake.exists("devices"):
        frame = lake.read("devices")
        wanted = [c for c in ("site", "sensor_type") if c in frame.columns]
        if wanted:
            for row in frame.select("device_id", *wanted).collect():
                devices[row["device_id"]] = {c: str(row[c]) for c in wanted if row[c] is not None}

    def labels(rule_id: str, device_id: str) -> dict[str, str]:
        return {
            "rule_id": rule_id,
            "device_id": device_id,
            "severity": severity.get(rule_id, "warning"),
            **devices.get(device_id, {}),
        }

    return labels


def changes_of(rows: pd.DataFrame, labels: Callable[[str, str], dict[str, str]], now: float) -> list[Change]:
    """The pass' transitions as the dispatcher takes them: in event-time order, each at the pass' time (when the
    notifier learns of it: Alertmanager's clock, so ``group_wait`` counts from then)."""
    transitions = rows[rows.incident_id.notna()].sort_values(["at", "incident_id", "transition"])
    return [
        Change(Incident(r.incident_id, labels(r.rule_id, r.device_id)), r.transition, now)
        for r in transitions.itertuples(index=False)
    ]


def ledger_frame(spark: SparkSession, rows: list[dict], batch_id: int) -> DataFrame:
    """Ledger rows (:func:`sensorcep.routes.notifier.notify`'s) -> a DataFrame of ``notifications``' columns."""
    return spark.createDataFrame([{**row, "batch_id": batch_id} for row in rows], BY_NAME["notifications"].columns)


class Passes:
    """foreachBatch: one notifier pass per micro-batch, its groups kept in ``notifier_state`` (and in memory between
    batches of one run)."""

    def __init__(self, settings: Settings, routes: RouteSet, labels, send: Callable[[Message], Outcome]):
        self.settings, self.routes, self.labels, self.send = settings, routes, labels, send
        self.last: tuple[int, dict] | None = None  # (batch id, groups after it)
        self.silenced: tuple[float, list[Silence]] | None = None  # (when read, the silences then)

    def silences_now(self, spark: SparkSession, now: float) -> list[Silence]:
        """The ``silences`` table, read again every ``rules_refresh`` of pass time (a new silence counts within it)."""
        if self.silenced is None or now - self.silenced[0] >= parse_duration(self.settings.rules_refresh):
            self.silenced = (now, silences.current(spark, self.settings))
        return self.silenced[1]

    def groups_before(self, lake: Tables, batch_id: int) -> dict:
        """The groups after the last batch before ``batch_id`` that changed them (none: no group yet)."""
        if self.last is not None and self.last[0] == batch_id - 1:
            return self.last[1]
        if not lake.exists("notifier_state"):
            return {}
        before = lake.read("notifier_state").where(F.col("batch_id") < batch_id)
        latest = before.orderBy(F.col("batch_id").desc()).select("groups").limit(1).collect()
        return json.loads(latest[0]["groups"]) if latest else {}

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        lake = Tables(batch.sparkSession, self.settings)
        rows = batch.toPandas()
        if rows.empty:
            return
        now = pd.Timestamp(rows.pass_at.max()).timestamp()
        groups = self.groups_before(lake, batch_id)
        changes = changes_of(rows, self.labels, now)
        muting = self.silences_now(batch.sparkSession, now)
        ledger, after = notify(self.routes, groups, changes, now, self.send, muting, self.settings.incident_page_url)
        writer = writer_id(self.settings, QUERY)
        if ledger:
            lake.append_batch(ledger_frame(batch.sparkSession, ledger, batch_id), "notifications", writer, batch_id)
        if after != groups:
            state = batch.sparkSession.createDataFrame(
                [(batch_id, json.dumps(after, sort_keys=True), datetime.fromtimestamp(now, timezone.utc))],
                BY_NAME["notifier_state"].columns,
            )
            lake.append_batch(state, "notifier_state", f"{writer}:state", batch_id, cache=False)
        self.last = (batch_id, after)


def sender(routes: RouteSet, settings: Settings) -> Callable[[Message], Outcome]:
    """send(message): to its receiver, the receivers' secrets read from ``routes_secret_scope``."""
    secrets = scope_secrets(settings.routes_secret_scope)
    return lambda msg: deliver(routes.receiver(msg.receiver), msg, secrets)


@queries.declare(QUERY, task="alert_records", writes="notifications, notifier_state", pool="alerts")
def start_notifier(spark: SparkSession, settings: Settings, *, wait: bool = True):
    """``alert_events`` -> the routes' receivers and ``notifications`` (micro-batches, ``trigger``); None when
    ``routes_file`` is empty (nobody to tell)."""
    if not settings.routes_file:
        return None
    routes = load_routes(settings.routes_file)
    create_tables(spark, settings, ["alert_events"])  # streamed from its first version, before the lifecycle writes
    passes = Passes(settings, routes, label_source(spark, settings), sender(routes, settings))
    return launch(notifier_input(spark, settings), settings, start_notifier.query, wait=wait, foreach_batch=passes)
