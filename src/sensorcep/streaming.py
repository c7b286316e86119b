"""Starting and finishing streaming queries the same way everywhere.

Every query of the project goes through :func:`start_query`: deterministic name and checkpoint,
its FAIR scheduler pool, the progress listener, and the trigger from settings (``availableNow`` is
Spark's own: everything the sources hold at start, in ``maxOffsetsPerTrigger``-sized batches).
"""
from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from .settings import Settings, parse_trigger

log = logging.getLogger(__name__)


def start_query(
    df: DataFrame,
    settings: Settings,
    query: str,
    *,
    foreach_batch: Callable | None = None,
    trigger: str | None = None,
    pool: str | None = None,
    output_mode: str = "append",
) -> StreamingQuery:
    trigger = trigger or settings.trigger
    spark = df.sparkSession
    if pool:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
    from .monitoring import ensure_progress_listener

    ensure_progress_listener(spark, settings, query)
    writer = (
        df.writeStream.queryName(settings.query_name(query))
        .option("checkpointLocation", settings.checkpoint_path(query))
        .outputMode(output_mode)
    )
    if foreach_batch is not None:
        writer = writer.foreachBatch(foreach_batch)
    started = writer.trigger(**parse_trigger(trigger)).start()
    if pool:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)
    return started


def finish(query: StreamingQuery, settings: Settings, trigger: str | None = None,
           timeout_s: float | None = None) -> StreamingQuery:
    """Wait for an availableNow query to drain and stop; leave continuous queries running."""
    if (trigger or settings.trigger) != "availableNow":
        return query
    query.awaitTermination(timeout_s)
    if query.exception() is not None:
        raise query.exception()
    from .monitoring import flush_progress

    flush_progress(SparkSession.active(), settings, query)
    return query


def writer_id(settings: Settings, query: str, sink: str = "") -> str:
    """The Delta ``txnAppId`` of a query's sink: query name (+ sink) + the id Spark keeps in the checkpoint.

    Stable across restarts from the same checkpoint (a replayed batch is recognised); new with a new
    checkpoint, whose batch ids start at 0 again and must not be taken for replays of the old query's.
    Call it inside ``foreachBatch`` (the checkpoint's ``metadata`` file exists once the query has started).
    """
    metadata = f"{settings.checkpoint_path(query)}/metadata"
    try:
        with open(metadata) as handle:  # local paths and Unity Catalog volumes (/Volumes/...)
            first = handle.readline()
    except OSError:  # other file systems: through Spark
        first = SparkSession.active().read.text(metadata).first()[0]
    name = settings.query_name(query) + (f":{sink}" if sink else "")
    return f"{name}@{json.loads(first)['id']}"


@contextmanager
def materialized(batch: DataFrame):
    """A (small) micro-batch computed once for several sinks (persisted, then released)."""
    cached = batch.persist()
    try:
        yield cached
    finally:
        cached.unpersist()


def run_available_now(df: DataFrame, settings: Settings, query: str, **kwargs) -> StreamingQuery:
    """Start with the settings' trigger and, for availableNow, wait until everything is processed."""
    started = start_query(df, settings, query, **kwargs)
    return finish(started, settings, kwargs.get("trigger"))
