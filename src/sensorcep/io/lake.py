"""The pipeline's Delta tables through one object: ``Tables(spark, settings)``.

Code names a table by its pipeline name (``"bronze_events"``) and asks the object to read, stream, check, append a
micro-batch exactly once, merge new rows or write; the object knows how ``settings`` address the table (a catalog
name, a path, or both: :mod:`sensorcep.io.tables`) and registers a locally named table with the session's catalog
once, before its first use. Every call takes the session it was made with: nothing falls back to a global one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from pyspark.sql import DataFrame, SparkSession

from sensorcep.io import delta
from sensorcep.io.tables import Table, register, table
from sensorcep.schemas import BY_NAME
from sensorcep.settings import Settings


class Tables:
    """The pipeline's tables as ``settings`` address them, in ``spark``'s session."""

    def __init__(self, spark: SparkSession, settings: Settings):
        self.spark, self.settings = spark, settings

    def __getitem__(self, name: str) -> Table:
        """The table ``name`` (its catalog name and/or location), registered with a local catalog once."""
        found = table(self.settings, name)
        register(self.spark, found)
        return found

    def create(self, names: Iterable[str], extra_columns: Mapping[str, str] | None = None) -> list[str]:
        """Create each named table that :mod:`sensorcep.schemas` declares with columns, unless it exists (idempotent);
        the names it created. Run before the queries that write them start: nothing is created by a first write.
        ``extra_columns``: DDL added to a table's declared columns (bronze's ``extra_fields`` and devices columns,
        which a Delta stream of bronze must see from its first version)."""
        created = []
        for name in names:
            spec = BY_NAME[name]
            if spec.columns is None:
                continue
            columns = ", ".join(filter(None, [spec.columns, (extra_columns or {}).get(name, "")]))
            if delta.create_table(self.spark, self[name], columns, spec.partition_by):
                created.append(name)
        return created

    def exists(self, name: str) -> bool:
        return delta.table_exists(self[name], self.spark)

    def read(self, name: str, version: int | None = None) -> DataFrame:
        return delta.read_table(self.spark, self[name], version)

    def stream(self, name: str) -> DataFrame:
        return delta.read_stream(self.spark, self[name])

    def write(self, df: DataFrame, name: str, mode: str = "append", partition_by: Iterable[str] = ()) -> None:
        delta.write_table(df, self[name], mode, partition_by)

    def append_batch(
        self,
        df: DataFrame,
        name: str,
        writer: str,
        batch_id: int,
        partition_by: Iterable[str] = (),
        cache: bool = True,
    ) -> bool:
        """Append a micro-batch exactly once (Delta's ``txnAppId`` = ``writer``, ``txnVersion`` = ``batch_id``)."""
        return delta.write_batch(df, self[name], writer, batch_id, partition_by, cache)

    def merge_new_rows(
        self,
        df: DataFrame,
        name: str,
        key: str | Iterable[str],
        partition_by: Iterable[str] = (),
        *,
        cache: bool = True,
    ) -> int | None:
        """Insert the rows whose ``key`` the table does not hold yet (:func:`sensorcep.io.delta.merge_new_rows`)."""
        return delta.merge_new_rows(df, self[name], key, partition_by, cache=cache)


def batch_writer(settings: Settings, name: str, writer: Callable[[], str], partition_by: Iterable[str] = ()):
    """A ``foreachBatch`` function appending each micro-batch to the table ``name`` exactly once (``writer()``: the
    ``txnAppId``, asked at every batch, see ``streaming.writer_id``)."""
    partition_by = list(partition_by)

    def write(batch: DataFrame, batch_id: int) -> None:
        Tables(batch.sparkSession, settings).append_batch(batch, name, writer(), batch_id, partition_by)

    return write
