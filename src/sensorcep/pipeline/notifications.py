"""The notifier query: the alert lifecycle's transitions -> messages to the routes' receivers, and a ledger row for
every message and every muted page (``notifications``).

It reads ``alert_events`` as a Delta stream (each commit's new transitions) beside a heartbeat (Spark's rate source,
one row a second), so a pass runs at every trigger even while no incident changes: a group's first message is due
``group_wait`` after its first incident whether or not anything else happens. Each micro-batch is one pass of
:func:`sensorcep.routes.notifier.notify` at the batch's own time (Spark's batch timestamp, which the checkpoint's
offset log keeps: a replayed batch passes at the same time). Paging transitions (``opened``, ``escalated``) join
groups at their own time (the lifecycle's event time, or the pass' time if that is earlier), so ``group_wait`` counts
from when the incident opened and a group already past it is told in the same pass; closing ones (``acked``,
``resolved``) leave them; what is due is sent (retries, then a dead letter: a receiver that is down never stops the
query) and every message and muted page becomes a row.

What is exactly once and what is at least once:

* the ledger's rows are appended exactly once per batch (Delta's ``txnAppId``/``txnVersion``); the groups after each
  pass are a small JSON file in the query's checkpoint (``groups/<batch id>.json``, written whole or not at all), and
  a pass starts from the groups of the batch before it, so a replayed batch makes the same messages, with the same
  ids, and the ledger holds each once (a Delta table for the groups cost a second commit, ~1.5 s, every pass:
  ``benchmarks/notifier_latency.py``);
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
import os
from collections.abc import Callable

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sensorcep.io.lake import Tables
from sensorcep.pipeline import queries
from sensorcep.pipeline.ingest import load_devices
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
    devices: dict[str, dict[str, str]] = {}
    frame = load_devices(spark, settings)
    if frame is not None:
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
    """The pass' transitions as the dispatcher takes them, in event-time order, each at its own time (the lifecycle's
    event time: ``group_wait`` counts from when the incident opened, not from when the notifier read it), or at the
    pass' time when that is earlier (a clock ahead must not hold a page back)."""
    transitions = rows[rows.incident_id.notna()].sort_values(["at", "incident_id", "transition"])
    return [
        Change(Incident(r.incident_id, labels(r.rule_id, r.device_id)), r.transition, min(_seconds(r.at), now))
        for r in transitions.itertuples(index=False)
    ]


def _seconds(at) -> float:
    moment = pd.Timestamp(at)
    return (moment if moment.tzinfo else moment.tz_localize("UTC")).timestamp()


def ledger_frame(spark: SparkSession, rows: list[dict], batch_id: int) -> DataFrame:
    """Ledger rows (:func:`sensorcep.routes.notifier.notify`'s) -> a DataFrame of ``notifications``' columns."""
    return spark.createDataFrame([{**row, "batch_id": batch_id} for row in rows], BY_NAME["notifications"].columns)


#: the groups after each pass, beside Spark's files in the query's checkpoint: ``<checkpoint>/groups/<batch id>.json``
GROUPS_FOLDER = "groups"
#: how many passes' groups are kept (a replay needs only the batch before it)
GROUPS_KEPT = 10


class Passes:
    """foreachBatch: one notifier pass per micro-batch. The groups after a pass that changed them are a file in the
    query's checkpoint (:data:`GROUPS_FOLDER`), kept in memory too between batches of one run."""

    def __init__(self, settings: Settings, routes: RouteSet, labels, send: Callable[[Message], Outcome]):
        self.settings, self.routes, self.labels, self.send = settings, routes, labels, send
        self.folder = os.path.join(settings.checkpoint_path(QUERY), GROUPS_FOLDER)
        self.last: tuple[int, dict] | None = None  # (batch id, groups after it)
        self.silenced: tuple[float, list[Silence]] | None = None  # (when read, the silences then)

    def silences_now(self, spark: SparkSession, now: float) -> list[Silence]:
        """The ``silences`` table, read again every ``rules_refresh`` of pass time (a new silence counts within it)."""
        if self.silenced is None or now - self.silenced[0] >= parse_duration(self.settings.rules_refresh):
            self.silenced = (now, silences.current(spark, self.settings))
        return self.silenced[1]

    def _saved(self) -> list[int]:
        names = os.listdir(self.folder) if os.path.isdir(self.folder) else []
        return sorted(int(name.removesuffix(".json")) for name in names if name.removesuffix(".json").isdigit())

    def groups_before(self, batch_id: int) -> dict:
        """The groups after the last batch before ``batch_id`` that changed them (none: no group yet). A replayed
        batch starts where it started the first time: its own file, if it got that far, is not read."""
        if self.last is not None and self.last[0] == batch_id - 1:
            return self.last[1]
        before = [b for b in self._saved() if b < batch_id]
        if not before:
            return {}
        with open(os.path.join(self.folder, f"{before[-1]}.json")) as handle:
            return json.load(handle)

    def save(self, batch_id: int, groups: dict) -> None:
        """The groups after ``batch_id``, written whole or not at all (a temporary file, then renamed)."""
        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, f"{batch_id}.json")
        with open(f"{path}.tmp", "w") as handle:
            json.dump(groups, handle, sort_keys=True)
        os.replace(f"{path}.tmp", path)
        for old in self._saved()[:-GROUPS_KEPT]:
            os.remove(os.path.join(self.folder, f"{old}.json"))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = batch.toPandas()
        if rows.empty:
            return
        now = pd.Timestamp(rows.pass_at.max()).timestamp()
        groups = self.groups_before(batch_id)
        changes = changes_of(rows, self.labels, now)
        muting = self.silences_now(batch.sparkSession, now)
        ledger, after = notify(self.routes, groups, changes, now, self.send, muting, self.settings.incident_page_url)
        if ledger:
            lake = Tables(batch.sparkSession, self.settings)
            rows = ledger_frame(batch.sparkSession, ledger, batch_id)
            lake.append_batch(rows, "notifications", writer_id(self.settings, QUERY), batch_id, cache=False)
        if after != groups:
            self.save(batch_id, after)
        self.last = (batch_id, after)


def sender(routes: RouteSet, settings: Settings) -> Callable[[Message], Outcome]:
    """send(message): to its receiver, the receivers' secrets read from ``routes_secret_scope``."""
    secrets = scope_secrets(settings.routes_secret_scope)
    return lambda msg: deliver(routes.receiver(msg.receiver), msg, secrets)


@queries.declare(QUERY, task="alert_records", writes="notifications", pool="alerts")
def start_notifier(spark: SparkSession, settings: Settings, *, wait: bool = True):
    """``alert_events`` -> the routes' receivers and ``notifications`` (micro-batches, ``trigger``); None when
    ``routes_file`` is empty (nobody to tell)."""
    if not settings.routes_file:
        return None
    routes = load_routes(settings.routes_file)
    create_tables(spark, settings, ["alert_events"])  # streamed from its first version, before the lifecycle writes
    passes = Passes(settings, routes, label_source(spark, settings), sender(routes, settings))
    return launch(notifier_input(spark, settings), settings, start_notifier.query, wait=wait, foreach_batch=passes)
