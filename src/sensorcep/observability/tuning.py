"""State-store tuning, measured: run a stateful query once per configuration and tabulate what it cost.

A *configuration* is a named :class:`Preset` (Spark settings + trigger) applied to one of the project's
stateful queries:

* ``sampling``      - the 02 sampling query (``transformWithStateInPandas``; needs a RocksDB store);
* ``window_counts`` - Spark's built-in sliding-window aggregation per device (count, min, max) over the
                      same windows and watermark: it runs on every state store, so it is where the HDFS
                      store can be compared with RocksDB.

Every configuration reads the same pre-generated micro-batches (a Delta table, one commit per trigger), starts
from a clean checkpoint in the same Spark application (the settings tested are all session settings read
when a query starts) and reports throughput, batch time, state commit time (``commitTimeMs``), state
rows and memory and RocksDB's custom metrics, all reported by the state stores on the executors (where state
lives; a driver-side heap reading would say nothing about them). :func:`recommend` reads the table.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from sensorcep.errors import SensorCepError
from sensorcep.runtime import DATABRICKS_ROCKSDB_PROVIDER, HDFS_PROVIDER, OSS_ROCKSDB_PROVIDER, is_databricks
from sensorcep.settings import Settings, parse_trigger

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


#: preset matrices: (query, preset) pairs. ``quick`` runs in CI and jobs (under 3 minutes locally).
MATRICES = {
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


@dataclass(frozen=True)
class Workload:
    """Simulated valid events: ``events`` over ``devices``, ``rate`` per event-time second, ``batch`` per trigger.

    ``shape``: ``steady`` or ``bursty`` (the rate alternates between 3x and 1/3 of ``rate`` every minute).
    Event times jitter up to 5 s (inside the watermark), 1% anomalies, 1% exact re-sends.
    """

    events: int = 20_000
    devices: int = 200
    rate: int = 500
    batch: int = 4_000
    shape: str = "steady"
    seed: int = 5

    def __post_init__(self):
        if self.shape not in ("steady", "bursty"):
            raise TuningError(f"workload shape must be 'steady' or 'bursty', not {self.shape!r}")
        if min(self.events, self.devices, self.rate, self.batch) <= 0:
            raise TuningError("workload events, devices, rate and batch must be positive")


#: workloads of the preset matrices
WORKLOADS = {
    "quick": Workload(events=20_000, batch=2_500),
    "full": Workload(events=300_000, devices=1_000, rate=1_000, batch=20_000),
}


def workload_frame(workload: Workload) -> pd.DataFrame:
    """The workload's events in arrival order (device_id, sensor_freq, event_time)."""
    rng = np.random.default_rng(workload.seed)
    n = workload.events
    offsets_s = np.arange(n) / workload.rate
    if workload.shape == "bursty":  # minute k holds 60 * rate * (3 if k is even else 1/3) events, evenly spread
        per_minute = np.resize([workload.rate * 180, max(1, workload.rate * 20)], n // (workload.rate * 20) + 2)
        minute = np.repeat(np.arange(len(per_minute)), per_minute)[:n]
        position = np.arange(n) - np.concatenate([[0], np.cumsum(per_minute)])[minute]
        offsets_s = minute * 60 + position * 60 / per_minute[minute]
    arrival_us = 1_767_571_200_000_000 + (offsets_s * 1e6).astype(np.int64)
    event_us = (arrival_us - rng.uniform(0, 5e6, n).astype(np.int64)) // 1000 * 1000
    freq = np.round(rng.normal(50, 10, n), 6)
    freq[rng.random(n) < 0.01] *= -1
    device = np.char.add("dev-", np.char.zfill(rng.integers(0, workload.devices, n).astype(str), 5))
    dup = rng.random(n) < 0.01
    dup[0] = False
    idx = np.where(dup, np.arange(n) - 1, np.arange(n))
    return pd.DataFrame(
        {
            "device_id": device[idx],
            "sensor_freq": freq[idx],
            "event_time": pd.to_datetime(event_us[idx], unit="us", utc=True),
        }
    )


WORKLOAD_SCHEMA = "device_id string, sensor_freq double, event_time timestamp"


def write_workload(folder: Path, workload: Workload, batches: int | None = None) -> list[int]:
    """The workload (its first ``batches`` micro-batches) as a Delta table, one commit of one file per micro-batch;
    returns events per batch.

    Read back by :func:`workload_stream`, every configuration sees the same batches, in commit order: nothing
    depends on file modification times, which Unity Catalog volumes and other mounts do not keep reliably.
    """
    from sensorcep.runtime import get_spark

    spark = get_spark()
    frame = workload_frame(workload)
    sizes = []
    for start in list(range(0, len(frame), workload.batch))[:batches]:
        part = frame.iloc[start : start + workload.batch]
        (
            spark.createDataFrame(part, WORKLOAD_SCHEMA)
            .coalesce(1)
            .write.format("delta")
            .mode("append")
            .save(str(folder))
        )
        sizes.append(len(part))
    return sizes


def workload_stream(spark, source: str):
    """A workload table as a stream of its micro-batches: one commit (one file) per trigger."""
    return spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)


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


# ------------------------------------------------------------------------------ one run
def _query(name: str, events, settings: Settings):
    from pyspark.sql import functions as F

    from sensorcep.pipeline.sampling import sample_stream

    if name == "sampling":
        return sample_stream(events, settings)
    window = F.window("event_time", settings.interval("window_duration"), settings.interval("slide_duration"))
    return (
        events.withWatermark("event_time", settings.interval("watermark_delay"))
        .groupBy(window.alias("w"), "device_id")
        .agg(
            F.count("*").alias("events"), F.min("sensor_freq").alias("min_freq"), F.max("sensor_freq").alias("max_freq")
        )
    )


def run_configuration(spark, query: str, preset: Preset, source: str, work: str, settings: Settings) -> dict:
    """Run ``query`` over the batch files in ``source`` under ``preset``; one tidy result row."""
    validate_conf(spark, preset.conf)
    previous = {key: spark.conf.get(key, None) for key in preset.conf}
    for key, value in preset.conf.items():
        spark.conf.set(key, value)
    output_rows = {"n": 0}

    def count(batch, batch_id):
        output_rows["n"] += batch.count()

    try:
        events = workload_stream(spark, source)
        started = time.perf_counter()
        running = (
            _query(query, events, settings)
            .writeStream.foreachBatch(count)
            .outputMode("append")
            .option("checkpointLocation", f"{work}/ckpt-{query}-{preset.name}")
            .trigger(**parse_trigger(preset.trigger))
            .start()
        )
        try:
            running.processAllAvailable()
        finally:
            running.stop()
        wall_s = time.perf_counter() - started
        progress = [json.loads(p.json) for p in running.recentProgress]
    finally:
        for key, value in previous.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    return {
        "query": query,
        "preset": preset.name,
        "store": preset.store,
        "trigger": preset.trigger,
        "description": preset.description,
        **summarize(progress),
        "output_rows": output_rows["n"],
        "wall_s": round(wall_s, 1),
        "conf": json.dumps(dict(preset.conf), sort_keys=True),
    }


def summarize(progress: list[dict]) -> dict:
    """Progress events of one run -> throughput, batch and commit percentiles, state size, RocksDB metrics."""
    data = [p for p in progress if p.get("numInputRows", 0) > 0]
    batch_ms = np.array([p["durationMs"].get("triggerExecution", 0) for p in data], dtype=float)
    ops = [p.get("stateOperators") or [] for p in progress]
    commit_ms = np.array([sum(o.get("commitTimeMs", 0) for o in batch) for batch in ops if batch], dtype=float)
    rows = [sum(o.get("numRowsTotal", 0) for o in batch) for batch in ops if batch]
    memory = [sum(o.get("memoryUsedBytes", 0) for o in batch) for batch in ops if batch]
    custom: dict[str, list[float]] = {}
    for batch in ops:
        for op in batch:
            for key, value in (op.get("customMetrics") or {}).items():
                if key.startswith("rocksdb"):
                    custom.setdefault(key, []).append(float(value))
    # wall-clock span of the batches with data: a processing-time trigger's idle waits count against it
    span_s = (
        (_epoch_ms(data[-1]) + data[-1]["durationMs"].get("triggerExecution", 0) - _epoch_ms(data[0])) / 1000
        if data
        else 0
    )
    pct = lambda values, q: float(np.percentile(values, q)) if len(values) else None  # noqa: E731
    return {
        "batches": len(data),
        "input_rows": int(sum(p["numInputRows"] for p in data)),
        "events_per_s": round(sum(p["numInputRows"] for p in data) / span_s, 1) if span_s else None,
        "batch_p50_ms": pct(batch_ms, 50),
        "batch_p95_ms": pct(batch_ms, 95),
        "batch_max_ms": float(batch_ms.max()) if len(batch_ms) else None,
        "commit_p50_ms": pct(commit_ms, 50),
        "commit_p95_ms": pct(commit_ms, 95),
        "state_rows_max": int(max(rows)) if rows else None,
        "state_memory_mb_max": round(max(memory) / 2**20, 2) if memory else None,
        "rocksdb_metrics": json.dumps({k: round(float(np.median(v)), 1) for k, v in sorted(custom.items())}),
    }


def _epoch_ms(progress: dict) -> float:
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp() * 1000


# ------------------------------------------------------------------------------ the matrix
def run_matrix(
    spark,
    settings: Settings,
    matrix: str | Iterable[tuple[str, str]] = "quick",
    workload: Workload | None = None,
    on_result: Callable[[dict], None] | None = None,
    rounds: int | None = None,
) -> pd.DataFrame:
    """Run every configuration of ``matrix`` on ``workload`` from clean checkpoints; the tidy result table.

    With ``rounds`` > 1 the matrix runs again in reverse order and every figure is the median over the rounds:
    a JVM keeps getting faster for minutes, and one order would favour whichever configuration runs last.
    Scratch files (workload, checkpoints) live under ``<base_path>/tuning/<run_id>`` and are removed after.
    """
    configurations = plan(matrix)
    name = matrix if isinstance(matrix, str) else "quick"
    workload = workload or WORKLOADS[name]
    rounds = rounds or ROUNDS.get(name, 1)
    run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    work = Path(settings.base_path) / "tuning" / run_id
    on_result = on_result or print_progress_line
    rows = []
    try:
        write_workload(work / "workload", workload)
        warm_up(spark, configurations, work, workload, settings)
        for round_ in range(1, rounds + 1):
            ordered = configurations if round_ % 2 else configurations[::-1]
            for i, (query, preset) in enumerate(ordered, 1):
                print(f"[round {round_}/{rounds}, {i}/{len(ordered)}] {query} / {preset.name} ...", flush=True)
                source = first_batches(work, workload, preset.max_batches)
                row = run_configuration(spark, query, preset, str(source), str(work / f"round-{round_}"), settings)
                rows.append(row)
                on_result(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = median_over_rounds(pd.DataFrame(rows), [f"{q}/{p.name}" for q, p in configurations])
    table.insert(0, "run_id", run_id)
    table["spark_version"] = spark.version
    table["platform"] = "databricks" if is_databricks() else "local"
    table["workload"] = json.dumps(workload.__dict__)
    table["measured_at"] = pd.Timestamp.now(tz="UTC")
    return table


#: rounds per matrix (``full`` runs twice, the second time in reverse order)
ROUNDS = {"quick": 1, "full": 2}


def median_over_rounds(rows: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """One row per configuration (in matrix order): numeric figures are medians over its rounds."""
    key = rows["query"] + "/" + rows["preset"]
    numeric = [c for c in rows.columns if pd.api.types.is_numeric_dtype(rows[c])]
    grouped = rows.groupby(key, sort=False)
    table = grouped.first()
    table[numeric] = grouped[numeric].median()
    table["rounds"] = grouped.size()
    return table.loc[[k for k in order if k in table.index]].reset_index(drop=True)


def first_batches(work: Path, workload: Workload, count: int | None) -> Path:
    """The workload table, or (``count``) a table of only its first ``count`` micro-batches, written once."""
    if count is None:
        return work / "workload"
    subset = work / f"workload-first-{count}"
    if not subset.exists():
        write_workload(subset, workload, batches=count)
    return subset


def warm_up(spark, configurations, work: Path, workload: Workload, settings: Settings) -> None:
    """Run each query once on six batches, unmeasured: Python workers and code generation start here, not
    in the first measured configuration."""
    small = dataclasses.replace(workload, events=min(workload.events, 6 * workload.batch))
    write_workload(work / "warm-up", small)
    first = {}
    for query, preset in configurations:
        first.setdefault(query, preset)
    for query, preset in first.items():
        print(f"[warm-up] {query} / {preset.name}", flush=True)
        run_configuration(
            spark,
            query,
            dataclasses.replace(preset, name=f"warm-up-{preset.name}", trigger="0 seconds"),
            str(work / "warm-up"),
            str(work / "warm-up-checkpoints"),
            settings,
        )


def print_progress_line(row: dict) -> None:
    print(
        f"      {row['events_per_s'] or 0:>10,.0f} ev/s  batch p50 {row['batch_p50_ms'] or 0:>6,.0f} ms  "
        f"p95 {row['batch_p95_ms'] or 0:>6,.0f} ms  commit p95 {row['commit_p95_ms'] or 0:>5,.0f} ms  "
        f"state rows {row['state_rows_max'] or 0:>7,}  ({row['wall_s']} s)",
        flush=True,
    )


#: the columns a reader compares configurations by (04's table, benchmarks/state_tuning.py)
SUMMARY_COLUMNS = [
    "query",
    "preset",
    "events_per_s",
    "batch_p50_ms",
    "batch_p95_ms",
    "batch_max_ms",
    "commit_p50_ms",
    "commit_p95_ms",
    "state_rows_max",
    "state_memory_mb_max",
]

#: the float columns: the rates and times of the summary, memory, wall time
NUMERIC = (*SUMMARY_COLUMNS[2:8], "state_memory_mb_max", "wall_s")


def save_results(spark, table: pd.DataFrame, settings: Settings):
    """Append a result table to Delta ``tuning_results`` (run id, Spark version, platform included); returns the
    table (a :class:`~sensorcep.io.tables.Table`)."""
    from sensorcep.io import delta, tables

    typed = table.astype({c: "float64" for c in NUMERIC if c in table}).astype(
        {c: "Int64" for c in ("batches", "input_rows", "state_rows_max", "output_rows") if c in table}
    )
    results = tables.table(settings, "tuning_results")
    delta.write_table(spark.createDataFrame(typed), results, mode="append")
    return results


# ------------------------------------------------------------------------------ reading the table
#: the preset the last full local run recommended (README "State store tuning"); the bundle's prod target uses it
RECOMMENDED = "rocksdb_changelog"


@dataclass(frozen=True)
class Recommendation:
    preset: str
    reasons: list[str] = field(default_factory=list)
    spark_conf: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"Recommended: {self.preset}"] + [f"  - {r}" for r in self.reasons]
        lines += ["  Databricks job cluster spark_conf:"] + [f'      {k}: "{v}"' for k, v in self.spark_conf.items()]
        return "\n".join(lines)


def databricks_conf(preset: Preset) -> dict[str, str]:
    """A preset's settings as a Databricks job cluster ``spark_conf`` (Databricks' RocksDB provider class;
    the shuffle partitions are left to the cluster's size)."""
    conf = {k: v for k, v in preset.conf.items() if k != SHUFFLE}
    if conf.get(PROVIDER) == OSS_ROCKSDB_PROVIDER:
        conf[PROVIDER] = DATABRICKS_ROCKSDB_PROVIDER
    return conf


def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


def recommend(
    table: pd.DataFrame, catalog: Mapping[str, Preset] | None = None, tolerance: float = 0.05
) -> Recommendation:
    """The sampling query's preset with the lowest p95 batch time (the trigger presets answer a different
    question: latency vs throughput), with the measured reasons, and how the stores compare on commit time.

    Presets within ``tolerance`` of the lowest p95 are a tie (run-to-run noise is larger than that here):
    the one with the fewest settings wins.
    """
    catalog = catalog if catalog is not None else presets()
    sampling = table[(table["query"] == "sampling") & (table["trigger"] == "0 seconds")].dropna(subset=["batch_p95_ms"])
    if sampling.empty:
        raise TuningError("no sampling-query result to recommend from: run a matrix with sampling configurations")
    fastest = sampling.sort_values(["batch_p95_ms", "events_per_s"], ascending=[True, False]).iloc[0]
    tied = sampling[sampling["batch_p95_ms"] <= fastest["batch_p95_ms"] * (1 + tolerance)]
    best = min(
        (row for _, row in tied.iterrows()), key=lambda row: (len(catalog[row["preset"]].conf), row["batch_p95_ms"])
    )
    reasons = []
    if best["preset"] != fastest["preset"]:
        reasons.append(
            f"{fastest['preset']} had the lowest p95 batch time ({fastest['batch_p95_ms']:,.0f} ms) but "
            f"{best['preset']} is within {tolerance:.0%} ({best['batch_p95_ms']:,.0f} ms) with fewer settings"
        )
    by = {(r["query"], r["preset"]): r for _, r in table.iterrows()}
    plain = by.get(("sampling", "rocksdb"))
    if plain is not None and best["preset"] != "rocksdb":
        reasons.append(
            f"sampling: p95 batch {best['batch_p95_ms']:,.0f} ms vs {plain['batch_p95_ms']:,.0f} ms with plain "
            f"RocksDB ({_ratio(best['batch_p95_ms'], plain['batch_p95_ms'])}), p95 commit "
            f"{best['commit_p95_ms']:,.0f} vs {plain['commit_p95_ms']:,.0f} ms, "
            f"{best['events_per_s']:,.0f} vs {plain['events_per_s']:,.0f} events/s"
        )
    else:
        reasons.append(
            f"sampling: lowest p95 batch time, {best['batch_p95_ms']:,.0f} ms at {best['events_per_s']:,.0f} events/s"
        )
    stores = [by.get(("window_counts", p)) for p in ("rocksdb_changelog", "rocksdb", "hdfs")]
    if all(s is not None for s in stores):
        changelog, rocksdb, hdfs = stores
        reasons.append(
            f"window_counts: p95 commit with changelog {changelog['commit_p95_ms']:,.0f} ms vs plain RocksDB "
            f"{rocksdb['commit_p95_ms']:,.0f} ms ({_ratio(changelog['commit_p95_ms'], rocksdb['commit_p95_ms'])})"
            f" and HDFS {hdfs['commit_p95_ms']:,.0f} ms ({_ratio(changelog['commit_p95_ms'], hdfs['commit_p95_ms'])})"
        )
    shuffle = by.get(("sampling", "shuffle_200"))
    if shuffle is not None:
        reasons.append(
            f"200 shuffle partitions: p95 batch {shuffle['batch_p95_ms']:,.0f} ms "
            f"({_ratio(shuffle['batch_p95_ms'], best['batch_p95_ms'])} of {best['preset']}): keep state "
            "partitions near the core count (fixed by the first checkpoint)"
        )
    slow = by.get(("sampling", "trigger_5s"))
    if slow is not None:
        reasons.append(
            f"5 s trigger: {slow['events_per_s']:,.0f} vs {best['events_per_s']:,.0f} events/s on a backlog; "
            "as fast as possible lowers latency and keeps up, a fixed interval only batches more per trigger"
        )
    return Recommendation(best["preset"], reasons, databricks_conf(catalog[best["preset"]]))
