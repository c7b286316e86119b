import pytest

from sensorcep.runtime import LocalDbutils
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
    assert parse_trigger("realtime") == {"realTime": "5 minutes"}
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
