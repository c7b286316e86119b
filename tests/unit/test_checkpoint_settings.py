"""The settings-change table: a restart with a setting a checkpoint's state is bound to is refused with one sentence;
every other change goes on (checkpoint_settings). The checkpoints here are folders as Spark leaves them."""

import json
import os
import re

import pytest

from sensorcep.pipeline import checkpoint_settings, registry
from sensorcep.pipeline.checkpoint_settings import (
    FIXED,
    FORMAT,
    FORMATS,
    GOES_ON,
    RECORD,
    SettingsChangedError,
    check,
    format_of,
)
from sensorcep.settings import Settings

#: another valid value for each fixed setting
OTHER = {
    "window_duration": "2 minutes",
    "slide_duration": "20 seconds",
    "watermark_delay": "45 seconds",
    "sample_scope": "device",
    "device_timeout": "10 minutes",
    "ack_timeout": "30 minutes",
}
#: another valid value for each change that goes on
GOES_ON_OTHER = {
    "trigger": "10 seconds",
    "alerts_trigger": "availableNow",
    "max_offsets_per_trigger": 5,
    "min_batch_records": 5,
    "max_batch_delay": "5 minutes",
    "max_future": "1 hour",
    "rules_file": "/tmp/other-rules.yml",
    "anomaly_threshold": -5.0,
    "partitions": 8,
    "extra_fields": "firmware",
}


def _started(settings: Settings, query: str = "q") -> None:
    """A start (the record made) and a first planned batch, as Spark leaves a checkpoint."""
    check(settings, query, tuple(FIXED))
    offsets = f"{settings.checkpoint_path(query)}/offsets"

    os.makedirs(offsets, exist_ok=True)
    with open(f"{offsets}/0", "w") as handle:
        handle.write('v1\n{"batchWatermarkMs":0}\n{}')


@pytest.fixture
def settings(tmp_path):
    return Settings(base_path=str(tmp_path))


def test_every_change_the_issue_names_is_classified_once_and_every_query_is_bound_to_fixed_ones():
    assert not set(FIXED) & set(GOES_ON)
    named = {"watermark_delay", "window_duration", "slide_duration", "max_future", "trigger", "extra_fields"}
    assert named | {"rules_file", "partitions"} <= set(FIXED) | set(GOES_ON)
    assert set(OTHER) == set(FIXED) and set(GOES_ON_OTHER) == set(GOES_ON)
    bound = {q.name: set(q.fixed_settings) for q in registry.registry().values()}
    assert all(names <= set(FIXED) for names in bound.values()), bound
    assert bound["sampling"] == {"window_duration", "slide_duration", "watermark_delay", "sample_scope"}
    assert {"device_activity", "alert_lifecycle", "stateful_rules"} <= {q for q, names in bound.items() if names}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_a_restart_with_a_fixed_setting_changed_is_refused_naming_it_both_values_and_the_way_on(settings, name):
    _started(settings)
    check(settings, "q", tuple(FIXED))  # the same settings: goes on
    changed = settings.replace(**{name: OTHER[name]})
    with pytest.raises(SettingsChangedError, match=rf"query q: {name} was .* now, and {FIXED[name]}\..*query_suffix"):
        check(changed, "q", tuple(FIXED))


@pytest.mark.parametrize("name", sorted(GOES_ON))
def test_a_restart_with_a_change_that_goes_on_is_not_refused(settings, name):
    _started(settings)
    check(settings.replace(**{name: GOES_ON_OTHER[name]}), "q", tuple(FIXED))


def test_the_same_duration_written_differently_is_no_change(settings):
    _started(settings.replace(window_duration="1 minute", watermark_delay="30s"))
    check(settings.replace(window_duration="60 seconds", watermark_delay="30 seconds"), "q", tuple(FIXED))


def test_a_checkpoint_of_another_format_is_refused_and_one_from_before_records_is_adopted(settings):
    _started(settings)
    record = f"{settings.checkpoint_path('q')}/{RECORD}"
    with open(record) as handle:
        saved = json.load(handle)
    assert saved["format"] == FORMAT and saved["settings"]["window_duration"] == "60 s"
    with open(record, "w") as handle:
        json.dump({**saved, "format": FORMAT + 1}, handle)
    with pytest.raises(SettingsChangedError, match=rf"format {FORMAT + 1}, this version .* writes format {FORMAT}"):
        check(settings, "q", tuple(FIXED))

    os.remove(record)  # a checkpoint made before records: adopted as it is, judged from then on
    check(settings.replace(window_duration="2 minutes"), "q", tuple(FIXED))
    with pytest.raises(SettingsChangedError, match="window_duration was 120 s"):
        check(settings, "q", tuple(FIXED))


@pytest.mark.parametrize("query", sorted(FORMATS))
def test_a_query_whose_state_changed_refuses_a_checkpoint_of_the_format_before_and_says_what_changed(settings, query):
    """Device activity and the stateful rules dropped their deduplication (decision 0037) and are keyed by buckets of
    devices (decision 0045), as is the alert lifecycle (decision 0046): Spark would read the state of the format before
    as theirs."""
    fixed = registry.query(query).fixed_settings
    _started(settings, query)
    record = f"{settings.checkpoint_path(query)}/{RECORD}"
    with open(record) as handle:
        saved = json.load(handle)
    now, changed = FORMATS[query]
    assert saved["format"] == format_of(query) == now > 1 and format_of("sampling") == FORMAT == 1
    check(settings, query, fixed)  # its own format: goes on
    with open(record, "w") as handle:
        json.dump({**saved, "format": now - 1}, handle)  # a checkpoint the version before this one made
    refused = rf"format {now - 1}, .* writes format {now}: {re.escape(changed)}; .*query_suffix"
    with pytest.raises(SettingsChangedError, match=refused):
        check(settings, query, fixed)
    os.remove(record)  # a checkpoint made before records: format 1, not this version's
    with pytest.raises(SettingsChangedError, match=rf"format {FORMAT}, .* writes format {now}: {re.escape(changed)}"):
        check(settings, query, fixed)
    assert not os.path.exists(record), "a refused checkpoint is left as it was"


def test_a_new_checkpoint_records_whatever_the_settings_are(settings):
    check(settings, "q", tuple(FIXED))
    check(settings.replace(window_duration="2 minutes"), "q", tuple(FIXED))  # nothing planned yet: a new start
    assert checkpoint_settings._read(f"{settings.checkpoint_path('q')}/{RECORD}")["settings"]["window_duration"] == (
        "120 s"
    )
