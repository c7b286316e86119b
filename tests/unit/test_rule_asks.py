"""The everyday asks of issue "Rules v2" as golden tests, without a JVM: each ask written as a rule, an input stream,
and the alerts the ask means. (Spike, no recovery, second spike: ``test_rule_patterns.py``; three pumps of one site:
``test_rule_groups.py``; two fields out of range together, and an OR of two conditions: ``test_rule_conditions.py``.)"""

from __future__ import annotations

from sensorcep.rules.catalog import VersionedRule
from sensorcep.rules.model import parse_rules
from sensorcep.rules.sequential import advance

MINUTE = 60_000_000


def fired(rule: dict, stream: list[tuple[float, dict]], watermark_min: float, setpoints: dict | None = None) -> list:
    """The minutes at which ``rule`` fires over one device's (minute, fields) events, up to the watermark."""
    [parsed] = parse_rules({"rules": [rule]})
    events = [(round(m * MINUTE), f.get("sensor_freq", 0.0), None, f) for m, f in stream]
    scoped = {("value_from", "setpoint"): setpoints} if setpoints is not None else {}
    alerts, _ = advance([VersionedRule(parsed, 1)], "pump-1", {}, events, round(watermark_min * MINUTE), scoped)
    return [a.event_time_us / MINUTE for a in alerts]


def test_average_temperature_over_five_minutes_above_the_devices_setpoint():
    rule = {"id": "over_setpoint", "kind": "aggregate", "function": "avg", "field": "temperature",
            "window": "5 minutes", "op": ">", "value_from": "devices.setpoint"}  # fmt: skip
    readings = [(m, {"temperature": 70.0 if m < 5 else 80.0}) for m in range(10)]  # 70 for 5 minutes, then 80
    assert fired(rule, readings, 20, setpoints={"pump-1": 75.0}) == [10], "the second window's average is 80 > 75"
    assert fired(rule, readings, 20, setpoints={"pump-1": 85.0}) == [], "its own setpoint is higher"
    assert fired(rule, readings, 20, setpoints={}) == [], "a device without a setpoint fires nothing"


def test_temperature_changing_by_more_than_ten_within_five_minutes():
    rule = {"id": "fast_change", "kind": "aggregate", "function": "range", "field": "temperature",
            "window": "5 minutes", "slide": "1 minute", "op": ">", "value": 10}  # fmt: skip
    steady = [(m, {"temperature": 60.0 + m}) for m in range(20)]  # one degree a minute: 4 within any window
    assert fired(rule, steady, 30) == []
    spike = [*steady[:10], (10, {"temperature": 85.0})]  # 69 at minute 9, then 85 at minute 10
    # the windows holding minute 10 and an earlier reading: [6, 11) .. [9, 14) (ends 11..14); [10, 15) holds only 85
    assert fired(rule, spike, 30) == [11, 12, 13, 14], "each 5-minute window the jump is in, once, at its end"


def test_a_field_not_reported_for_ten_minutes():
    reported = {"any": [{"field": "voltage", "op": ">=", "value": 0}, {"field": "voltage", "op": "<", "value": 0}]}
    rule = {"id": "voltage_silent", "kind": "pattern", "within": "10 minutes",
            "steps": [{"when": reported}, {"when": reported, "not": True}]}  # fmt: skip
    stream = [(m, {"voltage": 230.0}) for m in range(6)]  # minutes 0..5 with a voltage
    stream += [(m, {"sensor_freq": 50.0}) for m in range(6, 21)]  # then events without one
    stream += [(21, {"voltage": 229.0})]
    assert fired(rule, stream, 40) == [15, 31], "10 minutes after the last voltage, and again after the next"
    every_minute = [(m, {"voltage": 230.0}) for m in range(30)]
    assert fired(rule, every_minute, 38) == [], "reported every minute: silent only from minute 29, not yet 10 minutes"
    assert fired(rule, every_minute, 40) == [39]
