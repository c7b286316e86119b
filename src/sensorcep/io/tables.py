"""The tables registry: which Delta table a pipeline table's name means, and (locally) making the catalog know it.

``Settings.tables`` chooses one of two ways to address the tables, the same in every notebook and job:

* ``catalog`` (the default): catalog names, ``<catalog>.<schema>.<table>``.

  * On Databricks these are Unity Catalog managed tables in the bundle's schema (in dev ``dev_<user>_sensor_cep``).
  * Locally they are names in Spark's session catalog. That catalog lives in memory, one per Spark application,
    and each notebook kernel starts its own. So the first time a session uses a table, :func:`register` names it
    at its files under ``<base_path>/tables/<name>``, and a new table is created there. Every session then sees the
    same tables under the same names. :func:`register_all` names every table at once, e.g. for SQL in a fresh
    notebook: ``spark.table("sensor_cep.bronze_events")``.

* ``paths``: Delta tables by path, ``<base_path>/tables/<name>``; no catalog involved.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from urllib.parse import urlparse

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from sensorcep import runtime
from sensorcep.errors import SensorCepError
from sensorcep.settings import TABLES, Settings


@dataclass(frozen=True)
class Table:
    """One Delta table: its catalog name, or its path, or both (a name in the local catalog, at a path)."""

    name: str
    identifier: str | None  # the catalog name; None: a table by path
    location: str | None  # where this project keeps the files; None: Unity Catalog manages them

    def __str__(self) -> str:
        return self.identifier or f"delta.`{self.location}`"

    @property
    def sql_name(self) -> str:
        """The table in a SQL statement: its name, or ``delta.`<path>```."""
        return self.identifier or "delta.`" + str(self.location).replace("`", "``") + "`"


class TableLocationError(SensorCepError, RuntimeError):
    """A name the local catalog already gives to other files than ``base_path`` says."""


def table(settings: Settings, name: str) -> Table:
    """The pipeline table ``name`` as ``settings`` address it (see the module docstring)."""
    identifier = settings.table_name(name)
    location = None if identifier and runtime.catalog_keeps_tables() else settings.table_path(name)
    return Table(name, identifier, location)


def as_table(ref: Table | str) -> Table:
    """A :class:`Table`, or a Delta table by path (scratch tables, tests)."""
    if isinstance(ref, Table):
        return ref
    path = str(ref)
    return Table(os.path.basename(path.rstrip("/")), None, path)


_registered: set[tuple[str, str, str]] = set()
#: (session, schema) pairs whose schema this process created (``CREATE SCHEMA IF NOT EXISTS``) or found
_schemas: set[tuple[str, str]] = set()
_lock = threading.Lock()


def register(spark: SparkSession, table: Table) -> None:
    """Locally, for a table with a catalog name: make the session's catalog know it at its files.

    * If the catalog already has the name, it must point at ``table.location``. Otherwise this raises
      :class:`TableLocationError`: another ``base_path`` registered the name first, in the same Spark application.
    * If the files hold a Delta table, the name is registered there.
    * Otherwise nothing exists yet. The schema is created; the first write creates the table at its location and
      calls this again.

    Asked once per session and table. A no-op for tables by path and for Unity Catalog tables.
    """
    if table.identifier is None or table.location is None:
        return
    key = (runtime.session_key(spark), table.identifier, table.location)
    if key in _registered:
        return
    with _lock:
        if key in _registered:
            return
        if spark.catalog.tableExists(table.identifier):
            registered = spark.sql(f"DESCRIBE DETAIL {table.identifier}").first()["location"]
            if _local_path(registered) != _local_path(table.location):
                raise TableLocationError(
                    f"{table.identifier} is registered at {registered}, but base_path puts it at {table.location}: "
                    "give this base_path a schema of its own (setting `schema`)"
                )
        else:
            schema = table.identifier.rsplit(".", 1)[0]
            if (key[0], schema) not in _schemas:  # the schema once per session: a SQL command each time costs
                folder = os.path.dirname(table.location.rstrip("/")).replace("'", "\\'")
                spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema} LOCATION '{folder}'")
                _schemas.add((key[0], schema))
            if not _holds_delta_table(spark, table.location):
                return  # the first write creates the table at its location, then calls this again
            location = table.location.replace("'", "\\'")
            spark.sql(f"CREATE TABLE IF NOT EXISTS {table.identifier} USING delta LOCATION '{location}'")
        _registered.add(key)


def registered(spark: SparkSession, table: Table) -> bool:
    """Whether :func:`register` named the local table in this session (it does once its files hold a Delta table)."""
    return (runtime.session_key(spark), table.identifier, table.location) in _registered


def register_all(spark: SparkSession, settings: Settings) -> list[Table]:
    """Name every pipeline table that exists (locally; a no-op elsewhere) and return them all."""
    found = [table(settings, name) for name in TABLES]
    for each in found:
        register(spark, each)
    return found


def holds_delta_table(spark: SparkSession, location: str) -> bool:
    """Whether ``location`` holds a Delta table (asked through a read, which classic and Spark Connect sessions both
    answer; Delta's Python ``DeltaTable`` needs Delta Connect's server plugin under Connect)."""
    try:
        _ = spark.read.format("delta").load(location).schema  # analysing the read is the question
        return True
    except AnalysisException:
        return False


def _holds_delta_table(spark: SparkSession, location: str) -> bool:
    """:func:`holds_delta_table`, answered from the files when this process can see them (a classic session and a
    local location: the tests and local jobs register each not-yet-created table many times, and each read attempt
    is an analysis and an error through the JVM); a Spark Connect client asks its server, which may see other files."""
    scheme = urlparse(location).scheme
    if runtime.is_connect(spark) or scheme not in ("", "file"):
        return holds_delta_table(spark, location)
    log = os.path.join(_local_path(location), "_delta_log")
    if not os.path.isdir(log):
        return False
    # a Delta table has a first commit (or a checkpoint); a log folder without one is a creation still under way
    return any(name.endswith((".json", ".parquet")) and name[0].isdigit() for name in os.listdir(log))


def _local_path(location: str) -> str:
    path = urlparse(location).path if location.startswith("file:") else location
    return os.path.realpath(path.rstrip("/"))
