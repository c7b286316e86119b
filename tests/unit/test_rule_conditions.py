"""Rule conditions on any numeric field, combined with all / any / not, without a JVM: how they read, what they
refuse with one sentence each, how an event is judged (a field it lacks or carries as junk meets no comparison,
negated or not), and that ``rules check`` names a field no event carries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import rule_conditions
from support.oracle import meets, reads_as_number

from sensorcep.rules.model import (
    MAX_ALTERNATIVES,
    RuleError,
    check_fields,
    holds,
    number,
    parse_rules,
    rule_from_spec,
    spec_json,
)


def cmp(field: str, op: str, value: float) -> dict:
    """A comparison as written in YAML."""
    return {"field": field, "op": op, "value": value}


HOT_AND_LOW_VOLTAGE = {
    "id": "brownout",
    "kind": "threshold",
    "when": {
        "all": [
            cmp("sensor_freq", ">", 55),
            {"any": [cmp("voltage", ">", 250), {"not": cmp("voltage", ">=", 180)}]},
        ]
    },
}  # fmt: skip


def one(rule: dict):
    (parsed,) = parse_rules({"rules": [rule]})
    return parsed


def test_a_combined_condition_reads_as_one_line_and_survives_its_alert_rules_row():
    parsed = one(HOT_AND_LOW_VOLTAGE)
    assert parsed.text == "sensor_freq > 55 and (voltage > 250 or not voltage >= 180)"
    assert parsed.fields == {"sensor_freq", "voltage"}
    assert '"not": {' in spec_json(parsed), "stored as written: not, not its Python name"
    assert rule_from_spec(parsed.id, spec_json(parsed)) == parsed
    sequence = one(
        {
            "id": "surge_then_sag",
            "kind": "sequence",
            "first": {"all": [cmp("voltage", ">", 250), cmp("sensor_freq", ">", 5)]},
            "then": cmp("voltage", "<", 180),
            "within": "2 minutes",
        }
    )  # fmt: skip
    assert sequence.text == "(voltage > 250 and sensor_freq > 5) then voltage < 180 within 2 minutes"
    count = one({"id": "sags", "kind": "count", "when": {"not": cmp("voltage", ">", 180)},
                 "at_least": 3, "within": "5 minutes"})  # fmt: skip
    assert count.text == "3+ events with not voltage > 180 within 5 minutes"


def test_a_rule_written_the_old_way_keeps_its_spec_and_so_its_version():
    old = {"id": "low", "kind": "threshold", "field": "sensor_freq", "op": "<", "value": 0}
    spec = '{"description": "", "field": "sensor_freq", "kind": "threshold", "op": "<", "value": 0.0}'
    assert spec_json(one(old)) == spec


THRESHOLD = {"id": "t", "kind": "threshold"}


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ({**THRESHOLD, "when": {"all": [{"field": "voltage", "op": ">"}]}},
         "rule 1 (t), when.all.0.value: Field required"),
        ({**THRESHOLD, "when": {"any": []}}, "when.any: List should have at least 1 item"),
        ({**THRESHOLD, "when": {"not": cmp("voltage", "~", 1)}}, "when.not.op: Input should be"),
        ({**THRESHOLD, "when": cmp("device_id", "==", 1)}, "'device_id' is not a numeric field"),
        ({**THRESHOLD, "when": cmp("volt age", "<", 1)}, "'volt age' is not a field name"),
        ({**THRESHOLD, "field": "sensor_freq", "op": "<", "value": 0, "when": cmp("voltage", "<", 1)},
         "give either when or field/op/value, not both"),
        ({**THRESHOLD, "field": "sensor_freq"}, "give a condition: field, op and value (op, value missing), or when"),
        ({**THRESHOLD, "when": {"all": [{"any": [{"field": f"f{i}{j}", "op": "<", "value": 0} for j in range(2)]}
                                        for i in range(6)]}},
         f"expands to more than {MAX_ALTERNATIVES} alternatives; write it with fewer any: inside all:"),
        ({"id": "s", "kind": "sequence", "first": {"all": []}, "then": cmp("voltage", "<", 1),
          "within": "1 minute"}, "rule 1 (s), first.all: List should have at least 1 item"),
    ],
)  # fmt: skip
def test_each_bad_condition_gets_an_error_that_names_the_rule_and_where(rule, says):
    with pytest.raises(RuleError) as caught:
        parse_rules({"rules": [rule]})
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("given_value", "read"),
    [(230, 230.0), ("230", 230.0), ("-0.5", -0.5), ("1e3", 1000.0), (".5", 0.5), ("7.", 7.0), (None, None),
     ("", None), ("high", None), ("NaN", None), ("inf", None), ("1e999", None), ("0x10", None), (" 5", None),
     ("5\n", None), ("1_000", None), ("١٢", None), (True, None), (float("nan"), None)],
)  # fmt: skip
def test_a_field_reads_as_a_number_only_when_it_is_a_plain_finite_decimal(given_value, read):
    assert number(given_value) == read
    assert (number(given_value) is not None) == reads_as_number(given_value)  # the oracle's own reading agrees


def test_not_over_a_field_the_event_lacks_fires_nothing():
    parsed = one(HOT_AND_LOW_VOLTAGE)
    assert holds(parsed.test, {"sensor_freq": 60, "voltage": "170"}), "low voltage, hot"
    assert holds(parsed.test, {"sensor_freq": 60, "voltage": 260}), "high voltage, hot"
    assert not holds(parsed.test, {"sensor_freq": 60, "voltage": "200"}), "normal voltage"
    assert not holds(parsed.test, {"sensor_freq": 60}), "no voltage: neither above 250 nor below 180"
    assert not holds(parsed.test, {"sensor_freq": 60, "voltage": "broken"}), "junk is no voltage"


conditions = rule_conditions.conditions([-1.0, 0.0, 2.5, 180.0], max_leaves=5)
field_values = st.sampled_from([None, -1.0, 0.0, 2.5, 180.0, "180", "2.5e0", "high", "NaN", ""])


@given(condition=conditions, freq=st.sampled_from([-1.0, 0.0, 2.5, 180.0]), voltage=field_values)
def test_property_the_rules_reading_of_a_condition_is_the_oracles(condition, freq, voltage):
    """The model's reading (alternatives of comparisons, what Spark evaluates too) equals the oracle's recursive one."""
    rule = one({**THRESHOLD, "when": condition})
    event = {"sensor_freq": freq} if voltage is None else {"sensor_freq": freq, "voltage": voltage}
    assert holds(rule.test, event) == meets(condition, event)


def test_a_rule_reading_a_field_no_event_carries_is_refused_naming_it_and_the_setting():
    rules = parse_rules({"rules": [HOT_AND_LOW_VOLTAGE, {"id": "ok", "kind": "threshold", "field": "sensor_freq",
                                                          "op": "<", "value": 0}]})  # fmt: skip
    assert check_fields(rules, ["voltage"]) == rules
    with pytest.raises(RuleError) as refused:
        check_fields(rules, ["firmware"], "my.yaml")
    assert str(refused.value).startswith("my.yaml: rule brownout reads voltage, which no event carries")
    assert "extra_fields setting (now: firmware); add the field to extra_fields" in str(refused.value)


def test_rules_check_names_a_field_no_event_carries(tmp_path, monkeypatch, capsys):
    import yaml

    from sensorcep.__main__ import main

    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"rules": [HOT_AND_LOW_VOLTAGE]}))
    with pytest.raises(SystemExit) as stopped:
        main(["rules", "check", "--file", str(path)])
    assert stopped.value.code == 1
    assert "rule brownout reads voltage, which no event carries" in capsys.readouterr().err
    monkeypatch.setenv("SENSORCEP_EXTRA_FIELDS", "voltage")
    main(["rules", "check", "--file", str(path)])
    assert "brownout" in capsys.readouterr().out
