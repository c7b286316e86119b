"""Bad input and schema evolution at the ingest and sampling queries, through the real broker into real Delta.

Every record is either a valid event in bronze or a quarantine row with a reason (or a counted duplicate of a
valid event), the counts add up to what was produced, and the queries keep running.
"""

import json
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from support.profiles import examples
from support.streams import delta_frame, topic_records

from sensorcep.io import delta
from sensorcep.local.broker import create_topics
from sensorcep.local.simulator import produce_records
from sensorcep.pipeline import ingest, sampling

NOW = datetime(2026, 4, 1, 12, 0, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)

_text = st.text(max_size=12)
_times = st.one_of(
    st.datetimes(min_value=datetime(2026, 4, 1, 11, 0), max_value=datetime(2026, 4, 1, 12, 0)).map(
        lambda t: t.isoformat(timespec="milliseconds") + "Z"
    ),
    st.sampled_from(
        [
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59Z",
            "2026-04-09T12:00:00Z",
            "yesterday",
            "",
            "2026-13-45T99:00:00Z",
            "1700000000",
        ]
    ),
)
_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**20), 10**20),
    _text,
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
_event = st.fixed_dictionaries(
    {},
    optional={
        "device_id": st.one_of(st.text(min_size=1, max_size=8), st.integers(0, 10**6), _values),
        "sensor_freq": _values,
        "event_time": st.one_of(_times, _values),
        "firmware": _text,
        "huge": st.just("x" * 200_000),
        "extra": st.dictionaries(_text, _values, max_size=2),
    },
)


def _json(event: dict) -> bytes:
    # NaN / Infinity are not JSON: Python writes them anyway, exactly the kind of input producers send
    return json.dumps(event, allow_nan=True).encode()


_record = st.one_of(
    _event.map(_json),  # mostly structured, often wrong
    _event.map(_json).map(lambda b: b[: max(1, len(b) // 2)]),  # truncated JSON
    st.binary(max_size=64),  # arbitrary bytes, often not UTF-8
    st.sampled_from([b"", b"null", b"[]", b'"text"', b"\xff\xfe{}", b'{"device_id": "d1"}']),
)
_valid = st.builds(  # guaranteed valid events: every example ends with one, so it exercises the good path too
    lambda d, f, s: _json({"device_id": d, "sensor_freq": f, "event_time": (NOW - timedelta(seconds=s)).isoformat()}),
    st.sampled_from(["d1", "d2", "d3"]),
    st.floats(-5, 60, allow_nan=False),
    st.integers(0, 600),
)


@pytest.fixture(scope="module")
def bad_input(spark, tmp_path_factory, bootstrap):
    from sensorcep.settings import Settings

    settings = Settings(
        kafka_bootstrap_servers=bootstrap,
        base_path=str(tmp_path_factory.mktemp("bad-input")),
        schema="bad_input",
        events_topic="bad-input-events",
        max_offsets_per_trigger=200,
    )
    create_topics(bootstrap, [settings.events_topic])
    return {"settings": settings, "produced": 0}


@hsettings(
    max_examples=examples(6),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(records=st.tuples(st.lists(st.one_of(_record, _valid), max_size=39), _valid).map(lambda r: [*r[0], r[1]]))
def test_every_record_is_an_event_or_a_quarantine_row_and_the_stream_survives(spark, bad_input, records):
    settings = bad_input["settings"]
    frame = pd.DataFrame({"key": [None] * len(records), "value": records, "timestamp_ms": [NOW_MS] * len(records)})
    produce_records(frame, settings.kafka_bootstrap_servers, settings.events_topic)
    bad_input["produced"] += len(records)

    ingest.start_ingest(spark, settings)  # resumes from its checkpoint: exactly this example's records are new
    sampling.start_sampling(spark, settings)  # the stateful consumer of the same topic keeps running too

    bronze = (
        delta_frame(settings.table_path("bronze_events"), ["device_id", "event_time", "partition", "offset"])
        if delta.table_exists(settings.table_path("bronze_events"), spark)
        else pd.DataFrame(columns=["partition", "offset"])
    )
    quarantine = (
        delta_frame(settings.table_path("quarantine_events"), ["partition", "offset", "reason"])
        if delta.table_exists(settings.table_path("quarantine_events"), spark)
        else pd.DataFrame(columns=["partition", "offset", "reason"])
    )
    assert quarantine.reason.notna().all() and (quarantine.reason.str.len() > 0).all()
    reasons = ingest.quarantine_reasons(spark, settings)  # what 01 and the demo summary show
    assert reasons["count"].sum() == len(quarantine) and reasons["count"].is_monotonic_decreasing
    in_bronze = set(zip(bronze.partition, bronze.offset, strict=False))
    in_quarantine = set(zip(quarantine.partition, quarantine.offset, strict=False))
    assert not in_bronze & in_quarantine, "a record is either an event or quarantined"
    duplicates = len(bronze) and int(bronze.duplicated(["device_id", "event_time"]).sum())
    assert duplicates == 0
    produced = {
        (partition, offset): value
        for partition, offset, _, value in topic_records(settings.kafka_bootstrap_servers, settings.events_topic)
    }
    assert len(produced) == bad_input["produced"]
    seen = in_bronze | in_quarantine
    missing = set(produced) - seen
    assert seen <= set(produced)
    if missing:  # what is neither must be a duplicate (device_id, event_time) of a valid event in bronze
        keys = set(zip(bronze.device_id, pd.to_datetime(bronze.event_time, utc=True), strict=False))
        for offset in missing:
            event = json.loads(produced[offset])
            assert (
                str(event["device_id"]),
                pd.Timestamp(event["event_time"], tz="UTC")
                if pd.Timestamp(event["event_time"]).tzinfo is None
                else pd.Timestamp(event["event_time"]).tz_convert("UTC"),
            ) in keys, event


def test_a_new_optional_field_is_merged_into_bronze_and_can_go_away_again(spark, settings):
    from sensorcep.settings import Settings

    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic])
    path = settings.table_path("bronze_events")

    def produce(events, start):
        values = [_json(e) for e in events]
        produce_records(
            pd.DataFrame({"key": None, "value": values, "timestamp_ms": NOW_MS}),
            settings.kafka_bootstrap_servers,
            settings.events_topic,
        )

    def event(i, **extra):
        return {"device_id": f"d{i}", "sensor_freq": float(i), "event_time": f"2026-04-01T11:00:{i:02d}Z", **extra}

    produce([event(i) for i in range(0, 5)], 0)
    ingest.start_ingest(spark, settings)
    v1_columns = delta.read_table(spark, path).columns
    assert "firmware" not in v1_columns

    evolved = settings.replace(extra_fields="firmware")
    produce([event(i, firmware=f"1.{i}") for i in range(5, 10)], 5)
    ingest.start_ingest(spark, evolved)  # same checkpoint, one more column
    produce([event(i) for i in range(10, 15)], 10)  # the field disappears again
    ingest.start_ingest(spark, evolved)

    bronze = delta_frame(path).sort_values("device_id", key=lambda d: d.str[1:].astype(int))
    assert list(bronze.firmware) == [None] * 5 + [f"1.{i}" for i in range(5, 10)] + [None] * 5
    old_reader = delta_frame(path, v1_columns)  # an existing reader of the v1 columns is unaffected
    assert len(old_reader) == 15 and list(old_reader.columns) == v1_columns
    assert len(delta_frame(path, version=0)) == 0  # created up front, empty, before ingest's first append
    assert len(delta_frame(path, version=1)) == 5  # and time travel to the first append still reads
    assert delta.read_table(spark, path).where("firmware is not null").count() == 5
    assert Settings.from_mapping({"extra_fields": "firmware, build"}).extra_field_names == ["firmware", "build"]
