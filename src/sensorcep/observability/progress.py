"""A streaming query's progress as data: the ``stream_progress`` row schema and the figures taken from Spark's
``StreamingQueryProgress`` (state-operator sums, Kafka records skipped or behind)."""

from __future__ import annotations

import json
from datetime import datetime

import pyarrow as pa

PROGRESS_SCHEMA = pa.schema(
    [
        ("query_name", pa.string()),
        ("query_id", pa.string()),
        ("run_id", pa.string()),
        ("batch_id", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("num_input_rows", pa.int64()),
        ("input_rows_per_second", pa.float64()),
        ("processed_rows_per_second", pa.float64()),
        ("batch_duration_ms", pa.int64()),
        ("trigger_execution_ms", pa.int64()),
        ("add_batch_ms", pa.int64()),
        ("latest_offset_ms", pa.int64()),
        ("watermark", pa.timestamp("us", tz="UTC")),
        ("event_time_max", pa.timestamp("us", tz="UTC")),
        ("state_rows_total", pa.int64()),
        ("state_memory_bytes", pa.int64()),
        ("state_commit_ms", pa.int64()),
        ("rows_dropped_by_watermark", pa.int64()),
        ("source_end_offset", pa.string()),
        ("kafka_records_skipped", pa.int64()),
        ("progress_json", pa.string()),
        ("part_date", pa.date32()),
    ]
)


def _ts(text: str | None):
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


#: the figures Spark derives from a progress' sources, which a Spark Connect client's progress JSON leaves out (its
#: ``StreamingQueryProgress`` still has them as attributes)
DERIVED = ("numInputRows", "inputRowsPerSecond", "processedRowsPerSecond")


def progress_dict(progress) -> dict:
    """A ``StreamingQueryProgress`` (a classic session's or a Spark Connect client's) as the dict of its JSON, in the
    classic form: with the figures of :data:`DERIVED` that a Connect client's JSON omits, and each observed metric as
    ``{field: value}`` (a Connect client's JSON gives ``{"values": [...], "schema": {...}}``)."""
    found = json.loads(progress.json)
    for key in DERIVED:
        if key not in found:
            found[key] = getattr(progress, key)
    for name, metric in (found.get("observedMetrics") or {}).items():
        if isinstance(metric, dict) and set(metric) == {"values", "schema"}:
            fields = [field["name"] for field in metric["schema"]["fields"]]
            found["observedMetrics"][name] = dict(zip(fields, metric["values"], strict=True))
    return found


def progress_row(progress: dict) -> dict:
    """One StreamingQueryProgress (as a dict) -> one ``stream_progress`` row."""
    ops = progress.get("stateOperators") or []
    durations = progress.get("durationMs") or {}
    event_time = progress.get("eventTime") or {}
    sources = progress.get("sources") or [{}]
    ts = _ts(progress.get("timestamp"))
    return {
        "query_name": progress.get("name"),
        "query_id": progress.get("id"),
        "run_id": progress.get("runId"),
        "batch_id": progress.get("batchId"),
        "timestamp": ts,
        "num_input_rows": progress.get("numInputRows"),
        "input_rows_per_second": _finite(progress.get("inputRowsPerSecond")),
        "processed_rows_per_second": _finite(progress.get("processedRowsPerSecond")),
        "batch_duration_ms": progress.get("batchDuration"),
        "trigger_execution_ms": durations.get("triggerExecution"),
        "add_batch_ms": durations.get("addBatch"),
        "latest_offset_ms": durations.get("latestOffset"),
        "watermark": _ts(event_time.get("watermark")),
        "event_time_max": _ts(event_time.get("max")),
        "state_rows_total": sum(o.get("numRowsTotal", 0) for o in ops) if ops else None,
        "state_memory_bytes": sum(o.get("memoryUsedBytes", 0) for o in ops) if ops else None,
        "state_commit_ms": sum(o.get("commitTimeMs", 0) for o in ops) if ops else None,
        "rows_dropped_by_watermark": sum(o.get("numRowsDroppedByWatermark", 0) for o in ops) if ops else None,
        "source_end_offset": json.dumps(sources[0].get("endOffset")) if sources else None,
        "kafka_records_skipped": kafka_records_skipped(progress),
        "progress_json": json.dumps(progress),
        "part_date": ts.date() if ts else None,
    }


def _kafka_offsets(value) -> dict | None:
    value = json.loads(value) if isinstance(value, str) and value.startswith("{") else value
    return value if isinstance(value, dict) else None


def kafka_records_skipped(progress: dict) -> int | None:
    """Kafka records inside a batch's offset range that it did not read: deleted before it got to them (only
    possible with ``accept_data_loss``). None when no Kafka source has a known start (a query's first batch)."""
    skipped = None
    for source in progress.get("sources") or []:
        start, end = _kafka_offsets(source.get("startOffset")), _kafka_offsets(source.get("endOffset"))
        if not (source.get("description", "").startswith("KafkaV2") and start and end):
            continue
        span = sum(
            int(o) - int(start[topic][p])
            for topic, parts in end.items()
            for p, o in parts.items()
            if p in start.get(topic, {})
        )
        skipped = (skipped or 0) + max(0, span - int(source.get("numInputRows") or 0))
    return skipped


def _finite(value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if value == value and abs(value) != float("inf") else None


def offsets_behind(progress: dict) -> int | None:
    """Records the query's Kafka sources were behind the topics' ends at its last batch (None: no Kafka source)."""
    behind = [
        int(float(m["maxOffsetsBehindLatest"]))
        for source in progress.get("sources") or []
        if "maxOffsetsBehindLatest" in (m := source.get("metrics") or {})
    ]
    return sum(behind) if behind else None
