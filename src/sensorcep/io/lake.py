"""The pipeline's Delta tables through one object: ``Tables(spark, settings)``.

Code names a table by its pipeline name (``"bronze_events"``) and asks the object to read, stream, check, append a
micro-batch exactly once, merge new rows or write; the object knows how ``settings`` address the table (a catalog
name, a path, or both: :mod:`sensorcep.io.tables`) and registers a locally named table with the session's catalog
once, before its first use. Every call takes the session it was made with: nothing falls back to a global one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

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


class FencedAppends:
    """One writer's appends of its micro-batches' rows to ``name``, a table with a ``batch_id`` column: each batch's
    once, as a blind append, in one commit (all or none). When the writer (re)starts, the highest batch id the table
    holds of its rows (``mine``: a filter that names them; None: every row is the writer's) is read once: the fence.
    A batch at or below it may be a replay, and is appended only if the table holds none of its rows; a later one
    cannot have been written by an earlier attempt. (An idempotent append by ``txnAppId`` asks Delta for the table's
    whole transaction state at every batch: 0.3 s of a 0.5 s append, decision 0047.) The writer's batch ids must only
    grow: a reset checkpoint starts them again, which is why a query refuses a reset while such a table holds its rows
    (:func:`~sensorcep.pipeline.streaming.refuse_reset`). ``check_empty``: ``rows`` may be none (they are cached and
    looked at first): a batch with no row costs no commit (the table exists already: :meth:`Tables.create`)."""

    def __init__(
        self, name: str, partition_by: Iterable[str] = (), *, mine: Column | None = None, check_empty: bool = False
    ):
        self.name, self.partition_by, self.mine, self.check_empty = name, list(partition_by), mine, check_empty
        self.fence: int | None = None
        self.fenced = False

    def _held(self, lake: Tables) -> DataFrame:
        rows = lake.read(self.name)
        return rows if self.mine is None else rows.where(self.mine)

    def once(self, lake: Tables, rows: DataFrame, batch_id: int) -> bool:
        """Append ``rows`` (the batch's) unless the batch's rows are in already, or it has none; whether it appended."""
        if not self.fenced:
            self.fence = self._held(lake).agg(F.max("batch_id")).first()[0] if lake.exists(self.name) else None
            self.fenced = True
        if self.fence is not None and batch_id <= self.fence:
            if not self._held(lake).where(F.col("batch_id") == batch_id).isEmpty():
                return False  # a replayed batch whose append committed before the run died
        cached = rows.persist() if self.check_empty else rows
        try:
            if self.check_empty and cached.isEmpty():
                return False
            lake.write(cached, self.name, "append", self.partition_by)
            return True
        finally:
            if self.check_empty:
                cached.unpersist()
