"""01 ingest: Kafka -> validate/parse -> quarantine | dedup -> bronze Delta."""

from __future__ import annotations

import json
import time

import pandas as pd
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from sensorcep.errors import SensorCepError
from sensorcep.io.kafka import read_kafka, topic_partitions
from sensorcep.io.lake import Tables
from sensorcep.pipeline import queries
from sensorcep.pipeline.parsing import RECORD_KEY, parse_events, quarantine_rows
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
        *BRONZE_COLUMNS, *settings.extra_field_names, "reason", F.col("value").alias("raw_value")
    )
    if devices is not None:
        stream = stream.join(F.broadcast(devices), "device_id", "left")
    return stream


def valid_events(raw: DataFrame, settings: Settings) -> DataFrame:
    """Kafka rows -> parsed valid events (device_id, sensor_freq, event_time, kafka_timestamp), 01's rules.

    Bad records are not passed on: 01 ingest already quarantines them with their reason.
    """
    parsed = parse_events(raw, settings)
    return parsed.where(F.col("reason").isNull()).select(*EVENT_FIELDS)


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


def bronze_event_stream(spark: SparkSession, settings: Settings) -> DataFrame:
    """``bronze_events`` as a Delta stream of valid events (EVENT_FIELDS): the input of 02's stateful queries.

    The medallion: each Kafka record is parsed and deduplicated once, in 01; downstream reads the Delta table, so
    sampling can be replayed or backfilled from bronze long after Kafka's retention dropped the records.
    """
    lake = Tables(spark, settings)
    if not lake.exists("bronze_events"):
        raise BronzeMissingError(
            f"{lake['bronze_events']} does not exist yet: 02 reads bronze_events, which 01 ingest writes; "
            "run 01 (the ingest task) first"
        )
    return lake.stream("bronze_events").select(*EVENT_FIELDS)


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


def write_ingest_batch(settings: Settings, extra_columns: list[str]):
    """foreachBatch of ingest: every record of the batch ends in exactly one of three tables.

    * ``quarantine_events``: bad records, with the reason;
    * ``bronze_events``: the first record of each event key (device_id, event_time) that bronze does not hold yet;
    * ``duplicate_events``: every other valid record, with the Kafka coordinates of the bronze record it repeats.

    Which records are new is decided by one left join of the batch with bronze's keys and coordinates, restricted to
    the batch's event-time range (Delta skips the files and ``part_date`` partitions outside it). A record whose own
    coordinates are in bronze was written by an earlier attempt of this batch (a replay): it goes nowhere again, so
    the three writes are idempotent without writer ids, also across a checkpoint reset. Quarantine and duplicates are
    merged on Kafka coordinates first; bronze is appended last, so bronze's highest offset per partition marks
    completed batches (:func:`resume_offsets`).
    """
    columns = [*BRONZE_COLUMNS, *settings.extra_field_names, *extra_columns, "ingest_time", "part_date"]

    def write(batch: DataFrame, batch_id: int) -> None:
        lake = Tables(batch.sparkSession, settings)
        batch = batch.withColumn("ingest_time", F.current_timestamp()).persist()
        try:
            bad = quarantine_rows(
                batch.where(F.col("reason").isNotNull())
                .withColumnRenamed("raw_value", "value")
                .withColumn("key", F.lit(None).cast("binary"))
            )
            lake.merge_new_rows(bad, "quarantine_events", RECORD_KEY, ["part_date"], target_filter=_dates_of(bad))
            good = batch.where(F.col("reason").isNull()).withColumn("part_date", F.to_date("event_time"))
            span = good.agg(F.min("event_time").alias("lo"), F.max("event_time").alias("hi")).first()
            if span["lo"] is None:  # no valid event; the first batch still creates bronze (empty): 02 reads it
                if not lake.exists("bronze_events"):
                    lake.write(good.select(*columns).limit(0), "bronze_events", "append", ["part_date"])
                return
            judged = _judge(good, lake, span["lo"], span["hi"]).persist()
            try:
                dups = judged.where("_duplicate").select(*DUPLICATE_COLUMNS)
                lake.merge_new_rows(dups, "duplicate_events", RECORD_KEY, ["part_date"], target_filter=_dates_of(dups))
                new = judged.where("_new").select(*columns)
                if not new.isEmpty():
                    lake.write(new, "bronze_events", "append", ["part_date"])
            finally:
                judged.unpersist()
        finally:
            batch.unpersist()

    return write


def _judge(good: DataFrame, lake: Tables, lo, hi) -> DataFrame:
    """The batch's valid records with ``_new`` (to append to bronze) and ``_duplicate`` (+ whose duplicate)."""
    first = Window.partitionBy(*EVENT_KEY).orderBy(*RECORD_KEY)
    ranked = good.select(
        "*",
        F.row_number().over(first).alias("_copy"),
        F.first("partition").over(first).alias("_first_partition"),
        F.first("offset").over(first).alias("_first_offset"),
    )
    if lake.exists("bronze_events"):
        held = (
            lake.read("bronze_events")
            .where(F.col("part_date").between(F.to_date(F.lit(lo)), F.to_date(F.lit(hi))))
            .where(F.col("event_time").between(F.lit(lo), F.lit(hi)))
            .select(
                *EVENT_KEY,
                F.col("topic").alias("_b_topic"),
                F.col("partition").alias("_b_partition"),
                F.col("offset").alias("_b_offset"),
            )
        )
        ranked = ranked.join(held, EVENT_KEY, "left")
    else:
        ranked = ranked.select("*", *[F.lit(None).alias(c) for c in ("_b_topic", "_b_partition", "_b_offset")])
    in_bronze = F.col("_b_offset").isNotNull()
    itself = (
        in_bronze
        & (F.col("_b_topic") == F.col("topic"))
        & (F.col("_b_partition") == F.col("partition"))
        & (F.col("_b_offset") == F.col("offset"))
    )
    return ranked.select(
        "*",
        (~in_bronze & (F.col("_copy") == 1)).alias("_new"),
        ((in_bronze & ~itself) | (~in_bronze & (F.col("_copy") > 1))).alias("_duplicate"),
        F.coalesce("_b_partition", "_first_partition").alias("duplicate_of_partition"),
        F.coalesce("_b_offset", "_first_offset").alias("duplicate_of_offset"),
    )


def _dates_of(rows: DataFrame) -> str:
    """A MERGE condition on the target's ``part_date``: the partitions ``rows`` fall in (so the rest is skipped)."""
    dates = sorted({r["part_date"] for r in rows.select("part_date").distinct().collect() if r["part_date"]})
    if not dates:
        return "t.part_date IS NULL"
    return "t.part_date IN (" + ", ".join(f"DATE'{d.isoformat()}'" for d in dates) + ")"


def resume_offsets(spark: SparkSession, settings: Settings) -> str:
    """Where a NEW ingest checkpoint starts reading: after the last record of each partition bronze holds.

    Bronze is written last in each batch, so its highest offset per partition ends a completed batch; records after it
    (a batch that was cut short) are read again, and the idempotent writes add nothing for the ones already kept.
    Partitions bronze knows nothing of start at the earliest record. ``earliest`` when bronze does not exist.
    """
    lake = Tables(spark, settings)
    if not lake.exists("bronze_events"):
        return "earliest"
    held = (
        lake.read("bronze_events")
        .where(F.col("topic") == settings.events_topic)
        .groupBy("partition")
        .agg(F.max("offset").alias("last"))
        .collect()
    )
    if not held:
        return "earliest"
    last = {int(row["partition"]): int(row["last"]) for row in held}
    partitions = set(topic_partitions(settings, settings.events_topic)) | set(last)
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
    raw = read_kafka(spark, settings, settings.events_topic, starting_offsets=starting)
    stream = bronze_stream(raw, settings, devices)
    return launch(stream, settings, QUERY, wait=wait, foreach_batch=write_ingest_batch(settings, extra))
