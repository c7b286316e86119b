"""The always-on job's tasks without a JVM (stand-in queries): each is the package's entry point, which tasks and
queries start and what is refused, a query that gets work on a refresh or restarts when its rules change, and a late
Python worker's query started again while any other failure fails the task."""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException

from sensorcep.local import jobs
from sensorcep.pipeline import always_on, queries
from sensorcep.settings import Settings, SettingsError


def test_always_on_task_refuses_availablenow_and_unknown_tasks():
    with pytest.raises(SettingsError, match="interval"):
        always_on.start_task(None, "ingest", always_on.Settings())
    with pytest.raises(SettingsError, match="unknown always-on task"):
        always_on.start_task(None, "everything", always_on.Settings(trigger="5 seconds"))
    assert always_on.parse_arguments(["--task=alerts", "--alerts_trigger=realtime"]) == (
        "alerts",
        {"alerts_trigger": "realtime"},
    )


def test_every_always_on_task_calls_the_package_entry_point():
    tasks = jobs.tasks(jobs.ALWAYS_ON_JOB_KEY)
    assert {t.parameters["task"] for t in tasks} == set(always_on.TASKS)
    assert all(jobs.entry_point_function(t.entry_point) is always_on.main for t in tasks)


def test_the_always_on_job_runs_only_the_tasks_asked_for_and_names_an_unknown_one(monkeypatch):
    """``only``: one cluster's tasks (the real-time ``alerts`` task has its own on Databricks)."""
    started = []

    class Started:
        reloads, queries, settings = False, [], Settings()

        def started(self):
            return []

        def retry_worker_start_failures(self):
            return []

        def failed(self):
            return []

    def start_task(spark, task, settings, only_queries=None):
        started.append((task, only_queries))
        return Started()

    monkeypatch.setattr(always_on, "start_task", start_task)
    lines = []
    jobs.run_always_on(only=["alerts", "ingest"], until=lambda queries: True, out=lines.append, spark=object())
    assert started == [("ingest", None), ("alerts", None)], "in the job's order"
    assert [line.split(":")[0] for line in lines[:2]] == ["▶ ingest", "▶ alerts"]
    with pytest.raises(jobs.JobError, match=r"no task nope; its tasks: ingest, sampling_state, alerts, alert_records"):
        jobs.run_always_on(only=["nope"], until=lambda queries: True, out=lines.append, spark=object())

    # only some queries: the tasks that hold none of them do not start; the others start only those
    started.clear()
    wanted = {"device_activity", "ingest", "anomalies"}
    jobs.run_always_on(only_queries=wanted, until=lambda queries: True, out=lines.append, spark=object())
    assert started == [("ingest", wanted), ("sampling_state", wanted), ("alert_records", wanted)]
    with pytest.raises(jobs.JobError, match=r"no query nope; the queries: ingest, "):
        jobs.run_always_on(only_queries=["nope"], until=lambda queries: True, out=lines.append, spark=object())


def test_a_task_query_with_nothing_to_do_holds_an_empty_slot_until_a_refresh_gives_it_work():
    """No JVM: the declarations' start functions stand in for queries (a stateful rules query starts only once a
    stateful rule is in force; a changed rule set restarts the query that compiled the old one)."""
    rules = {"version": 0}
    started = []

    class Running:
        def __init__(self, name):
            self.name, self.isActive = name, True

        def stop(self):
            self.isActive = False

    def start_rules(spark, settings, *, wait=True):
        if rules["version"] == 0:
            return None
        started.append(Running(f"stateful_rules v{rules['version']}"))
        return started[-1]

    declared = [
        queries.Query(
            "sampling", lambda spark, settings, wait=True: Running("sampling"), "sampling_state", ("sensor_samples",)
        ),
        queries.Query(
            "stateful_rules", start_rules, "sampling_state", ("late_events",), reload_when=lambda s, t: rules["version"]
        ),
    ]
    task = always_on.RunningTask(None, always_on.Settings(), declared).start()
    assert [q.name for q in task.queries] == ["sampling"] and task.slots[1] is None
    assert task.refresh() == [], "nothing changed"
    rules["version"] = 1
    assert task.refresh() == ["stateful_rules"] and [q.name for q in task.queries] == ["sampling", "stateful_rules v1"]
    rules["version"] = 2
    assert task.refresh() == ["stateful_rules"] and not started[0].isActive and task.queries[1] is started[1]


class _Failed:
    """A stand-in for a streaming query that stopped with ``error`` (no JVM here)."""

    def __init__(self, name: str, error: str | None):
        self.name, self.isActive, self._error = name, error is None, error

    def exception(self):
        return self._error

    def stop(self):
        self.isActive = False


def test_a_query_whose_python_worker_did_not_start_in_time_is_started_again_one_at_a_time_and_nothing_else_is():
    """Spark gives a stateful processor's first Python worker 10 s to connect back; a busy machine starting every
    query at once can miss it. That failure, and only that one, is retried (as a Databricks task retry would): up to
    three times per query, one query at a time, the next restart no sooner than 12 s after the last."""
    started, now = [], [0.0]

    def declare(name):
        def start(spark, settings, *, wait=True):
            started.append(name)
            return _Failed(name, "Python worker failed to connect back." if name.startswith("flaky") else None)

        return queries.Query(name, start, "sampling_state", ())

    declared = [declare("flaky"), declare("broken"), declare("flaky too")]
    stagger = always_on.Stagger(clock=lambda: now[0])
    task = always_on.RunningTask(None, always_on.Settings(trigger="5 seconds"), declared, stagger=stagger)
    worker_failed = "org.apache.spark.SparkException: Python worker failed to connect back."
    task.slots = [_Failed("flaky", worker_failed), _Failed("broken", "AnalysisException: something real")]
    task.slots.append(_Failed("flaky too", worker_failed))
    assert [q.name for q in task.failed()] == ["broken"], "a query waiting for its restart has not failed the task"
    assert task.retry_worker_start_failures() == ["flaky"] and started == ["flaky"], "one query at a time"
    now[0] = 11.9
    assert task.retry_worker_start_failures() == [], "no restart within 12 s of the last"
    now[0] = 12.0
    assert task.retry_worker_start_failures() == ["flaky too"], "then the one restarted least"
    for step in range(1, 6):
        now[0] = 12.0 * (step + 1)
        task.retry_worker_start_failures()
    assert started == ["flaky", "flaky too", "flaky", "flaky too", "flaky", "flaky too"], started
    assert task.retry_worker_start_failures() == [] and not task.restarts_pending(), "three restarts per query"
    assert [q.name for q in task.failed()] == ["flaky", "broken", "flaky too"], "then the failure is the caller's"
    assert task.slots[1].exception() == "AnalysisException: something real", "any other failure is left as it is"


class _Streams:
    """``spark.streams`` without a JVM: each wait ends the next query in ``script`` as PySpark would (a failure raises
    StreamingQueryException)."""

    def __init__(self, script):
        self.script, self.waits = list(script), []

    def awaitAnyTermination(self, timeout=None):  # noqa: N802 (PySpark's name)
        self.waits.append(timeout)
        query, error = self.script.pop(0)
        query.isActive, query._error = False, RuntimeError(error) if error else None
        if error:
            raise StreamingQueryException(error)
        return True

    def resetTerminated(self):  # noqa: N802
        pass


def test_the_wheel_tasks_wait_restarts_a_late_python_worker_and_raises_any_other_failure():
    """``await_queries`` (the Databricks task's loop): PySpark's wait raises when a query failed; a worker-start failure
    is started again after the gap, and a later real failure stops the others and fails the task, naming it."""
    late, steady = _Failed("sampling", None), _Failed("ingest", None)
    restarted = _Failed("sampling", None)
    declared = [queries.Query("sampling", lambda *a, **k: restarted, "sampling_state", ())]
    task = always_on.RunningTask(None, always_on.Settings(trigger="5 seconds"), declared, stagger=always_on.Stagger())
    task.slots = [late]
    task.declared.append(queries.Query("ingest", lambda *a, **k: steady, "ingest", ()))
    task.slots.append(steady)
    streams = _Streams([(late, "Python worker failed to connect back."), (restarted, "AnalysisException: real")])
    spark = type("Spark", (), {"streams": streams})()
    with pytest.raises(Exception, match="AnalysisException: real"):
        always_on.await_queries(spark, task)
    assert task.slots[0] is restarted and task.retries == {0: 1}, "the late worker's query was started again"
    assert not steady.isActive, "the real failure stopped the other queries"


def test_a_task_started_with_only_some_queries_starts_only_those(monkeypatch):
    """``only_queries``: device activity alone of ``sampling_state`` (the fault test's runs: a point's query and what
    feeds it), still after bronze exists."""
    declared = []

    class Running:
        def __init__(self, spark, settings, queries):
            declared.extend(q.name for q in queries)

        def start(self):
            return self

    monkeypatch.setattr(always_on, "RunningTask", Running)
    monkeypatch.setattr(always_on, "wait_for_bronze", lambda spark, settings: declared.append("bronze exists"))
    always_on.start_task(None, "sampling_state", Settings(trigger="5 seconds"), {"device_activity", "ingest"})
    assert declared == ["bronze exists", "device_activity"]
