"""The always-on job: each task starts its streaming queries and keeps them running until they stop or fail.

The bundle's ``sensor_cep_streaming`` job (``continuous``: Databricks starts a new run when one ends or
fails) runs one task per entry of :data:`TASKS`, each a ``python_wheel_task`` calling :func:`main` through the
package's ``sensorcep-stream`` entry point with its parameters as ``--name=value`` arguments. Locally,
``python -m sensorcep run --job sensor_cep_streaming`` starts the same tasks in one Spark application
(:mod:`sensorcep.local.jobs`).

* ``ingest``: Kafka -> ``bronze_events`` / ``quarantine_events`` (micro-batches, ``trigger``);
* ``sampling_state``: ``bronze_events`` (Delta stream) -> ``sensor_samples`` and ``device_status`` (micro-batches,
  ``trigger``);
* ``alerts``: events -> alerts topic (``alerts_trigger``: real-time mode), on a cluster of its own; the task reads
  ``alert_rules`` every ``rules_refresh`` and restarts the query on its checkpoint when the rules changed;
* ``alert_records``: alerts topic -> ``anomalies`` (MERGE) and the alert lifecycle (micro-batches, ``trigger``).

A task that reads Kafka starts where its checkpoint left off: a stop and a restart lose and double nothing
(Delta sinks are idempotent per batch, ``anomalies`` is a MERGE, alerts carry a stable ``alert_id``).
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from sensorcep.observability.monitoring import stop_progress_listener
from sensorcep.pipeline import queries, registry
from sensorcep.pipeline.ingest import wait_for_bronze
from sensorcep.pipeline.streaming import (
    WORKER_START_GAP_S,
    WORKER_START_RETRIES,
    explain_failure,
    worker_start_failed,
)
from sensorcep.rules import catalog
from sensorcep.runtime import get_spark
from sensorcep.settings import Settings, SettingsError, parse_duration

log = logging.getLogger(__name__)


#: the always-on tasks: the bundle's task keys, each starting its declared queries
TASKS = queries.TASK_ORDER


@dataclass
class Stagger:
    """Restarts after worker-start failures, one at a time: the next not before ``gap_s`` after the last."""

    gap_s: float = WORKER_START_GAP_S
    clock: Callable[[], float] = time.monotonic
    last: float = -math.inf

    def ready(self) -> bool:
        return self.clock() - self.last >= self.gap_s

    def mark(self) -> None:
        self.last = self.clock()


#: one per process: the restarts of every task the process runs share it
RESTARTS = Stagger()


@dataclass
class RunningTask:
    """The queries of one always-on task, and what each compiled in when it started (its declaration's
    ``reload_when`` fingerprint: the alert rules). :meth:`refresh` restarts, on its checkpoint, each query whose
    fingerprint changed since, so a rule change reaches a running job without a restart of the job. A query whose
    start returned None (nothing to do, e.g. no stateful rule in force) holds an empty slot that a refresh fills
    once it has work."""

    spark: SparkSession
    settings: Settings
    declared: list[queries.Query]
    slots: list[StreamingQuery | None] = field(default_factory=list)
    compiled: list[object] = field(default_factory=list)
    retries: dict[int, int] = field(default_factory=dict)  # slot -> restarts after a worker start failure
    stagger: Stagger = field(default_factory=lambda: RESTARTS)

    def start(self) -> RunningTask:
        with catalog.one_read():  # the fingerprint and what the query compiles: one read of the rules
            for declared in self.declared:
                self.compiled.append(declared.reload_when(self.spark, self.settings) if declared.reload_when else None)
                self.slots.append(declared.start(self.spark, self.settings, wait=False))
        return self

    @property
    def queries(self) -> list[StreamingQuery]:
        """The task's running (or failed) queries."""
        return [q for q in self.slots if q is not None]

    def started(self) -> list[tuple[queries.Query, StreamingQuery]]:
        return [(d, q) for d, q in zip(self.declared, self.slots, strict=True) if q is not None]

    def refresh(self) -> list[str]:
        """Restart (or start) the queries whose compiled-in inputs changed; their names."""
        restarted = []
        with catalog.one_read():
            for index, declared in enumerate(self.declared):
                running = self.slots[index]
                if declared.reload_when is None or (running is not None and not running.isActive):
                    continue
                now = declared.reload_when(self.spark, self.settings)
                if now == self.compiled[index]:
                    continue
                log.warning("query %s: what it compiled in changed, restarting it on its checkpoint", declared.name)
                if running is not None:
                    running.stop()
                self.compiled[index] = now
                self.slots[index] = declared.start(self.spark, self.settings, wait=False)
                restarted.append(self.settings.query_name(declared.name))
        return restarted

    def _awaits_restart(self, index: int) -> bool:
        """Whether the slot's query stopped only because a Python worker did not start in time (as
        :func:`~sensorcep.pipeline.streaming.worker_start_failed` says) and may still be started again."""
        query = self.slots[index]
        if query is None or query.isActive or query.exception() is None:
            return False
        if self.retries.get(index, 0) >= WORKER_START_RETRIES:
            return False
        return worker_start_failed(query.exception())

    def restarts_pending(self) -> bool:
        return any(self._awaits_restart(index) for index in range(len(self.slots)))

    def retry_worker_start_failures(self) -> list[str]:
        """Start again, on its checkpoint, a query that failed because a Python worker did not start in time, as a
        Databricks task retry would: up to :data:`WORKER_START_RETRIES` times per query, one query at a time (no
        sooner than :data:`WORKER_START_GAP_S` after the last restart of any query, the one restarted least first); the
        names started again."""
        waiting = [index for index in range(len(self.slots)) if self._awaits_restart(index)]
        if not waiting or not self.stagger.ready():
            return []
        index = min(waiting, key=lambda i: self.retries.get(i, 0))  # the one restarted least so far
        log.warning("query %s: a Python worker did not start in time; starting it again", self.slots[index].name)
        self.retries[index] = self.retries.get(index, 0) + 1
        self.stagger.mark()
        self.slots[index] = self.declared[index].start(self.spark, self.settings, wait=False)
        return [self.settings.query_name(self.declared[index].name)]

    def failed(self) -> list[StreamingQuery]:
        """The queries that stopped with an error the task does not get past (not those waiting for a restart)."""
        return [
            query
            for index, query in enumerate(self.slots)
            if query is not None
            and not query.isActive
            and query.exception() is not None
            and not self._awaits_restart(index)
        ]

    @property
    def reloads(self) -> bool:
        return any(declared.reload_when is not None for declared in self.declared)


def start_task(
    spark: SparkSession, task: str, settings: Settings, only_queries: Iterable[str] | None = None
) -> RunningTask:
    """Start the queries of one always-on task (they run until stopped); ``only_queries``: of them, only these."""
    if task not in TASKS:
        raise SettingsError(f"unknown always-on task {task!r}; known: {', '.join(TASKS)}")
    if settings.runs_to_end:
        raise SettingsError("the always-on job keeps queries running: give trigger an interval (e.g. '10 seconds')")
    wanted = None if only_queries is None else set(only_queries)
    declared = [q for q in registry.tasks()[task] if wanted is None or q.name in wanted]
    if any(q.reads_bronze for q in declared):
        wait_for_bronze(spark, settings)  # the medallion: bronze_events, which the ingest task creates, must exist
    return RunningTask(spark, settings, declared).start()


def await_queries(spark: SparkSession, task: RunningTask) -> None:
    """Block while the queries run, refreshing them every ``rules_refresh`` (:meth:`RunningTask.refresh`) and starting
    again a query whose Python worker did not start in time; raise the first other failure, so the job run fails and
    Databricks restarts it."""
    every_s = parse_duration(task.settings.rules_refresh) if task.reloads else None
    while any(q.isActive for q in task.queries) or task.restarts_pending() or (task.reloads and not task.queries):
        wait_s = min(every_s or math.inf, WORKER_START_GAP_S if task.restarts_pending() else math.inf)
        try:
            ended = spark.streams.awaitAnyTermination(None if wait_s == math.inf else wait_s)
        except StreamingQueryException:  # a query failed: judged below
            ended = True
        if ended:
            spark.streams.resetTerminated()
        elif wait_s == every_s:  # a rules_refresh interval passed (not only a restart's gap)
            task.refresh()
        task.retry_worker_start_failures()
        failed = task.failed()
        if failed:
            for other in task.queries:
                if other.isActive:
                    other.stop()
            raise explain_failure(failed[0], failed[0].exception())


def parse_arguments(argv: list[str] | None = None) -> tuple[str, dict[str, str]]:
    """``--task=ingest --base_path=... --trigger=...`` (how a python_wheel_task passes named parameters)."""
    parser = argparse.ArgumentParser(prog="sensorcep-stream", description="run one always-on task")
    parser.add_argument("--task", required=True, choices=sorted(TASKS))
    known, rest = parser.parse_known_args(argv)
    params = {}
    for item in rest:
        name, sep, value = item.removeprefix("--").partition("=")
        if not item.startswith("--") or not sep:
            raise SettingsError(f"parameter {item!r}: expected --name=value")
        params[name] = value
    return known.task, params


def main(argv: list[str] | None = None) -> None:
    """Entry point of the always-on job's tasks (``sensorcep-stream --task=... --<setting>=...``)."""

    task, params = parse_arguments(argv)
    settings = Settings.from_mapping(params)
    spark = get_spark()

    running = start_task(spark, task, settings)
    log.warning("always-on task %s: started %s", task, ", ".join(q.name for q in running.queries))
    try:
        await_queries(spark, running)
    finally:
        stop_progress_listener(spark)  # under Spark Connect (serverless) the process could not exit otherwise
