"""01 ingest: Kafka -> validate/parse -> quarantine | dedup -> bronze Delta."""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import delta
from .kafka import read_kafka
from .parsing import parse_events, quarantine_rows
from .settings import Settings
from .streaming import run_available_now, start_query

QUERY = "ingest"
BRONZE_COLUMNS = ["device_id", "sensor_freq", "event_time", "topic", "partition", "offset", "kafka_timestamp"]


def bronze_stream(raw: DataFrame, settings: Settings, devices: DataFrame | None = None) -> DataFrame:
    """Valid events, deduplicated by (device_id, event_time), as one stream with the quarantine rows.

    Duplicates are re-deliveries, so they are recognised within ``watermark_delay`` of *arrival*
    (the Kafka timestamp): bronze keeps every valid event, including ones too late for the
    event-time operators downstream (those count them as dropped by watermark, not bronze).
    """
    parsed = parse_events(raw, settings)
    valid = (
        parsed.where(F.col("reason").isNull())
        .withWatermark("kafka_timestamp", settings.watermark_delay)
        .dropDuplicatesWithinWatermark(["device_id", "event_time"])
        .select(*BRONZE_COLUMNS, F.lit(None).cast("string").alias("reason"), F.lit(None).cast("binary").alias("raw_value"))
    )
    if devices is not None:
        valid = valid.join(F.broadcast(devices), "device_id", "left")
    bad = parsed.where(F.col("reason").isNotNull()).select(
        *BRONZE_COLUMNS, "reason", F.col("value").alias("raw_value"))
    return valid.unionByName(bad, allowMissingColumns=True)


def write_ingest_batch(settings: Settings, extra_columns: list[str]):
    bronze_path, quarantine_path = settings.table_path("bronze_events"), settings.table_path("quarantine_events")
    app_id = settings.query_name(QUERY)

    def write(batch: DataFrame, batch_id: int) -> None:
        batch = batch.withColumn("ingest_time", F.current_timestamp()).persist()
        try:
            good = batch.where(F.col("reason").isNull()).select(
                *BRONZE_COLUMNS, *extra_columns, "ingest_time", F.to_date("event_time").alias("part_date"))
            delta.write_batch(good, bronze_path, f"{app_id}:bronze", batch_id, ["part_date"])
            bad = quarantine_rows(
                batch.where(F.col("reason").isNotNull()).withColumnRenamed("raw_value", "value")
                .withColumn("key", F.lit(None).cast("binary")))
            delta.write_batch(bad, quarantine_path, f"{app_id}:quarantine", batch_id, ["part_date"])
        finally:
            batch.unpersist()

    return write


def load_devices(spark: SparkSession, settings: Settings) -> DataFrame | None:
    path = settings.table_path("devices")
    return delta.read_table(spark, path) if delta.table_exists(path) else None


def start_ingest(spark: SparkSession, settings: Settings, *, wait: bool = True):
    """Run (availableNow: to the end of the topic) or start (interval trigger) the ingest query."""
    devices = load_devices(spark, settings)
    extra = [c for c in devices.columns if c != "device_id"] if devices is not None else []
    stream = bronze_stream(read_kafka(spark, settings, settings.events_topic), settings, devices)
    runner = run_available_now if wait else start_query
    return runner(stream, settings, QUERY, foreach_batch=write_ingest_batch(settings, extra))
