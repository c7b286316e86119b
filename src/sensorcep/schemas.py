"""The project's Delta tables, declared once: name, columns and types, partitioning, key, and who writes them.

``settings.TABLES`` (the names), the columns an extra event field may not shadow (``settings.RESERVED_COLUMNS``) and
the step that creates the tables a query writes before it starts (:func:`sensorcep.pipeline.streaming.create_tables`,
through :meth:`sensorcep.io.lake.Tables.create`) derive from :data:`DECLARED`. The streaming queries declare what
they write (``queries.declare(writes=...)``); ``tests/unit/test_schemas.py`` checks that each table's ``written_by``
is exactly the queries that declare it.

A table with ``columns=None`` is written whole by one step (the devices dimension, the rules, tuning results) and
created by that write. Every other table is created with its columns before anything writes it: four queries append
to ``late_events``, and with catalog-named tables the first writes of several queries would otherwise race to create
it. Writers append with schema evolution, so a table may gain columns later (``extra_fields`` in bronze).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableSpec:
    name: str
    #: Spark DDL of the columns (``"device_id string, ..."``); None: created by its one writer
    columns: str | None
    #: what makes a row unique
    key: tuple[str, ...]
    #: the streaming queries that write it (``queries.declare(writes=...)``), or the step that does
    written_by: tuple[str, ...]
    partition_by: tuple[str, ...] = ()

    @property
    def column_names(self) -> list[str]:
        return [part.strip().split()[0] for part in split_columns(self.columns or "")]


def split_columns(ddl: str) -> list[str]:
    """``"a string, b array<string>, c map<string, int>"`` -> its column definitions (commas inside <> kept)."""
    parts, depth, current = [], 0, ""
    for char in ddl:
        depth += {"<": 1, ">": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p.strip() for p in [*parts, current] if p.strip()]


#: the Kafka record's columns ingest keeps with every event (bronze, duplicates)
KAFKA_COLUMNS = "topic string, partition int, offset long, kafka_timestamp timestamp"
#: an alert's columns (the alerts topic's record, as ``anomalies`` keeps it)
ALERT_COLUMNS = (
    "alert_id string, device_id string, sensor_freq double, event_time timestamp, kafka_timestamp timestamp, "
    "rule_id string, rule_version int, rule string, detail string, detected_at timestamp"
)

DECLARED: tuple[TableSpec, ...] = (
    TableSpec(
        "bronze_events",
        f"device_id string, sensor_freq double, event_time timestamp, {KAFKA_COLUMNS}, ingest_time timestamp, "
        "part_date date",
        key=("device_id", "event_time"),
        written_by=("ingest",),
        partition_by=("part_date",),
    ),
    TableSpec(
        "quarantine_events",
        "key binary, raw_value binary, topic string, partition int, offset long, kafka_timestamp timestamp, "
        "reason string, quarantined_at timestamp, part_date date",
        key=("topic", "partition", "offset"),
        written_by=("ingest", "alert_lifecycle"),
        partition_by=("part_date",),
    ),
    TableSpec(
        "duplicate_events",
        f"device_id string, event_time timestamp, sensor_freq double, {KAFKA_COLUMNS}, duplicate_of_partition int, "
        "duplicate_of_offset long, ingest_time timestamp, part_date date",
        key=("topic", "partition", "offset"),
        written_by=("ingest",),
        partition_by=("part_date",),
    ),
    TableSpec(
        "late_events",
        "query string, device_id string, sensor_freq double, event_time timestamp, watermark timestamp, "
        "late_by_s double, batch_id long, part_date date",
        key=("query", "device_id", "event_time"),
        written_by=("sampling", "device_activity", "stateful_rules", "alert_lifecycle", "group_rules"),
        partition_by=("part_date",),
    ),
    TableSpec("devices", None, key=("device_id",), written_by=("simulator --devices-table",)),
    TableSpec(
        "sensor_samples",
        "device_id string, sensor_freq double, event_time timestamp, window_start timestamp, window_end timestamp, "
        "roles array<string>, is_anomalous int, part_date date",
        key=("window_start", "window_end", "device_id", "event_time", "sensor_freq"),
        written_by=("sampling",),
        partition_by=("part_date",),
    ),
    TableSpec(
        "device_status",
        "device_id string, status_event string, status string, changed_at timestamp, first_seen timestamp, "
        "last_seen timestamp, event_count long",
        key=("device_id", "status_event", "changed_at"),
        written_by=("device_activity",),
    ),
    TableSpec(
        "anomalies",
        f"{ALERT_COLUMNS}, part_date date",
        key=("alert_id",),
        written_by=("anomalies",),
        partition_by=("part_date",),
    ),
    TableSpec(
        "alert_escalations",
        f"{ALERT_COLUMNS}, ack_deadline timestamp, escalated_at timestamp, reason string, part_date date",
        key=("alert_id",),
        written_by=("alert_lifecycle",),
        partition_by=("part_date",),
    ),
    TableSpec(
        "alert_events",
        "event_id string, incident_id string, rule_id string, device_id string, transition string, at timestamp, "
        "cause_id string, pages boolean, state string, alerts long, actor string, detail string, batch_id long, "
        "part_date date",
        key=("event_id",),
        written_by=("alert_lifecycle",),
        partition_by=("part_date",),
    ),
    TableSpec(
        "notifications",
        "notification_id string, receiver string, group_name string, incident_ids array<string>, "
        "new_incident_ids array<string>, repeat boolean, level int, status string, reason string, "
        "attempts array<string>, at timestamp, batch_id long",
        key=("notification_id", "status"),
        written_by=("notifier",),
    ),
    TableSpec(
        "silences",
        "silence_id string, matchers map<string, string>, starts timestamp, ends timestamp, author string, "
        "comment string, written_at timestamp, written_by string",
        key=("silence_id", "written_at"),
        written_by=("routes silence",),
    ),
    TableSpec("alert_rules", None, key=("rule_id",), written_by=("rules apply",)),
    TableSpec(
        "routes",
        "version int, spec string, source string, published_by string, published_at timestamp",
        key=("version",),
        written_by=("routes publish",),
    ),
    TableSpec(
        "device_baselines",
        "device_id string, rule_id string, rule_version int, events long, mean double, spread double, "
        "as_of timestamp, batch_id long",
        key=("device_id", "rule_id", "batch_id"),
        written_by=("stateful_rules",),
    ),
    TableSpec("tuning_results", None, key=("run_id", "query", "preset"), written_by=("04 state tuning",)),
    TableSpec(
        "stream_progress",
        "query_name string, query_id string, run_id string, batch_id long, timestamp timestamp, "
        "num_input_rows long, input_rows_per_second double, processed_rows_per_second double, "
        "batch_duration_ms long, trigger_execution_ms long, add_batch_ms long, latest_offset_ms long, "
        "watermark timestamp, event_time_max timestamp, state_rows_total long, state_memory_bytes long, "
        "state_commit_ms long, rows_dropped_by_watermark long, source_end_offset string, kafka_records_skipped long, "
        "progress_json string, part_date date",
        key=("run_id", "batch_id"),
        written_by=("progress listener",),
        partition_by=("part_date",),
    ),
)

BY_NAME = {spec.name: spec for spec in DECLARED}
