"""The query registry: every streaming query declared once, and every part of the project reading it."""

import sys
import types

import pytest

from sensorcep.local import jobs
from sensorcep.pipeline import always_on, queries, registry
from sensorcep.settings import Settings


def test_every_query_is_declared_once_with_its_task_trigger_setting_and_pool():
    declared = registry.registry()
    assert list(declared) == [
        "ingest",
        "device_activity",
        "sampling",
        "stateful_rules",
        "alerts",
        "alert_lifecycle",
        "anomalies",
        "group_rules",
        "notifier",
    ]
    assert {name: q.task for name, q in declared.items()} == {
        "ingest": "ingest",
        "device_activity": "sampling_state",
        "sampling": "sampling_state",
        "stateful_rules": "sampling_state",
        "alerts": "alerts",
        "alert_lifecycle": "alert_records",
        "anomalies": "alert_records",
        "group_rules": "alert_records",
        "notifier": "alert_records",
    }
    assert [name for name, q in declared.items() if q.trigger_setting == "alerts_trigger"] == ["alerts"]
    rewritten = {name: q.rewritten_from_start for name, q in declared.items() if q.rewritten_from_start}
    assert rewritten == {
        "device_activity": ("device_status",),
        "sampling": ("sensor_samples",),
        "stateful_rules": ("device_baselines",),
        "alert_lifecycle": ("alert_events",),
        "notifier": ("notifications",),
    }, "appends from the input's start: a new checkpoint is refused over their rows (ingest and MERGEs re-run safely)"
    records = [name for name, q in declared.items() if q.trigger_setting == "records_trigger"]
    assert records == ["device_activity", "sampling", "anomalies"], "tables only: no alert waits on them"
    assert {q.pool for q in declared.values()} == {None, "sampling", "alerts"}
    assert all(q.start.__name__.startswith("start_") for q in declared.values())
    reloads = {name: q.reload_when.__module__ for name, q in declared.items() if q.reload_when}
    assert reloads == {
        "stateful_rules": "sensorcep.rules.catalog",
        "alerts": "sensorcep.rules.catalog",
        "alert_lifecycle": "sensorcep.rules.catalog",
        "group_rules": "sensorcep.rules.catalog",
        "notifier": "sensorcep.routes.catalog",
    }, "restarted when the rules, or the routes, change"


def test_the_always_on_job_and_the_bundle_run_the_registry_tasks():
    assert always_on.TASKS == queries.TASK_ORDER == tuple(registry.tasks())
    assert [t.parameters["task"] for t in jobs.tasks(jobs.ALWAYS_ON_JOB_KEY)] == list(queries.TASK_ORDER)


def test_monitoring_knows_each_declared_querys_trigger():
    s = Settings(trigger="10 seconds", alerts_trigger="1 second", query_suffix="_x")
    intervals = registry.trigger_intervals(s)
    assert intervals == {f"{name}_x": 1_000 if name == "alerts" else 10_000 for name in registry.registry()}


ROLLUP_MODULE = """
from sensorcep.pipeline import queries


@queries.declare("hourly_rollup", task="sampling_state", writes="sensor_samples", pool="sampling", reads_bronze=True)
def start_hourly_rollup(spark, settings, *, wait=True):
    return None
"""


def test_adding_a_query_is_a_declaration_in_its_module_and_the_module_in_the_list(monkeypatch):
    module = types.ModuleType("sensorcep_test_rollup")  # a new pipeline module, written the documented way
    exec(compile(ROLLUP_MODULE, "rollup.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert "hourly_rollup" not in registry.registry(), "declared but not listed: not collected"
    monkeypatch.setattr(registry, "QUERY_MODULES", (*registry.QUERY_MODULES, module))

    assert registry.query("hourly_rollup").start is module.start_hourly_rollup
    assert module.start_hourly_rollup.query.tables == ("sensor_samples",)
    assert [q.name for q in registry.tasks()["sampling_state"]] == [
        "device_activity",
        "hourly_rollup",
        "sampling",
        "stateful_rules",
    ]
    assert "hourly_rollup" in registry.trigger_intervals(Settings())


def test_each_query_writes_named_tables_and_topics_only():
    tables = {name: q.tables for name, q in registry.registry().items()}
    assert tables["stateful_rules"] == ("device_baselines", "late_events")
    assert "quarantine_events" in tables["alert_lifecycle"]
    with pytest.raises(ValueError, match="writes names 'rollups', neither a table of settings.TABLES"):
        queries.declare("x", task="ingest", writes="bronze_events, rollups")
    topics = {name: [w for w in q.writes if w not in q.tables] for name, q in registry.registry().items()}
    assert {name: written for name, written in topics.items() if written} == {
        "stateful_rules": ["alerts topic"],
        "alerts": ["alerts topic"],
        "alert_lifecycle": ["escalations topic"],
        "group_rules": ["alerts topic"],
    }
    declared = queries.declare("x", task="alerts", writes="alerts topic, late_events")(lambda spark, settings: None)
    assert declared.query.writes == ("alerts topic", "late_events") and declared.query.tables == ("late_events",)
    with pytest.raises(ValueError, match="writes names 'pages topic', neither a table .* nor one of alerts topic"):
        queries.declare("x", task="alerts", writes="alerts topic, pages topic")


def test_declarations_refuse_what_the_project_cannot_run():
    with pytest.raises(ValueError, match="task must be one of"):
        queries.declare("x", task="nightly", writes="sensor_samples")
    with pytest.raises(ValueError, match="rewritten_from_start names tables it does not write"):
        queries.declare("x", task="ingest", writes="sensor_samples", rewritten_from_start="bronze_events")
    with pytest.raises(ValueError, match="trigger_setting must be one of"):
        queries.declare("x", task="ingest", writes="sensor_samples", trigger_setting="sometimes")
    with pytest.raises(queries.UnknownQueryError, match="no query named 'ingets'; the project's queries: ingest, "):
        registry.query("ingets")


def test_record_keeping_queries_run_at_records_trigger_and_the_rest_at_trigger():
    streaming = Settings(trigger="10 seconds", records_trigger="1 minute")
    triggers = {name: q.trigger(streaming) for name, q in registry.registry().items()}
    assert triggers == {
        **{name: "10 seconds" for name in triggers},
        "alerts": "realtime",
        "device_activity": "1 minute",
        "sampling": "1 minute",
        "anomalies": "1 minute",
    }
    # a job that runs to the end runs every micro-batch query to the end; an interval never runs faster than trigger
    assert registry.query("sampling").trigger(streaming.replace(trigger="availableNow")) == "availableNow"
    assert registry.query("sampling").trigger(streaming.replace(trigger="5 minutes")) == "5 minutes"
    assert registry.query("sampling").trigger(streaming.replace(records_trigger="")) == "10 seconds"
