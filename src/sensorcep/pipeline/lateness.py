"""Events too late for an event-time operator: kept in ``late_events``, never dropped silently.

A stateful operator behind a watermark drops, as too late, every input row whose event time is at or before the
watermark of the previous micro-batch (Spark's late-row filter; Spark only counts them in
``numRowsDroppedByWatermark``). :func:`with_input` unions the operator's output with its own input rows, and
:func:`late_event_writer`'s ``foreachBatch`` keeps the input rows Spark's filter removed, with the watermark they
missed and by how much, in ``late_events``; the operator's output goes to its own writer as before.

The watermark is read from the query's offset log (``offsets/<batch - 1>``, ``batchWatermarkMs``): the value
Spark itself used for the batch, also when the batch is replayed after a crash.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sensorcep.io import delta
from sensorcep.io.lake import FencedAppends, Tables
from sensorcep.pipeline import checkpoint_log, parsing
from sensorcep.settings import Settings

#: the input fields a late row keeps
EVENT_FIELDS = ["device_id", "sensor_freq", "event_time"]
#: what a rejected input record carries to ``quarantine_events``
QUARANTINE_INPUT = ["key", "value", *parsing.KAFKA_COORDINATES, "reason"]
#: a late event's identity in ``late_events``: recorded once per query
LATE_KEY = ["query", "device_id", "event_time"]
#: the columns of ``late_events``
LATE_COLUMNS = [
    "query",
    "device_id",
    "sensor_freq",
    "event_time",
    "watermark",
    "late_by_s",
    "batch_id",
    "part_date",
]


def with_input(
    output: DataFrame, events: DataFrame, fields: list[str] = EVENT_FIELDS, rejected: DataFrame | None = None
) -> DataFrame:
    """The operator's ``output`` and its input ``events`` (the stream behind its watermark) in one stream:
    ``_out`` (a struct of an output row, or null), ``_in`` (a struct of the input ``fields``, or null) and, with
    ``rejected`` (input records refused before the operator, in :func:`parsing.quarantine_rows`' input columns:
    key, value, Kafka coordinates, reason), ``_bad``."""
    branches = [
        output.select(F.struct(*output.columns).alias("_out")),
        events.select(F.struct(*fields).alias("_in")),
    ]
    if rejected is not None:
        branches.append(rejected.select(F.struct(*QUARANTINE_INPUT).alias("_bad")))
    names = [b.columns[0] for b in branches]
    types = {b.columns[0]: b.schema[b.columns[0]].dataType for b in branches}
    typed = [
        b.select(*[F.col(n) if n == b.columns[0] else F.lit(None).cast(types[n]).alias(n) for n in names])
        for b in branches
    ]
    union = typed[0]
    for branch in typed[1:]:
        union = union.unionByName(branch)
    return union


def late_event_writer(
    settings: Settings, query: str, write_output: Callable[[DataFrame, int], None], *, input_repeats: bool = False
):
    """``foreachBatch`` over :func:`with_input`'s stream: output rows to ``write_output``, late input rows (event time
    at or before the watermark Spark's late-row filter used in this batch) to ``late_events``, exactly once; rejected
    records, if the stream has them, to ``quarantine_events`` (merged on their Kafka coordinates).

    One job computes the batch and counts its output, late and rejected rows; a sink with nothing to write is not
    asked (each ran a job to find nothing: several seconds a batch for the alert lifecycle on 2 cores). A batch with no
    row to keep (most batches of a stateful query, e.g. those that only move the watermark) ends there.

    ``input_repeats``: the query's input is read at least once (the alerts topic behind the alert lifecycle), so the
    same late event can arrive twice: it is kept once (:func:`not_held`). Bronze, the others' input, holds each event
    once."""

    # each batch's late rows once, as a blind append fenced by batch id (decision 0047)
    query_name = settings.query_name(query)
    appended = FencedAppends("late_events", ["part_date"], mine=F.col("query") == query_name, check_empty=input_repeats)

    def write(batch: DataFrame, batch_id: int) -> None:
        lake = Tables(batch.sparkSession, settings)
        mark_ms = late_watermark_ms(batch.sparkSession, settings, query, batch_id)
        mark = F.timestamp_millis(F.lit(mark_ms))
        keep = F.col("_out").isNotNull() | (F.col("_in.event_time") <= mark)
        if "_bad" in batch.columns:
            keep = keep | F.col("_bad").isNotNull()
        kept = batch.where(keep).persist()
        try:
            # one job computes every partition (the operator's state commits here) and counts each kind of kept row:
            # a sink with nothing to write is not asked (its table exists already)
            kinds = [c for c in ("_out", "_in", "_bad") if c in kept.columns]
            counts = kept.agg(*[F.count(c).alias(c) for c in kinds]).first().asDict()
            if counts["_out"]:
                write_output(kept.where(F.col("_out").isNotNull()).select("_out.*"), batch_id)
            if counts["_in"]:  # a kept input row is a late one: its event time is at or before the mark
                late = kept.where(F.col("_in").isNotNull()).select(
                    F.lit(query_name).alias("query"),
                    *[F.col(f"_in.{name}").alias(name) for name in EVENT_FIELDS],
                    mark.alias("watermark"),
                    ((F.lit(mark_ms * 1000) - F.unix_micros("_in.event_time")) / 1e6).alias("late_by_s"),
                    F.lit(batch_id).cast("long").alias("batch_id"),
                    F.to_date("_in.event_time").alias("part_date"),
                )
                # with input_repeats, the append follows a read of late_events: another query's append to a partition
                # it read fails it (Delta's conflict check), and it is simply done again (held rows are left out)
                delta.retry_first_commit_race(
                    lambda: appended.once(lake, not_held(late, lake, query_name) if input_repeats else late, batch_id),
                    attempts=5,
                    codes=delta.CONCURRENT_APPEND,
                )
            if counts.get("_bad"):
                bad = parsing.quarantine_rows(kept.where(F.col("_bad").isNotNull()).select("_bad.*"))
                lake.merge_new_rows(bad, "quarantine_events", parsing.RECORD_KEY, ["part_date"])
        finally:
            kept.unpersist()

    return write


def not_held(late: DataFrame, lake: Tables, query_name: str) -> DataFrame:
    """The late rows ``late_events`` does not hold yet for ``query_name`` (by :data:`LATE_KEY`). Only the query itself
    writes its rows, so this read and the blind append after it cannot race (a MERGE would conflict with the other
    queries' appends to the same partitions)."""
    late = late.dropDuplicates(LATE_KEY)
    if not lake.exists("late_events"):
        return late
    # only the late rows' own days (``part_date`` is the event time's): late_events grows for as long as the job runs
    days = [row[0] for row in late.select("part_date").distinct().collect()]
    held = (
        lake.read("late_events").where(F.col("part_date").isin(days) & (F.col("query") == query_name)).select(*LATE_KEY)
    )
    return late.join(held, LATE_KEY, "left_anti")


def late_watermark_ms(spark: SparkSession, settings: Settings, query: str, batch_id: int) -> int:
    """The watermark of Spark's late-row filter in ``batch_id``: the previous batch's (0 for the first batch)."""
    if batch_id == 0:
        return 0
    return checkpoint_log.watermark_ms(spark, settings.checkpoint_path(query), batch_id - 1)
