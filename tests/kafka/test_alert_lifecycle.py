"""The alert lifecycle query (transformWithStateInPandas, event time): over controlled micro-batches its transitions
equal the clock-driven oracle whatever the batches, arrival order, re-sent alerts and late rows; live, from the
alerts and acks topics, it writes ``alert_events`` once, escalates once per incident into ``alert_escalations``,
refuses bad acks into quarantine with a reason and keeps late alerts in ``late_events``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from support.oracle import lifecycle_steps, watermarks
from support.profiles import examples
from support.streams import T0, T0_US, delta_frame, late_rows

from sensorcep.local import simulator
from sensorcep.local.broker import create_topics
from sensorcep.pipeline import alert_lifecycle, alerts
from sensorcep.pipeline.streaming import start_query
from sensorcep.rules.lifecycle import Policy

S = 1_000_000
INPUT_SCHEMA = (
    "rule_id string, device_id string, event_time timestamp, kind string, alert_id string, action string, "
    "until_us long, actor string, alert string, sensor_freq double"
)


def inputs_frame(rows: list[tuple]) -> pd.DataFrame:
    """(rule, device, second, kind, alert_id, action, until_s) -> the processor's input rows."""
    frame = pd.DataFrame(
        [
            {"rule_id": r, "device_id": d, "event_time_us": T0_US + t * S, "kind": k, "alert_id": a,
             "action": act, "until_us": None if u is None else T0_US + u * S, "actor": None if k == "alert" else "ops",
             "alert": json.dumps({"alert_id": a}) if k == "alert" else None,
             "sensor_freq": -1.0 if k == "alert" else None}
            for r, d, t, k, a, act, u in rows
        ],
        columns=["rule_id", "device_id", "event_time_us", "kind", "alert_id", "action", "until_us", "actor", "alert",
                 "sensor_freq"],
    )  # fmt: skip
    text = {name: "string" for name in ("rule_id", "device_id", "kind", "alert_id", "action", "actor", "alert")}
    return frame.astype({"until_us": "Int64", "sensor_freq": "float64", **text})


def write_input_batches(folder, batches: list[pd.DataFrame]) -> None:
    import os

    folder.mkdir(parents=True, exist_ok=True)
    for i, batch in enumerate(batches):
        path = folder / f"batch-{i:04d}.parquet"
        out = batch.assign(event_time=pd.to_datetime(batch.event_time_us, unit="us", utc=True)).drop(
            columns="event_time_us"
        )
        out.to_parquet(path, index=False, coerce_timestamps="us")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def run_batches(spark, settings, folder, batches, policy: Policy) -> list[tuple]:
    write_input_batches(folder, batches)
    stream = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(folder))
    timed = stream.withWatermark("event_time", settings.interval("watermark_delay"))
    got: list = []
    query = start_query(
        alert_lifecycle.transitions_of(timed, {"": policy}),
        settings,
        "alert_lifecycle",
        foreach_batch=lambda batch, _: got.extend(batch.collect()),
        trigger="availableNow",
    )
    query.awaitTermination()
    assert query.exception() is None
    return sort_key(
        (r.rule_id, r.device_id, r.incident_id, r.transition, (r.at_us - T0_US) // S, r.cause_id, r.state, r.alerts)
        for r in got
    )


def expected(batches: list[pd.DataFrame], policy: Policy, delay_s: int) -> list[tuple]:
    """The oracle per (rule, device) over the rows the watermark accepted, each record once."""
    marks = watermarks(batches, delay_s * 1000)
    accepted, seen = [], set()
    for k, batch in enumerate(batches):
        for row in batch.astype(object).where(batch.notna(), None).itertuples(index=False):
            record = (row.kind, row.alert_id, row.action, row.until_us)
            late_mark = marks[k - 1] if k > 0 else 0  # Spark's late-row filter: the previous batch's watermark
            if row.event_time_us > late_mark * 1000 and (record, row.event_time_us) not in seen:
                seen.add((record, row.event_time_us))
                accepted.append(row)
    final_s = (marks[-1] * 1000 - T0_US) // S
    by_key: dict[tuple, list] = {}
    for row in accepted:
        until_s = None if row.until_us is None else (int(row.until_us) - T0_US) // S
        inputs = by_key.setdefault((row.rule_id, row.device_id), [])
        inputs.append(((row.event_time_us - T0_US) // S, row.kind, row.alert_id, row.action, until_s))
    out = []
    for (rule, device), inputs in by_key.items():
        steps = lifecycle_steps(inputs, final_s, policy.latch, policy.suppress_us // S, policy.escalate_us // S)
        out += [(rule, device, *step) for step in steps]
    return sorted(out, key=lambda t: tuple("" if v is None else v for v in t))


def sort_key(rows):
    return sorted(rows, key=lambda t: tuple("" if v is None else v for v in t))


def test_fixed_batches_out_of_order_resent_and_late_give_the_oracles_transitions(spark, settings, tmp_path):
    policy = Policy(latch=True, suppress_us=60 * S, escalate_us=120 * S)
    batches = [
        inputs_frame([("r", "d1", 10, "alert", "a1", None, None), ("r", "d1", 5, "alert", "a0", None, None),
                      ("r", "d2", 0, "alert", "b1", None, None)]),  # fmt: skip
        inputs_frame([("r", "d1", 10, "alert", "a1", None, None),  # re-sent (the alerts topic is at least once)
                      ("r", "d2", 40, "ack", "b1", "snooze", 300), ("r", "d1", 60, "ack", "a1", "ack", None)]),
        inputs_frame([("r", "d2", 400, "alert", "b2", None, None), ("r", "d1", 3, "alert", "a8", None, None)]),
        inputs_frame([("r", "d1", 2, "alert", "a9", None, None)]),  # behind the watermark (60 - 30 s): dropped
    ]  # fmt: skip
    got = run_batches(spark, settings, tmp_path / "in", batches, policy)
    assert got == sort_key(expected(batches, policy, settings.watermark_seconds))
    # a8 (3 s) arrived after a0 (5 s) and a1 (10 s), but the watermark had not passed them: it opens the incident
    d1 = [(t[2], t[3], t[4]) for t in got if t[1] == "d1"]
    assert d1 == [("a8", "acked", 60), ("a8", "opened", 3), ("a8", "repeated", 5), ("a8", "repeated", 10)]
    assert "a9" not in {t[5] for t in got}
    assert ("r", "d2", "b1", "unsnoozed", 300, None, "open", 1) in got
    assert ("r", "d2", "b1", "escalated", 300, None, "open", 1) in got, "its deadline (120 s) passed while snoozed"


@st.composite
def input_batches(draw):
    batches = []
    for b in range(draw(st.integers(1, 3))):
        rows = []
        for i in range(draw(st.integers(1, 8))):
            rule, device, second = (
                draw(st.sampled_from(["r1", "r2"])),
                draw(st.sampled_from(["d1", "d6", "d8"])),  # d6 and d8 share a bucket of devices (one key)
                draw(st.integers(0, 300)),
            )
            kind = draw(st.sampled_from(["alert", "alert", "ack", "snooze"]))
            if kind == "alert":
                rows.append((rule, device, second, "alert", f"a{b}{i}", None, None))
            elif kind == "ack":
                rows.append((rule, device, second, "ack", f"a{b}{i}", "ack", None))
            else:
                rows.append((rule, device, second, "ack", f"a{b}{i}", "snooze", second + draw(st.integers(1, 150))))
        batches.append(inputs_frame(rows))
    if not draw(st.booleans()):  # open end or not: an alert much later moves the watermark past every drawn one and its
        batches.append(inputs_frame([("r1", "d2", 1_000, "alert", "z", None, None)]))  # deadlines (the simplest case)
    suppress, escalate = draw(st.sampled_from([20, 90])) * S, draw(st.sampled_from([40, 200])) * S
    return batches, Policy(draw(st.booleans()), suppress, escalate)


def test_property_any_batches_give_the_oracles_transitions(spark, settings, tmp_path):
    runs = iter(range(1000))

    # no shrinking: each example is a streaming query (seconds); a failure prints its whole case
    @hypothesis_settings(
        max_examples=examples(5),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        phases=[Phase.generate],
    )
    @given(case=input_batches())
    def check(case):
        batches, policy = case
        run = next(runs)
        own = settings.replace(base_path=str(tmp_path / f"run{run}"), schema=f"{settings.schema}_{run}")
        got = run_batches(spark, own, tmp_path / f"in{run}", batches, policy)
        assert got == sort_key(expected(batches, policy, own.watermark_seconds))

    check()


def _alert(device: str, seconds: float) -> dict:
    event_us = T0_US + int(seconds * 1e6)
    event_time = pd.Timestamp(event_us, unit="us", tz="UTC").strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"alert_id": alerts.alert_id(device, event_us, "negative_frequency"), "device_id": device,
            "sensor_freq": -1.0, "event_time": event_time, "kafka_timestamp": event_time,
            "rule_id": "negative_frequency", "rule_version": 1, "rule": "sensor_freq < 0"}  # fmt: skip


def _at(seconds: float) -> str:
    return (T0 + pd.Timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ack(alert: dict, seconds: float, **more) -> dict:
    keys = {name: alert[name] for name in ("alert_id", "device_id", "rule_id")}
    return {**keys, "acked_by": "ops", "ack_time": _at(seconds), **more}


def _produce(bootstrap: str, topic: str, values: list, sent_at: dict[int, float] | None = None) -> None:
    stamps = [
        T0 + pd.Timedelta(seconds=sent_at[i])
        if sent_at and i in sent_at
        else pd.Timestamp(v.get("ack_time", v.get("event_time", T0)) if isinstance(v, dict) else T0)
        for i, v in enumerate(values)
    ]
    simulator.produce_records(
        pd.DataFrame(
            {
                "key": [b"k"] * len(values),
                "value": [(json.dumps(v) if isinstance(v, dict) else v).encode() for v in values],
                "timestamp_ms": [int(pd.Timestamp(t).timestamp() * 1000) for t in stamps],
            }
        ),
        bootstrap,
        topic,
    )


#: in make extended (decision 0063): make test runs the lifecycle's writer over fixed and random batches (above), and
#: notebook 03 runs it from the alerts and acks topics
@pytest.mark.extended
def test_live_from_the_topics_events_once_escalations_once_bad_acks_and_alerts_quarantined(spark, settings):
    bootstrap = settings.kafka_bootstrap_servers
    create_topics(bootstrap, [settings.alerts_topic, settings.acks_topic])
    a0, a1, b0, c0, late = _alert("a", 0), _alert("a", 30), _alert("b", 10), _alert("c", 20), _alert("c", 1)
    far = _alert("d", 2_000)
    now = datetime.now(timezone.utc)
    nowhere = {k: v for k, v in _alert("e", 40).items() if k != "device_id"}
    ahead = {**_alert("e", 50), "event_time": (now + timedelta(minutes=40)).isoformat()}  # its Kafka timestamp too
    _produce(
        bootstrap,
        settings.alerts_topic,
        [a0, a1, b0, c0, a1, far, "not json", nowhere, ahead],  # a1 re-sent; the last three are refused
        sent_at={8: (now + timedelta(minutes=38) - T0).total_seconds()},
    )
    _produce(
        bootstrap,
        settings.acks_topic,
        [
            _ack(a1, 120),  # a's incident (a0, a1) acked in time
            _ack(b0, 700),  # after b's escalation (10 + 600 s): closes it, late
            _ack(c0, 60, action="snooze", until=_at(1_800)),  # c snoozed past its deadline
            {"alert_id": far["alert_id"], "acked_by": "old-client", "ack_time": _at(2_000)},  # no device/rule
            _ack(far, 2 * 86_400),  # a client clock 2 days ahead, its Kafka timestamp not
            _ack(far, 2_000, action="mute"),
            "not json",
            _ack(c0, 70, action="snooze", until=1_767_225_600_000),  # epoch milliseconds: read as the year 57,970
            # a client clock 40 minutes ahead, its Kafka timestamps too (38 minutes: the broker takes up to an hour)
            {**_ack(c0, 80), "ack_time": (now + timedelta(minutes=40)).isoformat()},
        ],
        sent_at={4: 2_000, 8: (now + timedelta(minutes=38) - T0).total_seconds()},
    )
    alert_lifecycle.start_alert_lifecycle(spark, settings)
    _produce(bootstrap, settings.alerts_topic, [late])  # behind the watermark (2,000 - 30 s) when it arrives
    alert_lifecycle.start_alert_lifecycle(spark, settings)
    alert_lifecycle.start_alert_lifecycle(spark, settings)  # a run with nothing new adds nothing

    events = delta_frame(settings.table_path("alert_events"))
    story = sorted((e.device_id, e.transition, int((e.at - T0).total_seconds())) for e in events.itertuples())
    assert story == sorted(
        [("a", "opened", 0), ("a", "repeated", 30), ("a", "acked", 120), ("b", "opened", 10), ("b", "escalated", 610),
         ("b", "acked", 700), ("c", "opened", 20), ("c", "snoozed", 60), ("c", "unsnoozed", 1_800),
         ("c", "escalated", 1_800)]
    )  # fmt: skip  # d's alert (2,000 s) waits for the watermark (1,970 s)
    assert not events.event_id.duplicated().any() and events.pages.sum() == 5, "3 opened, 2 escalated"
    escalated = delta_frame(settings.table_path("alert_escalations"))
    assert sorted(escalated.alert_id) == sorted([b0["alert_id"], c0["alert_id"]]), "one row per incident"
    assert set(escalated.reason) == {"not acknowledged within 10 minutes"}
    refused = delta_frame(settings.table_path("quarantine_events"), ["topic", "reason"])
    assert sorted(refused.reason.str.split(" ").str[:3].str.join(" ")) == sorted(
        ["ack names no", "ack_time more than", "ack action is", "ack is not", "a snooze until", "ack_time more than",
         "alert is not", "alert names no", "alert event_time more"]
    )  # fmt: skip
    assert [(d, t) for d, _, t, _ in late_rows(settings, "alert_lifecycle")] == [("c", T0_US + 1_000_000)]
    still = alert_lifecycle.open_alerts(spark, settings)
    assert still.device_id.tolist() == ["c"] and still.state.tolist() == ["open"] and still.alerts.tolist() == [1]
