"""The one place that knows whether we run on Databricks or locally, on a classic session or Spark Connect.

Everything else asks this module for a SparkSession, for ``dbutils`` (and secrets) and for the class
names that differ (Kafka's JAAS login modules, the RocksDB state store), and never looks at the
environment itself. It also knows which compute a session runs on (dedicated, standard access mode, serverless) and
what each lacks (:func:`require` stops where a missing feature is first used, with one sentence). Kafka and Delta are
the same connectors on both sides. The laptop session itself (jars, Delta's extension, FAIR pools) is made by
:mod:`sensorcep.local.session`, handed in through entry points (:func:`laptop`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
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


def is_databricks_app() -> bool:
    """Whether this process is a Databricks App (the incident page deployed by the bundle): the platform names the app
    in ``DATABRICKS_APP_NAME`` in the app's container, which has no Spark of its own."""
    return "DATABRICKS_APP_NAME" in os.environ and not is_databricks()


def jaas_login_module(name: str) -> str:
    """A Kafka JAAS login module class: Databricks shades the Kafka client (``kafkashaded.``)."""
    prefix = "kafkashaded.org.apache.kafka" if is_databricks() else "org.apache.kafka"
    return f"{prefix}.common.security.{name}"


def rocksdb_provider() -> str:
    return DATABRICKS_ROCKSDB_PROVIDER if is_databricks() else OSS_ROCKSDB_PROVIDER


def catalog_keeps_tables() -> bool:
    """Whether the session's catalog lasts and places its tables' files itself: Unity Catalog (or the workspace's
    metastore) on Databricks. A local session's catalog lives in memory, one per Spark application: there the project
    keeps the files under ``base_path`` and names them in each session (:mod:`sensorcep.io.tables`). A Databricks App
    (the incident page) reads the same Unity Catalog tables through Databricks Connect: there too the catalog keeps
    them, and a table is found by its name alone."""
    return is_databricks() or is_databricks_app()


# ------------------------------------------------------------------------------ compute kinds and what each lacks
LOCAL, DEDICATED, STANDARD, SERVERLESS = "local", "dedicated", "standard", "serverless"

#: how a sentence names each kind of compute
COMPUTE_NAMES = {
    LOCAL: "a local session",
    DEDICATED: "dedicated compute",
    STANDARD: "standard access mode compute",
    SERVERLESS: "serverless compute",
}

#: the cluster usage tag holding the compute's access mode (the Clusters API's ``data_security_mode``). Databricks
#: does not document it as a contract, so it is read defensively and only its known values count.
ACCESS_MODE_CONF = "spark.databricks.clusterUsageTags.dataSecurityMode"
STANDARD_ACCESS_MODES = frozenset({"USER_ISOLATION", "DATA_SECURITY_MODE_STANDARD"})
DEDICATED_ACCESS_MODES = frozenset({"SINGLE_USER", "DATA_SECURITY_MODE_DEDICATED"})


def compute_kind(spark) -> str:
    """``local``, ``dedicated``, ``standard`` (access mode) or ``serverless``: the compute this session runs on.

    Databricks documents no single switch for this, so it is read from several signals, most certain first:

    - not Databricks at all: no ``DATABRICKS_RUNTIME_VERSION`` (:func:`is_databricks`);
    - serverless: ``DATABRICKS_RUNTIME_VERSION`` of the form ``client.<version>``: serverless notebooks and jobs run
      an environment version, "a stable client API based on Spark Connect" ("Serverless environment versions",
      docs.databricks.com/aws/en/release-notes/serverless/environment-version), and MLflow's
      ``mlflow/utils/databricks_utils.py`` (``is_in_databricks_serverless``) tests exactly this prefix; or
      ``IS_SERVERLESS=TRUE``, which serverless notebooks set (not documented; databrickslabs/dbldatagen#297 detects
      serverless by it);
    - standard or dedicated: the access mode tag :data:`ACCESS_MODE_CONF` when it holds a known value, else the
      session's architecture: standard access mode runs user code over Spark Connect, dedicated compute on the classic
      Spark architecture ("How does Databricks enforce user isolation?", docs.databricks.com/aws/en/compute/lakeguard;
      :func:`is_connect`).

    None of this can be checked without a workspace: the tests stand fake sessions in for one.
    """
    if not is_databricks():
        return LOCAL
    version = os.environ.get("DATABRICKS_RUNTIME_VERSION", "")
    if version.startswith("client.") or os.environ.get("IS_SERVERLESS", "").upper() == "TRUE":
        return SERVERLESS
    mode = _conf(spark, ACCESS_MODE_CONF).upper()
    if mode in STANDARD_ACCESS_MODES:
        return STANDARD
    if mode in DEDICATED_ACCESS_MODES:
        return DEDICATED
    return STANDARD if is_connect(spark) else DEDICATED


def _conf(spark, key: str) -> str:
    """A Spark conf's value, or "" where it is unset or unreadable (serverless refuses the cluster tags with
    ``CONFIG_NOT_AVAILABLE`` instead of returning the default)."""
    try:
        return str(spark.conf.get(key, None) or "").strip()
    except Exception:  # noqa: BLE001 - any refusal means: not known here
        return ""


def runtime_version() -> tuple[int, int] | None:
    """The Databricks Runtime's (major, minor) from ``DATABRICKS_RUNTIME_VERSION`` (``"16.3"``), or None where there
    is none (local, serverless' ``client.*``) or it does not read as a version."""
    found = re.match(r"(\d+)\.(\d+)", os.environ.get("DATABRICKS_RUNTIME_VERSION", ""))
    return (int(found[1]), int(found[2])) if found else None


class ComputeFeatureError(SensorCepError, RuntimeError):
    """The compute lacks a feature the project is about to use: one sentence naming the feature, the compute and what
    to use instead, raised where the feature is first used, so a notebook stops at that cell."""


class RealTimeUnavailableError(ComputeFeatureError):
    pass


@dataclass(frozen=True)
class Feature:
    """A feature some compute lacks: ``missing`` maps a compute kind without it to what to do instead there; ``since``
    maps a kind to the first Databricks Runtime (major, minor) that has it there."""

    name: str
    missing: Mapping[str, str] = field(default_factory=dict)
    since: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    error: type[ComputeFeatureError] = ComputeFeatureError


#: the bundle's job clusters: dedicated access mode, Databricks Runtime 17.3 (bundles/*.job.yml)
_JOB_CLUSTERS = "the bundle's job clusters (dedicated, Databricks Runtime 17.3)"

# What each kind lacks, from Databricks' documentation. FAIR scheduler pools are not here: standard and serverless
# have none (no SparkContext), but a query without its pool gives the same results, so that degrades with a logged
# sentence (:func:`classic_context`) instead of stopping.
REAL_TIME_MODE = Feature(
    # "Set up real-time mode" (docs.databricks.com/aws/en/structured-streaming/real-time/setup): classic compute,
    # Databricks Runtime 16.4 LTS+, spark.databricks.streaming.realTimeMode.enabled (checked in set_trigger); earlier
    # versions of the page allowed dedicated access mode only, current ones also standard (Python); serverless
    # notebooks and jobs are not supported
    "real-time mode (alerts_trigger=realtime)",
    missing={
        SERVERLESS: "set alerts_trigger to availableNow (serverless runs no interval triggers either), or run the "
        "alert query on the always-on job's realtime_cluster",
    },
    since={DEDICATED: (16, 4), STANDARD: (16, 4)},
    error=RealTimeUnavailableError,
)
PROCESSING_TIME_TRIGGERS = Feature(
    # "Serverless compute limitations" (docs.databricks.com/aws/en/compute/serverless/limitations), streaming: only
    # Trigger.AvailableNow; the DataStreamWriter.trigger reference: on serverless "the default trigger, processingTime,
    # continuous, and realTime are not supported"
    "a processing-time trigger (an interval such as trigger='10 seconds'; only availableNow runs there)",
    missing={
        SERVERLESS: "set trigger and alerts_trigger to availableNow, or run the always-on job (sensor_cep_streaming) "
        f"on {_JOB_CLUSTERS}",
    },
)
STATE_READER = Feature(
    # "Read Structured Streaming state information" (docs.databricks.com/aws/en/structured-streaming/read-state): not
    # on serverless; Databricks Runtime 16.3+ on standard access mode, 14.3 LTS+ on dedicated, which here is 16.2+, the
    # first runtime that has the transformWithStateInPandas state this project reads
    "the state reader (Spark's state-metadata and statestore sources)",
    missing={SERVERLESS: f"read the operator state on {_JOB_CLUSTERS} or other classic compute, or skip these cells"},
    since={DEDICATED: (16, 2), STANDARD: (16, 3)},
)
TRANSFORM_WITH_STATE = Feature(
    # "Build a custom stateful application" (docs.databricks.com/aws/en/stateful-applications): Databricks Runtime
    # 16.2+; on standard access mode, Python from 16.3
    "transformWithStateInPandas (02's sampling and device activity)",
    since={DEDICATED: (16, 2), STANDARD: (16, 3)},
)


def missing(feature: Feature, spark) -> str | None:
    """Why this compute cannot use ``feature``, as one sentence naming the feature, the compute and what to use
    instead; None where it can (always locally, and where the runtime's version does not read as one)."""
    kind = compute_kind(spark)
    compute = COMPUTE_NAMES[kind]
    if kind in feature.missing:
        return f"{feature.name} is not available on {compute}: {feature.missing[kind]}."
    needed, version = feature.since.get(kind), runtime_version()
    if needed is not None and version is not None and version < needed:
        return (
            f"{feature.name} needs Databricks Runtime {needed[0]}.{needed[1]} or above on {compute}, and this one "
            f"runs {version[0]}.{version[1]}: use a newer runtime, e.g. {_JOB_CLUSTERS}."
        )
    return None


def require(feature: Feature, spark) -> None:
    """Raise ``feature``'s :class:`ComputeFeatureError` with the sentence of :func:`missing` where this compute lacks
    it; called where the feature is first used."""
    reason = missing(feature, spark)
    if reason is not None:
        raise feature.error(reason)


#: the cluster setting Databricks' real-time mode needs (``Set up real-time mode``)
REALTIME_MODE_CONF = "spark.databricks.streaming.realTimeMode.enabled"


def writer_session(writer):
    """The session of a ``DataStreamWriter``: classic PySpark keeps it as ``_spark``, Spark Connect as ``_session``."""
    return writer._spark if hasattr(writer, "_spark") else writer._session


def set_trigger(writer, trigger: dict):
    """``DataStreamWriter.trigger(**trigger)``; real-time mode also where PySpark has no ``realTime`` keyword.

    Databricks' PySpark (and Apache Spark's from 4.2) takes ``trigger(realTime=...)``; open-source PySpark 4.1
    has the JVM's ``Trigger.RealTime`` (SPARK-53736) but not yet the keyword, so a classic session sets it
    there. Open-source Spark Connect 4.1 has no way to ask for it: a clear error.
    """
    spark = writer_session(writer)
    if "realTime" not in trigger:
        if "availableNow" not in trigger:
            require(PROCESSING_TIME_TRIGGERS, spark)
        return writer.trigger(**trigger)
    require(REAL_TIME_MODE, spark)
    if is_databricks() and _conf(spark, REALTIME_MODE_CONF).lower() != "true":
        raise RealTimeUnavailableError(
            f"real-time mode (alerts_trigger=realtime) is off on this {COMPUTE_NAMES[compute_kind(spark)]} "
            f"({REALTIME_MODE_CONF} is not true): set alerts_trigger to availableNow or an interval, or run the alert "
            "query on the always-on job's realtime_cluster, which turns it on."
        )
    try:
        return writer.trigger(**trigger)
    except TypeError:
        context = classic_context(spark)
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
    if is_databricks_app():  # Databricks Connect as the app's service principal, on the compute its environment names
        from databricks.connect import DatabricksSession  # noqa: PLC0415 - the app's requirements (src/requirements.txt)

        return DatabricksSession.builder.getOrCreate()
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
    if is_databricks_app():
        return AppDbutils()
    return laptop("dbutils")(params)


#: the environment variable a Databricks App reads a secret from: the bundle's app resource hands each secret in by
#: this name (``value_from``), whatever its scope
APP_SECRET_ENV = "SENSORCEP_SECRET_{key}"


class AppSecrets:
    """A Databricks App's secrets: ``get(scope, key)`` reads ``SENSORCEP_SECRET_<KEY>`` (upper case, - -> _), which
    the app's secret resource of that key fills (an app has no ``dbutils``; the resource names the scope)."""

    def get(self, scope: str, key: str) -> str:
        name = APP_SECRET_ENV.format(key=key.upper().replace("-", "_"))
        if name not in os.environ:
            raise KeyError(f"secret {scope}/{key} not found: the app has no secret resource for it (env {name})")
        return os.environ[name]


class AppDbutils:
    """What a Databricks App's code asks of ``dbutils``: its secrets (:class:`AppSecrets`)."""

    secrets = AppSecrets()
