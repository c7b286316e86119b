"""Running the matrix: each configuration from a clean checkpoint on the same workload batches, its progress
summarized into one row (throughput, batch and commit percentiles, state size, RocksDB metrics); the rounds'
median, and the results table in Delta ``tuning_results``."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
from pyspark.sql import functions as F

from sensorcep.io.lake import Tables
from sensorcep.observability.progress import progress_dict, progress_row
from sensorcep.pipeline.sampling import sample_stream
from sensorcep.pipeline.streaming import query_conf
from sensorcep.runtime import is_databricks
from sensorcep.settings import Settings, parse_trigger
from sensorcep.tuning.presets import Preset, plan, validate_conf
from sensorcep.tuning.workload import (
    WORKLOADS,
    Workload,
    is_table_name,
    workload_location,
    workload_stream,
    write_workload,
)


# ------------------------------------------------------------------------------ one run
def _query(name: str, events, settings: Settings):

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


#: the observed metric that counts each batch's output rows (a Spark Connect client's ``foreachBatch`` runs in the
#: server's Python worker: a counter in this process would never move)
OUTPUT = "tuning_output"


def _observed(progress: dict) -> dict:
    return (progress.get("observedMetrics") or {}).get(OUTPUT) or {}


def _consume(batch, _batch_id) -> None:
    batch.count()  # the batch computed (and its state committed): the study's sink


def run_configuration(spark, query: str, preset: Preset, source: str, work: str, settings: Settings) -> dict:
    """Run ``query`` over the batch files in ``source`` under ``preset``; one tidy result row."""
    validate_conf(spark, preset.conf)
    with query_conf(spark, dict(preset.conf)):
        events = workload_stream(spark, source)
        started = time.perf_counter()
        running = (
            _query(query, events, settings)
            .observe(OUTPUT, F.count(F.lit(1)).alias("rows"))  # counted where the batch runs: Connect's too
            .writeStream.foreachBatch(_consume)
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
        progress = [progress_dict(p) for p in running.recentProgress]
    return {
        "query": query,
        "preset": preset.name,
        "store": preset.store,
        "trigger": preset.trigger,
        "description": preset.description,
        **summarize(progress),
        "output_rows": sum(_observed(p).get("rows") or 0 for p in progress),
        "wall_s": round(wall_s, 1),
        "conf": json.dumps(dict(preset.conf), sort_keys=True),
    }


def summarize(progress: list[dict]) -> dict:
    """Progress events of one run -> throughput, batch and commit percentiles, state size, RocksDB metrics."""
    data = [p for p in progress if p.get("numInputRows", 0) > 0]
    batch_ms = np.array([p["durationMs"].get("triggerExecution", 0) for p in data], dtype=float)
    rows_ = [progress_row(p) for p in progress if p.get("stateOperators")]  # the one place state sums are taken
    commit_ms = np.array([r["state_commit_ms"] for r in rows_], dtype=float)
    rows = [r["state_rows_total"] for r in rows_]
    memory = [r["state_memory_bytes"] for r in rows_]
    ops = [p.get("stateOperators") or [] for p in progress]
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
    rows, written = [], []

    def location(name: str) -> str:
        written.append(workload_location(settings, work, name, run_id))
        return written[-1]

    try:
        write_workload(location("workload"), workload)
        if name != "smoke":  # smoke proves the path, it measures nothing worth a warm-up
            warm_up(spark, configurations, work, workload, settings, location("warm-up"))
        subsets: dict[int | None, str] = {None: written[0]}
        for round_ in range(1, rounds + 1):
            ordered = configurations if round_ % 2 else configurations[::-1]
            for i, (query, preset) in enumerate(ordered, 1):
                print(f"[round {round_}/{rounds}, {i}/{len(ordered)}] {query} / {preset.name} ...", flush=True)
                if preset.max_batches not in subsets:  # a table of only the first batches, written once
                    subsets[preset.max_batches] = location(f"workload-first-{preset.max_batches}")
                    write_workload(subsets[preset.max_batches], workload, batches=preset.max_batches)
                source = subsets[preset.max_batches]
                row = run_configuration(spark, query, preset, source, str(work / f"round-{round_}"), settings)
                rows.append(row)
                on_result(row)
    finally:
        for table in filter(is_table_name, written):
            spark.sql(f"DROP TABLE IF EXISTS {table}")
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


def warm_up(spark, configurations, work: Path, workload: Workload, settings: Settings, source: str) -> None:
    """Run each query once on six batches, unmeasured: Python workers and code generation start here, not
    in the first measured configuration."""
    small = dataclasses.replace(workload, events=min(workload.events, 6 * workload.batch))
    write_workload(source, small)
    first = {}
    for query, preset in configurations:
        first.setdefault(query, preset)
    for query, preset in first.items():
        print(f"[warm-up] {query} / {preset.name}", flush=True)
        run_configuration(
            spark,
            query,
            dataclasses.replace(preset, name=f"warm-up-{preset.name}", trigger="0 seconds"),
            source,
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

    typed = table.astype({c: "float64" for c in NUMERIC if c in table}).astype(
        {c: "Int64" for c in ("batches", "input_rows", "state_rows_max", "output_rows") if c in table}
    )
    lake = Tables(spark, settings)
    lake.write(spark.createDataFrame(typed), "tuning_results", mode="append")
    return lake["tuning_results"]
