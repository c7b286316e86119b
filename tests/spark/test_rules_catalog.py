"""The ``alert_rules`` table read once per pass: the always-on job starts and refreshes its rule queries inside
``catalog.one_read()``, so the seed check, the fingerprints and the rules the queries compile come from one Delta read,
and a write in the pass is read back."""

from __future__ import annotations

import pytest

from sensorcep.io.lake import Tables
from sensorcep.pipeline.group_rules import grouped_alerts
from sensorcep.rules import catalog
from sensorcep.rules.catalog import VersionedRule
from sensorcep.rules.model import load_rules, parse_rules


def _count_reads(monkeypatch) -> list[str]:
    reads: list[str] = []
    read = Tables.read

    def counted(self, name, version=None):
        reads.append(name)
        return read(self, name, version)

    monkeypatch.setattr(Tables, "read", counted)
    return reads


def test_a_pass_reads_the_rules_once_and_outside_a_pass_every_call_reads(spark, settings, monkeypatch):
    reads = _count_reads(monkeypatch)
    with catalog.one_read():
        fingerprint = catalog.fingerprint(spark, settings)  # seeds the table from the packaged rules, then reads it
        in_force = catalog.rules_in_force(spark, settings)
        with catalog.one_read():  # a nested pass shares the outer one
            assert catalog.fingerprint(spark, settings) == fingerprint
    assert reads.count("alert_rules") == 1, reads
    assert [(r.id, r.version) for r in in_force] == list(fingerprint)  # the packaged rules, all enabled
    assert {r.id for r in in_force} == {r.id for r in load_rules()}

    reads.clear()
    catalog.fingerprint(spark, settings)
    catalog.rules_in_force(spark, settings)
    assert reads.count("alert_rules") == 2, "outside a pass, each call reads the table as it is now"


def test_a_write_in_a_pass_is_what_the_pass_reads_next(spark, settings):
    rules = load_rules()
    with catalog.one_read():
        before = catalog.fingerprint(spark, settings)
        changed = catalog.apply_rules(spark, settings, rules[1:])  # the first rule is no longer listed: disabled
        after = catalog.fingerprint(spark, settings)
        in_force = catalog.rules_in_force(spark, settings)
    assert changed.disabled == [rules[0].id]
    assert dict(after)[rules[0].id] == dict(before)[rules[0].id] + 1, "the disabled rule's new version is read back"
    assert rules[0].id not in {r.id for r in in_force}


def test_an_aggregate_rules_value_from_reads_each_devices_number_from_the_devices_table(spark, settings):
    """``value_from: devices.setpoint``: the devices table's column, read once as the query starts; a device whose
    value is null is left out (its windows fire nothing); a column the table lacks is a clear error."""
    from sensorcep.rules.catalog import VersionedRule
    from sensorcep.rules.evaluate import RuleScopeError, scope_devices
    from sensorcep.rules.model import parse_rules

    def rules(column: str) -> list[VersionedRule]:
        rule = {"id": "over", "kind": "aggregate", "function": "avg", "field": "sensor_freq", "window": "5 minutes",
                "op": ">", "value_from": f"devices.{column}"}  # fmt: skip
        return [VersionedRule(r, 1) for r in parse_rules({"rules": [rule]})]

    with pytest.raises(RuleScopeError, match="value_from devices.setpoint need the devices table"):
        scope_devices(spark, settings, rules("setpoint"))
    rows = [("d1", "lab", 60.5), ("d2", "lab", None), ("d3", "plant", 42.0)]
    devices = spark.createDataFrame(rows, "device_id string, site string, setpoint double")
    Tables(spark, settings).write(devices, "devices", mode="overwrite")
    assert scope_devices(spark, settings, rules("setpoint")) == {("value_from", "setpoint"): {"d1": 60.5, "d3": 42.0}}
    with pytest.raises(RuleScopeError, match="the devices table has no column 'limit'"):
        scope_devices(spark, settings, rules("limit"))


def test_a_group_rule_puts_only_devices_with_its_label_in_a_group_and_a_devices_table_without_it_in_none(spark):
    rules = parse_rules({"rules": [{"id": "a", "kind": "threshold", "field": "sensor_freq", "op": "<", "value": 0},
                                   {"id": "g", "kind": "group", "rule": "a", "by": "site", "at_least": 2,
                                    "within": "1 minute"}]})  # fmt: skip
    group = [VersionedRule(rules[1], 1)]
    alerts = spark.createDataFrame(
        [("x1", "d1", "a"), ("x2", "d2", "a"), ("x3", "d1", "b")], "alert_id string, device_id string, rule_id string"
    ).selectExpr("*", "timestamp'2026-01-05 00:00:00' AS event_time", "-1.0d AS sensor_freq")
    sites = spark.createDataFrame([("d1", "plant-1"), ("d2", None)], "device_id string, site string")
    got = grouped_alerts(alerts, sites, group).select("group_rule", "group", "alert_id").collect()
    assert [tuple(r) for r in got] == [("g", "site=plant-1", "x1")], "d2 has no site; x3 is another rule's"
    types = spark.createDataFrame([("d1", "pump")], "device_id string, sensor_type string")
    assert grouped_alerts(alerts, types, group).count() == 0, "no site column: nobody is in a site group"
