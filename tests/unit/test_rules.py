"""Alert rules as data, without a JVM: the rule model's validation (one clear error per bad rule) and how a rule set
becomes ``alert_rules`` rows with versions."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sensorcep.rules.catalog import plan_changes
from sensorcep.rules.model import RuleError, load_rules, packaged_examples, parse_rules, rule_from_spec, spec_json

NOW = datetime(2026, 11, 25, 12, 0)


def rule(**fields) -> dict:
    return {"id": "low", "kind": "threshold", "field": "sensor_freq", "op": "<", "value": 0, **fields}


def aggregate(**fields) -> dict:
    return {"id": "a", "kind": "aggregate", "function": "count", "window": "1 minute", "op": "<", "value": 1, **fields}


def test_the_packaged_rule_set_is_the_original_rule_as_one_row():
    (only,) = load_rules()
    assert (only.id, only.kind, only.text, only.enabled) == ("negative_frequency", "threshold", "sensor_freq < 0", True)


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ({"rules": [rule(id="Low Freq")]}, "rule 1 (Low Freq), id: String should match pattern"),
        ({"rules": [rule(field="device_id")]}, "field: 'device_id' is not a numeric field of an event"),
        ({"rules": [rule(op="=<")]}, "op: Input should be '<', '<=', '>', '>=', '==' or '!='"),
        ({"rules": [rule(value=float("nan"))]}, "value: must be a finite number, not nan"),
        ({"rules": [rule(value="low")]}, "value: Input should be a valid number"),
        ({"rules": [rule(scope={"site": "lab", "device_id": "d1"})]}, "give exactly one of device_id, site"),
        ({"rules": [rule(scope={"site": " "})]}, "scope: site must not be empty"),
        ({"rules": [rule(scope={"building": "b1"})]}, "scope.building: Extra inputs are not permitted"),
        ({"rules": [rule(threshhold=3)]}, "rule 1 (low), threshhold: Extra inputs are not permitted"),
        ({"rules": [rule(), rule(id="ok"), rule(kind="cluster")]}, "rule 3 (low): kind 'cluster' is not a rule kind"),
        ({"rules": [rule(kind="baseline", k=0, span=10)]}, "k: Input should be greater than 0"),
        ({"rules": [rule(kind="baseline", k=3)]}, "span: Field required"),
        ({"rules": [rule(kind="spike")]}, "rule 1 (low): kind 'spike' is not a rule kind; one of: threshold, rate"),
        ({"rules": [rule(kind="count", at_least=1, within="1 minute")]}, "at_least: Input should be greater than"),
        ({"rules": [rule(kind="count", at_least=3, within="soon")]}, "within: cannot read 'soon' as a duration"),
        ({"rules": [rule(kind="absence", within="0 seconds")]}, "must be longer than 0, not '0 seconds'"),
        ({"rules": [rule(suppress_for="a while")]}, "suppress_for: cannot read 'a while' as a duration"),
        ({"rules": [rule(latch="sometimes")]}, "latch: Input should be a valid boolean"),
        ({"rules": [{**rule(kind="absence", within="5 minutes"), "scope": None}]}, "field: Extra inputs"),
        ({"rules": ["low"]}, "rule 1: expected a mapping of a rule's fields, not str"),
        ({"rules": [rule(), rule(value=5)]}, "rules 1 and 2 share the id 'low'"),
        ({"rules": [rule(), {"id": "x"}]}, "rule 2 (x): kind is missing; one of: threshold, rate, count, absence"),
        ({"rules": [aggregate(function="avg")]}, "rule 1 (a): avg needs a field to aggregate (only count may go"),
        ({"rules": [aggregate(window="5 minutes", slide="2 minutes")]}, "window (5 minutes) must be a whole number of"),
        ({"rules": [aggregate(window="1 hour", slide="1 second")]}, "window / slide is 3600: at most 60 windows"),
        ({"rules": [aggregate(function="median")]}, "function: Input should be 'avg', 'min', 'max', 'sum', 'count'"),
        ({"rules": {"id": "low"}}, "'rules' must be a list of rules, not dict"),
        (["low"], "expected a mapping with a 'rules' list"),
    ],
)
def test_each_bad_rule_gets_an_error_that_names_it_and_what_is_wrong(document, says):
    with pytest.raises(RuleError, match="^my.yaml: ") as caught:
        parse_rules(document, "my.yaml")
    assert says in str(caught.value)


def test_a_file_that_is_missing_or_not_yaml_is_an_error_naming_the_file(tmp_path):
    with pytest.raises(RuleError, match=r"rules file .*nope.yaml: cannot be read \(No such file"):
        load_rules(tmp_path / "nope.yaml")
    junk = tmp_path / "junk.yaml"
    junk.write_text("rules: [ {id: a, kind: threshold\n")
    with pytest.raises(RuleError, match=r"rules file .*junk.yaml: not valid YAML"):
        load_rules(junk)


def test_a_rule_survives_its_round_trip_through_an_alert_rules_row():
    (parsed,) = parse_rules({"rules": [rule(scope={"site": "lab"}, description="cold", value=-1.5)]})
    again = rule_from_spec(parsed.id, spec_json(parsed), parsed.enabled)
    assert again == parsed and again.text == "sensor_freq < -1.5 [site=lab]"
    with pytest.raises(RuleError, match=r"alert_rules: 1 problem\(s\): rule 1 \(low\), op"):
        rule_from_spec("low", spec_json(parsed).replace('"<"', '"~"'))  # a hand-edited row is checked again


def rows_after(*rule_sets):
    rows = []
    for rules in rule_sets:
        changes = plan_changes(rows, parse_rules({"rules": rules}), NOW)
        rows = changes.rows
    return changes, {r["rule_id"]: (r["rule_version"], r["enabled"]) for r in rows}


def test_versions_rise_only_for_rules_that_change_and_a_dropped_rule_is_disabled_not_deleted():
    first = [rule(), rule(id="high", op=">", value=100)]
    changes, versions = rows_after(first)
    assert (changes.added, versions) == (["low", "high"], {"low": (1, True), "high": (1, True)})

    changes, versions = rows_after(first, first)
    assert not changes.any and changes.unchanged == ["low", "high"] and str(changes) == "no change"

    changes, versions = rows_after(first, [rule(value=-1), rule(id="high", op=">", value=100)])
    assert (changes.changed, versions) == (["low"], {"low": (2, True), "high": (1, True)})

    changes, versions = rows_after(first, [rule()])
    assert (changes.disabled, versions) == (["high"], {"low": (1, True), "high": (2, False)})
    assert str(changes) == "1 disabled (high)"

    changes, versions = rows_after(first, [rule()], [rule()])
    assert not changes.any and versions["high"] == (2, False), "a disabled rule stays as it is"

    changes, versions = rows_after(first, [rule()], first)
    assert changes.changed == ["high"] and versions["high"] == (3, True), "listed again: enabled, next version"

    changes, versions = rows_after(first, [rule(), rule(id="high", op=">", value=100, enabled=False)])
    assert changes.changed == ["high"] and versions["high"] == (2, False), "enabled: false is a change too"


def test_the_python_evaluation_of_a_threshold_matches_its_operator_and_device_scope():
    freq = np.array([-1.0, 0.0, 1.0, 5.0])
    devices = np.array(["a", "b", "a", "b"])
    for op, want in [("<", [1, 0, 0, 0]), ("<=", [1, 1, 0, 0]), (">", [0, 0, 1, 1]), ("==", [0, 1, 0, 0])]:
        (parsed,) = parse_rules({"rules": [rule(op=op, value=0)]})
        assert parsed.fires({"sensor_freq": freq}, devices).astype(int).tolist() == want
    (scoped,) = parse_rules({"rules": [rule(op=">", value=-5, scope={"device_id": "b"})]})
    assert scoped.fires({"sensor_freq": freq}, devices).tolist() == [False, True, False, True]
    either = {"any": [{"field": "sensor_freq", "op": "<", "value": 0}, {"field": "voltage", "op": ">", "value": 2}]}
    (combined,) = parse_rules({"rules": [{"id": "c", "kind": "threshold", "when": either}]})
    assert combined.fires({"sensor_freq": freq}, devices).tolist() == [True, False, False, False], "no voltage column"
    voltage = np.array([0.0, 3.0, 0.0, 1.0])
    assert combined.fires({"sensor_freq": freq, "voltage": voltage}, devices).tolist() == [True, True, False, False]
    (by_site,) = parse_rules({"rules": [rule(scope={"site": "lab"})]})
    with pytest.raises(RuleError, match="a site scope needs the devices table"):
        by_site.fires({"sensor_freq": freq}, devices)


def test_the_commented_examples_in_the_packaged_rule_set_are_valid_rules_of_every_kind():
    parsed = packaged_examples()
    kinds = ["threshold", "threshold", "rate", "count", "absence", "sequence", "baseline", "aggregate", "pattern"]
    assert [r.kind for r in parsed] == [*kinds, "group"]
    assert [r.text for r in parsed] == [
        "sensor_freq > 95 [site=lab]",
        "sensor_freq > 55 and (voltage > 250 or not voltage >= 180)",
        "change of sensor_freq per second > 50",
        "3+ events with sensor_freq < 1 within 5 minutes",
        "no event for 10 minutes",
        "sensor_freq > 95 then sensor_freq < 1 within 2 minutes",
        "sensor_freq more than 4 spreads from the device's baseline (span 50)",
        "avg(sensor_freq) over 5 minutes every 1 minute > 80",
        "sensor_freq > 90 then no sensor_freq < 60 then sensor_freq > 90+ within 2 minutes",
        "3 devices of one site fire negative_frequency within 10 minutes",
    ]


STATEFUL = [
    {"id": "jump", "kind": "rate", "field": "sensor_freq", "op": ">", "value": 0.05},
    {"id": "lows", "kind": "count", "field": "sensor_freq", "op": "<", "value": 1.0, "at_least": 2, "within": "30 s"},
    {"id": "quiet", "kind": "absence", "within": "40 seconds"},
    {"id": "odd", "kind": "baseline", "field": "sensor_freq", "k": 1.5, "span": 5, "min_events": 3},
    {"id": "far", "kind": "baseline", "field": "sensor_freq", "k": 1.0, "span": 4, "min_events": 3, "min_spread": 2.0},
    {"id": "up_then_down", "kind": "sequence", "first": {"field": "sensor_freq", "op": ">", "value": 5.0},
     "then": {"field": "sensor_freq", "op": "<", "value": 1.0}, "within": "60 seconds"},
    # the same kinds over a field kept through extra_fields (text, sometimes absent or junk) and combined conditions
    {"id": "volt_jump", "kind": "rate", "field": "voltage", "op": "<", "value": -1.0},
    {"id": "hot_avg", "kind": "aggregate", "function": "avg", "field": "sensor_freq", "window": "60 s", "slide": "20 s",
     "op": ">", "value": 2.0},
    {"id": "busy", "kind": "aggregate", "function": "count", "window": "30 s", "op": ">=", "value": 3},
    {"id": "volt_spread", "kind": "aggregate", "function": "stddev", "field": "voltage", "window": "90 s",
     "slide": "30 s", "op": ">", "value": 100.0},
    {"id": "volt_low", "kind": "aggregate", "function": "min", "field": "voltage", "window": "40 s", "op": "<",
     "value": 180.0},
    {"id": "sags", "kind": "count", "when": {"any": [{"field": "voltage", "op": "<", "value": 180.0},
     {"not": {"field": "sensor_freq", "op": ">=", "value": 0.0}}]}, "at_least": 2, "within": "40 s"},
    {"id": "volt_odd", "kind": "baseline", "field": "voltage", "k": 1.0, "span": 4, "min_events": 2},
    {"id": "surge_then_sag", "kind": "sequence",
     "first": {"all": [{"field": "voltage", "op": ">", "value": 230.0},
                       {"field": "sensor_freq", "op": ">", "value": 1.0}]},
     "then": {"not": {"field": "voltage", "op": ">=", "value": 180.0}}, "within": "90 seconds"},
    # a per-device setpoint (the devices table's column; device b has none: fires nothing)
    {"id": "over_setpoint", "kind": "aggregate", "function": "max", "field": "sensor_freq", "window": "30 s",
     "op": ">", "value_from": "devices.setpoint"},
    # patterns: a repeating step, a not between steps, a trailing not, a repeat bounded above
    {"id": "lows_then_high", "kind": "pattern", "within": "60 s", "steps": [
        {"when": {"field": "sensor_freq", "op": "<", "value": 1.0}, "times": {"min": 2}},
        {"when": {"field": "sensor_freq", "op": ">", "value": 5.0}}]},
    {"id": "high_no_sag_high", "kind": "pattern", "within": "90 s", "steps": [
        {"when": {"field": "sensor_freq", "op": ">", "value": 1.0}},
        {"when": {"field": "voltage", "op": "<", "value": 180.0}, "not": True},
        {"when": {"field": "sensor_freq", "op": ">", "value": 5.0}}]},
    {"id": "neg_unanswered", "kind": "pattern", "within": "45 s", "steps": [
        {"when": {"field": "sensor_freq", "op": "<", "value": 0.0}, "times": {"min": 1, "max": 2}},
        {"when": {"field": "voltage", "op": ">", "value": 230.0}, "not": True}]},
]  # fmt: skip
VOLTAGES = [None, "170", "200", "240.5", "1e3", "n/a"]
SETPOINTS = {"a": 1.5}


@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.sampled_from([-1.0, 0.5, 2.0, 7.0]),
            st.integers(0, 300),
            st.sampled_from(VOLTAGES),
        ),  # fmt: skip
        max_size=40,
        unique_by=lambda r: (r[0], r[2]),
    ),
    cuts=st.lists(st.integers(0, 330), max_size=5),
)
def test_property_the_stateful_logic_in_any_watermark_steps_equals_the_oracle(rows, cuts):
    """No JVM: each device's events released in steps (the watermarks of successive micro-batches) through the
    processor's logic give the plain-Python oracle's alerts, whatever the steps."""
    from support.oracle import stateful_rule_alerts

    from sensorcep.pipeline.alerts import alert_id
    from sensorcep.rules.catalog import VersionedRule
    from sensorcep.rules.sequential import advance

    rules = [VersionedRule(r, 1) for r in parse_rules({"rules": STATEFUL})]
    frame = pd.DataFrame(rows, columns=["device_id", "sensor_freq", "s", "voltage"]).assign(
        event_time_us=lambda f: f.s.astype("int64") * 1_000_000
    )
    final_us = 330 * 1_000_000
    got = set()
    for device, group in frame.groupby("device_id"):
        memory, done = {}, -1
        for mark_us in [*sorted(c * 1_000_000 for c in cuts), final_us]:
            step = [
                (int(t), float(v), None, {"voltage": volts})
                for t, v, volts in zip(group.event_time_us, group.sensor_freq, group.voltage, strict=True)
            ]
            step = [e for e in step if done < e[0] <= mark_us]
            fired, memory = advance(rules, device, memory, step, mark_us, {("value_from", "setpoint"): SETPOINTS})
            got |= {(alert_id(f.device_id, f.event_time_us, f.rule_id), f.rule_id) for f in fired}
            done = max(done, mark_us)
    assert got == stateful_rule_alerts(frame, STATEFUL, final_us // 1000, {"setpoint": SETPOINTS})


def test_how_an_alert_lives_is_part_of_the_rule_with_defaults_that_do_not_change_old_specs():
    plain, unlatched = parse_rules({"rules": [rule(), rule(id="flappy", latch=False, suppress_for="2 minutes")]})
    assert (plain.latched, plain.suppress_us) == (True, 300_000_000), "latched, 5 minutes by default"
    assert (unlatched.latched, unlatched.suppress_us) == (False, 120_000_000)
    assert "latch" not in spec_json(plain) and "suppress_for" not in spec_json(plain), "unset: the spec is unchanged"
    assert rule_from_spec("flappy", spec_json(unlatched)) == unlatched


def test_a_sensor_stuck_at_one_value_fires_when_it_departs_unless_min_spread_allows_the_departure():
    """A constant run has a spread of 0: any departure is infinitely many spreads away and fires (it used to give no
    verdict at all); ``min_spread`` is the documented floor for readings that are quantised or noise-free."""
    from sensorcep.rules.catalog import VersionedRule
    from sensorcep.rules.sequential import advance

    def fired(min_spread: float, last: float) -> list[int]:
        spec = {"id": "stuck", "kind": "baseline", "field": "sensor_freq", "k": 4.0, "span": 10, "min_events": 5}
        rules = [VersionedRule(r, 1) for r in parse_rules({"rules": [{**spec, "min_spread": min_spread}]})]
        events = [(t * 1_000_000, 20.0, None) for t in range(30)] + [(30_000_000, last, None)]
        alerts, _ = advance(rules, "d", {}, events, 60_000_000)
        return [a.event_time_us for a in alerts]

    assert fired(0.0, 20.0) == [], "the same constant value again is no departure"
    assert fired(0.0, 20.5) == [30_000_000], "a stuck sensor's first different reading fires"
    assert fired(1.0, 23.0) == [], "within k x min_spread of the constant: no alert"
    assert fired(1.0, 24.5) == [30_000_000]
    plain = parse_rules({"rules": [{"id": "b", "kind": "baseline", "field": "sensor_freq", "k": 4.0, "span": 10}]})[0]
    assert "min_spread" not in spec_json(plain), "a rule that does not set it keeps its spec (and its version)"


def test_an_aggregate_window_fires_once_when_the_watermark_closes_it_and_its_end_arms_the_timer():
    from sensorcep.rules.catalog import VersionedRule
    from sensorcep.rules.sequential import advance, next_deadline_us

    spread = {"id": "noisy", "kind": "aggregate", "function": "stddev", "field": "sensor_freq", "window": "1 minute",
              "op": ">", "value": 1.0}  # fmt: skip
    rules = [VersionedRule(r, 1) for r in parse_rules({"rules": [spread]})]
    s = 1_000_000
    fired, memory = advance(rules, "d", {}, [(10 * s, 0.0, None), (20 * s, 5.0, None), (70 * s, 9.0, None)], 70 * s)
    assert [(f.event_time_us, f.rule_id, f.sensor_freq) for f in fired] == [(60 * s, "noisy", None)], "at its end"
    assert next_deadline_us(rules, memory) == 120 * s, "the open window's end: the device may stay quiet"
    fired, memory = advance(rules, "d", memory, [], 200 * s)
    assert fired == [] and memory == {"noisy:1": []}, "one event: no spread, no verdict; the window is gone"


def test_readings_at_floats_limits_give_a_window_no_spread_instead_of_stopping_the_query():
    """-1e308 then 1e308 (both finite: ingest takes them) overflow the running variance to -inf; the closed window
    then has no stddev (as a window of one event has none): no alert, and no exception out of the processor."""
    from sensorcep.rules.catalog import VersionedRule
    from sensorcep.rules.sequential import advance

    spread = {"id": "noisy", "kind": "aggregate", "function": "stddev", "field": "sensor_freq", "window": "1 minute",
              "op": ">", "value": 1.0}  # fmt: skip
    rules = [VersionedRule(r, 1) for r in parse_rules({"rules": [spread]})]
    s = 1_000_000
    fired, memory = advance(
        rules, "d", {}, [(10 * s, -1e308, None), (20 * s, 1e308, None), (70 * s, 0.0, None)], 70 * s
    )
    assert fired == [] and memory["noisy:1"], "the window closed with no spread; the next is open"


def test_a_duration_beyond_ten_years_is_refused_when_the_rules_are_read_not_when_a_timer_overflows():
    quiet = {"id": "quiet", "kind": "absence", "within": "400000000000 days"}
    for bad in (quiet, rule(suppress_for="1" + "0" * 309 + " seconds")):
        with pytest.raises(RuleError, match=r"must be at most 3,660 days \(about ten years\)"):
            parse_rules({"rules": [bad]})
    assert parse_rules({"rules": [{**quiet, "within": "3660 days"}]})


def test_an_aggregate_compares_with_a_value_or_each_devices_own_number_not_both():
    with pytest.raises(RuleError, match="give value .* or value_from .*, one of them"):
        parse_rules({"rules": [aggregate(value_from="devices.setpoint")]})
    with pytest.raises(RuleError, match="give value .* or value_from .*, one of them"):
        parse_rules({"rules": [{k: v for k, v in aggregate().items() if k != "value"}]})
    with pytest.raises(RuleError, match="value_from: String should match pattern"):
        parse_rules({"rules": [{**{k: v for k, v in aggregate().items() if k != "value"}, "value_from": "setpoint"}]})
    [over] = parse_rules({"rules": [{**{k: v for k, v in aggregate(function="avg", field="sensor_freq").items()
                                       if k != "value"}, "op": ">", "value_from": "devices.setpoint"}]})  # fmt: skip
    assert (over.text, over.devices_column) == ("avg(sensor_freq) over 1 minute > devices.setpoint", "setpoint")
    assert "value_from" not in spec_json(parse_rules({"rules": [aggregate()]})[0]), "an old rule keeps its spec"


READINGS = st.sampled_from([5.0, 5.0, -3.5, 0.1, 97.0, 1e9]) | st.floats(-1e3, 1e3)  # constant runs, jumps, noise


@given(st.lists(READINGS, max_size=40), st.integers(1, 30))
def test_the_baseline_oracle_gives_each_event_the_baseline_of_the_events_before_it(values, span):
    """The oracle's one pass over a device's values (``ew_baselines_before``) equals pandas over each prefix alone."""
    from support.oracle import ew_baseline, ew_baselines_before

    def alone(prefix: list[float]) -> tuple[float, float]:
        if not prefix:
            return 0.0, 0.0
        weighted = pd.Series(prefix, dtype="float64").ewm(alpha=2.0 / (span + 1), adjust=False)
        return float(weighted.mean().iloc[-1]), float(weighted.std(bias=True).iloc[-1])

    assert ew_baselines_before(values, span) == [alone(values[:i]) for i in range(len(values))]
    assert ew_baseline(values, span) == alone(values)
