"""``kind: group``, without a JVM: "three pumps of one site faulting within 10 minutes" as an input stream of the
named rule's alerts with the moments the group fires; a property that the processor's logic, fed in any cut of
watermark steps, fires exactly where a literal reading of the definition does; and what ``rules check`` refuses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from sensorcep.rules.grouping import advance, forget, group_label, labels_of
from sensorcep.rules.model import RuleError, check_groups, parse_rules

MINUTE = 60_000_000
PUMP_FAULT = {"id": "pump_fault", "kind": "threshold", "field": "sensor_freq", "op": "<", "value": 0}


def group(**fields) -> dict:
    return {"id": "site_pumps", "kind": "group", "rule": "pump_fault", "by": "site", "at_least": 3,
            "within": "10 minutes", **fields}  # fmt: skip


def parsed_group(**fields):
    return check_groups(parse_rules({"rules": [PUMP_FAULT, group(**fields)]}))[1]


def fires_at(alerts: list[tuple[float, str]], **fields) -> list[float]:
    """The minutes at which the group fires over (minute, device) alerts of the named rule in one group."""
    fired, _ = advance(parsed_group(**fields), {}, sorted((round(m * MINUTE), d) for m, d in alerts))
    return [t / MINUTE for t in fired]


def test_three_pumps_of_one_site_faulting_within_ten_minutes_fire_once_at_the_third():
    assert fires_at([(0, "p1"), (4, "p2"), (9, "p3")]) == [9]
    assert fires_at([(0, "p1"), (4, "p2"), (9, "p3"), (9.5, "p4")]) == [9], "after it fires, counting starts again"
    assert fires_at([(0, "p1"), (4, "p2"), (9, "p3"), (9.5, "p4"), (11, "p5"), (12, "p6")]) == [9, 12]


def test_a_device_counts_once_and_only_while_its_latest_alert_is_within_the_window():
    assert fires_at([(0, "p1"), (1, "p1"), (2, "p1"), (3, "p2")]) == [], "one pump faulting three times is one device"
    assert fires_at([(0, "p1"), (5, "p2"), (10, "p3")]) == [], "p1's alert is 10 minutes old at p3's: no longer within"
    assert fires_at([(0, "p1"), (5, "p2"), (9, "p1"), (10, "p3")]) == [10], "p1's later alert keeps it counting"


def test_the_group_of_a_device_is_its_label_and_a_device_without_one_is_in_no_group():
    rule = parsed_group()
    assert group_label(rule, {"site": "plant-1", "sensor_type": "pump"}) == "site=plant-1"
    assert group_label(rule, {"sensor_type": "pump"}) is None and group_label(rule, {"site": ""}) is None
    assert group_label(parsed_group(by="sensor_type"), {"sensor_type": "pump"}) == "sensor_type=pump"
    assert rule.text == "3 devices of one site fire pump_fault within 10 minutes"
    assert labels_of("site=plant-1") == {"site": "plant-1"}, "routes match a group incident by its site"
    assert labels_of("p1") == {} and labels_of("colour=red") == {} and labels_of("site=") == {}


alert_streams = st.lists(
    st.tuples(st.integers(0, 40), st.sampled_from(["p1", "p2", "p3", "p4", "p5"])), max_size=40
).map(lambda alerts: sorted((m * MINUTE, d) for m, d in alerts))


def literal(rule, alerts: list[tuple[int, str]]) -> list[int]:
    """The definition read literally: the alert that makes ``at_least`` distinct devices have an alert within the
    ``within`` before it, counting only alerts after the last one that fired, fires."""
    fired, last = [], -1
    for i, (t, _) in enumerate(alerts):
        devices = {d for j, (t2, d) in enumerate(alerts) if last < j <= i and t2 > t - rule.within_us}
        if len(devices) >= rule.at_least:
            fired.append(t)
            last = i
    return fired


@hypothesis_settings(max_examples=300, deadline=None)
@given(alerts=alert_streams, cuts=st.lists(st.integers(0, 45), max_size=6), at_least=st.integers(2, 4))
def test_any_cut_into_watermark_steps_fires_where_the_definition_read_literally_does(alerts, cuts, at_least):
    rule = parsed_group(at_least=at_least)
    memory, fired, released = {}, [], 0
    for watermark in [*sorted(c * MINUTE for c in cuts), 50 * MINUTE]:  # as the processor's timers release them
        final = [a for a in alerts[released:] if a[0] <= watermark]
        released += len(final)
        now, memory = advance(rule, memory, final)
        memory = forget(rule, memory, watermark)
        fired += now
    assert fired == literal(rule, alerts)
    assert len(memory) < at_least, "a group's memory stays under at_least devices"


@pytest.mark.parametrize(
    ("rules", "error"),
    [
        ([group(rule="nope")], "group rule site_pumps counts the alerts of 'nope', which is no rule of the set"),
        ([PUMP_FAULT, group(), group(id="sites", rule="site_pumps")], "which is another group rule"),
    ],
)
def test_a_group_rule_must_name_a_rule_of_another_kind_in_the_same_set(rules, error):
    with pytest.raises(RuleError, match=error):
        check_groups(parse_rules({"rules": rules}))


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"at_least": 1}, "at_least: Input should be greater than or equal to 2"),
        ({"within": None}, "within"),
        ({"by": "device_id"}, "by: Input should be 'site' or 'sensor_type'"),
        ({"scope": {"site": "lab"}}, "a group rule takes no scope"),
    ],
)
def test_rules_check_refuses_a_group_rule_it_cannot_bound_or_place(fields, error):
    rule = {k: v for k, v in group(**fields).items() if v is not None}
    with pytest.raises(RuleError, match=error):
        parse_rules({"rules": [PUMP_FAULT, rule]})
