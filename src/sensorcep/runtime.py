"""The one place that knows whether we run on Databricks or locally, on a classic session or Spark Connect.

Everything else asks this module for a SparkSession, for ``dbutils`` (and secrets) and for the class
names that differ (Kafka's JAAS login modules, the RocksDB state store), and never looks at the
environment itself. Kafka and Delta are the same connectors on both sides. The laptop session itself (jars, Delta's
extension, FAIR pools) is made by :mod:`sensorcep.local.session`, handed in through entry points (:func:`laptop`).
"""

from __future__ import annotations

import os
from functools import lru_cache
from importlib.metadata import entry_points

from pyspark import SparkContext
from pyspark.sql import SparkSession

from sensorcep.errors import SensorCepError

OSS_ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
DATABRICKS_ROCKSDB_PROVIDER = "com.databricks.sql.streaming.state.RocksDBStateStoreProvider"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def is_databricks() -> bool:
    return "DATABRICKS_RUNTIME_VERSION" in os.environ


def jaas_login_module(name: str) -> str:
    """A Kafka JAAS login module class: Databricks shades the Kafka client (``kafkashaded.``)."""
    prefix = "kafkashaded.org.apache.kafka" if is_databricks() else "org.apache.kafka"
    return f"{prefix}.common.security.{name}"


def rocksdb_provider() -> str:
    return DATABRICKS_ROCKSDB_PROVIDER if is_databricks() else OSS_ROCKSDB_PROVIDER


def catalog_keeps_tables() -> bool:
    """Whether the session's catalog lasts and places its tables' files itself: Unity Catalog (or the workspace's
    metastore) on Databricks. A local session's catalog lives in memory, one per Spark application: there the project
    keeps the files under ``base_path`` and names them in each session (:mod:`sensorcep.io.tables`)."""
    return is_databricks()


class RealTimeUnavailableError(SensorCepError, RuntimeError):
    pass


#: the cluster setting Databricks' real-time mode needs (``Set up real-time mode``)
REALTIME_MODE_CONF = "spark.databricks.streaming.realTimeMode.enabled"


def set_trigger(writer, trigger: dict):
    """``DataStreamWriter.trigger(**trigger)``; real-time mode also where PySpark has no ``realTime`` keyword.

    Databricks' PySpark (and Apache Spark's from 4.2) takes ``trigger(realTime=...)``; open-source PySpark 4.1
    has the JVM's ``Trigger.RealTime`` (SPARK-53736) but not yet the keyword, so a classic session sets it
    there. Open-source Spark Connect 4.1 has no way to ask for it: a clear error.
    """
    if "realTime" not in trigger:
        return writer.trigger(**trigger)
    if is_databricks() and writer._spark.conf.get(REALTIME_MODE_CONF, "false").lower() != "true":
        raise RealTimeUnavailableError(
            f"alerts_trigger=realtime: this compute has no real-time mode ({REALTIME_MODE_CONF} is not true; "
            "serverless and standard access mode have none): set alerts_trigger to availableNow or an interval, "
            "or run the alert query on the always-on job's realtime_cluster"
        )
    try:
        return writer.trigger(**trigger)
    except TypeError:
        context = classic_context(writer._spark)
        if context is None:
            raise RealTimeUnavailableError(
                "real-time mode needs Databricks' PySpark (trigger(realTime=...)) or a classic session; this "
                "open-source Spark Connect session has neither: set alerts_trigger to an interval, "
                "e.g. '1 second'"
            ) from None
        real_time = context._gateway.jvm.org.apache.spark.sql.streaming.Trigger.RealTime(trigger["realTime"])
        writer._jwrite = writer._jwrite.trigger(real_time)
        return writer


# ------------------------------------------------------------------------------ classic or Spark Connect
def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect session (serverless, standard access mode, ``SPARK_REMOTE``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def classic_context(spark):
    """The SparkContext behind a classic session, or None under Spark Connect, which has none.

    The one door to classic-only features (FAIR scheduler pools, the JVM's real-time trigger): every caller
    handles None by degrading with a logged sentence or a clear error.
    """
    if is_connect(spark):
        return None

    return SparkContext.getOrCreate()


def session_alive(spark) -> bool:
    """False once the session (Connect) or the application (classic) has been stopped."""
    if is_connect(spark):
        return not spark.is_stopped

    return SparkContext._active_spark_context is not None


def session_key(spark) -> str:
    """A stable id of the session's application (Connect: the session id)."""
    return spark.session_id if is_connect(spark) else spark.conf.get("spark.app.id")


@lru_cache(maxsize=1)
def get_spark(app_name: str = "sensor-cep", extra_conf: tuple = ()):
    """The SparkSession: the cluster's on Databricks, a Spark Connect server's with ``SPARK_REMOTE``, else the laptop
    session, which the laptop twin hands in (:func:`laptop`): this module never imports laptop code."""
    if is_databricks():
        return SparkSession.builder.getOrCreate()
    if os.environ.get("SPARK_REMOTE"):  # a Spark Connect client, e.g. of a local session serving Connect
        return SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).getOrCreate()
    return laptop("session")(app_name, extra_conf)


#: the entry-point group through which the laptop twin (``sensorcep.local``) hands in its session and ``dbutils``
LAPTOP_GROUP = "sensorcep.laptop"


def laptop(name: str):
    """The laptop twin's ``name`` provider (``session``: a function making the local SparkSession with the pinned
    Kafka and Delta jars; ``dbutils``: the widgets and secrets stand-in), declared as entry points by the installed
    package (pyproject.toml): cluster code asks for them by name and never imports ``sensorcep.local``."""
    found = entry_points(group=LAPTOP_GROUP, name=name)
    if not found:
        raise LaptopMissingError(
            f"no Databricks runtime, no SPARK_REMOTE, and no laptop {name} provider ({LAPTOP_GROUP} entry points): "
            "install the package into the virtualenv (`make venv`: pip install -e .)"
        )
    return next(iter(found)).load()


class LaptopMissingError(SensorCepError, RuntimeError):
    """Neither Databricks nor a Spark Connect server nor the laptop twin is at hand."""


def get_dbutils(params: dict[str, str] | None = None):
    """Databricks' ``dbutils`` from the notebook namespace, or the local stand-in."""
    if is_databricks():
        try:
            from IPython import get_ipython  # noqa: PLC0415 - Databricks notebooks only

            return get_ipython().user_ns["dbutils"]
        except (ImportError, AttributeError, KeyError):
            from pyspark.dbutils import DBUtils  # noqa: PLC0415 - type: ignore[import-not-found]

            return DBUtils(get_spark())
    return laptop("dbutils")(params)
