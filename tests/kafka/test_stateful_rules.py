"""The stateful rule kinds (rate, count, absence) in transformWithStateInPandas, in event time: their alerts equal a
plain-Python oracle whatever the micro-batches, the arrival order and the late events; the live query reads bronze
and sends its alerts to the alerts topic with the rule id and version; events too late are kept in late_events."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from support.oracle import accepted_events, ew_baseline, late_events, stateful_rule_alerts, watermarks
from support.profiles import examples
from support.streams import (
    T0,
    T0_US,
    alerts_on_topic,
    batch_stream,
    events,
    late_rows,
    produce_events,
    topic_records,
    write_batches,
)

from sensorcep.io.lake import Tables
from sensorcep.local import simulator
from sensorcep.local.broker import create_topics
from sensorcep.pipeline import alerts, always_on, ingest, registry, stateful_rules
from sensorcep.pipeline.backtest import backtest
from sensorcep.pipeline.streaming import start_query, stop_queries
from sensorcep.rules import catalog
from sensorcep.rules.catalog import VersionedRule
from sensorcep.rules.model import FUNCTIONS, parse_rules

RULES = [
    {"id": "jump", "kind": "rate", "field": "sensor_freq", "op": ">", "value": 2.0},
    {"id": "drop_d2", "kind": "rate", "field": "sensor_freq", "op": "<=", "value": -1.0, "scope": {"device_id": "d2"}},
    {"id": "three_low", "kind": "count", "field": "sensor_freq", "op": "<", "value": 1.0, "at_least": 3,
     "within": "40 seconds"},
    {"id": "silent", "kind": "absence", "within": "45 seconds"},
    {"id": "up_down", "kind": "sequence", "first": {"field": "sensor_freq", "op": ">", "value": 4.0},
     "then": {"field": "sensor_freq", "op": "<=", "value": 1.0}, "within": "10 seconds"},
    {"id": "odd", "kind": "baseline", "field": "sensor_freq", "k": 1.0, "span": 3, "min_events": 2},
]  # fmt: skip


def _on(field: str, op: str, value: float) -> dict:
    return {"field": field, "op": op, "value": value}


#: rules over a field kept through extra_fields (text in bronze; absent or junk for some events), conditions combined
VOLTAGE_RULES = [
    {"id": "sags", "kind": "count", "when": {"not": _on("voltage", ">=", 180.0)}, "at_least": 2, "within": "60 s"},
    {"id": "surge_then_sag", "kind": "sequence",
     "first": {"all": [_on("voltage", ">", 240.0), _on("sensor_freq", ">", 1.0)]},
     "then": {"any": [_on("voltage", "<", 180.0), _on("sensor_freq", "<", 0.1)]}, "within": "30 seconds"},
    {"id": "volt_drop", "kind": "rate", "field": "voltage", "op": "<", "value": -5.0},
    {"id": "low_avg_volts", "kind": "aggregate", "function": "avg", "field": "voltage", "window": "30 s",
     "slide": "10 s", "op": "<", "value": 200.0},
]  # fmt: skip


def versioned(rules: list[dict]) -> list[VersionedRule]:
    return [VersionedRule(r, 1) for r in parse_rules({"rules": rules}) if r.enabled]


def run_batches(spark, settings, folder, batches, rules) -> set[tuple]:
    """The processor over controlled micro-batches (one file each), availableNow: (alert_id, rule_id) it emits."""
    write_batches(folder, batches)
    stream = batch_stream(spark, folder).withColumn("kafka_timestamp", F.col("event_time"))
    got: list = []
    query = start_query(
        stateful_rules.rule_alert_stream(stream, settings, versioned(rules), {}),
        settings,
        "stateful_rules",
        foreach_batch=lambda batch, _: got.extend(batch.collect()),
        trigger="availableNow",
    )
    query.awaitTermination()
    assert query.exception() is None
    assert all(r.rule_version == 1 and r.rule for r in got)
    return {(r.alert_id, r.rule_id) for r in got}


def expected(batches, rules, settings) -> set[tuple]:
    delay_ms = settings.watermark_seconds * 1000
    return stateful_rule_alerts(accepted_events(batches, delay_ms), rules, watermarks(batches, delay_ms)[-1])


def test_fixed_batches_through_the_live_writer_fire_what_the_oracle_fires_and_keep_late_events(
    spark, settings, tmp_path
):
    create_topics(settings.kafka_bootstrap_servers, [settings.alerts_topic])
    batches = [
        events(("d1", 0.0, 0), ("d1", 0.5, 10), ("d2", 5.0, 5), ("d1", 0.2, 20)),  # d1: three low within 40 s
        events(("d1", 30.0, 25), ("d2", 1.0, 8), ("d3", 0.0, 60)),  # d1 jumps (+29.8 in 5 s); d2 drops 4 in 3 s
        events(("d3", 0.1, 200), ("d1", 0.05, 40)),  # d3 silent 60 -> 200 s
        events(("d2", 0.0, 300), ("d1", 0.0, 15)),  # d1 at 15 s: too late (the late-row filter's watermark: 30 s)
    ]
    # d1: a sag at 0 s, a surge at 25 s (at 30 Hz) and a sag at 40 s; d2 without a voltage, or junk
    volts = iter(["170", "250", None, "120", "245", "n/a", "100", "175", "150", "230", "200"])
    batches = [batch.assign(voltage=[next(volts) for _ in range(len(batch))]) for batch in batches]
    write_batches(tmp_path / "in", batches)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"rules": RULES + VOLTAGE_RULES}))
    settings = settings.replace(rules_file=str(path), extra_fields="voltage")
    stream = batch_stream(spark, tmp_path / "in", extra=("voltage",)).withColumn("kafka_timestamp", F.col("event_time"))
    stateful_rules.start_stateful_rules(spark, settings, events=stream)

    sent = [json.loads(v) for _, _, _, v in topic_records(settings.kafka_bootstrap_servers, settings.alerts_topic)]
    want = expected(batches, RULES + VOLTAGE_RULES, settings)
    assert {(a["alert_id"], a["rule_id"]) for a in sent} == want
    kinds = {"jump", "drop_d2", "three_low", "silent", "up_down", "odd", "sags", "surge_then_sag", "volt_drop"}
    kinds |= {"low_avg_volts"}
    assert {rule for _, rule in want} == kinds, "every kind, and the rules over voltage"
    assert late_rows(settings, "stateful_rules") == late_events(batches, settings.watermark_seconds * 1000)
    assert [(d, t) for d, _, t, _ in late_rows(settings, "stateful_rules")] == [("d1", T0_US + 15_000_000)]

    baselines = Tables(spark, settings).read("device_baselines").toPandas()
    latest = baselines.sort_values("as_of").groupby("device_id").last()
    delay_ms = settings.watermark_seconds * 1000
    accepted = accepted_events(batches, delay_ms)
    final = accepted[accepted.event_time_us <= watermarks(batches, delay_ms)[-1] * 1000]
    for device, group in final.groupby("device_id"):
        mean, spread = ew_baseline(group.sort_values("event_time_us").sensor_freq.tolist(), span=3)
        row = latest.loc[device]
        assert (row.events, row.rule_id) == (len(group), "odd")
        assert row["mean"] == pytest.approx(mean) and row.spread == pytest.approx(spread)
    assert not baselines.duplicated(["device_id", "batch_id"]).any(), "one row per device and batch that moved it"


@st.composite
def fleets(draw):
    """Micro-batches of events from three devices, out of order, some late, with rules of every stateful kind."""
    n_batches = draw(st.integers(1, 4))
    batches = []
    for _ in range(n_batches):
        rows = draw(
            st.lists(
                st.tuples(st.sampled_from(["d1", "d2", "d3"]), st.sampled_from([-2.0, 0.0, 0.5, 3.0, 9.0]),
                          st.integers(0, 240)),
                min_size=1,
                max_size=12,
                unique_by=lambda r: (r[0], r[2]),
            )
        )  # fmt: skip
        batches.append(events(*rows))
    if not draw(st.booleans()):  # open end or not: a later event moves the watermark past every drawn one (the simplest
        batches.append(events(("d9", 1.0, 600)))  # case too), so windows close and absences are due
    seen, unique = set(), []
    for batch in batches:  # bronze holds each (device, event time) once
        keep = [(d, t) not in seen for d, t in zip(batch.device_id, batch.event_time_us, strict=True)]
        seen.update(zip(batch.device_id, batch.event_time_us, strict=True))
        unique.append(batch[keep].reset_index(drop=True))
    rules = draw(
        st.lists(
            st.one_of(
                st.builds(lambda op, v: {"kind": "rate", "field": "sensor_freq", "op": op, "value": v},
                          st.sampled_from([">", "<", ">=", "<="]), st.sampled_from([-0.1, 0.0, 0.1])),
                st.builds(lambda n, w, v: {"kind": "count", "field": "sensor_freq", "op": "<", "value": v,
                                           "at_least": n, "within": f"{w} seconds"},
                          st.integers(2, 3), st.sampled_from([10, 30, 90]), st.sampled_from([0.1, 1.0, 5.0])),
                st.builds(lambda w: {"kind": "absence", "within": f"{w} seconds"}, st.sampled_from([5, 20, 60])),
                st.builds(lambda f, w, s: {"kind": "aggregate", "function": f, "field": "sensor_freq",
                                           "window": f"{w} seconds", "slide": f"{s} seconds", "op": ">", "value": 1.0},
                          st.sampled_from(FUNCTIONS), st.sampled_from([20, 60]), st.sampled_from([10, 20])),
                st.builds(lambda k, n: {"kind": "baseline", "field": "sensor_freq", "k": k, "span": 4, "min_events": n},
                          st.sampled_from([0.5, 1.5]), st.integers(2, 4)),
                st.builds(lambda a, b, w: {"kind": "sequence", "first": {"field": "sensor_freq", "op": ">", "value": a},
                                           "then": {"field": "sensor_freq", "op": "<", "value": b},
                                           "within": f"{w} seconds"},
                          st.sampled_from([0.0, 2.0]), st.sampled_from([0.1, 1.0]), st.sampled_from([10, 60])),
                st.builds(lambda a, n, w, last: {"kind": "pattern", "within": f"{w} seconds", "steps": [
                              {"when": {"field": "sensor_freq", "op": ">", "value": a}, "times": {"min": n}},
                              {"when": {"field": "sensor_freq", "op": "<", "value": 0.1}, "not": last}]},
                          st.sampled_from([0.0, 2.0]), st.integers(1, 2), st.sampled_from([10, 60]), st.booleans()),
            ),
            min_size=1,
            max_size=4,
        )
    )  # fmt: skip
    return unique, [{**r, "id": f"r{i}"} for i, r in enumerate(rules)]


def test_property_any_batches_and_rules_fire_what_the_oracle_fires(spark, settings, tmp_path):
    runs = iter(range(1000))

    @hypothesis_settings(max_examples=examples(6), deadline=None, suppress_health_check=list(HealthCheck))
    @given(fleet=fleets())
    def check(fleet):
        batches, rules = fleet
        run = next(runs)
        own = settings.replace(base_path=str(tmp_path / f"run{run}"), schema=f"{settings.schema}_{run}")
        assert run_batches(spark, own, tmp_path / f"in{run}", batches, rules) == expected(batches, rules, own)

    check()


#: in make extended (decision 0063): make test runs the live query's writer over fixed and random batches (above)
@pytest.mark.extended
def test_the_live_query_reads_bronze_and_its_alerts_reach_the_topic_and_anomalies(spark, settings, tmp_path):
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic, settings.alerts_topic])
    assert stateful_rules.start_stateful_rules(spark, settings) is None, "no stateful rule in force: no query"

    rules = [*RULES, {"id": "negative_frequency", "kind": "threshold", "field": "sensor_freq", "op": "<", "value": 0}]
    catalog.apply_rules(spark, settings, parse_rules({"rules": rules}))  # the packaged rule, plus the stateful ones
    settings = settings.replace(alerts_trigger="availableNow")
    sim = simulator.generate(simulator.SimulationConfig(events=1_500, devices=6, seed=11, start=T0, rate=10))
    simulator.produce(sim, settings.kafka_bootstrap_servers, settings.events_topic)
    ingest.start_ingest(spark, settings)
    assert stateful_rules.start_stateful_rules(spark, settings) is not None
    alerts.start_anomalies(spark, settings)

    sent = [json.loads(v) for _, _, _, v in topic_records(settings.kafka_bootstrap_servers, settings.alerts_topic)]
    bronze = ingest.Tables(spark, settings).read("bronze_events").toPandas()
    frame = bronze.assign(event_time_us=bronze.event_time.astype("int64") // 1000)
    final_ms = int(frame.event_time_us.max()) // 1000 - settings.watermark_seconds * 1000
    want = stateful_rule_alerts(frame, RULES, final_ms)
    assert {(a["alert_id"], a["rule_id"]) for a in sent} == want and len(want) > 20
    assert {a["rule_version"] for a in sent} == {1} and all(a["rule"] for a in sent)
    anomalies = ingest.Tables(spark, settings).read("anomalies").toPandas()
    assert set(anomalies.alert_id) == {a for a, _ in want}, "anomalies records the stateful rules' alerts too"
    assert late_rows(settings, "stateful_rules") == [], "bronze in one batch: nothing late"
    by_rule = backtest(spark, settings, parse_rules({"rules": rules})).by_rule.set_index("rule_id")
    stateful = by_rule[by_rule.index.isin([r["id"] for r in RULES])]  # drop_d2 watches a device not in this fleet
    assert (stateful.added == 0).all() and (stateful.dropped == 0).all(), "the backtest equals the live run"
    assert stateful.kept.sum() == len(want)
    assert pd.notna(anomalies[anomalies.rule_id == "silent"].kafka_timestamp).sum() == 0, "an absence has no record"


#: in make extended (decision 0063): make test's test_rule_alerts.py has a running query pick up a rule change
@pytest.mark.extended
def test_a_running_stateful_rules_query_picks_up_a_rule_change_mid_stream(spark, settings):
    """Events the watermark released before the change are judged by the old version, the ones it releases after the
    change by the new (a changed rule starts afresh: its memory is kept per version)."""
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic, settings.alerts_topic])
    settings = settings.replace(trigger="1 second")
    jump = {"id": "jump", "kind": "rate", "field": "sensor_freq", "op": ">", "value": 2.0}
    catalog.apply_rules(spark, settings, parse_rules({"rules": [jump]}))

    def deliver(task, rows):  # the fleet sends, ingest lands them in bronze, the running query reads them
        produce_events(settings.kafka_bootstrap_servers, settings.events_topic, rows)
        ingest.start_ingest(spark, settings.replace(trigger="availableNow"))
        if task is not None:
            task.queries[0].processAllAvailable()

    deliver(None, [("d1", 0.0, 0), ("d1", 30.0, 10), ("d1", 0.0, 100)])  # 0 -> 10 s: +3/s
    task = always_on.RunningTask(spark, settings, [registry.query("stateful_rules")]).start()
    try:
        task.queries[0].processAllAvailable()
        deliver(task, [("d1", 0.0, 200)])  # its batch runs with watermark 70 s: 0 and 10 s are judged by v1
        assert task.refresh() == [], "no change, no restart"
        catalog.apply_rules(spark, settings, parse_rules({"rules": [{**jump, "value": 0.5}]}))
        assert task.refresh() == ["stateful_rules"] and task.queries[0].isActive
        deliver(task, [("d1", 10.0, 210), ("d1", 10.0, 400)])  # 200 -> 210 s: +1/s, fires v2 (not v1)
        deliver(task, [("d1", 10.0, 800)])  # its batch runs with watermark 370 s: 100, 200, 210 s judged by v2
    finally:
        stop_queries(spark, task.queries)

    want = {
        (alerts.alert_id("d1", T0_US + 10_000_000, "jump"), "jump", 1),
        (alerts.alert_id("d1", T0_US + 210_000_000, "jump"), "jump", 2),
    }
    assert alerts_on_topic(settings) == want


#: in make extended (decision 0063): make test runs the backtest notebook over the rules in force
@pytest.mark.extended
def test_a_backtest_of_the_rules_in_force_judges_only_the_events_the_live_query_took(spark, settings):
    """An event too late for the live stateful query's watermark is in late_events and fired nothing live; the backtest
    of the rules in force must not judge it either (it used to add an alert the live run never fired). The rules
    also read a field kept through extra_fields: from the topic's JSON through bronze, live and in the backtest."""
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic, settings.alerts_topic])
    low = {"id": "low", "kind": "count", "field": "sensor_freq", "op": "<", "value": 0.0, "at_least": 2}
    sag = {"id": "sag", "kind": "count", "when": {"not": {"field": "voltage", "op": ">=", "value": 180}}, "at_least": 2}
    rules = parse_rules({"rules": [{**low, "within": "1 minute"}, {**sag, "within": "1 minute"}]})  # two within 1 min
    settings = settings.replace(alerts_trigger="availableNow", extra_fields="voltage")
    catalog.apply_rules(spark, settings, rules)

    def deliver(rows, volts):  # the fleet sends, ingest lands them in bronze, the stateful query judges them
        extra = [{"voltage": v} if v is not None else {} for v in volts]
        produce_events(settings.kafka_bootstrap_servers, settings.events_topic, rows, extra)
        ingest.start_ingest(spark, settings)
        stateful_rules.start_stateful_rules(spark, settings)

    # fires low at 55 s, sag at 50 s (170 then 175); watermark 70 s
    deliver([("d1", 5.0, 0), ("d1", -1.0, 50), ("d1", -1.5, 55), ("d1", 5.0, 100)], [170, "175", "n/a", 200])
    deliver([("d1", -2.0, 20), ("d1", -2.5, 25), ("d1", 5.0, 130)], [100, 100, None])  # too late: they would fire
    alerts.start_anomalies(spark, settings)

    late = sorted((d, t) for d, _, t, _ in late_rows(settings, "stateful_rules"))
    assert late == [("d1", T0_US + 20_000_000), ("d1", T0_US + 25_000_000)]
    assert sorted((rule, t) for _, rule, t in alerts_at(settings)) == [
        ("low", T0_US + 55_000_000),
        ("sag", T0_US + 50_000_000),
    ]
    result = backtest(spark, settings, rules)
    assert result.totals == {"live": 2, "candidate": 2, "added": 0, "dropped": 0, "kept": 2}, result


def alerts_at(settings) -> set[tuple]:
    """(alert_id, rule_id, event time in µs) of every alert on the alerts topic."""
    found = set()
    for _, _, _, value in topic_records(settings.kafka_bootstrap_servers, settings.alerts_topic):
        alert = json.loads(value)
        found.add((alert["alert_id"], alert["rule_id"], int(pd.Timestamp(alert["event_time"]).value // 1000)))
    return found
