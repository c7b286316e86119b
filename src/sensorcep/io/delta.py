"""Delta tables through Delta Lake's Spark connector: the same calls locally and on Databricks.

A micro-batch is appended exactly once with Delta's idempotent writes (``txnAppId`` = the writer,
``txnVersion`` = the batch id): a batch replayed after a crash is recognised by Delta and skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession


def write_batch(
    df: DataFrame, path: str, app_id: str, batch_id: int, partition_by: Iterable[str] = (), cache: bool = True
) -> bool:
    """Append one micro-batch exactly once. Returns False when there was nothing to write.

    The batch is computed (and cached) before the write, whatever Delta then decides: a stateful query's
    state stores commit only when its micro-batch is consumed (Spark 4.1 fails the batch otherwise:
    STATE_STORE_COMMIT_VALIDATION), and Delta skips a replayed batch without reading it. An empty batch
    (most batches of a stateful query) costs no commit, except the first: the table exists once its
    query has run, with or without rows. ``cache=False``: ``df`` is a projection of a batch the caller has
    cached and computed already (one copy of a large batch is enough).
    """
    cached = df.persist() if cache else df
    try:
        empty = cached.count() == 0 if cache else cached.isEmpty()  # count: every partition computed (and cached)
        if empty and table_exists(path, cached.sparkSession):
            return False
        writer = (
            cached.write.format("delta")
            .mode("append")
            .option("mergeSchema", "true")
            .option("txnAppId", app_id)
            .option("txnVersion", batch_id)
        )
        partition_by = list(partition_by)
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        writer.save(path)
        return True
    finally:
        if cache:
            cached.unpersist()


def batch_writer(path: str, app_id: Callable[[], str], partition_by: Iterable[str] = ()):
    """A ``foreachBatch`` function appending each micro-batch to ``path`` exactly once (``app_id()``: the writer's
    ``txnAppId``, asked at every batch, see ``streaming.writer_id``)."""
    partition_by = list(partition_by)

    def write(batch: DataFrame, batch_id: int) -> None:
        write_batch(batch, path, app_id(), batch_id, partition_by)

    return write


def write_table(df: DataFrame, path: str, mode: str = "append", partition_by: Iterable[str] = ()) -> None:
    """A plain (non-streaming) write, e.g. the devices dimension or tuning results."""
    writer = (
        df.write.format("delta").mode(mode).option("mergeSchema" if mode == "append" else "overwriteSchema", "true")
    )
    partition_by = list(partition_by)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(path)


def table_exists(path: str, spark: SparkSession | None = None) -> bool:
    """Whether ``path`` holds a Delta table (asked through a read, which classic and Spark Connect sessions both
    answer; Delta's Python ``DeltaTable`` needs Delta Connect's server plugin under Connect)."""
    try:
        _ = read_table(spark or _spark(), path).schema  # analysing the read is the question
        return True
    except AnalysisException:
        return False


def read_table(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    """The current (or a past) version of the Delta table at ``path``."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)


def _spark() -> SparkSession:
    from sensorcep.runtime import get_spark

    return get_spark()


def merge_new_rows(df: DataFrame, path: str, key: str, partition_by: Iterable[str] = ()) -> bool:
    """Insert the rows whose ``key`` the table does not hold yet (``MERGE ... WHEN NOT MATCHED THEN INSERT *``).

    Idempotent by itself: a replayed batch finds its rows and adds nothing. Creates the table on first use.
    Returns False when the batch was empty (no commit).
    """
    cached = df.persist()
    try:
        if cached.isEmpty():
            return False
        spark = cached.sparkSession
        if not table_exists(path, spark):
            write_table(cached.limit(0), path, "append", partition_by)
        target = "delta.`" + path.replace("`", "``") + "`"
        spark.sql(
            f"MERGE INTO {target} AS t USING {{rows}} AS s ON t.`{key}` = s.`{key}` WHEN NOT MATCHED THEN INSERT *",
            rows=cached,
        )
        return True
    finally:
        cached.unpersist()
