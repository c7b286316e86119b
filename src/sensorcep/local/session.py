"""The laptop twin's SparkSession and ``dbutils`` stand-in: what Databricks provides on a cluster.

A local session with the pinned Kafka and Delta jars (fetched by ``make jars``), Delta's SQL extension and catalog,
RocksDB state, FAIR pools from ``scheduler_pools`` and, for tests, a Spark Connect server; widgets that read the
local runner's job parameters and secrets from environment variables. Cluster code never imports this module:
:func:`sensorcep.runtime.get_spark` and :func:`~sensorcep.runtime.get_dbutils` reach it through the package's
``sensorcep.laptop`` entry points.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from pyspark.sql import SparkSession

from sensorcep.local import class_archive, python_worker
from sensorcep.local.jars import pinned_version, spark_jars
from sensorcep.local.java import check_java
from sensorcep.runtime import OSS_ROCKSDB_PROVIDER
from sensorcep.settings import defaults, parse_pools

#: environment variable the local job runner uses to hand job parameters to the widget stand-in
PARAMS_ENV = "SENSORCEP_NOTEBOOK_PARAMS"


#: task slots beyond the cores: a real-time-mode query holds one slot per source partition for as long as it
#: runs, and the micro-batch queries beside it still need slots (``SENSORCEP_EXTRA_TASK_SLOTS``)
EXTRA_TASK_SLOTS = 4


#: JVM options of the local Spark driver (``SENSORCEP_JVM_OPTIONS``), e.g. the test suite's
JVM_OPTIONS_ENV = "SENSORCEP_JVM_OPTIONS"
#: where the local catalog keeps managed tables (``SENSORCEP_WAREHOUSE_DIR``; default: Spark's ``spark-warehouse`` in
#: the working directory); each test session has its own, so two sessions side by side share no table folder
WAREHOUSE_ENV = "SENSORCEP_WAREHOUSE_DIR"


def local_spark_conf(cores: int | None = None) -> dict[str, str]:
    cores = cores or os.cpu_count() or 2
    slots = cores + int(os.environ.get("SENSORCEP_EXTRA_TASK_SLOTS", EXTRA_TASK_SLOTS))
    jvm_options = f"{class_archive.java_options()} {os.environ.get(JVM_OPTIONS_ENV, '')}".strip()  # the user's win
    warehouse = os.environ.get(WAREHOUSE_ENV, "").strip()
    return {
        **({"spark.driver.extraJavaOptions": jvm_options} if jvm_options else {}),
        **({"spark.sql.warehouse.dir": warehouse} if warehouse else {}),
        "spark.master": f"local[{slots}]",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.default.parallelism": str(cores),
        "spark.sql.streaming.stateStore.providerClass": OSS_ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.streaming.numRecentProgressUpdates": "1000",
        "spark.sql.streaming.asyncLogPurge.enabled": "true",
        "spark.scheduler.mode": "FAIR",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "ERROR",
        "spark.driver.memory": os.environ.get("SENSORCEP_DRIVER_MEMORY", "6g"),
        "spark.sql.adaptive.enabled": "false",
        "spark.python.worker.reuse": "true",
        # Python workers (stateful processors) yield the CPU to the real-time alert query's JVM tasks
        "spark.python.daemon.module": "sensorcep.local.low_priority_daemon",
        # every idempotent Delta write replays the table's log to find its transactions: one task, not 50
        # (measured here: ~0.7 s per small txn append with 1, ~0.9 s with 2, 3-4.5 s with 50)
        "spark.databricks.delta.snapshotPartitions": "1",
        # a micro-batch's cache lives for one batch: compressing it costs more CPU than it saves (measured here:
        # 250,000 Kafka records parsed as ingest parses them and cached, in a one-off batch-mode run: 1.9 s, not 2.3 s)
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # generated classes are cached by their code: Spark keeps 100, fewer than one ingest micro-batch's plans need
        # with the other queries' beside them, so each batch compiled most of them again
        "spark.sql.codegen.cache.maxEntries": "1000",
    }


def connector_conf() -> dict[str, str]:
    """Spark's Kafka connector and Delta Lake for a local session: the jars pinned in ``jvm/pom.xml``
    (fetched by ``make venv``) and Delta's SQL extension and catalog, as Delta's docs configure them."""

    if version("delta-spark") != pinned_version("delta.version"):
        raise RuntimeError(
            f"delta-spark {version('delta-spark')} (requirements.txt) differs from Delta's jars "
            f"{pinned_version('delta.version')} (jvm/pom.xml): pin the same version in both"
        )
    return {
        "spark.jars": ",".join(spark_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }


#: a local session also serves Spark Connect on this port when the variable is set (tests; trying Connect locally)
CONNECT_PORT_ENV = "SENSORCEP_CONNECT_SERVER_PORT"


def connect_server_conf() -> dict[str, str]:
    """Spark Connect's server as a plugin of the local session (its jar ships in the pyspark wheel): a client
    started with ``SPARK_REMOTE=sc://localhost:<port>`` then runs on this JVM, with its jars and confs."""
    port = os.environ.get(CONNECT_PORT_ENV)
    if not port:
        return {}
    return {"spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin", "spark.connect.grpc.binding.port": port}


def serve_connect(console: Path) -> str:
    """The Spark application of a local job run, as a job cluster is on Databricks: this process's local session,
    serving Spark Connect on a free port, its console written to ``console``. The run's notebook kernels connect to
    it (``SPARK_REMOTE``, the returned address) instead of starting a JVM each: one cold start per run, and every
    notebook after the first gets a JVM whose JIT is warm (``make demo``: decision 0024)."""
    if SparkSession.getActiveSession() is not None:
        raise RuntimeError("this process has a Spark session already: serve_connect starts the run's own")
    with socket.socket() as probe:  # a free port, for the server to bind right after
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ[CONNECT_PORT_ENV] = str(port)
    try:
        with jvm_console_to(console):
            start()
    finally:
        del os.environ[CONNECT_PORT_ENV]  # a kernel that starts a session of its own must not bind the port again
    return f"sc://localhost:{port}"


def fair_pools_file() -> str:
    """A FAIR scheduler allocation file with the pools and weights of ``scheduler_pools`` (local session).

    On Databricks the cluster's scheduler is already FAIR; a pool named by a query is created on first
    use with weight 1 unless the cluster points ``spark.scheduler.allocation.file`` at such a file.
    """

    pools = "".join(
        f'<pool name="{name}"><schedulingMode>FAIR</schedulingMode>'
        f"<weight>{weight}</weight><minShare>0</minShare></pool>"
        for name, weight in parse_pools(defaults()["scheduler_pools"]).items()
    )
    path = os.path.join(tempfile.gettempdir(), f"sensorcep-fairscheduler-{os.getpid()}.xml")
    with open(path, "w") as out:
        out.write(f'<?xml version="1.0"?><allocations>{pools}</allocations>')
    return path


# ------------------------------------------------------------------------------ dbutils
class _LocalWidgets:
    """Just enough of ``dbutils.widgets`` for notebooks to run unchanged locally.

    Values come from the job parameters the local runner passes (``SENSORCEP_NOTEBOOK_PARAMS``),
    falling back to the widget's default.
    """

    def __init__(self, params: dict[str, str] | None = None):
        self._params = params if params is not None else json.loads(os.environ.get(PARAMS_ENV, "{}"))
        self._defaults: dict[str, str] = {}

    def text(self, name: str, defaultValue: str = "", label: str | None = None) -> None:
        self._defaults[name] = defaultValue

    dropdown = combobox = lambda self, name, defaultValue, choices=None, label=None: self.text(name, defaultValue)

    def get(self, name: str) -> str:
        if name in self._params:
            return str(self._params[name])
        if name in self._defaults:
            return self._defaults[name]
        raise ValueError(f"No widget named {name!r} is defined")

    def getAll(self) -> dict[str, str]:
        return {**self._defaults, **{k: str(v) for k, v in self._params.items()}}

    def removeAll(self) -> None:
        self._defaults.clear()


class _LocalSecrets:
    """Secrets from environment variables: scope ``s``, key ``k`` -> ``$S_K`` (upper case, - -> _)."""

    def get(self, scope: str, key: str) -> str:
        name = f"{scope}_{key}".upper().replace("-", "_")
        if name not in os.environ:
            raise KeyError(f"secret {scope}/{key} not found: set the environment variable {name}")
        return os.environ[name]


class LocalDbutils:
    local = True  # widgets fall back to the laptop's defaults (settings.settings_from_widgets)

    def __init__(self, params: dict[str, str] | None = None):
        self.widgets = _LocalWidgets(params)
        self.secrets = _LocalSecrets()


def start(app_name: str = "sensor-cep", extra_conf: tuple = ()) -> SparkSession:
    """The local SparkSession (entry point ``sensorcep.laptop: session``)."""
    check_java()
    workers = python_worker.interpreter()  # pyspark imported from its installed bytecode in the workers
    if os.environ.get("PYSPARK_PYTHON") in (None, sys.executable, workers):  # a user's own interpreter wins
        os.environ["PYSPARK_PYTHON"] = workers
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    conf = {
        **local_spark_conf(),
        **connector_conf(),
        "spark.scheduler.allocation.file": fair_pools_file(),
        **connect_server_conf(),
        **dict(extra_conf),
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@contextlib.contextmanager
def jvm_console_to(path: Path):
    """Point this process's stderr (file descriptor 2) at ``path`` while a JVM starts: the JVM inherits it and keeps
    writing its console there (incubator modules, log4j, hostname and native-library warnings); Python's own stderr
    is restored when the block ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = os.dup(2)
    try:
        with path.open("ab") as log:
            os.dup2(log.fileno(), 2)
            yield path
    finally:
        os.dup2(saved, 2)
        os.close(saved)
