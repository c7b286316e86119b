"""The alert lifecycle in plain Python (no JVM): flapping pages once, ack closes, snooze mutes, latch holds, unacked
escalates once; :func:`lifecycle.advance` equals a clock-driven oracle on random inputs, whatever the watermarks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from support.oracle import lifecycle_steps

from sensorcep.rules import lifecycle
from sensorcep.rules.lifecycle import Input, Policy

S = 1_000_000  # µs per second
LATCHED = Policy(latch=True, suppress_us=60 * S, escalate_us=600 * S, escalate_text="not acknowledged within 10 min")
UNLATCHED = Policy(latch=False, suppress_us=60 * S, escalate_us=600 * S)


def alert(second: int, alert_id: str) -> Input:
    return Input(second * S, "alert", alert_id, alert={"alert_id": alert_id})


def ack(second: int, alert_id: str = "x", action: str = "ack", until: int | None = None) -> Input:
    return Input(second * S, "ack", alert_id, action, None if until is None else until * S, "ops")


def story(steps) -> list[tuple]:
    return [(s.transition, s.at_us // S, s.state, s.alerts) for s in steps]


def test_a_flapping_device_pages_once_and_an_ack_closes_its_incident():
    steps, incident = lifecycle.advance(
        None, [alert(0, "a1"), alert(10, "a2"), alert(20, "a3"), ack(30, "a2")], 1_000 * S, LATCHED
    )
    assert story(steps) == [("opened", 0, "open", 1), ("repeated", 10, "open", 2), ("repeated", 20, "open", 3),
                            ("acked", 30, "closed", 3)]  # fmt: skip
    assert [s.pages for s in steps] == [True, False, False, False]
    assert {s.incident_id for s in steps} == {"a1"} and incident is None
    again, _ = lifecycle.advance(None, [alert(40, "a4")], 50 * S, LATCHED)
    assert story(again) == [("opened", 40, "open", 1)], "after the ack, the next alert opens (and pages) anew"


def test_unacked_escalates_once_at_its_deadline_and_a_latched_incident_stays_open_until_acked():
    steps, incident = lifecycle.advance(None, [alert(0, "a1"), alert(700, "a2")], 5_000 * S, LATCHED)
    assert story(steps) == [("opened", 0, "open", 1), ("escalated", 600, "open", 1), ("repeated", 700, "open", 2)]
    assert steps[1].pages and steps[1].alert == {"alert_id": "a1"} and steps[1].detail.startswith("not acknowledged")
    assert incident["state"] == "open", "latched: an hour of quiet does not close it"
    steps, incident = lifecycle.advance(incident, [ack(5_100)], 6_000 * S, LATCHED)
    assert story(steps) == [("acked", 5_100, "closed", 2)] and incident is None


def test_an_ack_at_the_deadline_is_in_time():
    steps, _ = lifecycle.advance(None, [alert(0, "a1"), ack(600)], 700 * S, LATCHED)
    assert [s.transition for s in steps] == ["opened", "acked"]


def test_an_unlatched_incident_resolves_after_suppress_for_without_an_alert():
    steps, incident = lifecycle.advance(None, [alert(0, "a1"), alert(50, "a2"), alert(200, "a3")], 300 * S, UNLATCHED)
    assert story(steps) == [("opened", 0, "open", 1), ("repeated", 50, "open", 2), ("resolved", 110, "closed", 2),
                            ("opened", 200, "open", 1), ("resolved", 260, "closed", 1)]  # fmt: skip
    assert incident is None and [s.incident_id for s in steps][-2:] == ["a3", "a3"]


def test_a_snooze_mutes_until_its_end_then_escalates_at_once_if_its_deadline_passed():
    steps, incident = lifecycle.advance(
        None, [alert(0, "a1"), ack(100, action="snooze", until=900), alert(300, "a2")], 2_000 * S, LATCHED
    )
    assert story(steps) == [("opened", 0, "open", 1), ("snoozed", 100, "snoozed", 1), ("repeated", 300, "snoozed", 2),
                            ("unsnoozed", 900, "open", 2), ("escalated", 900, "open", 2)]  # fmt: skip
    assert steps[1].detail == "until 1970-01-01T00:15:00Z"
    assert incident["escalated"]


def test_a_snooze_until_beyond_the_years_python_holds_is_recorded_not_raised():
    """The query quarantines a snooze longer than a year; a state written before that check, or a timer's own text,
    must still not raise out of the processor (that would stop the lifecycle at every restart)."""
    until = 1_767_225_600_000 * S  # epoch milliseconds read as seconds: the year 57,970
    steps, incident = lifecycle.advance(None, [alert(0, "a1"), Input(100 * S, "ack", "a1", "snooze", until, "ops")],
                                        2_000 * S, LATCHED)  # fmt: skip
    assert [s.transition for s in steps] == ["opened", "snoozed"] and incident["state"] == "snoozed"
    assert steps[1].detail == f"until {until} µs after 1970-01-01"


def test_acks_with_nothing_to_close_are_recorded_as_ignored():
    steps, incident = lifecycle.advance(None, [ack(5, "zz"), alert(10, "a1"), ack(20, action="snooze", until=15)],
                                        100 * S, LATCHED)  # fmt: skip
    assert story(steps) == [("ignored", 5, "closed", 0), ("opened", 10, "open", 1), ("ignored", 20, "open", 1)]
    assert steps[0].incident_id is None and steps[0].cause_id == "zz" and steps[0].detail == "ack: no open alert"
    assert incident["state"] == "open"


def test_nothing_fires_beyond_the_watermark():
    steps, incident = lifecycle.advance(None, [alert(0, "a1")], 599 * S, LATCHED)
    assert story(steps) == [("opened", 0, "open", 1)]
    assert lifecycle.next_deadline_us(incident, LATCHED) == 600 * S
    steps, _ = lifecycle.advance(incident, [], 600 * S, LATCHED)
    assert story(steps) == [("escalated", 600, "open", 1)]


@st.composite
def histories(draw):
    n = draw(st.integers(1, 14))
    inputs = []
    for i in range(n):
        second = draw(st.integers(0, 400))
        kind = draw(st.sampled_from(["alert", "alert", "ack", "snooze"]))
        if kind == "alert":
            inputs.append((second, "alert", f"a{i:02d}", None, None))
        elif kind == "ack":
            inputs.append((second, "ack", f"a{draw(st.integers(0, n)):02d}", "ack", None))
        else:
            inputs.append((second, "ack", f"a{i:02d}", "snooze", second + draw(st.integers(-5, 200))))
    latch = draw(st.booleans())
    suppress, escalate = draw(st.sampled_from([10, 45, 120])), draw(st.sampled_from([30, 90, 240]))
    cuts = sorted(draw(st.lists(st.integers(0, 700), max_size=4)))
    return inputs, latch, suppress, escalate, cuts


@hypothesis_settings(max_examples=300, deadline=None)
@given(history=histories())
def test_property_advance_equals_the_clock_oracle_whatever_the_watermarks(history):
    inputs, latch, suppress, escalate, cuts = history
    policy = Policy(latch, suppress * S, escalate * S)
    final_s = 700
    # the live processor: inputs released as successive watermarks pass them (one input per second at most behind)
    steps, incident, released = [], None, 0
    ordered = sorted(inputs, key=lambda i: i[0])
    for mark in [*cuts, final_s]:
        batch = [i for i in ordered[released:] if i[0] <= mark]
        released += len(batch)
        more, incident = lifecycle.advance(
            incident,
            [Input(t * S, k, a, act or "ack", None if u is None else u * S) for t, k, a, act, u in batch],
            mark * S,
            policy,
        )
        steps += more
    got = [(s.incident_id, s.transition, s.at_us // S, s.cause_id, s.state, s.alerts) for s in steps]
    assert got == lifecycle_steps(inputs, final_s, latch, suppress, escalate)
