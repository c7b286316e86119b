"""Starting and finishing streaming queries the same way everywhere.

Every query of the project goes through :func:`start_query`: deterministic name and checkpoint,
its FAIR scheduler pool, the progress listener, and the trigger from settings (``availableNow`` is
Spark's own: everything the sources hold at start, in ``maxOffsetsPerTrigger``-sized batches).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from sensorcep.errors import SensorCepError
from sensorcep.io.lake import Tables
from sensorcep.observability.monitoring import ensure_progress_listener, flush_progress
from sensorcep.observability.progress import offsets_behind
from sensorcep.pipeline import checkpoint_log, checkpoint_settings
from sensorcep.pipeline.claims import claim_checkpoint, release_checkpoints
from sensorcep.pipeline.interruptions import stops_cleanly
from sensorcep.pipeline.queries import Query
from sensorcep.runtime import classic_context, session_key, set_trigger
from sensorcep.settings import Settings, parse_trigger, trigger_runs_to_end

log = logging.getLogger(__name__)
_said_no_pools: set[str] = set()

#: how Spark says a Python worker did not start in time: a query's Python process (a stateful processor's, at its
#: first batch; a foreachBatch function's on Spark Connect, as the query starts) must connect back within Spark's fixed
#: 10 seconds, and a busy 2-core machine starting several queries at once can miss that. A transient failure that
#: starting the query again gets past.
WORKER_START_FAILURES = ("Python worker failed to connect back", "CANNOT_OPEN_SOCKET")
#: how many times one query is started again after such a failure, and (the always-on job) the least time between two
#: such restarts of any query of the process: past Spark's 10 s, so the restarted queries' Python processes do not race
#: each other again (two queries restarted together both failed again, in a suite run beside the fault test)
WORKER_START_RETRIES = 3
WORKER_START_GAP_S = 12.0


def worker_start_failed(error: BaseException | None) -> bool:
    """Whether a query failed (or failed to start) only because its Python worker did not start in time."""
    return error is not None and any(marker in str(error) for marker in WORKER_START_FAILURES)


def scheduler_pool_context(spark: SparkSession):
    """Where a query's FAIR scheduler pool is set: the classic session's SparkContext. Spark Connect has no
    pools (its queries share the cluster's scheduler): None, said once per session."""
    context = classic_context(spark)
    if context is None and session_key(spark) not in _said_no_pools:
        _said_no_pools.add(session_key(spark))
        log.warning(
            "Spark Connect session: FAIR scheduler pools are a classic-cluster feature, so the queries "
            "share the default pool (their results are the same; only their CPU shares differ)"
        )
    return context


def start_query(
    df: DataFrame,
    settings: Settings,
    query: str,
    *,
    foreach_batch: Callable | None = None,
    sink: tuple[str, dict[str, str]] | None = None,
    trigger: str | None = None,
    pool: str | None = None,
    output_mode: str = "append",
) -> StreamingQuery:
    """Start ``df`` as the project's query ``query``: into ``foreach_batch``, or a ``sink`` = (format, options).

    A real-time trigger (``realtime[:interval]``) runs in update mode, the only one real-time mode takes (for a
    stateless query it writes the same rows as append), on a checkpoint of its own (``<query>-realtime``): runtimes
    refuse a micro-batch run's checkpoint in real-time mode.
    """
    trigger = trigger or settings.trigger
    trigger_kwargs = parse_trigger(trigger)
    realtime = "realTime" in trigger_kwargs
    if realtime:
        output_mode = "update"
    spark = df.sparkSession
    context = scheduler_pool_context(spark) if pool else None
    if context is not None:
        context.setLocalProperty("spark.scheduler.pool", pool)

    ensure_progress_listener(spark, settings, query)
    claim = claim_checkpoint(settings, query, realtime=realtime)
    checkpoint = settings.checkpoint_path(query, realtime=realtime)
    for folder in checkpoint_log.clear_unstarted(checkpoint, realtime=realtime):
        log.warning("query %s: cleared %s, left by a run killed before its first commit", query, folder)
    writer = (
        df.writeStream.queryName(settings.query_name(query))
        .option("checkpointLocation", checkpoint)
        .outputMode(output_mode)
    )
    if foreach_batch is not None:
        writer = writer.foreachBatch(stops_cleanly(foreach_batch))
    if sink is not None:
        writer = writer.format(sink[0]).options(**sink[1])
    try:
        started = _start(set_trigger(writer, trigger_kwargs), query)
    except BaseException:
        claim.release()
        raise
    claim.query = started
    if context is not None:
        context.setLocalProperty("spark.scheduler.pool", None)
    return started


def _start(writer, query: str) -> StreamingQuery:
    """``writer.start()``, again (up to :data:`WORKER_START_RETRIES` times) when only its Python worker was late: on
    Spark Connect a foreachBatch query starts its function's Python process as it starts (``make demo``: 03's sampling
    query beside the real-time alert query missed Spark's 10 s once), and nothing of the query exists yet."""
    attempt = 0
    while True:
        try:
            return writer.start()
        except Exception as error:
            attempt += 1
            if attempt > WORKER_START_RETRIES or not worker_start_failed(error):
                raise
            log.warning(
                "query %s: its Python worker did not start in time; starting the query again (%d of %d)",
                query,
                attempt,
                WORKER_START_RETRIES,
            )


def finish(
    query: StreamingQuery, settings: Settings, trigger: str | None = None, timeout_s: float | None = None
) -> StreamingQuery:
    """Wait for a query whose trigger runs to the end (``availableNow``, ``once``) to stop; leave others running."""
    if not trigger_runs_to_end(trigger or settings.trigger):
        return query
    try:
        query.awaitTermination(timeout_s)
    except Exception as error:  # the query's failure (StreamingQueryException)
        raise explain_failure(query, error) from error
    if query.exception() is not None:
        raise explain_failure(query, query.exception())
    release_checkpoints()

    flush_progress(SparkSession.active(), settings, query)
    return query


class CheckpointMismatchError(SensorCepError, RuntimeError):
    """A query restarted on a checkpoint that another source wrote."""


class DataLossError(SensorCepError, RuntimeError):
    """Kafka records were deleted before a query read them; the query stopped instead of skipping them."""


#: how Spark's Kafka source says records it had to read are gone (error class, message, the option it names)
DATA_LOSS_MARKERS = ("KAFKA_DATA_LOSS", "Some data may have been lost", "failOnDataLoss")


def explain_failure(query: StreamingQuery, error: BaseException) -> BaseException:
    """A query's failure, as the error to raise: Kafka data loss becomes a :class:`DataLossError` that says what
    was lost and the two ways on, a checkpoint of another source a :class:`CheckpointMismatchError` that says what
    to delete; anything else is returned unchanged."""
    text = str(error)
    if "DELTA_INVALID_SOURCE_VERSION" in text:
        return CheckpointMismatchError(
            f"query {query.name}: its checkpoint ({query.name} under checkpoints/) was written for another source; "
            f"since the medallion change, 02's queries read bronze_events, not Kafka. Start them from a new "
            f"checkpoint: delete that checkpoint folder (the new query reads bronze from its start and emits every "
            f"window bronze holds again: empty the query's output table first, or start it with a new schema, "
            f"--var schema=<new> for a deployed bundle, schema=<new> and query_suffix=_v2 locally)."
        )
    if not any(marker in text for marker in DATA_LOSS_MARKERS):
        return error
    said = next((line.strip() for line in text.splitlines() if "offset" in line.lower()), text.splitlines()[0])
    return DataLossError(
        f"query {query.name}: Kafka records were deleted before it read them (retention ran out, or the topic was "
        f"deleted and re-created), so it stopped rather than skip them silently. Spark: {said[:400]} "
        f"To go on from the earliest records still in Kafka, skipping the lost ones knowingly, run it once with "
        f"accept_data_loss=true (stream_progress.kafka_records_skipped counts them); to keep everything, restore the "
        f"records first."
    )


class CheckpointResetError(SensorCepError, RuntimeError):
    """A query started on a new checkpoint while the tables it rewrites from its input's start hold rows."""


def refuse_reset(spark: SparkSession, settings: Settings, declared: Query, created: Iterable[str] = ()) -> None:
    """Refuse to start ``declared`` on a new checkpoint (none yet, or reset: no id of Spark's, so a new Delta writer id,
    :func:`writer_id`) while a table it rewrites from its input's start (:attr:`Query.rewritten_from_start`) holds
    rows: it would read bronze (or the topic) from the start and append every row again. So do its own rows of
    ``late_events`` (a query that writes them judges lateness against its own watermarks: a new run reads its input
    again, in other micro-batches, and keeps as late what it finds late; the old rows would double its rows, or claim
    events were left out of its output that the new run took). A restart on the checkpoint (its id kept, also after a
    kill before its first commit) goes on: Delta skips the batches it wrote. ``created``: tables this start has just
    created, empty without a read."""
    late_rows = "late_events" in declared.tables
    if not (declared.rewritten_from_start or late_rows) or checkpoint_id(settings, declared.name) is not None:
        return
    lake = Tables(spark, settings)
    asked = [name for name in declared.rewritten_from_start if name not in set(created)]
    held = [
        f"DELETE FROM {lake[name].sql_name}" for name in asked if lake.exists(name) and not lake.read(name).isEmpty()
    ]
    name = settings.query_name(declared.name)
    if late_rows and "late_events" not in set(created) and lake.exists("late_events"):
        if not lake.read("late_events").where(F.col("query") == name).isEmpty():
            held.append(f"DELETE FROM {lake['late_events'].sql_name} WHERE query = '{name}'")
    if held:
        raise CheckpointResetError(
            f"query {name} has no checkpoint at {settings.checkpoint_path(declared.name)}, but its tables already hold "
            f"rows it wrote through an earlier one: a new checkpoint reads its input from the start and would append "
            f"them all again. Restore that checkpoint; or, to rebuild from its input, remove them first "
            f"({'; '.join(held)}); or run with another schema."
        )


def checkpoint_id(settings: Settings, query: str) -> str | None:
    """The id Spark keeps in the query's checkpoint (``metadata``), or None before its first start."""
    metadata = f"{settings.checkpoint_path(query)}/metadata"
    try:
        with open(metadata) as handle:  # local paths and Unity Catalog volumes (/Volumes/...)
            first = handle.readline()
    except FileNotFoundError:
        return None
    except OSError:  # other file systems: through Spark
        try:
            first = SparkSession.active().read.text(metadata).first()[0]
        except AnalysisException as error:
            if "PATH_NOT_FOUND" not in str(error):
                raise
            return None
    return json.loads(first)["id"] if first.strip() else None


def checkpoint_exists(settings: Settings, query: str) -> bool:
    """Whether the query has a checkpoint with at least one planned batch (a restart resumes from it)."""
    return bool(checkpoint_log.batches(settings.checkpoint_path(query), "offsets"))


def writer_id(settings: Settings, query: str, sink: str = "") -> str:
    """The Delta ``txnAppId`` of a query's sink: query name (+ sink) + the id Spark keeps in the checkpoint.

    Stable across restarts from the same checkpoint (a replayed batch is recognised); new with a new
    checkpoint, whose batch ids start at 0 again and must not be taken for replays of the old query's.
    Call it inside ``foreachBatch`` (the checkpoint's ``metadata`` file exists once the query has started).
    """
    found = checkpoint_id(settings, query)
    if found is None:
        raise RuntimeError(f"query {settings.query_name(query)} has not started: its checkpoint has no id yet")
    name = settings.query_name(query) + (f":{sink}" if sink else "")
    return f"{name}@{found}"


@contextmanager
def query_conf(spark: SparkSession, conf: dict[str, str]):
    """Session confs for the queries started inside the block (a query copies the session's confs when it starts and
    keeps the ones its checkpoint records), restored afterwards."""
    previous = {name: spark.conf.get(name, None) for name in conf}
    for name, value in conf.items():
        spark.conf.set(name, value)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, value)


@contextmanager
def materialized(batch: DataFrame):
    """A (small) micro-batch computed once for several sinks (persisted, then released)."""
    cached = batch.persist()
    try:
        yield cached
    finally:
        cached.unpersist()


_created: set[tuple] = set()
_created_lock = threading.Lock()


def create_tables(spark: SparkSession, settings: Settings, names: Iterable[str]) -> list[str]:
    """Create the tables a query writes before it starts (:meth:`sensorcep.io.lake.Tables.create`), once per session
    and table location: four queries write ``late_events``, and none of them may be the one to create it. Returns the
    tables this call created."""
    where = (session_key(spark), settings.base_path, settings.tables, settings.catalog, settings.schema)
    with _created_lock:
        missing = [name for name in names if (*where, name) not in _created]
        created = Tables(spark, settings).create(missing) if missing else []
        _created.update((*where, name) for name in missing)
    return created


def launch(df: DataFrame, settings: Settings, declared: Query, *, wait: bool, **kwargs) -> StreamingQuery:
    """Start the declared query (its start function's ``.query``, :mod:`sensorcep.pipeline.queries`) with its trigger
    setting and its pool; ``wait``: run it to the end of its input (:func:`run_available_now`), else return it
    running."""
    checkpoint_settings.check(settings, declared.name, declared.fixed_settings)
    created = create_tables(df.sparkSession, settings, declared.tables)
    refuse_reset(df.sparkSession, settings, declared, created)
    kwargs.setdefault("trigger", declared.trigger(settings))
    if declared.pool:
        kwargs.setdefault("pool", declared.pool)
    return (run_available_now if wait else start_query)(df, settings, declared.name, **kwargs)


def run_available_now(df: DataFrame, settings: Settings, query: str, **kwargs) -> StreamingQuery:
    """Start with the settings' trigger and, for availableNow, wait until everything is processed."""
    started = start_query(df, settings, query, **kwargs)
    return finish(started, settings, kwargs.get("trigger"))


def source_end_offsets(query: StreamingQuery) -> dict[str, dict[str, int]]:
    """The Kafka offsets a query has processed up to (its last progress' ``endOffset``):
    {topic: {partition: offset}}."""
    last = query.lastProgress
    if last is None:
        return {}
    offsets: dict[str, dict[str, int]] = {}
    for source in json.loads(last.json)["sources"]:
        end = source.get("endOffset")
        end = json.loads(end) if isinstance(end, str) else end
        for topic, partitions in (end or {}).items():
            if isinstance(partitions, dict):
                offsets.setdefault(topic, {}).update({str(p): int(o) for p, o in partitions.items()})
    return offsets


def caught_up(query: StreamingQuery, target: dict[str, dict[str, int]]) -> bool:
    done = source_end_offsets(query)
    return all(done.get(topic, {}).get(p, -1) >= o for topic, parts in target.items() for p, o in parts.items())


def stop_when_caught_up(
    query: StreamingQuery,
    target: dict[str, dict[str, int]] | None = None,
    timeout_s: float = 300.0,
    poll_s: float = 0.2,
) -> StreamingQuery:
    """Stop a running query once its progress shows it has read ``target`` (e.g. a topic's end offsets), or, with
    no target, once a progress report made after this call shows its Kafka sources 0 records behind the end.

    A real-time-mode query reports progress once per checkpoint interval, so this returns within about one
    interval of the query catching up. Raises the query's error if it failed, TimeoutError if it never caught up.
    """

    def reported_after(start: int | None) -> bool:
        last = query.lastProgress
        return last is not None and (start is None or last.batchId > start)

    start = query.lastProgress.batchId if query.lastProgress is not None else None

    def done() -> bool:
        if target is not None:
            return caught_up(query, target)
        return reported_after(start) and offsets_behind(json.loads(query.lastProgress.json)) == 0

    deadline = time.monotonic() + timeout_s
    while not done():  # polling a condition, not sleeping as synchronisation
        if query.exception() is not None:
            raise explain_failure(query, query.exception())
        if time.monotonic() > deadline:
            query.stop()
            raise TimeoutError(
                f"{query.name} read up to {source_end_offsets(query)}, not "
                f"{target or 'the end of its topics'}, within {timeout_s:.0f} s"
            )
        time.sleep(poll_s)
    query.stop()
    return query


#: loggers that report a stopped query's interrupted tasks as errors: a sink's write "is aborting", the task's
#: InterruptException, "Aborting commit for partition" (the real-time alert query's long-running Kafka writes)
STOP_NOISE_LOGGERS = (
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec",
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
    "org.apache.spark.util.Utils",
)


def stop_queries(spark: SparkSession, queries: list[StreamingQuery], settle_s: float = 10.0) -> None:
    """Stop the queries that still run, quietly: while they stop (and their killed tasks wind down, at most
    ``settle_s``), the loggers of :data:`STOP_NOISE_LOGGERS` are silenced, then restored. A query that fails is not
    stopped here, so its error is still reported. Under Spark Connect (no JVM at hand) the stop is plain."""
    running = [q for q in queries if q.isActive]
    if not running:
        return
    context = classic_context(spark)
    if context is None:
        for query in running:
            query.stop()
        return
    jvm = context._jvm
    configurator, level = jvm.org.apache.logging.log4j.core.config.Configurator, jvm.org.apache.logging.log4j.Level
    saved = {name: jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel() for name in STOP_NOISE_LOGGERS}
    for name in STOP_NOISE_LOGGERS:
        configurator.setLevel(name, level.OFF)
    try:
        for query in running:
            query.stop()
        deadline = time.monotonic() + settle_s
        while context.statusTracker().getActiveStageIds() and time.monotonic() < deadline:
            time.sleep(0.1)  # killed tasks still winding down log their interruption
    finally:
        for name, previous in saved.items():
            configurator.setLevel(name, previous)
