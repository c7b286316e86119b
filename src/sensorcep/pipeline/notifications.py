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

* the groups after each pass, and the ledger rows not yet in ``notifications``, are a small JSON file in the query's
  checkpoint (``groups/<batch id>.json``, written whole or not at all); a pass starts from the file of the batch
  before it, so a replayed batch makes the same messages, with the same ids;
* the ledger's rows are appended exactly once (Delta's ``txnAppId``/``txnVersion``, the version the last batch whose
  rows a commit holds). With an interval trigger the append runs behind the passes (:class:`Ledger`, one thread, in
  batch order, several passes' rows in one commit when it falls behind): a pass does not wait ~1.5 s for a Delta
  commit before the next can send (``benchmarks/notifier_latency.py``). Rows whose append had not committed when the
  job stopped or died are in the last file, and the next run's first pass appends them again under their own
  versions, which Delta skips for those that did commit. A run to the end (``availableNow``) appends in the pass;
* a message is sent at least once: a crash between sending and the ledger's append replays the batch, which sends it
  again with the same notification id, the receivers' idempotency key (the webhook's ``Idempotency-Key``,
  PagerDuty's ``dedup_key``).

Labels: ``rule_id`` and ``device_id`` from the transition, ``severity`` from the rule in force (``warning`` when it
does not say), ``site`` and ``sensor_type`` from the ``devices`` table when there is one (a group rule's incident:
the label its ``device_id`` names, e.g. ``site`` of ``site=plant-1``). The routes (the ``routes``
table's version in force, :mod:`sensorcep.routes.catalog`), the rules' severities and the devices are read when the
query starts; the always-on job restarts it when a new version of the routes is published. The query runs only
when ``routes_file`` names a routes file: with no routes nobody is told, and nothing runs (docs/routes.md).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from datetime import datetime

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sensorcep.io.lake import Tables
from sensorcep.pipeline import queries
from sensorcep.pipeline.ingest import load_devices
from sensorcep.pipeline.streaming import create_tables, launch, writer_id
from sensorcep.routes import catalog as routes_catalog
from sensorcep.routes import silences
from sensorcep.routes.delivery import Message, Outcome, deliver, scope_secrets
from sensorcep.routes.dispatch import CLOSING, PAGING, Change
from sensorcep.routes.model import RouteSet
from sensorcep.routes.notifier import notify
from sensorcep.routes.planning import Incident, Silence
from sensorcep.rules import catalog, grouping
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

    def labels(rule_id: str, device_id: str | None) -> dict[str, str]:
        # a group rule's incident: its group's label; an incident of an alert that named no device: none
        return {
            "rule_id": rule_id,
            "device_id": device_id,
            "severity": severity.get(rule_id, "warning"),
            **devices.get(device_id, grouping.labels_of(device_id or "")),
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


def ledger_frame(spark: SparkSession, entries: list[tuple[int, list[dict]]]) -> DataFrame:
    """Ledger rows of passes ((batch id, :func:`sensorcep.routes.notifier.notify`'s rows)) -> a DataFrame of
    ``notifications``' columns."""
    rows = [{**row, "batch_id": batch_id} for batch_id, each in entries for row in each]
    return spark.createDataFrame(rows, BY_NAME["notifications"].columns)


class Ledger:
    """The ``notifications`` appends of one run: each pass' rows, in batch order, exactly once.

    ``deferred``: appended by a thread of its own while the next passes run (several passes' rows in one commit, its
    ``txnVersion`` the last batch's); otherwise in the pass. :meth:`unwritten` is what the pass' groups file keeps
    until the append commits; :meth:`recover` appends what a stopped or dead run left unwritten. A failed deferred
    append fails the next pass (its rows are in the groups file: the restarted query appends them)."""

    def __init__(self, settings: Settings, deferred: bool):
        self.settings, self.deferred = settings, deferred
        self.lock = threading.Condition()
        self.pending: list[tuple[int, list[dict]]] = []  # not yet committed, in batch order
        self.busy = False  # an append is running
        self.failed: BaseException | None = None

    def unwritten(self) -> list[tuple[int, list[dict]]]:
        with self.lock:
            return list(self.pending)

    def add(self, spark: SparkSession, batch_id: int, rows: list[dict]) -> None:
        """The pass' rows: appended now, or queued for the thread."""
        with self.lock:
            if self.failed is not None:
                failed, self.failed = self.failed, None
                raise RuntimeError("the notifications ledger's last append failed; its rows are kept") from failed
            if rows:
                self.pending.append((batch_id, rows))
            start = self.deferred and self.pending and not self.busy
            if start:
                self.busy = True
        if not self.deferred:
            self._append_pending(spark)
        elif start:
            threading.Thread(target=self._drain, args=(spark,), name="notifications-ledger", daemon=True).start()

    def _drain(self, spark: SparkSession) -> None:
        """The thread: append what is pending until nothing is (checked and given up under the lock, so rows a pass
        adds while the last append runs are never left behind), or an append fails."""
        while True:
            with self.lock:
                if not self.pending or self.failed is not None:
                    self.busy = False
                    self.lock.notify_all()
                    return
            try:
                self._append_pending(spark)
            except BaseException as error:  # handed to the next pass, which fails the query
                with self.lock:
                    self.failed = error

    def _append_pending(self, spark: SparkSession) -> None:
        """One commit of every row pending now."""
        entries = self.unwritten()
        if not entries:
            return
        Tables(spark, self.settings).append_batch(
            ledger_frame(spark, entries), "notifications", writer_id(self.settings, QUERY), entries[-1][0], cache=False
        )
        with self.lock:
            del self.pending[: len(entries)]

    def flush(self, timeout_s: float = 60.0) -> None:
        """Until every row handed over is in the table (or the last append failed)."""
        with self.lock:
            self.lock.wait_for(lambda: not self.busy, timeout=timeout_s)

    def recover(self, spark: SparkSession, left: list[tuple[int, list[dict]]]) -> None:
        """Append the rows a previous run left unwritten (its last groups file) that the table does not hold: each
        pass' rows under its own ``txnVersion``, in order, so Delta skips those an append of that run committed
        (which held every row before its version too)."""
        known = {b for b, _ in self.unwritten()}  # queued in this process: the thread appends them
        lake, writer = Tables(spark, self.settings), writer_id(self.settings, QUERY)
        for batch_id, rows in left:
            if batch_id not in known:
                lake.append_batch(ledger_frame(spark, [(batch_id, rows)]), "notifications", writer, batch_id)


#: the groups after each pass, beside Spark's files in the query's checkpoint: ``<checkpoint>/groups/<batch id>.json``
GROUPS_FOLDER = "groups"
#: how many passes' groups are kept (a replay needs only the batch before it)
GROUPS_KEPT = 10


def _to_json(entries: list[tuple[int, list[dict]]]) -> list:
    return [[b, [{**row, "at": row["at"].isoformat()} for row in rows]] for b, rows in entries]


def _from_json(entries: list) -> list[tuple[int, list[dict]]]:
    return [(b, [{**row, "at": datetime.fromisoformat(row["at"])} for row in rows]) for b, rows in entries]


class Passes:
    """foreachBatch: one notifier pass per micro-batch. The groups after a pass that changed them (and the ledger
    rows not yet appended) are a file in the query's checkpoint (:data:`GROUPS_FOLDER`), kept in memory too between
    batches of one run."""

    def __init__(
        self, settings: Settings, routes: RouteSet, labels, send: Callable[[Message], Outcome], ledger: Ledger
    ):
        self.settings, self.routes, self.labels, self.send, self.ledger = settings, routes, labels, send, ledger
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

    def state_before(self, batch_id: int) -> tuple[dict, list[tuple[int, list[dict]]]]:
        """The groups after the last batch before ``batch_id`` that saved them (none: no group yet), and the ledger
        rows then unwritten. A replayed batch starts where it started the first time: its own file, if it got that
        far, is not read."""
        before = [b for b in self._saved() if b < batch_id]
        if not before:
            return {}, []
        with open(os.path.join(self.folder, f"{before[-1]}.json")) as handle:
            saved = json.load(handle)
        return saved["groups"], _from_json(saved["unwritten"])

    def save(self, batch_id: int, groups: dict, unwritten: list[tuple[int, list[dict]]]) -> None:
        """The groups after ``batch_id`` and the ledger rows not yet appended, written whole or not at all (a
        temporary file, then renamed)."""
        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, f"{batch_id}.json")
        with open(f"{path}.tmp", "w") as handle:
            json.dump({"groups": groups, "unwritten": _to_json(unwritten)}, handle, sort_keys=True)
        os.replace(f"{path}.tmp", path)
        for old in self._saved()[:-GROUPS_KEPT]:
            os.remove(os.path.join(self.folder, f"{old}.json"))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = batch.toPandas()
        if rows.empty:
            return
        spark = batch.sparkSession
        now = pd.Timestamp(rows.pass_at.max()).timestamp()
        if self.last is not None and self.last[0] == batch_id - 1:
            groups = self.last[1]
        else:  # the run's first pass (or a replay): where the file left off, and what it had not appended
            groups, left = self.state_before(batch_id)
            self.ledger.recover(spark, left)
        changes = changes_of(rows, self.labels, now)
        muting = self.silences_now(spark, now)
        ledger, after = notify(self.routes, groups, changes, now, self.send, muting, self.settings.incident_page_url)
        if after != groups or ledger:
            self.save(batch_id, after, [*self.ledger.unwritten(), *([(batch_id, ledger)] if ledger else [])])
        self.ledger.add(spark, batch_id, ledger)
        self.last = (batch_id, after)


def sender(routes: RouteSet, settings: Settings, version: int | None = None) -> Callable[[Message], Outcome]:
    """send(message): to its receiver, the receivers' secrets read from ``routes_secret_scope``. A group formed under
    earlier routes may name a receiver these no longer have: its message is dead-lettered, the reason naming it."""
    secrets = scope_secrets(settings.routes_secret_scope)
    names = {receiver.name for receiver in routes.receivers}
    in_force = f"the routes in force (version {version})" if version else "the routes in force"

    def send(msg: Message) -> Outcome:
        if msg.receiver not in names:
            return Outcome(msg.notification_id, "dead_letter", [f"receiver {msg.receiver} is not in {in_force}"])
        return deliver(routes.receiver(msg.receiver), msg, secrets)

    return send


def ledger_summary(spark: SparkSession, settings: Settings) -> pd.DataFrame:
    """``notifications`` by receiver and status: the messages and the incidents they listed (none yet: no rows)."""
    lake = Tables(spark, settings)
    if not lake.exists("notifications"):
        return pd.DataFrame(columns=["receiver", "status", "messages", "incidents"])
    return (
        lake.read("notifications")
        .groupBy("receiver", "status")
        .agg(F.count("*").alias("messages"), F.sum(F.size("incident_ids")).alias("incidents"))
        .orderBy("receiver", "status")
        .toPandas()
    )


#: the ledger of the last run of the query on each checkpoint in this process
_LEDGERS: dict[str, Ledger] = {}


def flush_ledger(settings: Settings, timeout_s: float = 60.0) -> None:
    """Until the rows this process' notifier handed to its ledger are in ``notifications`` (after a stop: what is
    still unwritten then is appended by the next run's first pass anyway)."""
    ledger = _LEDGERS.get(settings.checkpoint_path(QUERY))
    if ledger is not None:
        ledger.flush(timeout_s)


@queries.declare(
    QUERY,
    task="alert_records",
    writes="notifications",
    pool="alerts",
    reload_when=routes_catalog.fingerprint,
    rewritten_from_start="notifications",
)
def start_notifier(spark: SparkSession, settings: Settings, *, wait: bool = True):
    """``alert_events`` -> the routes' receivers and ``notifications`` (micro-batches, ``trigger``); None when
    ``routes_file`` is empty (nobody to tell). The routes are the ``routes`` table's version in force (seeded from
    ``routes_file``); the always-on job restarts the query when a new version is published."""
    if not settings.routes_file:
        return None
    version, routes = routes_catalog.routes_in_force(spark, settings)
    create_tables(spark, settings, ["alert_events"])  # streamed from its first version, before the lifecycle writes
    checkpoint = settings.checkpoint_path(QUERY)
    if checkpoint in _LEDGERS:  # a restart in this process: the last run's appends end before this run recovers
        _LEDGERS[checkpoint].flush()
    ledger = _LEDGERS[checkpoint] = Ledger(settings, deferred=not settings.runs_to_end)
    passes = Passes(settings, routes, label_source(spark, settings), sender(routes, settings, version), ledger)
    return launch(notifier_input(spark, settings), settings, start_notifier.query, wait=wait, foreach_batch=passes)
