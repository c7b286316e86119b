"""Rules written in Python (``sensorcep.rules.builder``): the same rule model as YAML, validated the same way, and a
rule moved from YAML to Python keeps its spec (so its version)."""

from __future__ import annotations

import pytest
import yaml

from sensorcep.rules.builder import (
    absence,
    absent,
    aggregate,
    baseline,
    count,
    field,
    group,
    pattern,
    rate,
    sequence,
    step,
    threshold,
    to_yaml,
)
from sensorcep.rules.model import AllOf, AnyOf, Not, RuleError, parse_rules, spec_json

freq, voltage = field("sensor_freq"), field("voltage")


def test_the_documented_rule_set_builds_and_reads_back_from_its_yaml():
    rules = [
        threshold("brownout", (freq > 55) & ((voltage > 250) | ~(voltage >= 180)), severity="critical"),
        count("sags", voltage < 180, at_least=3, within="5 minutes"),
        sequence("surge_then_sag", first=voltage > 250, then=voltage < 180, within="2 minutes"),
        aggregate("hot_average", "avg", freq, window="5 minutes", slide="1 minute", op=">", value=80),
        aggregate("busy", "count", window="1 minute", op=">=", value=100),
        aggregate("over_setpoint", "avg", freq, window="5 minutes", op=">", value_from="devices.setpoint"),
        rate("jump", freq, op=">", value=50),
        absence("silent", within="10 minutes", scope={"site": "lab"}),
        baseline("odd", voltage, k=4, span=50),
        pattern("spike_twice", step(freq > 90), absent(freq < 60), step(freq > 90, times=(1, 3)), within="2 minutes"),
        group("site_brownout", "brownout", by="site", at_least=3, within="10 minutes"),
    ]
    assert rules[-1].text == "3 devices of one site fire brownout within 10 minutes"
    assert rules[-2].text == "sensor_freq > 90 then no sensor_freq < 60 then sensor_freq > 90{1,3} within 2 minutes"
    assert [r.text for r in rules[:4]] == [
        "sensor_freq > 55 and (voltage > 250 or not voltage >= 180)",
        "3+ events with voltage < 180 within 5 minutes",
        "voltage > 250 then voltage < 180 within 2 minutes",
        "avg(sensor_freq) over 5 minutes every 1 minute > 80",
    ]
    assert rules[0].level == "critical"
    written = to_yaml(rules)
    assert "description" not in written and "enabled" not in written, "defaults left out"
    assert parse_rules(yaml.safe_load(written)) == rules


def test_a_rule_moved_from_yaml_to_python_keeps_its_spec_and_so_its_version():
    (from_yaml,) = parse_rules({"rules": [{"id": "low", "kind": "threshold", "field": "sensor_freq", "op": "<",
                                           "value": 0}]})  # fmt: skip
    assert spec_json(threshold("low", freq < 0)) == spec_json(from_yaml)


def test_operators_combine_conditions_and_flatten_chains():
    chain = (freq > 1) & (freq < 5) & (voltage > 2)
    assert isinstance(chain, AllOf) and len(chain.all) == 3
    either = (freq > 1) | (voltage > 2) | (voltage < -2)
    assert isinstance(either, AnyOf) and len(either.any) == 3
    assert isinstance(~(freq > 1), Not) and (~(freq > 1)).negated == (freq > 1)


def test_a_bad_rule_built_in_python_is_a_rule_error_that_names_it():
    with pytest.raises(RuleError, match="rule Low Freq: .*id: String should match pattern"):
        threshold("Low Freq", freq < 0)
    with pytest.raises(RuleError, match="'device_id' is not a numeric field of an event"):
        threshold("status", field("device_id") < 3)
    with pytest.raises(RuleError, match="value: must be a finite number, not inf"):
        threshold("huge", freq > float("inf"))
    with pytest.raises(RuleError, match="rule spread: .*stddev needs a field"):
        aggregate("spread", "stddev", window="1 minute", op=">", value=1)
