"""``kind: pattern``, without a JVM: the examples of Flink CEP's documentation (its after-match skip strategy
``SKIP_PAST_LAST_EVENT``, which this kind follows, and a trailing ``notFollowedBy`` within a time), Azure Stream
Analytics' MATCH_RECOGNIZE example (its ATM that warns twice in a row) and the everyday asks, as input
streams with the alerts the peers' docs say they produce; each also judged by the oracle's literal search
(``support.oracle.pattern_matches``); and what ``rules check`` refuses."""

from __future__ import annotations

import pytest
from support.oracle import pattern_matches

from sensorcep.rules.catalog import VersionedRule
from sensorcep.rules.model import Judged, RuleError, parse_rules
from sensorcep.rules.sequential import advance, next_deadline_us, pattern_runs

#: the letters of Flink's examples as readings of sensor_freq: a in [0, 10), b in [10, 20), c >= 90, d in [50, 60)
LETTER = {"a": 5.0, "b": 15.0, "c": 95.0, "d": 55.0}
IS = {
    "a": {"all": [{"field": "sensor_freq", "op": ">=", "value": 0}, {"field": "sensor_freq", "op": "<", "value": 10}]},
    "b": {"all": [{"field": "sensor_freq", "op": ">=", "value": 10}, {"field": "sensor_freq", "op": "<", "value": 20}]},
    "c": {"field": "sensor_freq", "op": ">=", "value": 90},
}


def pattern(*steps, within="1 minute") -> dict:
    return {"id": "p", "kind": "pattern", "within": within, "steps": list(steps)}


def _rows(stream: list[tuple[int, float | dict]]) -> list[dict]:
    return [reading if isinstance(reading, dict) else {"sensor_freq": reading} for _, reading in stream]


def fired(rule: dict, stream: list[tuple[int, float | dict]], watermark_s: int = 1_000) -> list:
    """The rule's alerts over (second, reading) events of one device (a reading: sensor_freq, or the event's fields by
    name), as the stateful rules query runs it (:func:`advance`)."""
    [parsed] = parse_rules({"rules": [rule]})
    events = [
        (t * 1_000_000, row.get("sensor_freq"), None, row) for (t, _), row in zip(stream, _rows(stream), strict=True)
    ]
    return advance([VersionedRule(parsed, 1)], "dev", {}, events, watermark_s * 1_000_000)[0]


def alerts(rule: dict, stream: list[tuple[int, float | dict]], watermark_s: int = 1_000) -> list[int]:
    """The seconds at which the rule fires (:func:`fired`), after checking that the oracle's literal search says the
    same."""
    got = [f.event_time_us // 1_000_000 for f in fired(rule, stream, watermark_s)]
    expected = pattern_matches(rule, [t * 1_000_000 for t, _ in stream], _rows(stream), watermark_s * 1_000_000)
    assert got == [t // 1_000_000 for t in expected], "the query's logic and the oracle's search disagree"
    return got


def letters(text: str) -> list[tuple[int, float]]:
    """'b b b c' -> one event a second from second 1."""
    return [(second, LETTER[letter]) for second, letter in enumerate(text.split(), start=1)]


def test_flink_b_plus_c_over_b1_b2_b3_c_is_one_match_with_skip_past_last_event():
    """Flink's docs: for ``b+ c`` and ``b1 b2 b3 c``, SKIP_PAST_LAST_EVENT gives the one match ``b1 b2 b3 c``."""
    rule = pattern({"when": IS["b"], "times": {"min": 1}}, {"when": IS["c"]})
    assert alerts(rule, letters("b b b c")) == [4]


def test_flink_a_times_2_over_a1_to_a4_matches_a1_a2_then_a3_a4():
    """FLINK-7169: ``a{2}`` over ``a1 a2 a3 a4`` with AFTER MATCH SKIP PAST LAST ROW: a1 a2, then a3 a4 (a pattern
    has two steps at least: ``a a``, and ``a{2} c``)."""
    twice = pattern({"when": IS["a"], "times": {"min": 2, "max": 2}}, {"when": IS["c"]})
    assert alerts(twice, letters("a a c a a c")) == [3, 6]
    pair = pattern({"when": IS["a"]}, {"when": IS["a"]})
    assert alerts(pair, letters("a a a a")) == [2, 4]


def test_flink_a_b_plus_c_with_relaxed_contiguity_skips_the_events_between():
    """Flink's docs: ``a b+ c`` (followedBy) over ``a b1 d1 b2 d2 b3 c`` matches, every match ending at c: one alert,
    at c, after which matching starts again."""
    rule = pattern({"when": IS["a"]}, {"when": IS["b"], "times": {"min": 1}}, {"when": IS["c"]})
    assert alerts(rule, letters("a b d b d b c")) == [7]
    assert alerts(rule, letters("a d c b c")) == [5], "c before any b does not end it; b then c does"


def test_flink_trailing_not_followed_by_fires_when_within_ends_without_the_event():
    """Flink's ``begin(a).notFollowedBy(b).within(10 s)``: an a followed by a b within 10 s is no match; an a with no
    b for 10 s is, emitted when the 10 s end."""
    rule = pattern({"when": IS["a"]}, {"when": IS["b"], "not": True}, within="10 seconds")
    assert alerts(rule, [(0, LETTER["a"]), (5, LETTER["b"]), (20, LETTER["a"]), (25, LETTER["d"])]) == [30]
    assert alerts(rule, [(20, LETTER["a"])], watermark_s=29) == [], "not before the watermark passes 30"
    [parsed] = parse_rules({"rules": [rule]})
    _, memory = advance([VersionedRule(parsed, 1)], "dev", {}, [(20_000_000, 5.0, None)], 21_000_000)
    assert next_deadline_us([VersionedRule(parsed, 1)], memory) == 30_000_000, "a quiet device's timer"


#: Azure Stream Analytics' "Advanced pattern matching with MATCH_RECOGNIZE" (Common query patterns): each ATM's
#: operations, Return_Code as a number (0 "Success", 1 "Warning"), seconds after 00:10:00 on 2017-01-26
ATM_OPERATIONS = {
    "atm-1": [(0, 0), (8, 0), (14, 1), (19, 1)],  # then Opening Money Slot and Printing Bank Balance warn
    "atm-2": [(7, 0), (11, 0)],  # Opening Money Slot, Closing Money Slot
}
WARNING = {"field": "return_code", "op": "!=", "value": 0}
SUCCESS = {"field": "return_code", "op": "==", "value": 0}


def test_asa_two_consecutive_warnings_of_an_atm_within_a_minute():
    """ASA's ``PATTERN (Success* Warning{2,})`` with ``LIMIT DURATION(minute, 1)``, ``PARTITION BY ATM_id``: one
    output, ATM 1, whose first warning is at 00:10:14; ATM 2 only succeeds. Here the same ask is a warning, then no
    success, then a warning (``Success*`` before them restricts nothing); the alert is the match's last event, 00:10:19.
    ASA's rows follow one another in a match; this kind lets other events come between, so "consecutive" is the not
    step: a success between the two warnings is no match."""
    rule = pattern({"when": WARNING}, {"when": SUCCESS, "not": True}, {"when": WARNING}, within="1 minute")
    fired = {atm: alerts(rule, [(t, {"return_code": code}) for t, code in ops])
             for atm, ops in ATM_OPERATIONS.items()}  # fmt: skip
    assert fired == {"atm-1": [19], "atm-2": []}
    assert alerts(rule, [(14, {"return_code": 1}), (16, {"return_code": 0}), (19, {"return_code": 1})]) == []
    assert alerts(rule, [(14, {"return_code": 1}), (80, {"return_code": 1})]) == [], "not within a minute"


SPIKE = {"field": "sensor_freq", "op": ">", "value": 90}
RECOVERED = {"field": "sensor_freq", "op": "<", "value": 60}


def test_spike_then_no_recovery_then_a_second_spike_within_two_minutes():
    rule = pattern({"when": SPIKE}, {"when": RECOVERED, "not": True}, {"when": SPIKE}, within="2 minutes")
    assert alerts(rule, [(0, 95.0), (30, 70.0), (60, 96.0)]) == [60]
    assert alerts(rule, [(200, 95.0), (220, 50.0), (260, 96.0)]) == [], "it recovered in between"
    assert alerts(rule, [(400, 95.0), (600, 96.0)]) == [], "the second spike came after 2 minutes"
    assert alerts(rule, [(0, 95.0), (20, 50.0), (40, 97.0), (70, 98.0)]) == [70], "a new match from the spike at 40"


def test_a_repeating_step_between_min_and_max():
    three_lows = pattern({"when": SPIKE}, {"when": RECOVERED, "times": {"min": 3, "max": 3}}, within="1 minute")
    assert alerts(three_lows, [(0, 95.0), (10, 1.0), (20, 70.0), (30, 2.0), (40, 3.0)]) == [40]
    assert alerts(three_lows, [(0, 95.0), (10, 1.0), (30, 2.0), (70, 3.0)]) == [], "the third low after within"


@pytest.mark.parametrize(
    ("steps", "says"),
    [
        ([{"when": SPIKE}], "steps: List should have at least 2 items"),
        ([{"when": SPIKE, "not": True}, {"when": SPIKE}], "the first step cannot be a not step"),
        ([{"when": SPIKE}, {"when": SPIKE, "not": True, "times": {"min": 2}}], "step 2 is a not step: it takes no"),
        ([{"when": SPIKE, "times": {"min": 3, "max": 2}}, {"when": SPIKE}], "max (2) is below min (3)"),
        ([{"when": SPIKE, "times": {"min": 1000}}, {"when": SPIKE}], "less than or equal to 100"),
    ],
)
def test_rules_check_refuses_a_pattern_it_cannot_bound_or_read(steps, says):
    with pytest.raises(RuleError) as refused:
        parse_rules({"rules": [pattern(*steps)]})
    assert says in str(refused.value), str(refused.value)


def test_a_pattern_without_within_is_refused_and_its_text_reads_as_the_pattern():
    with pytest.raises(RuleError, match=r"rule 1 \(p\), within: Field required"):
        parse_rules({"rules": [{"id": "p", "kind": "pattern", "steps": [{"when": SPIKE}, {"when": SPIKE}]}]})
    [parsed] = parse_rules({"rules": [pattern({"when": SPIKE}, {"when": RECOVERED, "not": True},
                                              {"when": SPIKE, "times": {"min": 2}}, within="2 minutes")]})  # fmt: skip
    assert parsed.text == "sensor_freq > 90 then no sensor_freq < 60 then sensor_freq > 90{2,} within 2 minutes"


def test_a_patterns_alert_names_the_time_of_each_steps_events_by_the_rules_step_numbers():
    spikes = pattern({"when": SPIKE}, {"when": RECOVERED, "not": True}, {"when": SPIKE, "times": {"min": 2}},
                     within="2 minutes")  # fmt: skip
    [match] = fired(spikes, [(0, 95.0), (30, 70.0), (60, 96.0), (70, 97.0)])
    assert match.detail == (
        "step 1 at 1970-01-01T00:00:00.000Z; step 3 at 1970-01-01T00:01:00.000Z to 1970-01-01T00:01:10.000Z"
    )
    quiet = pattern({"when": IS["a"]}, {"when": IS["b"], "not": True}, within="10 seconds")
    [ended] = fired(quiet, [(20, LETTER["a"])], watermark_s=40)
    assert (ended.event_time_us, ended.detail) == (30_000_000, "step 1 at 1970-01-01T00:00:20.000Z")
    [rate] = fired({"id": "r", "kind": "rate", "field": "sensor_freq", "op": ">", "value": 1.0}, [(0, 1.0), (1, 9.0)])
    assert rate.detail == "", "the other kinds carry no detail"


def test_a_trailing_not_ends_its_match_at_within_before_the_event_that_begins_the_next():
    """An a, nothing for 10 s, then an a again at 12 s: the first match ends at 10 s (its alert comes before the
    second a's), and the second a begins a match of its own that ends at 22 s."""
    rule = pattern({"when": IS["a"]}, {"when": IS["b"], "not": True}, within="10 seconds")
    assert alerts(rule, [(0, LETTER["a"]), (12, LETTER["a"])]) == [10, 22]
    assert alerts(rule, [(0, LETTER["a"]), (4, LETTER["d"]), (12, LETTER["a"]), (15, LETTER["b"])]) == [10]


def test_an_event_that_meets_no_step_leaves_the_partial_matches_and_drops_only_the_expired():
    """The shortcut for an event that meets none of a pattern's conditions gives what the long way
    (:func:`pattern_runs`) gives: the partial matches as they were, less those whose within has passed; a partial
    match kept before the spans were is carried on with none; the caller's memory is left as it was."""
    [parsed] = parse_rules({"rules": [pattern({"when": IS["a"]}, {"when": IS["c"]}, within="10 seconds")]})
    rules = [VersionedRule(parsed, 1)]
    quiet = [(12_000_000, LETTER["d"], None)]
    runs = [[0, 1, False, 1_000_000, [[1_000_000, 1_000_000]]], [0, 1, False, 5_000_000, [[5_000_000, 5_000_000]]]]
    memory = {"p:1": runs}
    _, after = advance(rules, "dev", memory, quiet, 12_000_000)
    assert (
        after == {"p:1": runs[1:]} == {"p:1": pattern_runs(parsed, runs, 12_000_000, Judged({"sensor_freq": 55.0}))[1]}
    )
    assert memory == {"p:1": runs}, "the caller's memory is left as it was"
    _, after = advance(rules, "dev", {"p:1": [[0, 1, False, 5_000_000]]}, quiet, 12_000_000)
    assert after == {"p:1": [[0, 1, False, 5_000_000, []]]}


def test_alerts_come_in_the_order_of_their_events_and_for_one_event_in_the_order_of_the_rules():
    """Each rule takes a device's events in a loop of its own; the alerts still come out as if each event had gone
    through the rules in turn, and an absence the watermark proves comes after every event's alerts."""
    rising = [{"id": f"rise_{i}", "kind": "rate", "field": "sensor_freq", "op": ">", "value": -i} for i in (0, 1)]
    quiet = {"id": "quiet", "kind": "absence", "within": "5 seconds"}
    parsed = parse_rules({"rules": [*rising, quiet]})
    events = [(t * 1_000_000, float(t), None) for t in (3, 1, 2)]  # out of order: taken oldest first

    def fired(rules) -> list[tuple[int, str]]:
        got, _ = advance([VersionedRule(r, 1) for r in rules], "dev", {}, events, 100_000_000)
        return [(f.event_time_us // 1_000_000, f.rule_id) for f in got]

    assert fired(parsed) == [(2, "rise_0"), (2, "rise_1"), (3, "rise_0"), (3, "rise_1"), (8, "quiet")]
    assert fired(parsed[::-1]) == [(2, "rise_1"), (2, "rise_0"), (3, "rise_1"), (3, "rise_0"), (8, "quiet")]
