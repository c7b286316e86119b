"""Delta tables through Delta Lake's Spark connector: the same calls locally and on Databricks.

Every function takes the session and a :class:`~sensorcep.io.tables.Table` (a catalog name, a path, or both: see
:mod:`sensorcep.io.tables`) or a path (scratch tables, tests); pipeline code goes through
:class:`sensorcep.io.lake.Tables`, which names the tables. A micro-batch is appended exactly once with Delta's
idempotent writes (``txnAppId`` = the writer, ``txnVersion`` = the batch id): a batch replayed after a crash is
recognised by Delta and skipped.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame, DataFrameWriter, SparkSession

from sensorcep.io import tables
from sensorcep.io.tables import Table


def write_batch(
    df: DataFrame, table: Table | str, app_id: str, batch_id: int, partition_by: Iterable[str] = (), cache: bool = True
) -> bool:
    """Append one micro-batch exactly once. Returns False when there was nothing to write.

    The batch is computed (and cached) before the write, whatever Delta then decides: a stateful query's
    state stores commit only when its micro-batch is consumed (Spark 4.1 fails the batch otherwise:
    STATE_STORE_COMMIT_VALIDATION), and Delta skips a replayed batch without reading it. An empty batch
    (most batches of a stateful query) costs no commit, except the first: the table exists once its
    query has run, with or without rows. ``cache=False``: ``df`` is a projection of a batch the caller has
    cached and computed already (one copy of a large batch is enough).
    """
    table = tables.as_table(table)
    cached = df.persist() if cache else df
    try:
        empty = cached.count() == 0 if cache else cached.isEmpty()  # count: every partition computed (and cached)
        if empty and table_exists(table, cached.sparkSession):
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
        _save(writer, table, cached.sparkSession)
        return True
    finally:
        if cache:
            cached.unpersist()


def write_table(df: DataFrame, table: Table | str, mode: str = "append", partition_by: Iterable[str] = ()) -> None:
    """A plain (non-streaming) write, e.g. the devices dimension or tuning results."""
    writer = (
        df.write.format("delta").mode(mode).option("mergeSchema" if mode == "append" else "overwriteSchema", "true")
    )
    partition_by = list(partition_by)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    _save(writer, tables.as_table(table), df.sparkSession)


def _save(writer: DataFrameWriter, table: Table, spark: SparkSession) -> None:
    if table.location is None:  # Unity Catalog places a named table's files
        writer.saveAsTable(table.identifier)
        return
    # the files are ours to place (paths, or the local catalog): an append to the location, then the name, if any,
    # registered there under the registry's lock. A create-table-as-select by name would race the registry's own
    # CREATE TABLE in another thread, and would refuse a folder a crashed first write left without a Delta log.
    retry_first_commit_race(lambda: writer.save(table.location))
    tables.register(spark, table)


def create_table(spark: SparkSession, table: Table | str, columns: str, partition_by: Iterable[str] = ()) -> bool:
    """Create the Delta table with ``columns`` (Spark DDL) unless it exists; True if this call created it.

    One ``CREATE TABLE IF NOT EXISTS`` (:func:`create_statement`): a metadata-only commit, which classic and Spark
    Connect sessions both run, with no Spark job (an empty append cost 1.3-2.2 s a table here, warm; this 0.3-0.6 s).
    A folder that holds files but no Delta log (a write cut short before the table existed) is taken by Delta's
    ``CREATE ... IF NOT EXISTS`` for a table that exists, and nothing is created (older releases refused it instead);
    there the table is created by an empty append, as any first write would. Another writer creating the table at the
    same moment (another task's cluster) is not an error: the table exists either way."""
    table = tables.as_table(table)
    if table_exists(table, spark):
        return False
    try:
        try:
            spark.sql(create_statement(table, columns, partition_by))
        except Exception as error:
            if "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION" not in str(error):
                raise
        if table.location is not None and not tables.holds_delta_table(spark, table.location):
            write_table(spark.createDataFrame([], columns), table, "append", partition_by)
        tables.register(spark, table)
    except Exception as error:  # lost the race to another creator: by name (Unity Catalog) or by path (Delta)
        if not any(code in str(error) for code in ("TABLE_OR_VIEW_ALREADY_EXISTS", *CREATION_RACE)):
            raise
        return False
    return True


def create_statement(table: Table, columns: str, partition_by: Iterable[str] = ()) -> str:
    """``CREATE TABLE IF NOT EXISTS`` for the table: by name where Unity Catalog places the files, else at its
    location (a local catalog name is then registered there by :func:`sensorcep.io.tables.register`)."""
    target = table.sql_name if table.location is None else Table(table.name, None, table.location).sql_name
    partitioned = ", ".join(f"`{column}`" for column in partition_by)
    return f"CREATE TABLE IF NOT EXISTS {target} ({columns}) USING delta" + (
        f" PARTITIONED BY ({partitioned})" if partitioned else ""
    )


#: what Delta says when two writers create the same table at once (e.g. two queries' first batches to late_events)
CREATION_RACE = ("DELTA_PROTOCOL_CHANGED", "DELTA_METADATA_CHANGED")


#: a read-then-append that lost to another writer's append in a partition it read (late_events' once-only check)
CONCURRENT_APPEND = ("DELTA_CONCURRENT_APPEND",)


def retry_first_commit_race(save, attempts: int = 3, codes: tuple[str, ...] = CREATION_RACE) -> None:
    """Run ``save``; when it lost the race to create the table to another writer (:data:`CREATION_RACE`), run it again:
    the losing commit wrote nothing, and the table now exists. Any other error is raised as it is."""
    for attempt in range(1, attempts + 1):
        try:
            save()
            return
        except Exception as error:  # Py4JJavaError or pyspark's captured exception: the message names Delta's error
            if attempt == attempts or not any(code in str(error) for code in codes):
                raise


def table_exists(table: Table | str, spark: SparkSession) -> bool:
    """Whether the Delta table exists (asked of the catalog, or for a path of the files)."""
    table = tables.as_table(table)
    if table.identifier is not None:
        tables.register(spark, table)
        if table.location is not None and not tables.registered(spark, table):
            return False  # a local name is registered as soon as its files hold a Delta table: they hold none
        return spark.catalog.tableExists(table.identifier)
    return tables.holds_delta_table(spark, table.location)


def read_table(spark: SparkSession, table: Table | str, version: int | None = None) -> DataFrame:
    """The current (or a past) version of the Delta table."""
    table = tables.as_table(table)
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    if table.identifier is None:
        return reader.load(table.location)
    tables.register(spark, table)
    return reader.table(table.identifier)


def read_stream(spark: SparkSession, table: Table | str) -> DataFrame:
    """The Delta table as a streaming source (each commit's new rows)."""
    table = tables.as_table(table)
    if table.identifier is None:
        return spark.readStream.format("delta").load(table.location)
    tables.register(spark, table)
    return spark.readStream.table(table.identifier)


def merge_new_rows(
    df: DataFrame,
    table: Table | str,
    key: str | Iterable[str],
    partition_by: Iterable[str] = (),
    *,
    cache: bool = True,
) -> int | None:
    """Insert the rows whose ``key`` (one column or several) the table does not hold yet (``MERGE ... WHEN NOT
    MATCHED THEN INSERT *``, with schema evolution: a new column is added to the table).

    Idempotent by itself: a replayed batch finds its rows and adds nothing, whoever writes it (no writer id); a
    key twice in one batch is one row. The first batch of a new table is a plain append (which creates it).
    Insert-only merges commit new files only, so the table stays a valid streaming source.

    Returns the number of rows inserted, or None when the batch was empty (no commit). ``cache=False``: ``df`` is a
    projection of a batch the caller has cached already.
    """
    table = tables.as_table(table)
    keys = [key] if isinstance(key, str) else list(key)
    df = df.dropDuplicates(keys)  # a key twice in one batch is still one row
    cached = df.persist() if cache else df
    try:
        if cached.isEmpty():
            return None
        spark = cached.sparkSession
        if not table_exists(table, spark):
            write_table(cached, table, "append", partition_by)
            return cached.count()
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
        metrics = spark.sql(
            f"MERGE WITH SCHEMA EVOLUTION INTO {table.sql_name} AS t USING {{rows}} AS s ON {on} "
            "WHEN NOT MATCHED THEN INSERT *",
            rows=cached,
        ).first()
        return int(metrics["num_inserted_rows"]) if metrics is not None else 0
    finally:
        if cache:
            cached.unpersist()
