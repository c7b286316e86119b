"""01 ingest: Kafka -> validate/parse -> quarantine | dedup -> bronze Delta."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.util import inheritable_thread_target

from sensorcep.errors import SensorCepError
from sensorcep.io.kafka import read_kafka, topic_partitions
from sensorcep.io.lake import Tables
from sensorcep.pipeline import queries
from sensorcep.pipeline.parsing import RECORD_KEY, parse_events, parsed_once, quarantine_rows
from sensorcep.pipeline.streaming import checkpoint_exists, launch
from sensorcep.settings import Settings

QUERY = "ingest"
#: a parsed valid event as the downstream queries read it
EVENT_FIELDS = ["device_id", "sensor_freq", "event_time", "kafka_timestamp"]
BRONZE_COLUMNS = ["device_id", "sensor_freq", "event_time", "topic", "partition", "offset", "kafka_timestamp"]


def bronze_stream(raw: DataFrame, settings: Settings, devices: DataFrame | None = None) -> DataFrame:
    """Parsed records, valid events and quarantine rows together: stateless, no watermark.

    Deduplication happens in each micro-batch against ``bronze_events`` itself (:func:`write_ingest_batch`), not with
    a watermark on the Kafka timestamp: that timestamp is the producer's clock, and a watermark on it silently drops
    every record stamped before the fastest clock in the fleet.
    """
    stream = parse_events(raw, settings).select(
        *BRONZE_COLUMNS,
        *settings.extra_field_names,
        "reason",
        # only a bad record keeps its raw bytes (for quarantine): a batch is cached, and most of it is valid
        F.when(F.col("reason").isNotNull(), F.col("value")).alias("raw_value"),
    )
    if devices is not None:
        stream = stream.join(F.broadcast(devices), "device_id", "left")
    return stream


def valid_events(raw: DataFrame, settings: Settings) -> DataFrame:
    """Kafka rows -> parsed valid events (device_id, sensor_freq, event_time, kafka_timestamp, the ``extra_fields``),
    01's rules.

    Bad records are not passed on: 01 ingest already quarantines them with their reason.
    """
    parsed = parsed_once(parse_events(raw, settings))
    return parsed.where(F.col("reason").isNull()).select(*EVENT_FIELDS, *settings.extra_field_names)


def valid_event_stream(spark: SparkSession, settings: Settings) -> DataFrame:
    """The events topic -> parsed valid events (a second parse: for tests and benchmarks that bypass bronze)."""
    return valid_events(read_kafka(spark, settings, settings.events_topic), settings)


class BronzeMissingError(SensorCepError, RuntimeError):
    """``bronze_events`` does not exist yet: 01 ingest has not run."""


def wait_for_bronze(spark: SparkSession, settings: Settings, timeout_s: float = 600.0) -> None:
    """Until ``bronze_events`` exists (the always-on job starts ingest and sampling together; ingest's first
    batch creates the table). Raises :class:`BronzeMissingError` after ``timeout_s``."""

    lake = Tables(spark, settings)
    deadline = time.monotonic() + timeout_s
    while not lake.exists("bronze_events"):  # polling a condition
        if time.monotonic() > deadline:
            raise BronzeMissingError(
                f"{lake['bronze_events']} did not appear within {timeout_s:.0f} s: is the ingest task running?"
            )
        time.sleep(1.0)


def bronze_event_stream(spark: SparkSession, settings: Settings, extra_fields: list[str] | None = None) -> DataFrame:
    """``bronze_events`` as a Delta stream of valid events (EVENT_FIELDS, and the ``extra_fields`` asked for, kept
    through the setting of that name): the input of 02's stateful queries.

    The medallion: each Kafka record is parsed and deduplicated once, in 01; downstream reads the Delta table, so
    sampling can be replayed or backfilled from bronze long after Kafka's retention dropped the records.
    """
    lake = Tables(spark, settings)
    if not lake.exists("bronze_events"):
        raise BronzeMissingError(
            f"{lake['bronze_events']} does not exist yet: 02 reads bronze_events, which 01 ingest writes; "
            "run 01 (the ingest task) first"
        )
    return lake.stream("bronze_events").select(*EVENT_FIELDS, *(extra_fields or []))


#: an event's identity: a second record with the same key is a duplicate of the first
EVENT_KEY = ["device_id", "event_time"]
#: the columns of ``duplicate_events``: the record, and the bronze event it repeats
DUPLICATE_COLUMNS = [
    "device_id",
    "event_time",
    "sensor_freq",
    "topic",
    "partition",
    "offset",
    "kafka_timestamp",
    "duplicate_of_partition",
    "duplicate_of_offset",
    "ingest_time",
    "part_date",
]


#: the valid rows of its latest batches an ingest run keeps cached (about 100 bytes a row) to look records up in, not
#: bronze: at 10,000 events/s, the last 100 s of the fleet's events; a record later than that is looked up in bronze
KEPT_ROWS = 1_000_000
#: and at most this many batches (a quiet fleet's batches are small: each kept batch is one more branch of the lookup)
KEPT_BATCHES = 8
#: at most this many of a batch's keys found in bronze or the kept batches come back to the driver; more (a batch read
#: again after a reset), and the batch is judged against bronze's event-time range instead
FOUND_ROWS = 20_000


def write_ingest_batch(
    settings: Settings,
    extra_columns: list[str],
    *,
    kept_rows: int = KEPT_ROWS,
    kept_batches: int = KEPT_BATCHES,
    found_rows: int = FOUND_ROWS,
):
    """foreachBatch of ingest: every record of the batch ends in exactly one of three tables.

    * ``quarantine_events``: bad records, with the reason;
    * ``bronze_events``: the first record of each event key (device_id, event_time) that bronze does not hold yet;
    * ``duplicate_events``: every other valid record, with the Kafka coordinates of the bronze record it repeats.

    Which records are new is decided by ranking the batch's valid records by key and looking the batch's keys up in
    what bronze holds: first in this run's latest batches, kept cached (:class:`RecentBatches`: at most ``kept_rows``
    valid rows in at most ``kept_batches`` batches), and in bronze itself only for records no later than what those
    cover (a record re-sent or held back longer; every record, in a run's first batch after a restart). The keys found
    (at most ``found_rows``, else the batch is judged against bronze's event-time range, as after a reset) come back to
    the driver and join the ranking as a broadcast. A record whose own coordinates a table already holds was written by
    an earlier attempt of this batch (a replay): it goes nowhere again, so the three writes are idempotent without
    writer ids, also across a checkpoint reset. Each write is a blind append (no MERGE); empty sides are not written.

    The three appends run side by side (quarantine while the batch is judged, duplicates beside bronze); a new
    checkpoint reads bronze's last batch again (:func:`resume_offsets`).

    The function returned has ``release()``: let go of the batches it keeps cached (a run to the end calls it).
    """
    columns = [*BRONZE_COLUMNS, *settings.extra_field_names, *extra_columns, "ingest_time", "part_date"]
    existing: set[str] = set()  # tables seen to exist: a running query's tables do not go away
    fences: dict[str, Fence] = {}  # per table, what it held when this run first wrote it
    recent: list[RecentBatches] = []  # one, made at the run's first batch (it asks bronze's latest event time)

    def write(batch: DataFrame, batch_id: int) -> None:
        lake = KnownTables(batch.sparkSession, settings, existing)
        if not recent:
            recent.append(RecentBatches(_latest_event_time(lake), kept_rows, kept_batches))
        kept = recent[0]
        batch = batch.persist()
        judged, keep = None, False
        try:
            # the three appends run side by side, each in a thread of its own (a Delta commit is mostly waiting):
            # quarantine while the batch is judged, duplicates while bronze is appended; the pool's exit waits for them
            with ThreadPoolExecutor(2, thread_name_prefix="ingest-append") as beside:
                appends = []
                append = inheritable_thread_target(batch.sparkSession)(_append_unheld)  # the query's pool and tags
                span = _span(batch, kept.floor)  # the one pass that parses (and caches) the batch
                if span.bad:
                    bad = quarantine_rows(
                        batch.where(F.col("reason").isNotNull())
                        .withColumnRenamed("raw_value", "value")
                        .withColumn("key", F.lit(None).cast("binary"))
                    )
                    appends.append(beside.submit(append, lake, bad, "quarantine_events", span, fences))
                good = batch.where(F.col("reason").isNull()).withColumn("part_date", F.to_date("event_time"))
                if span.good:
                    judged, keep = _judge(good, lake, span, kept, found_rows)
                    judged = judged.persist()
                    counts = judged.agg(
                        F.count(F.when(F.col("_new"), 1)).alias("new"),
                        F.count(F.when(F.col("_duplicate"), 1)).alias("duplicates"),
                    ).first()
                    if counts["duplicates"]:
                        dups = _stamped(judged.where("_duplicate")).select(*DUPLICATE_COLUMNS)
                        appends.append(beside.submit(append, lake, dups, "duplicate_events", span, fences))
                if judged is not None and counts["new"]:
                    lake.write(
                        _stamped(judged.where("_new")).select(*columns), "bronze_events", "append", ["part_date"]
                    )
                elif not lake.exists("bronze_events"):  # no valid event; the first batch still creates bronze (empty)
                    lake.write(_stamped(good).select(*columns).limit(0), "bronze_events", "append", ["part_date"])
                for done in appends:
                    done.result()  # a failed append fails the batch
            if judged is not None:
                if keep:
                    kept.keep(judged, span.good, span.hi)
                else:
                    kept.forget(span.hi)
        except BaseException:
            kept.forget(None)  # a failed batch ends the run: nothing stays cached
            keep = False
            raise
        finally:
            if judged is not None and not keep:
                judged.unpersist()
            batch.unpersist()

    def release() -> None:
        if recent:
            recent[0].forget(None)

    write.release = release
    return write


class RecentBatches:
    """An ingest run's latest batches, cached with their judgement (``_new``: the rows appended to bronze): where a
    batch's keys are looked up before bronze.

    ``floor``: every bronze row with a later event time was appended by a batch kept here, so only records at or
    before it need bronze read. It starts at bronze's latest event time when the run began (None: bronze held
    nothing) and rises to a batch's latest event time as the batch is let go (oldest first, past ``kept_rows`` or
    ``kept_batches``)."""

    def __init__(self, floor, kept_rows: int, kept_batches: int = KEPT_BATCHES):
        self.floor, self.kept_rows, self.kept_batches = floor, kept_rows, kept_batches
        self.batches: list[tuple[DataFrame, int, object]] = []  # (judged, valid rows, latest event time)

    def held(self, lo, hi) -> DataFrame | None:
        """The kept batches' bronze rows with event times in [lo, hi] (and after the floor), as :func:`_held` names
        their columns; None when nothing is kept."""
        rows = None
        for judged, _, _ in self.batches:
            part = judged.where("_new").where(F.col("event_time").between(F.lit(lo), F.lit(hi)))
            if self.floor is not None:
                part = part.where(F.col("event_time") > F.lit(self.floor))
            rows = _held(part) if rows is None else rows.unionAll(_held(part))
        return rows

    def keep(self, judged: DataFrame, rows: int, latest) -> None:
        self.batches.append((judged, rows, latest))
        while len(self.batches) > self.kept_batches or (
            len(self.batches) > 1 and sum(n for _, n, _ in self.batches) > self.kept_rows
        ):
            oldest, _, until = self.batches.pop(0)
            self._rise(until)
            oldest.unpersist()

    def forget(self, latest) -> None:
        """Let every kept batch go (the floor rises past them and to ``latest``: a batch judged against bronze)."""
        for judged, _, until in self.batches:
            self._rise(until)
            judged.unpersist()
        self.batches.clear()
        self._rise(latest)

    def _rise(self, until) -> None:
        if until is not None and (self.floor is None or until > self.floor):
            self.floor = until


def _latest_event_time(lake: Tables):
    """Bronze's latest event time (None: empty or missing), from Delta's file statistics where they answer it."""
    if not lake.exists("bronze_events"):
        return None
    return lake.read("bronze_events").agg(F.max("event_time")).first()[0]


def _stamped(rows: DataFrame) -> DataFrame:
    """+ ``ingest_time``, added as a table is written, not before the batch is cached: the time is a literal in the
    generated code, and in the cached plan it made Spark compile the parsing code again every micro-batch."""
    return rows.withColumn("ingest_time", F.current_timestamp())


class KnownTables(Tables):
    """:class:`Tables` that remembers which tables exist (each check is a catalog or log lookup, per batch)."""

    def __init__(self, spark: SparkSession, settings: Settings, existing: set[str]):
        super().__init__(spark, settings)
        self.existing = existing

    def exists(self, name: str) -> bool:
        if name not in self.existing and super().exists(name):
            self.existing.add(name)
        return name in self.existing


#: a table's highest Kafka offset per (topic, partition)
Fence = dict[tuple[str, int], int]


@dataclass(frozen=True)
class BatchSpan:
    """What one pass over a batch tells: its valid and bad records, how many valid ones are no later than the kept
    batches' floor (``old``: :class:`RecentBatches`), its valid events' time range, and the Kafka
    offsets it covers: ``ranges`` (first and last offset per (topic, partition)) and ``offsets`` (a Column: true for a
    row of a table whose coordinates fall in them)."""

    good: int
    bad: int
    old: int
    lo: object
    hi: object
    ranges: dict[tuple[str, int], tuple[int, int]]
    offsets: Column

    def reaches(self, fence: Fence) -> bool:
        """Whether the batch starts at or before an offset the table held: it may repeat records it holds."""
        return any(first <= fence.get(where, -1) for where, (first, _) in self.ranges.items())


def _span(batch: DataFrame, floor=None) -> BatchSpan:
    valid = F.col("reason").isNull()
    old = valid & (F.col("event_time") <= F.lit(floor)) if floor is not None else F.lit(False)
    rows = (
        batch.groupBy("topic", "partition")
        .agg(
            F.min("offset").alias("first"),
            F.max("offset").alias("last"),
            F.count(F.when(valid, 1)).alias("good"),
            F.count(F.when(~valid, 1)).alias("bad"),
            F.count(F.when(old, 1)).alias("old"),
            F.min(F.when(valid, F.col("event_time"))).alias("lo"),
            F.max(F.when(valid, F.col("event_time"))).alias("hi"),
        )
        .collect()
    )
    offsets = F.lit(False)
    for row in rows:
        offsets = offsets | (
            (F.col("topic") == row["topic"])
            & (F.col("partition") == row["partition"])
            & F.col("offset").between(row["first"], row["last"])
        )
    times = [row["lo"] for row in rows if row["lo"] is not None], [row["hi"] for row in rows if row["hi"] is not None]
    return BatchSpan(
        good=sum(row["good"] for row in rows),
        bad=sum(row["bad"] for row in rows),
        old=sum(row["old"] for row in rows),
        lo=min(times[0], default=None),
        hi=max(times[1], default=None),
        ranges={(row["topic"], row["partition"]): (row["first"], row["last"]) for row in rows},
        offsets=offsets,
    )


def _append_unheld(lake: Tables, rows: DataFrame, name: str, span: BatchSpan, fences: dict[str, Fence]) -> None:
    """Append the rows whose Kafka coordinates the table does not hold yet.

    Only a batch that reaches into what the table held when this run first wrote it can repeat rows (a batch
    replayed after a crash, or read again after a checkpoint reset: always the run's first batches); for those,
    the batch's own offset range is read back (the table's file statistics on ``offset`` skip the rest) and left
    out. The fence is asked once per run and table; the run's own batches never overlap one another.
    """
    if name not in fences:
        fences[name] = _held_offsets(lake, name) if lake.exists(name) else {}
    if span.reaches(fences[name]):
        held = lake.read(name).where(span.offsets).select(*RECORD_KEY)
        rows = rows.join(held, RECORD_KEY, "left_anti")
    lake.write(rows, name, "append", ["part_date"])


def _held_offsets(lake: Tables, name: str) -> Fence:
    rows = lake.read(name).groupBy("topic", "partition").agg(F.max("offset").alias("last")).collect()
    return {(row["topic"], row["partition"]): row["last"] for row in rows}


def _held(rows: DataFrame) -> DataFrame:
    """Bronze rows as the lookup names them: the key and the row's Kafka coordinates (``_b_topic``, ``_b_partition``,
    ``_b_offset``)."""
    return rows.select(
        *EVENT_KEY,
        F.col("topic").alias("_b_topic"),
        F.col("partition").alias("_b_partition"),
        F.col("offset").alias("_b_offset"),
    )


def _bronze_range(lake: Tables, lo, hi) -> DataFrame:
    """Bronze's rows with event times in [lo, hi] (Delta skips the ``part_date`` partitions and files outside it)."""
    return _held(
        lake.read("bronze_events")
        .where(F.col("part_date").between(F.to_date(F.lit(lo)), F.to_date(F.lit(hi))))
        .where(F.col("event_time").between(F.lit(lo), F.lit(hi)))
    )


def _judge(good: DataFrame, lake: Tables, span: BatchSpan, kept: RecentBatches, found_rows: int):
    """The batch's valid records with ``_new`` (to append to bronze) and ``_duplicate`` (+ whose duplicate); and
    whether the judgement may be kept for the next batches to look up in: it may when it joins only the keys found,
    brought to the driver (it then depends on neither the kept batches nor bronze)."""
    first = Window.partitionBy(*EVENT_KEY).orderBy(*RECORD_KEY)
    ranked = good.select(
        "*",
        F.row_number().over(first).alias("_copy"),
        F.first("partition").over(first).alias("_first_partition"),
        F.first("offset").over(first).alias("_first_offset"),
    )
    held = kept.held(span.lo, span.hi)
    if span.old and lake.exists("bronze_events"):  # records no later than the floor: bronze itself holds theirs
        older = _bronze_range(lake, span.lo, min(span.hi, kept.floor))
        held = older if held is None else held.unionAll(older)
    found, keep = [], True
    if held is not None:
        found = (
            held.join(good.select(*EVENT_KEY), EVENT_KEY, "left_semi")
            .select("device_id", F.unix_micros("event_time").alias("_t"), "_b_topic", "_b_partition", "_b_offset")
            .limit(found_rows + 1)
            .collect()
        )
    if len(found) > found_rows:  # many of the batch's keys are held (a batch read again): judged against bronze
        keep = False
        ranked = ranked.join(_bronze_range(lake, span.lo, span.hi), EVENT_KEY, "left")
    elif found:
        types = {name: good.schema[name].dataType.simpleString() for name in ("topic", "partition", "offset")}
        table = good.sparkSession.createDataFrame(
            found,
            f"device_id string, _t bigint, _b_topic {types['topic']}, _b_partition {types['partition']}, "
            f"_b_offset {types['offset']}",
        ).select("device_id", F.timestamp_micros("_t").alias("event_time"), "_b_topic", "_b_partition", "_b_offset")
        ranked = ranked.join(F.broadcast(table), EVENT_KEY, "left")
    else:
        ranked = ranked.select("*", *[F.lit(None).alias(c) for c in ("_b_topic", "_b_partition", "_b_offset")])
    in_bronze = F.col("_b_offset").isNotNull()
    itself = (
        in_bronze
        & (F.col("_b_topic") == F.col("topic"))
        & (F.col("_b_partition") == F.col("partition"))
        & (F.col("_b_offset") == F.col("offset"))
    )
    judged = ranked.select(
        *[c for c in good.columns if c not in ("reason", "raw_value")],  # a valid record has neither
        (~in_bronze & (F.col("_copy") == 1)).alias("_new"),
        ((in_bronze & ~itself) | (~in_bronze & (F.col("_copy") > 1))).alias("_duplicate"),
        F.coalesce("_b_partition", "_first_partition").alias("duplicate_of_partition"),
        F.coalesce("_b_offset", "_first_offset").alias("duplicate_of_offset"),
    )  # the ranking's helpers are left out: the result is cached, and only what is written is kept
    return judged, keep


def resume_offsets(spark: SparkSession, settings: Settings) -> str:
    """Where a NEW ingest checkpoint starts reading: in each partition, at the last batch that appended to bronze.

    A batch's three appends run side by side, so of the last batch, quarantine or duplicates may not have committed
    when bronze's did; every earlier batch committed all three (a batch starts once the one before has ended). So the
    new checkpoint reads, in each partition, the last batch that appended rows of it to bronze again (and any batch
    after it that appended none): it starts after the highest offset of the partition's rows from earlier batches.
    A batch's rows share one ``ingest_time`` (one per append), and the partition's last batch is the one that holds its
    highest offset: no clock is compared. The records read again add nothing where a table already holds them (the
    appends are idempotent, :func:`write_ingest_batch`). Partitions bronze holds no earlier batch of start at the
    earliest record; ``earliest`` when it holds none of any partition.
    """
    lake = Tables(spark, settings)
    if not lake.exists("bronze_events"):
        return "earliest"
    bronze = lake.read("bronze_events").where(F.col("topic") == settings.events_topic)
    last_batch = bronze.groupBy("partition").agg(F.max_by("ingest_time", "offset").alias("_last_batch"))
    held = (
        bronze.join(last_batch, "partition")
        .where(F.col("ingest_time") != F.col("_last_batch"))
        .groupBy("partition")
        .agg(F.max("offset").alias("last"))
        .collect()
    )
    last = {int(row["partition"]): int(row["last"]) for row in held}
    if not last:  # bronze holds no batch before its last: every partition from its start
        return "earliest"
    partitions = set(topic_partitions(settings, settings.events_topic, spark=spark)) | set(last)
    return json.dumps({settings.events_topic: {str(p): last[p] + 1 if p in last else -2 for p in sorted(partitions)}})


def quarantine_reasons(spark: SparkSession, settings: Settings) -> pd.DataFrame:
    """``quarantine_events`` by reason, most frequent first (unparseable times grouped under one reason)."""
    lake = Tables(spark, settings)
    if not lake.exists("quarantine_events"):
        return pd.DataFrame({"reason": pd.Series([], dtype=object), "count": pd.Series([], dtype="int64")})
    reason = F.regexp_replace("reason", r"^unparseable event_time .*", "unparseable event_time").alias("reason")
    return lake.read("quarantine_events").groupBy(reason).count().orderBy(F.desc("count"), "reason").toPandas()


def load_devices(spark: SparkSession, settings: Settings) -> DataFrame | None:
    lake = Tables(spark, settings)
    return lake.read("devices") if lake.exists("devices") else None


@queries.declare(QUERY, task="ingest", writes="bronze_events, quarantine_events, duplicate_events")
def start_ingest(spark: SparkSession, settings: Settings, *, wait: bool = True):
    """Run (availableNow: to the end of the topic) or start (interval trigger) the ingest query.

    A new checkpoint (first run, or after a reset) starts after the records bronze already holds
    (:func:`resume_offsets`), not at the start of the topic.
    """
    devices = load_devices(spark, settings)
    extra = [c for c in devices.columns if c != "device_id"] if devices is not None else []
    starting = "earliest" if checkpoint_exists(settings, QUERY) else resume_offsets(spark, settings)
    raw = read_kafka(spark, settings, settings.events_topic, starting_offsets=starting, waits_for_records=True)
    stream = bronze_stream(raw, settings, devices)
    # bronze holds its extra fields and devices columns from its first version: its Delta readers never see it change
    added = [f"`{name}` string" for name in settings.extra_field_names]
    if devices is not None:
        added += [f"`{f.name}` {f.dataType.simpleString()}" for f in devices.schema.fields if f.name != "device_id"]
    Tables(spark, settings).create(start_ingest.query.tables, {"bronze_events": ", ".join(added)})
    write = write_ingest_batch(settings, extra)
    query = launch(stream, settings, start_ingest.query, wait=wait, foreach_batch=write)
    if wait:  # a classic session ran the batches in this process: what they kept cached is let go
        write.release()
    return query
