"""What a restart with changed settings does: refused at start with one sentence, or it goes on.

A stateful query's checkpoint holds state built under some settings: windows of one length, timers set one
``device_timeout`` after an event, a watermark ``watermark_delay`` behind. Restarted with other values, Spark would
carry on with the old state under the new rules and write results that match neither setting. So each query declares
the settings its checkpoint is bound to (``queries.declare(fixed_settings=...)``); its first start records their
values in the checkpoint (:data:`RECORD`, beside Spark's own files) and every later start compares them
(:func:`check`): a change is refused with :class:`SettingsChangedError`, naming the setting, both values and the two
ways on. Every other change goes on (:data:`GOES_ON` says why each of the usual ones is safe).

The record also names the query's checkpoint format (:func:`format_of`); a checkpoint of another format is refused the
same way, saying what changed. A checkpoint made before records existed is of format 1: it is adopted (its values are
recorded as they are now) where format 1 is still the query's, and refused like any other where it is not. The
record is read and written as a file: local paths and Unity Catalog volumes (``/Volumes/...``); elsewhere there is no
check.
"""

from __future__ import annotations

import json
import logging
import os

from sensorcep.errors import SensorCepError
from sensorcep.pipeline import checkpoint_log
from sensorcep.settings import Settings, parse_duration

log = logging.getLogger(__name__)

#: the checkpoint format this version writes for a query not in :data:`FORMATS`
FORMAT = 1
#: queries whose state changed incompatibly since format 1: the format this version writes, and what changed (raise a
#: query's format when its operators or their state change: Spark would read the old state into the new operators)
FORMATS = {
    "alert_lifecycle": (
        2,
        "its state is keyed by buckets of devices, not by (rule, device), and keeps pending inputs in chunks "
        "(decision 0046)",
    ),
    "device_activity": (
        3,
        "its state is keyed by buckets of devices, not by device (decision 0045)",
    ),
    "stateful_rules": (
        3,
        "its state is keyed by buckets of devices, not by device, and keeps pending events in chunks (decision 0045)",
    ),
}
#: the record's file name inside the checkpoint folder (Spark ignores files it does not know)
RECORD = "sensorcep-settings.json"

#: settings a checkpoint can be bound to, and what its state holds of them
FIXED = {
    "window_duration": "the state holds windows of the old length",
    "slide_duration": "the state holds windows on the old slide",
    "watermark_delay": "the state's timers and the late events already recorded follow the old watermark",
    "sample_scope": "the state is keyed by the old scope",
    "device_timeout": "each device's offline timer was set with the old timeout",
    "ack_timeout": "each open incident's escalation timer was set with the old timeout",
}
#: changes that go on, and why they are safe
GOES_ON = {
    "trigger": "only when batches run changes",
    "alerts_trigger": "a switch of alert mode starts where the other mode ended (alerts.starting_offsets)",
    "max_offsets_per_trigger": "only the size of the batches changes",
    "min_batch_records": "only when ingest's batches run changes",
    "max_batch_delay": "only when ingest's batches run changes",
    "max_future": "a record's verdict is made once, when it is read: records read from now on get the new bound",
    "rules_file": "the always-on job restarts the rule queries when the rules change (queries.declare reload_when)",
    "anomaly_threshold": "applies to the events read from now on",
    "partitions": "Spark's Kafka source reads a topic's new partitions from their first record",
    "extra_fields": "bronze gains the new fields as columns (earlier rows hold null), tests/kafka/test_bad_input.py",
}


class SettingsChangedError(SensorCepError, RuntimeError):
    """A query restarted on its checkpoint with a setting its state was not built for."""


def _value(settings: Settings, name: str) -> str:
    """A setting's value as the record keeps it: durations in seconds (``1 minute`` = ``60 seconds``)."""
    value = getattr(settings, name)
    if name.endswith(("_duration", "_delay", "_timeout")):
        return f"{parse_duration(value):g} s"
    if name == "extra_fields":
        return ",".join(settings.extra_field_names)
    return str(value)


def check(settings: Settings, query: str, fixed: tuple[str, ...]) -> None:
    """Record the ``fixed`` settings in a new checkpoint of ``query``, or refuse a restart that changed one."""
    checkpoint = settings.checkpoint_path(query)
    if not fixed or not os.path.isabs(checkpoint):
        return
    path = os.path.join(checkpoint, RECORD)
    now = {name: _value(settings, name) for name in fixed}
    recorded = _read(path)
    planned = bool(checkpoint_log.batches(checkpoint, "offsets"))
    if not planned:
        _write(path, query, now)
        return
    if recorded is None:  # made before records, so format 1: adopted where that is still this version's format
        recorded = {"format": FORMAT, "settings": now}
        if format_of(query) == FORMAT:
            log.warning("query %s: its checkpoint has no settings record (made before records): adopted", query)
            _write(path, query, now)
    name = settings.query_name(query)
    if recorded.get("format") != format_of(query):
        what = FORMATS[query][1] if query in FORMATS else "its state is not what this version's operators read"
        raise SettingsChangedError(
            f"query {name}: its checkpoint has format {recorded.get('format')}, this version of sensor-cep writes "
            f"format {format_of(query)}: {what}; {_ways_on(settings, query)}"
        )
    before = recorded.get("settings", {})
    for setting, value in now.items():
        if setting in before and before[setting] != value:
            why = FIXED.get(setting, "its state was built with the old value")
            raise SettingsChangedError(
                f"query {name}: {setting} was {before[setting]} when its checkpoint was made and is {value} now, "
                f"and {why}. Set {setting} back, or {_ways_on(settings, query)}"
            )
    if any(setting not in before for setting in now):  # a setting the query was bound to later: recorded now
        _write(path, query, {**before, **now})


def format_of(query: str) -> int:
    """The checkpoint format this version writes for ``query``."""
    return FORMATS[query][0] if query in FORMATS else FORMAT


def _ways_on(settings: Settings, query: str) -> str:
    return (
        f"start the query from a new checkpoint with a new schema for its tables (a deployed bundle: deploy with "
        f"--var schema=<new>, whose volume holds new checkpoints; locally: schema=<new> and query_suffix=_v2, a new "
        f"checkpoint), or delete {settings.checkpoint_path(query)} and empty the tables it writes"
    )


def _read(path: str) -> dict | None:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _write(path: str, query: str, values: dict[str, str]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        json.dump({"format": format_of(query), "settings": values}, handle, indent=1, sort_keys=True)
