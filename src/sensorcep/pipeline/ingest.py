"""01 ingest: Kafka -> validate/parse -> quarantine | dedup -> bronze Delta."""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sensorcep.io import delta, tables
from sensorcep.io.kafka import read_kafka
from sensorcep.pipeline.parsing import parse_events, quarantine_rows
from sensorcep.pipeline.streaming import run_available_now, start_query, writer_id
from sensorcep.settings import Settings

QUERY = "ingest"
#: a parsed valid event as the downstream queries read it
EVENT_FIELDS = ["device_id", "sensor_freq", "event_time", "kafka_timestamp"]
BRONZE_COLUMNS = ["device_id", "sensor_freq", "event_time", "topic", "partition", "offset", "kafka_timestamp"]


def bronze_stream(raw: DataFrame, settings: Settings, devices: DataFrame | None = None) -> DataFrame:
    """Parsed records, deduplicated, in one pass over Kafka: valid events and quarantine rows together.

    Duplicates are re-deliveries, so they are recognised within ``watermark_delay`` of *arrival*
    (the Kafka timestamp, which every record has, valid or not): bronze keeps every valid event,
    including ones too late for the event-time operators downstream, and a bad record is keyed by
    its Kafka coordinates so it is never merged with another.
    """
    parsed = parse_events(raw, settings)
    dedup_key = F.when(
        F.col("reason").isNull(), F.concat_ws("|", "device_id", F.col("event_time").cast("string"))
    ).otherwise(F.concat_ws("|", F.lit("bad"), "topic", "partition", "offset"))
    stream = (
        parsed.withColumn("_dedup_key", dedup_key)
        .withWatermark("kafka_timestamp", settings.watermark_delay)
        .dropDuplicatesWithinWatermark(["_dedup_key"])
        .select(*BRONZE_COLUMNS, *settings.extra_field_names, "reason", F.col("value").alias("raw_value"))
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


class BronzeMissingError(RuntimeError):
    """``bronze_events`` does not exist yet: 01 ingest has not run."""


def wait_for_bronze(spark: SparkSession, settings: Settings, timeout_s: float = 600.0) -> None:
    """Until ``bronze_events`` exists (the always-on job starts ingest and sampling together; ingest's first
    batch creates the table). Raises :class:`BronzeMissingError` after ``timeout_s``."""
    import time

    bronze = tables.table(settings, "bronze_events")
    deadline = time.monotonic() + timeout_s
    while not delta.table_exists(bronze, spark):  # polling a condition
        if time.monotonic() > deadline:
            raise BronzeMissingError(f"{bronze} did not appear within {timeout_s:.0f} s: is the ingest task running?")
        time.sleep(1.0)


def bronze_event_stream(spark: SparkSession, settings: Settings) -> DataFrame:
    """``bronze_events`` as a Delta stream of valid events (EVENT_FIELDS): the input of 02's stateful queries.

    The medallion: each Kafka record is parsed and deduplicated once, in 01; downstream reads the Delta table, so
    sampling can be replayed or backfilled from bronze long after Kafka's retention dropped the records.
    """
    bronze = tables.table(settings, "bronze_events")
    if not delta.table_exists(bronze, spark):
        raise BronzeMissingError(
            f"{bronze} does not exist yet: 02 reads bronze_events, which 01 ingest writes; "
            "run 01 (the ingest task) first"
        )
    return delta.read_stream(spark, bronze).select(*EVENT_FIELDS)


def write_ingest_batch(settings: Settings, extra_columns: list[str]):
    bronze, quarantine = tables.table(settings, "bronze_events"), tables.table(settings, "quarantine_events")

    def write(batch: DataFrame, batch_id: int) -> None:
        batch = batch.withColumn("ingest_time", F.current_timestamp()).persist()
        batch.count()  # computed once, whole (the dedup state commits even if Delta skips a replayed batch)
        try:
            good = batch.where(F.col("reason").isNull()).select(
                *BRONZE_COLUMNS,
                *settings.extra_field_names,
                *extra_columns,
                "ingest_time",
                F.to_date("event_time").alias("part_date"),
            )
            delta.write_batch(good, bronze, writer_id(settings, QUERY, "bronze"), batch_id, ["part_date"], cache=False)
            bad = quarantine_rows(
                batch.where(F.col("reason").isNotNull())
                .withColumnRenamed("raw_value", "value")
                .withColumn("key", F.lit(None).cast("binary"))
            )
            delta.write_batch(
                bad, quarantine, writer_id(settings, QUERY, "quarantine"), batch_id, ["part_date"], cache=False
            )
        finally:
            batch.unpersist()

    return write


def quarantine_reasons(spark: SparkSession, settings: Settings) -> pd.DataFrame:
    """``quarantine_events`` by reason, most frequent first (unparseable times grouped under one reason)."""
    quarantine = tables.table(settings, "quarantine_events")
    if not delta.table_exists(quarantine, spark):
        return pd.DataFrame({"reason": pd.Series([], dtype=object), "count": pd.Series([], dtype="int64")})
    reason = F.regexp_replace("reason", r"^unparseable event_time .*", "unparseable event_time").alias("reason")
    return delta.read_table(spark, quarantine).groupBy(reason).count().orderBy(F.desc("count"), "reason").toPandas()


def load_devices(spark: SparkSession, settings: Settings) -> DataFrame | None:
    devices = tables.table(settings, "devices")
    return delta.read_table(spark, devices) if delta.table_exists(devices, spark) else None


def start_ingest(spark: SparkSession, settings: Settings, *, wait: bool = True):
    """Run (availableNow: to the end of the topic) or start (interval trigger) the ingest query."""
    devices = load_devices(spark, settings)
    extra = [c for c in devices.columns if c != "device_id"] if devices is not None else []
    stream = bronze_stream(read_kafka(spark, settings, settings.events_topic), settings, devices)
    runner = run_available_now if wait else start_query
    return runner(stream, settings, QUERY, foreach_batch=write_ingest_batch(settings, extra))
