"""The configurations tuning compares: state-store presets (Spark settings + trigger), the queries they apply to,
the matrices of pairs, and the checks that refuse a key this Spark does not know."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sensorcep.errors import SensorCepError
from sensorcep.runtime import DATABRICKS_ROCKSDB_PROVIDER, HDFS_PROVIDER, OSS_ROCKSDB_PROVIDER, is_databricks

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
BOUNDED = "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage"
MAX_MEMORY = "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"
FORMAT_V2 = "spark.sql.streaming.stateStore.checkpointFormatVersion"
SHUFFLE = "spark.sql.shuffle.partitions"
ASYNC_CHECKPOINT = "spark.databricks.streaming.statefulOperator.asyncCheckpoint.enabled"
ROCKSDB_PREFIX = "spark.sql.streaming.stateStore.rocksdb."
#: Databricks-only settings the presets use (refused elsewhere: open-source Spark has no such setting)
DATABRICKS_KEYS = frozenset({ASYNC_CHECKPOINT})
#: RocksDB options are read by prefix, not registered as SQL settings (open-source Spark 4.1 RocksDBConf)
ROCKSDB_OPTIONS = frozenset(
    {
        "changelogCheckpointing.enabled",
        "boundedMemoryUsage",
        "maxMemoryUsageMB",
        "writeBufferCacheRatio",
        "highPriorityPoolRatio",
        "compactOnCommit",
        "blockSizeKB",
        "blockCacheSizeMB",
        "lockAcquireTimeoutMs",
        "resetStatsOnLoad",
        "formatVersion",
        "trackTotalNumberOfRows",
        "maxOpenFiles",
        "writeBufferSizeMB",
        "maxWriteBufferNumber",
        "allowFAllocate",
        "compression",
        "minVersionsToRetain",
        "minVersionsToDelete",
        "fileChecksumEnabled",
        "minDeltasForSnapshot",
    }
)
QUERIES = ("sampling", "window_counts")


class TuningError(SensorCepError, ValueError):
    """A configuration the harness will not run (unknown Spark key, wrong store for the query...)."""


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    conf: Mapping[str, str]
    trigger: str = "0 seconds"  # as fast as possible
    databricks_only: bool = False
    max_batches: int | None = None  # only the workload's first micro-batches (for very slow configurations)

    @property
    def store(self) -> str:
        provider = self.conf.get(PROVIDER, "")
        return "hdfs" if provider == HDFS_PROVIDER else "rocksdb"


def _rocksdb(**extra: str) -> dict[str, str]:
    return {
        PROVIDER: DATABRICKS_ROCKSDB_PROVIDER if is_databricks() else OSS_ROCKSDB_PROVIDER,
        CHANGELOG: "false",
        **extra,
    }


def presets() -> dict[str, Preset]:
    """The named configurations (provider class names follow the platform: see runtime.rocksdb_provider)."""
    cores = str(os.cpu_count() or 2) if not is_databricks() else "8"
    changelog = {CHANGELOG: "true", SHUFFLE: cores}
    items = [
        Preset(
            "hdfs",
            "HDFS-backed store: state in JVM memory, delta files per batch (no transformWithState)",
            {PROVIDER: HDFS_PROVIDER, SHUFFLE: cores},
        ),
        Preset("rocksdb", "RocksDB store, full snapshot upload on every commit", _rocksdb(**{SHUFFLE: cores})),
        Preset(
            "rocksdb_changelog",
            "RocksDB + changelog checkpointing: commit writes only the batch's changes",
            _rocksdb(**changelog),
        ),
        Preset(
            "rocksdb_bounded_memory",
            "RocksDB + changelog, block cache and memtables capped (500 MB per executor)",
            _rocksdb(**changelog, **{BOUNDED: "true", MAX_MEMORY: "500"}),
        ),
        Preset(
            "rocksdb_checkpoint_v2",
            "RocksDB + changelog, state checkpoint format v2 (checkpoint ids in the commit log)",
            _rocksdb(**changelog, **{FORMAT_V2: "2"}),
        ),
        Preset(
            "shuffle_200",
            "RocksDB + changelog with Spark's default 200 shuffle partitions (first 4 batches only: "
            "each takes tens of seconds on 2 cores)",
            _rocksdb(**{CHANGELOG: "true", SHUFFLE: "200"}),
            max_batches=4,
        ),
        Preset(
            "trigger_5s",
            "RocksDB + changelog, 5 s processing-time trigger (the source design): fewer, larger batches",
            _rocksdb(**changelog),
            trigger="5 seconds",
        ),
        Preset(
            "databricks_async_checkpoint",
            "Databricks RocksDB + changelog + asynchronous state checkpointing",
            _rocksdb(**changelog, **{ASYNC_CHECKPOINT: "true"}),
            databricks_only=True,
        ),
    ]
    return {p.name: p for p in items}


#: preset matrices: (query, preset) pairs. ``smoke`` proves the notebook and the tables under test (one
#: configuration per query on a few batches, no warm-up); ``quick`` runs in dev jobs and ``make nightly`` (under 3
#: minutes locally); ``full`` is the study (the prod tuning job's).
MATRICES = {
    "smoke": [("sampling", "rocksdb"), ("window_counts", "hdfs")],
    "quick": [
        ("sampling", "rocksdb"),
        ("sampling", "rocksdb_changelog"),
        ("window_counts", "hdfs"),
        ("window_counts", "rocksdb"),
        ("window_counts", "rocksdb_changelog"),
    ],
    "full": [
        ("sampling", p)
        for p in (
            "rocksdb",
            "rocksdb_changelog",
            "rocksdb_bounded_memory",
            "rocksdb_checkpoint_v2",
            "shuffle_200",
            "trigger_5s",
            "databricks_async_checkpoint",
        )
    ]
    + [("window_counts", p) for p in ("hdfs", "rocksdb", "rocksdb_changelog", "rocksdb_checkpoint_v2")],
}


# ------------------------------------------------------------------------------ validation
def validate_conf(spark, conf: Mapping[str, str]) -> None:
    """Refuse keys this Spark does not know or cannot change at runtime, with the closest known key."""
    problems = []
    for key in conf:
        if key.startswith(ROCKSDB_PREFIX):
            option = key[len(ROCKSDB_PREFIX) :]
            if option not in ROCKSDB_OPTIONS:
                hint = difflib.get_close_matches(option, ROCKSDB_OPTIONS, n=1)
                problems.append(
                    f"{key} is not a RocksDB state store option"
                    + (f" (did you mean {ROCKSDB_PREFIX}{hint[0]}?)" if hint else "")
                )
        elif key in DATABRICKS_KEYS and is_databricks():
            continue  # Databricks reads these when a query starts; its runtime may not report them as SQL settings
        elif not spark.conf.isModifiable(key):
            hint = difflib.get_close_matches(key, [PROVIDER, CHANGELOG, FORMAT_V2, SHUFFLE, ASYNC_CHECKPOINT], n=1)
            problems.append(
                f"{key} is not a Spark SQL setting this runtime can change per query"
                + (f" (did you mean {hint[0]}?)" if hint else "")
            )
    if problems:
        raise TuningError("refusing configuration: " + "; ".join(problems))


def plan(
    matrix: str | Iterable[tuple[str, str]], catalog: Mapping[str, Preset] | None = None
) -> list[tuple[str, Preset]]:
    """Resolve a matrix name (or explicit (query, preset) pairs) to runnable configurations.

    Databricks-only presets are dropped off Databricks; unknown names and impossible pairs raise.
    """
    catalog = catalog if catalog is not None else presets()
    if isinstance(matrix, str):
        if matrix not in MATRICES:
            raise TuningError(f"unknown tuning_preset {matrix!r}; known: {', '.join(MATRICES)}")
        matrix = MATRICES[matrix]
    chosen = []
    for query, name in matrix:
        if query not in QUERIES:
            raise TuningError(f"unknown query {query!r}; known: {', '.join(QUERIES)}")
        if name not in catalog:
            raise TuningError(f"unknown preset {name!r}; known: {', '.join(catalog)}")
        preset = catalog[name]
        if preset.databricks_only and not is_databricks():
            continue
        if query == "sampling" and preset.store == "hdfs":
            raise TuningError(f"{name}: the sampling query uses transformWithState, which needs a RocksDB store")
        chosen.append((query, preset))
    return chosen


def databricks_conf(preset: Preset) -> dict[str, str]:
    """A preset's settings as a Databricks job cluster ``spark_conf`` (Databricks' RocksDB provider class;
    the shuffle partitions are left to the cluster's size)."""
    conf = {k: v for k, v in preset.conf.items() if k != SHUFFLE}
    if conf.get(PROVIDER) == OSS_ROCKSDB_PROVIDER:
        conf[PROVIDER] = DATABRICKS_ROCKSDB_PROVIDER
    return conf
