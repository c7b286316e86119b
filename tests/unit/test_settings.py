import re

import pytest

from sensorcep.local.session import LocalDbutils
from sensorcep.settings import Settings, SettingsError, parse_duration, parse_trigger, settings_from_widgets


def test_defaults_match_the_spec():
    s = Settings()
    assert (s.window_seconds, s.slide_seconds, s.watermark_seconds) == (60, 30, 30)
    assert s.sample_scope == "window" and s.events_topic == "sensor-events" and s.alerts_topic == "sensor-alerts"


def test_locations_derive_from_base_path_deterministically():
    s = Settings(base_path="/x/y/")
    assert s.table_path("bronze_events") == "/x/y/tables/bronze_events"
    assert s.checkpoint_path("ingest") == "/x/y/checkpoints/ingest"
    with pytest.raises(SettingsError, match="unknown table"):
        s.table_path("bronze")


def test_tables_are_catalog_names_by_default_or_paths_by_one_setting():
    assert Settings().table_name("bronze_events") == "sensor_cep.bronze_events"  # the session's current catalog
    assert Settings(catalog="main", schema="dev_ann_sensor_cep").table_name("anomalies") == (
        "main.dev_ann_sensor_cep.anomalies"
    )
    assert Settings(tables="paths").table_name("anomalies") is None
    with pytest.raises(SettingsError, match="'catalog' .* or 'paths'"):
        Settings(tables="volumes").validate()
    with pytest.raises(SettingsError, match="schema: 'sensor-cep' is not a usable name"):
        Settings(schema="sensor-cep").validate()
    with pytest.raises(SettingsError, match="give a schema"):
        Settings(schema="").validate()


def test_widget_values_are_typed_and_validated():
    dbutils = LocalDbutils({"max_offsets_per_trigger": "500", "sample_scope": "device"})
    s = settings_from_widgets(dbutils, ["max_offsets_per_trigger", "sample_scope", "trigger"])
    assert s.max_offsets_per_trigger == 500 and s.sample_scope == "device" and s.trigger == "availableNow"
    with pytest.raises(SettingsError, match="sample_scope"):
        settings_from_widgets(LocalDbutils({"sample_scope": "fleet"}), ["sample_scope"])
    with pytest.raises(SettingsError, match="integer"):
        settings_from_widgets(LocalDbutils({"max_offsets_per_trigger": "lots"}), ["max_offsets_per_trigger"])
    with pytest.raises(SettingsError, match="unknown widget"):
        settings_from_widgets(LocalDbutils(), ["kafka_host"])


def test_durations_and_triggers():
    assert parse_duration("60 seconds") == 60 and parse_duration("5 minutes") == 300 and parse_duration("500 ms") == 0.5
    assert parse_trigger("availableNow") == {"availableNow": True}
    assert parse_trigger("2 seconds") == {"processingTime": "2 seconds"}
    assert parse_trigger("realtime") == {"realTime": "300 seconds"}
    assert parse_trigger("realtime:30 seconds") == {"realTime": "30 seconds"}
    with pytest.raises(SettingsError, match="at least 5 seconds"):
        parse_trigger("realtime:1 second")
    with pytest.raises(SettingsError, match="stateless queries only"):
        Settings(trigger="realtime").validate()
    with pytest.raises(SettingsError, match="duration"):
        Settings(watermark_delay="soon").validate()
    with pytest.raises(SettingsError, match="slide_duration"):
        Settings(window_duration="30 seconds", slide_duration="60 seconds").validate()
    with pytest.raises(SettingsError, match="must divide window_duration"):
        Settings(window_duration="60 seconds", slide_duration="25 seconds").validate()


def test_environment_overrides_widget_defaults(monkeypatch):
    monkeypatch.setenv("SENSORCEP_EVENTS_TOPIC", "other-topic")
    assert settings_from_widgets(LocalDbutils({}), ["events_topic"]).events_topic == "other-topic"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1 minute 30 seconds", 90), ("90s", 90), ("1m30s", 90), ("2 hours", 7200), ("30", 30), ("250 ms", 0.25)],
)
def test_compound_durations_add_up(text, seconds):
    assert parse_duration(text) == seconds


def test_compound_durations_reach_spark_in_its_own_spelling():
    s = Settings(window_duration="1 minute 30 seconds", slide_duration="45s", watermark_delay="1m")
    assert (s.window_seconds, s.slide_seconds) == (90, 45)
    assert (s.interval("window_duration"), s.interval("watermark_delay")) == ("90 seconds", "60 seconds")
    assert parse_trigger("1m30s") == {"processingTime": "90 seconds"}


@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"ack_timeout": "10 minutes + INTERVAL 1 DAY"}, "ack_timeout: cannot read"),
        ({"watermark_delay": "30 seconds; DROP TABLE x"}, "watermark_delay: cannot read"),
        ({"max_future": "-5 minutes"}, "max_future: cannot read"),
        ({"device_timeout": "0 seconds"}, "device_timeout must be longer than 0"),
        ({"window_duration": "1 fortnight"}, "window_duration: cannot read"),
        ({"records_trigger": "availableNow"}, "records_trigger must be an interval such as 1 minute"),
        ({"records_trigger": "realtime"}, "records_trigger must be an interval"),
        ({"records_trigger": "1 minute; DROP TABLE x"}, "records_trigger must be an interval"),
        ({"min_batch_records": -1}, "min_batch_records must be >= 0"),
        ({"min_batch_records": 200_000}, "min_batch_records (200,000) must not exceed max_offsets_per_trigger"),
        ({"max_batch_delay": "0 seconds"}, "max_batch_delay must be longer than 0"),
        ({"max_batch_delay": "a while"}, "max_batch_delay: cannot read"),
        ({"query_suffix": "/../ingest"}, "query_suffix: '/../ingest' may hold letters, digits and _ only"),
        ({"query_suffix": "-realtime"}, "query_suffix"),
        ({"alerts_topic": "sensor-events"}, "alerts_topic and events_topic are both 'sensor-events'"),
        ({"escalations_topic": "sensor-alert-acks"}, "escalations_topic and acks_topic"),
        ({"events_topic": "events/../x"}, "events_topic: 'events/../x' is not a Kafka topic name"),
        ({"events_topic": ""}, "events_topic: '' is not a Kafka topic name"),
        ({"scheduler_pools": "sampling:1,alerts:two"}, "scheduler_pools: cannot read 'alerts:two'"),
        ({"scheduler_pools": "sampling:0"}, "weight >= 1"),
        ({"scheduler_pools": "<pool>:1"}, "scheduler_pools: cannot read '<pool>:1'"),
        ({"scheduler_pools": "a:1,a:2"}, "pool 'a' is given twice"),
        ({"anomaly_threshold": float("nan")}, "anomaly_threshold must be a finite number"),
        ({"kafka_bootstrap_servers": "broker"}, "not a host:port"),
        ({"extra_fields": "voltage, Device_ID"}, "extra_fields: 'Device_ID' is not a usable column name"),
        ({"catalog": "main; DROP"}, "catalog: 'main; DROP' is not a usable name"),
        ({"tables": "paths", "base_path": "/Volumes/c/s/data"}, "Unity Catalog volumes cannot hold Delta tables"),
    ],
    ids=lambda v: str(v)[:40],
)
def test_settings_refuse_junk_with_one_sentence_naming_the_setting(changes, refusal):
    with pytest.raises(SettingsError, match=re.escape(refusal)):
        Settings().replace(**changes)


def test_junk_from_a_widget_is_refused_before_anything_runs():
    with pytest.raises(SettingsError, match="ack_timeout: cannot read"):
        settings_from_widgets(LocalDbutils({"ack_timeout": "10 minutes + INTERVAL 1 DAY"}), ["ack_timeout"])
    with pytest.raises(SettingsError, match="anomaly_threshold must be a number"):
        settings_from_widgets(LocalDbutils({"anomaly_threshold": "low"}), ["anomaly_threshold"])


def test_the_default_clock_skew_allowed_is_minutes_not_a_day():
    # one device stamping local time as UTC must not move every event-time watermark hours ahead
    assert Settings().max_future_seconds == 300


def test_a_real_time_run_never_shares_the_micro_batch_checkpoint():
    s = Settings(base_path="/v")
    assert s.checkpoint_path("alerts") == "/v/checkpoints/alerts"
    assert s.checkpoint_path("alerts", realtime=True) == "/v/checkpoints/alerts-realtime"


class _WorkspaceWidgets:
    """Stands in for Databricks' dbutils (no workspace here): widgets that return what a user typed, else the
    default the notebook declared."""

    def __init__(self, typed: dict[str, str]):
        self.typed, self.declared = typed, {}
        self.widgets = self

    def text(self, name, default):
        self.declared[name] = default

    def get(self, name):
        return self.typed.get(name, self.declared[name])


def test_a_notebook_opened_on_databricks_stops_at_once_naming_what_the_laptop_defaults_cannot_be(monkeypatch):
    monkeypatch.delenv("SENSORCEP_BASE_PATH", raising=False)
    monkeypatch.delenv("SENSORCEP_KAFKA_BOOTSTRAP_SERVERS", raising=False)
    names = ["kafka_bootstrap_servers", "base_path", "catalog", "schema"]
    with pytest.raises(SettingsError) as refused:
        settings_from_widgets(_WorkspaceWidgets({"catalog": "workspace"}), names)
    message = str(refused.value)
    assert message.startswith("on Databricks, set the widget(s) kafka_bootstrap_servers (")
    assert "base_path (the deployment's volume" in message and "catalog (" not in message
    typed = {"kafka_bootstrap_servers": "b1:9092", "base_path": "/Volumes/w/s/data", "catalog": "workspace"}
    assert settings_from_widgets(_WorkspaceWidgets(typed), names).base_path == "/Volumes/w/s/data"


def test_the_cli_prints_any_project_error_as_one_sentence(monkeypatch, capsys):
    from sensorcep.__main__ import main
    from sensorcep.errors import SensorCepError

    monkeypatch.setenv("SENSORCEP_ACK_TIMEOUT", "10 minutes + INTERVAL 1 DAY")
    with pytest.raises(SystemExit) as stopped:
        main(["summary"])  # settings are read before any JVM starts
    assert stopped.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "✘ ack_timeout: cannot read '10 minutes + INTERVAL 1 DAY' as a duration like '30 seconds' or "
        "'1 minute 30 seconds'"
    ]
    assert issubclass(SettingsError, SensorCepError) and issubclass(SettingsError, ValueError)


@pytest.mark.parametrize("spelling", ["availableNow", "available_now", " available_now "])
def test_every_spelling_of_available_now_runs_to_the_end_everywhere(spelling, monkeypatch):
    from sensorcep.pipeline import always_on, streaming

    settings = Settings.from_mapping({"trigger": spelling})
    assert settings.trigger == "availableNow" and settings.runs_to_end
    assert not Settings.from_mapping({"trigger": "10 seconds"}).runs_to_end

    class Query:  # a stand-in: finish() must wait for it, as for any query that runs to the end
        waited = False

        def awaitTermination(self, timeout=None):
            Query.waited = True

        def exception(self):
            return None

    monkeypatch.setattr(streaming, "release_checkpoints", lambda: None)
    monkeypatch.setattr(streaming, "flush_progress", lambda *args: None)
    monkeypatch.setattr(streaming.SparkSession, "active", staticmethod(lambda: None))
    streaming.finish(Query(), settings)
    assert Query.waited, f"finish() returned before a trigger={spelling!r} query had processed its input"
    with pytest.raises(SettingsError, match="always-on job keeps queries running"):
        always_on.start_task(None, "ingest", settings)


def test_only_a_running_ingest_waits_for_records_and_spark_reads_the_delay_in_milliseconds():
    from sensorcep.io.kafka import batch_wait_options

    waits = Settings(trigger="10 seconds", min_batch_records=10_000, max_batch_delay="1 minute 30 seconds")
    assert batch_wait_options(waits) == {"minOffsetsPerTrigger": "10000", "maxTriggerDelay": "90000ms"}
    assert batch_wait_options(waits.replace(min_batch_records=0)) == {}
    assert batch_wait_options(waits.replace(trigger="availableNow")) == {}, "a run to the end drains, never waits"
