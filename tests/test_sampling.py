"""02 sampling: the pure rule, the streamed processor against the pandas oracle, restart, Kafka end to end."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from oracle import late_events, reference_samples
from streams import T0, batch_stream, events, late_rows, oracle_rows, sample_rows, write_batches

from sensorcep.local import simulator
from sensorcep.local.broker import create_topics
from sensorcep.pipeline import ingest, sampling


def roles_by_time(samples: pd.DataFrame) -> dict[float, list[str]]:
    return {
        (t - events(("x", 0, 0)).event_time_us[0]) / 1e6: r
        for t, r in zip(samples.event_time_us, samples.roles, strict=False)
    }


# ---------------------------------------------------------------------------- the pure rule
def test_one_event_is_first_middle_and_last():
    samples = sampling.pick_samples(events(("a", 5.0, 1)))
    assert samples.roles.tolist() == [["first", "middle", "last"]]
    assert samples.is_anomalous.tolist() == [0]


def test_two_events_middle_is_index_one():
    samples = sampling.pick_samples(events(("a", 5.0, 2), ("b", 6.0, 1)))
    assert roles_by_time(samples) == {1.0: ["first"], 2.0: ["middle", "last"]}


def test_ties_in_event_time_are_ordered_by_device_then_freq():
    samples = sampling.pick_samples(events(("b", 1.0, 3), ("a", 9.0, 3), ("c", 7.0, 3)))
    assert samples.device_id.tolist() == ["a", "b", "c"]
    assert samples.roles.tolist() == [["first"], ["middle"], ["last"]]


def test_zero_is_an_ordinary_value_and_negative_is_an_anomaly():
    samples = sampling.pick_samples(events(("a", 0.0, 0), ("b", 0.0, 1), ("c", 3.0, 2), ("d", -0.5, 3), ("e", 4.0, 4)))
    assert roles_by_time(samples) == {0.0: ["first"], 2.0: ["middle"], 3.0: ["anomaly"], 4.0: ["last"]}
    assert samples.set_index("device_id").is_anomalous.to_dict() == {"a": 0, "c": 0, "d": 1, "e": 0}


def test_only_anomalies_every_event_once_with_all_roles():
    samples = sampling.pick_samples(events(("a", -1.0, 0), ("b", -2.0, 1), ("c", -3.0, 2)))
    assert samples.roles.tolist() == [["first", "anomaly"], ["middle", "anomaly"], ["last", "anomaly"]]


def test_duplicates_count_once():
    samples = sampling.pick_samples(events(("a", 1.0, 0), ("a", 1.0, 0), ("b", 2.0, 1), ("c", 3.0, 2)))
    assert samples.device_id.tolist() == ["a", "b", "c"]  # n = 3, so b (index 1) is the middle
    assert samples.roles.tolist() == [["first"], ["middle"], ["last"]]


def test_anomaly_threshold_is_a_parameter():
    samples = sampling.pick_samples(events(("a", 1.0, 0), ("b", 8.0, 1), ("c", 9.0, 2)), anomaly_threshold=8.0)
    assert samples.is_anomalous.tolist() == [1, 0, 0]  # strictly below the threshold


# ---------------------------------------------------------------------------- streamed vs oracle
# Watermark 30 s, windows 60 s sliding 30 s. Times are seconds after T0.
BATCHES = [
    events(("a", 10.0, 0.5), ("b", 0.0, 5), ("c", 12.5, 10), ("a", -3.0, 20), ("b", 8.0, 50)),
    events(
        ("c", 9.0, 60),
        ("a", 11.0, 75.25),
        ("b", 7.0, 75.25),
        ("a", 6.0, 100),
        ("b", 0.0, 5),  # duplicate of an event of the previous batch
        ("c", 4.0, 55),
    ),  # out of order, far above the late-row watermark (0)
    events(
        ("a", 3.0, 110),
        ("b", -1.0, 140),
        ("c", 5.0, 25),  # late but in the watermark: the late-row filter uses the previous batch's (20)
        ("a", 5.0, 10),  # too late: <= 20
        ("b", 5.0, 20),
    ),  # exactly at the late-row watermark: too late
    events(
        ("a", -4.0, 200),
        ("b", -5.0, 201),
        ("c", -6.0, 205),  # a window holding only anomalies
        ("a", 2.0, 300),  # windows holding one event
        ("b", 3.0, 400),
        ("c", 1.0, 401),  # ... and two
        ("a", 8.0, 430),
    ),
    events(("b", 9.0, 510)),  # final watermark 480 = the end of window [420, 480)
]


def _run(spark, settings, tmp_path, batches, **changes):
    settings = settings.replace(**changes)
    folder = tmp_path / "in"
    write_batches(folder, batches)
    sampling.start_sampling(spark, settings, events=batch_stream(spark, folder))
    return settings


@pytest.mark.parametrize(
    "scope, slide", [("window", 30), ("window", 20), ("window", 60), ("device", 30), ("device", 20)]
)
def test_streamed_samples_equal_the_oracle(spark, settings, tmp_path, scope, slide):
    settings = _run(spark, settings, tmp_path, BATCHES, sample_scope=scope, slide_duration=f"{slide} seconds")
    expected = reference_samples(BATCHES, 60, slide, 30, scope)
    assert sample_rows(settings) == oracle_rows(expected)
    assert late_rows(settings, "sampling") == late_events(BATCHES, 30_000), "every dropped event is in late_events"
    assert {r[:2] for r in late_rows(settings, "sampling")} == {("a", 5.0), ("b", 5.0)}
    if (scope, slide) == ("window", 30):  # the semantics the fixed batches are built to show
        sampled_times = {r[4] for r in oracle_rows(expected)}
        assert events(("c", 5.0, 25)).event_time_us[0] in sampled_times, "late-but-in-watermark event sampled"
        assert not any(r[2:5] == ("a", 5.0, events(("a", 5.0, 10)).event_time_us[0]) for r in oracle_rows(expected))
        assert any(r[1] == int(T0.timestamp() * 1000) + 480_000 for r in oracle_rows(expected)), (
            "a window ending exactly at the watermark is emitted"
        )


def test_restart_after_k_batches_equals_an_uninterrupted_run(spark, settings, tmp_path):
    folder = tmp_path / "in"
    write_batches(folder, BATCHES[:3])
    sampling.start_sampling(spark, settings, events=batch_stream(spark, folder))
    after_first_run = sample_rows(settings)
    write_batches(folder, BATCHES[3:], first_index=3)
    sampling.start_sampling(spark, settings, events=batch_stream(spark, folder))  # same checkpoint
    sampling.start_sampling(spark, settings, events=batch_stream(spark, folder))  # nothing new: adds nothing
    assert 0 < len(after_first_run) < len(sample_rows(settings))
    assert sample_rows(settings) == oracle_rows(reference_samples(BATCHES, 60, 30, 30))
    assert late_rows(settings, "sampling") == late_events(BATCHES, 30_000), "late events once, across the restart"


batch_lists = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from("abc"),
            st.sampled_from([-2.0, 0.0, 1.5, 3.0, 7.25]),
            st.integers(0, 400).map(lambda s: s / 2),
        ),
        min_size=0,
        max_size=12,
    ),
    min_size=1,
    max_size=5,
)


@hsettings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batch_lists, scope=st.sampled_from(["window", "device"]), slide=st.sampled_from([20, 30, 60]))
def test_property_any_batches_match_the_oracle(spark, settings, tmp_path_factory, batches, scope, slide):
    frames = [events(*rows) if rows else events(("z", 1.0, 0)).iloc[:0] for rows in batches]
    frames = [f for f in frames if len(f)] or [events(("a", 1.0, 0))]  # a parquet file per non-empty batch
    base = tmp_path_factory.mktemp("prop")  # a base path and schema per example
    example = dict(sample_scope=scope, slide_duration=f"{slide} seconds", base_path=str(base), schema=base.name)
    settings = _run(spark, settings, base, frames, **example)
    assert sample_rows(settings) == oracle_rows(reference_samples(frames, 60, slide, 30, scope))
    assert late_rows(settings, "sampling") == late_events(frames, 30_000)


# ---------------------------------------------------------------------------- Kafka end to end
@pytest.mark.integration
def test_kafka_to_bronze_to_sensor_samples_parses_once_and_twice_adds_nothing(spark, settings):
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic])
    sim = simulator.generate(simulator.SimulationConfig(events=4_000, devices=30, seed=11, start=T0, rate=20))
    simulator.produce(sim, settings.kafka_bootstrap_servers, settings.events_topic)
    ingest.start_ingest(spark, settings)  # the one parse: Kafka -> bronze_events
    query = sampling.start_sampling(spark, settings)  # the medallion: 02 reads bronze as a Delta stream
    first = sample_rows(settings)
    sampling.start_sampling(spark, settings)
    assert sample_rows(settings) == first

    sources = [s["description"] for p in query.recentProgress for s in json.loads(p.json)["sources"]]
    assert sources and all(d.startswith("DeltaSource") and "bronze_events" in d for d in sources)
    plan = sampling.sample_stream(ingest.bronze_event_stream(spark, settings), settings)._jdf.queryExecution()
    assert "from_json" not in plan.toString() and "Kafka" not in plan.toString(), "no second parse, no Kafka"

    # bronze (4 ingest batches) is read in one micro-batch; bad records were quarantined, duplicates dropped by 01
    valid = sim.valid.assign(event_time_us=sim.valid.event_time.dt.tz_convert(None).astype("int64") // 1000)
    assert first == oracle_rows(reference_samples([valid], 60, 30, 30))
    assert any("anomaly" in r[5] for r in first) and len({r[0] for r in first}) > 5
