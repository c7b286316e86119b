"""Delta tables, the same call on both sides.

Databricks: native Delta (``txnAppId``/``txnVersion`` make a micro-batch write idempotent).
Locally: ``deltalake`` (delta-rs) writes real Delta tables with an application transaction per
(writer, batch id), so a replayed micro-batch is skipped - the same guarantee.
"""
from __future__ import annotations

import logging
from typing import Iterable

import pyarrow as pa

from .runtime import is_databricks

log = logging.getLogger(__name__)


def write_batch(df, path: str, app_id: str, batch_id: int, partition_by: Iterable[str] = ()) -> bool:
    """Append one micro-batch exactly once. Returns False when the batch was already committed."""
    partition_by = list(partition_by)
    if is_databricks():
        writer = (
            df.write.format("delta").mode("append").option("mergeSchema", "true")
            .option("txnAppId", app_id).option("txnVersion", batch_id)
        )
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        writer.save(path)
        return True
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import TableNotFoundError

    try:
        target = DeltaTable(path)  # loaded once: the replay check and the write share it
    except TableNotFoundError:
        target = None
    done = target.transaction_version(app_id) if target is not None else None
    if done is not None and done >= batch_id:
        log.info("skip batch %s of %s: already in %s", batch_id, app_id, path)
        if not isinstance(df, pa.Table):
            # a replayed micro-batch must still be computed: its stateful operators commit their state stores
            # only when the batch is consumed (Spark 4.1 fails the batch otherwise: STATE_STORE_COMMIT_VALIDATION)
            df.write.format("noop").mode("overwrite").save()
        return False
    table = df if isinstance(df, pa.Table) else df.toArrow()  # an Arrow table: see streaming.materialized
    if table.num_rows == 0 and done is not None:
        return False  # nothing to add (stateful queries emit nothing in most batches)
    write_deltalake(
        target if target is not None else path,
        table,
        mode="append",
        partition_by=partition_by or None,
        schema_mode="merge",
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id=app_id, version=batch_id)]),
    )
    return True


def batch_writer(path: str, app_id: str, partition_by: Iterable[str] = ()):
    """A ``foreachBatch`` function appending each micro-batch to ``path`` exactly once."""
    partition_by = list(partition_by)

    def write(batch, batch_id: int) -> None:
        write_batch(batch, path, app_id, batch_id, partition_by)

    return write


def write_table(df, path: str, mode: str = "append", partition_by: Iterable[str] = ()) -> None:
    """A plain (non-streaming) write, e.g. the devices dimension or tuning results."""
    partition_by = list(partition_by)
    if is_databricks():
        writer = df.write.format("delta").mode(mode).option("mergeSchema", "true")
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        writer.save(path)
        return
    from deltalake import write_deltalake

    write_deltalake(path, df.toArrow(), mode=mode, partition_by=partition_by or None,
                    schema_mode="merge" if mode == "append" else "overwrite")


def table_exists(path: str) -> bool:
    if is_databricks():
        from delta.tables import DeltaTable  # type: ignore[import-not-found]
        from .runtime import get_spark

        return DeltaTable.isDeltaTable(get_spark(), path)
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(path)


def read_table(spark, path: str, version: int | None = None):
    """A Spark DataFrame of the current (or a past) version of the Delta table at ``path``."""
    if is_databricks():
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(path)
    from deltalake import DeltaTable

    table = DeltaTable(path, version=version).to_pyarrow_table()
    return spark.createDataFrame(table)

