"""Every record accounted for: where each record read from Kafka went, and every event too late for a window.

* :func:`ingest_accounting`: the records of the events topic by destination (``bronze_events``,
  ``quarantine_events``, ``duplicate_events``): their sum is every record ingest read.
* :func:`late_event_summary`: ``late_events`` by query, beside what the query's progress reported as dropped by the
  watermark: a query whose operators dropped rows that ``late_events`` does not hold is flagged.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sensorcep.io.lake import Tables
from sensorcep.settings import Settings

DESTINATIONS = ("bronze_events", "quarantine_events", "duplicate_events")


def ingest_accounting(spark: SparkSession, settings: Settings) -> pd.DataFrame:
    """One row per destination table of ingest: records of ``events_topic`` in it, and their Kafka offsets' span."""
    rows, lake = [], Tables(spark, settings)
    for name in DESTINATIONS:
        if not lake.exists(name):
            rows.append({"table": name, "records": 0})
            continue
        found = (
            lake.read(name).where(F.col("topic") == settings.events_topic).agg(F.count("*").alias("records")).first()
        )
        rows.append({"table": name, "records": int(found["records"])})
    frame = pd.DataFrame(rows)
    total = pd.DataFrame([{"table": "every record read", "records": int(frame.records.sum())}])
    return pd.concat([frame, total], ignore_index=True)


def late_event_summary(spark: SparkSession, settings: Settings, progress: pd.DataFrame | None = None) -> pd.DataFrame:
    """``late_events`` by query (events, the most late one's lag, the latest watermark missed), with ``dropped``: the
    rows the query's stateful operators reported dropped by the watermark (``stream_progress``; an operator chain
    counts a row once per operator), and ``accounted``: False when rows were dropped and none is in ``late_events``."""
    columns = ["query", "late_events", "max_late_by_s", "last_watermark", "dropped", "accounted"]
    lake = Tables(spark, settings)
    late = (
        lake.read("late_events")
        .groupBy("query")
        .agg(
            F.count("*").alias("late_events"),
            F.max("late_by_s").alias("max_late_by_s"),
            F.max("watermark").alias("last_watermark"),
        )
        .toPandas()
        if lake.exists("late_events")
        else pd.DataFrame(columns=columns[:4])
    )
    if progress is not None and len(progress):
        dropped = (
            pd.to_numeric(progress.rows_dropped_by_watermark, errors="coerce")
            .groupby(progress.query_name)
            .sum()
            .rename("dropped")
            .reset_index()
            .rename(columns={"query_name": "query"})
        )
        dropped = dropped[dropped.dropped > 0]
        late = late.merge(dropped, on="query", how="outer")
    else:
        late = late.assign(dropped=0)
    late["late_events"] = late.late_events.fillna(0).astype("int64")
    late["dropped"] = late.dropped.fillna(0).astype("int64")
    late["accounted"] = (late.dropped == 0) | (late.late_events > 0)
    return late.reindex(columns=columns).sort_values("query").reset_index(drop=True)
