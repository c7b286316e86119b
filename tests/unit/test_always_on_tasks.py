"""The always-on job, run locally from its bundle definition: it runs, stops cleanly and resumes from its
checkpoints with nothing lost and nothing doubled."""

from __future__ import annotations

import pytest

from sensorcep.local import jobs
from sensorcep.pipeline import always_on, queries
from sensorcep.settings import SettingsError


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


def test_a_query_whose_python_worker_did_not_start_in_time_is_started_again_once_and_nothing_else_is():
    """Spark gives a stateful processor's first Python worker 10 s to connect back; a busy machine starting every
    query at once can miss it. That failure, and only that one, is retried once (as a Databricks task retry would)."""
    started = []

    def declare(name):
        def start(spark, settings, *, wait=True):
            started.append(name)
            return _Failed(name, "Python worker failed to connect back." if name == "flaky" else None)

        return queries.Query(name, start, "sampling_state", ())

    task = always_on.RunningTask(None, always_on.Settings(trigger="5 seconds"), [declare("flaky"), declare("broken")])
    task.slots = [
        _Failed("flaky", "org.apache.spark.SparkException: Python worker failed to connect back."),
        _Failed("broken", "AnalysisException: something real"),
    ]
    assert task.retry_worker_start_failures() == ["flaky"] and started == ["flaky"]
    assert task.retry_worker_start_failures() == [], "once: a second failure of the same kind is the caller's"
    assert task.slots[1].exception() == "AnalysisException: something real", "any other failure is left as it is"
