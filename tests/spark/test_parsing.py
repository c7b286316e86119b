"""Every record is a valid event or a quarantine row with the reason: pinned on a fixed set."""

from datetime import datetime, timedelta

import pytest

from sensorcep.pipeline.ingest import EVENT_FIELDS, valid_events
from sensorcep.pipeline.parsing import parse_events
from sensorcep.settings import Settings

KAFKA_TIME = datetime(2026, 1, 5, 12, 0)
CASES = [
    (b'{"device_id": "377412", "sensor_freq": 44.49, "event_time": "2023-04-12T10:15:03.120Z"}', None),
    (b'{"device_id": 377412, "sensor_freq": -1, "event_time": "2023-04-12 10:15:03"}', None),
    (b'{"device_id": "a", "sensor_freq": 0, "event_time": "2023-04-12T10:15:03+02:00"}', None),
    (b'{"device_id": "a", "sensor_freq": 1.0, "event_time": "2023-04-12T10:15:03Z", "firmware": "1.2"}', None),
    (
        b'{"device_id": true, "sensor_freq": 4.5, "event_time": "2023-04-12T10:15:03Z"}',
        "device_id has wrong type BOOLEAN",
    ),
    (
        b'{"device_id": 1.5, "sensor_freq": 4.5, "event_time": "2023-04-12T10:15:03Z"}',
        "device_id has wrong type DECIMAL(2,1)",
    ),
    # a device_id that only looks like a number is a string; a float is the wrong type; NaN/Infinity are not JSON
    (b'{"device_id": "+inf", "sensor_freq": 4.5, "event_time": "2023-04-12T10:15:03Z"}', None),
    (b'{"device_id": " 7.5", "sensor_freq": 4.5, "event_time": "2023-04-12T10:15:03Z"}', None),
    (
        b'{"device_id": -1.5, "sensor_freq": 4.5, "event_time": "2023-04-12T10:15:03Z"}',
        "device_id has wrong type DECIMAL(2,1)",
    ),
    (
        b'{"device_id": 1.0E10, "sensor_freq": 4.5, "event_time": "2023-04-12T10:15:03Z"}',
        "device_id has wrong type DOUBLE",
    ),
    (b'{"device_id": Infinity, "sensor_freq": 4.5, "event_time": "2023-04-12T10:15:03Z"}', "invalid JSON"),
    (b'{"device_id": "", "sensor_freq": 4.5, "event_time": "2023-04-12T10:15:03Z"}', "device_id is empty"),
    (b'{"device_id": null, "sensor_freq": 4.5, "event_time": "2023-04-12T10:15:03Z"}', "missing field device_id"),
    (
        b'{"device_id": "a", "sensor_freq": "4.5", "event_time": "2023-04-12T10:15:03Z"}',
        "sensor_freq has wrong type STRING",
    ),
    (
        b'{"device_id": "a", "sensor_freq": 1e400, "event_time": "2023-04-12T10:15:03Z"}',
        "sensor_freq is not a finite number",
    ),
    (b'{"device_id": "a", "sensor_freq": NaN, "event_time": "2023-04-12T10:15:03Z"}', "invalid JSON"),
    (b'{"device_id": "a", "event_time": "2023-04-12T10:15:03Z"}', "missing field sensor_freq"),
    (b'{"device_id": "a", "sensor_freq": 4.5, "event_time": "yesterday"}', "unparseable event_time yesterday"),
    (b'{"device_id": "a", "sensor_freq": 4.5, "event_time": 12345}', "event_time has wrong type BIGINT"),
    (b'{"device_id": "a", "sensor_freq": 4.5}', "missing field event_time"),
    (
        b'{"device_id": "a", "sensor_freq": 4.5, "event_time": "2999-01-01T00:00:00Z"}',
        "event_time more than 5 minutes in the future",
    ),
    (b'{"device_id": "a", ', "invalid JSON"),
    (b"[1, 2]", "JSON value is not an object"),
    (b'"text"', "JSON value is not an object"),
    (b"\xff\xfe\x00", "value is not valid UTF-8"),
    (None, "empty value"),
]


@pytest.fixture(scope="module")
def parsed(spark):
    rows = [(None, value, "t", 0, i, KAFKA_TIME) for i, (value, _) in enumerate(CASES)]
    df = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )
    return {r["offset"]: r for r in parse_events(df, Settings()).collect()}


@pytest.mark.parametrize("index", range(len(CASES)), ids=[str(r) for _, r in CASES])
def test_each_record_gets_its_reason(parsed, index):
    assert parsed[index]["reason"] == CASES[index][1]


def test_valid_records_are_typed_and_utc(parsed):
    first, numeric_id, zoned = parsed[0], parsed[1], parsed[2]
    assert (first["device_id"], first["sensor_freq"]) == ("377412", 44.49)
    assert first["event_time"].isoformat() == "2023-04-12T10:15:03.120000"
    assert numeric_id["device_id"] == "377412" and numeric_id["sensor_freq"] == -1.0
    assert zoned["event_time"].isoformat() == "2023-04-12T08:15:03" and zoned["sensor_freq"] == 0.0


def test_a_device_id_that_only_looks_like_a_number_keeps_its_text(parsed):
    """The fast path tries a number cast only on what could be one; these strings are device ids as written."""
    ids = {parsed[i]["device_id"] for i, (value, _) in enumerate(CASES) if value and b'"device_id": "' in value}
    assert {"+inf", " 7.5"} <= ids


def test_future_is_relative_to_the_kafka_timestamp_so_replays_get_the_same_verdict(spark):
    value = b'{"device_id": "a", "sensor_freq": 1.0, "event_time": "2026-01-05T12:10:00Z"}'  # 10 min after KAFKA_TIME
    rows = [(None, value, "t", 0, 0, KAFKA_TIME), (None, value, "t", 0, 1, KAFKA_TIME + timedelta(minutes=8))]
    df = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )
    reasons = {r["offset"]: r["reason"] for r in parse_events(df, Settings()).collect()}
    assert reasons == {0: "event_time more than 5 minutes in the future", 1: None}


def test_the_future_bound_is_inclusive_to_the_microsecond(spark):
    """An event at exactly Kafka time + max_future is accepted; one millisecond later it is not."""
    times = [(KAFKA_TIME + timedelta(minutes=5, milliseconds=ms)).isoformat() + "Z" for ms in (0, 1)]
    values = [f'{{"device_id": "a", "sensor_freq": 1.0, "event_time": "{t}"}}' for t in times]
    rows = [(None, value.encode(), "t", 0, i, KAFKA_TIME) for i, value in enumerate(values)]
    df = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )
    reasons = {r["offset"]: r["reason"] for r in parse_events(df, Settings()).collect()}
    assert reasons == {0: None, 1: "event_time more than 5 minutes in the future"}


def test_a_record_without_a_usable_kafka_timestamp_is_bounded_by_the_ingest_clock(spark):
    """Watermark poisoning: a Kafka timestamp before 1971 (or none) gave no bound, so a far-future event reached
    bronze and moved every downstream watermark forward. The ingest clock bounds it; a past event still passes."""
    future = (datetime.now() + timedelta(days=2)).isoformat() + "Z"
    times = (future, "2026-01-05T11:00:00Z")
    values = [f'{{"device_id": "a", "sensor_freq": 1.0, "event_time": "{t}"}}' for t in times]
    stamps = [datetime(1970, 1, 1), None]
    rows = [(None, v.encode(), "t", 0, i * 2 + j, ts) for i, v in enumerate(values) for j, ts in enumerate(stamps)]
    df = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )
    reasons = {r["offset"]: r["reason"] for r in parse_events(df, Settings()).collect()}
    ahead = "event_time more than 5 minutes in the future"
    assert reasons == {0: ahead, 1: ahead, 2: None, 3: None}


def test_a_gateway_whose_clock_runs_ahead_in_both_times_is_bounded_by_the_ingest_clock(spark):
    """Its event time and its Kafka timestamp agree, a day ahead: the Kafka timestamp alone let it through."""
    ahead = datetime.now() + timedelta(days=1)
    value = f'{{"device_id": "a", "sensor_freq": 1.0, "event_time": "{ahead.isoformat()}Z"}}'.encode()
    df = spark.createDataFrame(
        [(None, value, "t", 0, 0, ahead)],
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp",
    )
    (row,) = parse_events(df, Settings()).collect()
    assert row["reason"] == "event_time more than 5 minutes in the future" and row["event_time"] is None


def test_keeping_only_the_valid_events_parses_each_record_once(spark, parsed):
    """The alert query keeps the valid events by their reason. Spark 4.1 pushes such a filter below the projections it
    names and writes the parse out in it again (SPARK-47672): that plan held the JSON parse 436 times and cost ~0.8 s
    per 250,000 records. The plan holds it once, and the events are the parse's valid ones."""
    rows = [(None, value, "t", 0, i, KAFKA_TIME) for i, (value, _) in enumerate(CASES)]
    df = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )
    events = valid_events(df, Settings())
    assert events._jdf.queryExecution().optimizedPlan().toString().count("from_json(") == 1
    expected = [tuple(r[f] for f in EVENT_FIELDS[:3]) for r in parsed.values() if r["reason"] is None]
    assert sorted(tuple(r)[:3] for r in events.collect()) == sorted(expected)


EXTRA_VALUES = [
    '"1.2"', '"a\\"b\\u00e9"', '""', "230.5", "1.50", "1e3", "-0", "12345678901234567890123", "true", "null",
    '{"a": 1, "b": [1, 2.50]}', '[1, "x", null]',
]  # fmt: skip


def test_extra_fields_read_in_the_one_parse_keep_the_text_get_json_object_gives(spark):
    """Extra fields are read by the typed parse, not by a parse of their own each: every JSON type reads as the text
    ``get_json_object`` gives it (what they were read with before), a field the record lacks is null, a name that is
    ``_corrupt`` (the parse's own helper name) is still read, and a field given twice reads as its last value, as the
    event's own fields do. Only valid events keep them."""
    event = '"device_id": "a", "sensor_freq": 1.0, "event_time": "2023-04-12T10:15:03Z"'
    values = [f'{{{event}, "voltage": {v}, "_corrupt": {v}}}' for v in EXTRA_VALUES]
    values += [f"{{{event}}}", f'{{"voltage": 1, {event}, "voltage": 2}}', '{"device_id": "a", "voltage": 7']
    rows = [(None, v.encode(), "t", 0, i, KAFKA_TIME) for i, v in enumerate(values)]
    df = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )
    settings = Settings(extra_fields="voltage, _corrupt")
    got = {r["offset"]: r for r in parse_events(df, settings).collect()}
    text = df.selectExpr("offset", "get_json_object(cast(value as string), '$.voltage') as v").collect()
    expected = {r["offset"]: r["v"] for r in text}
    for i in range(len(EXTRA_VALUES)):
        assert got[i]["reason"] is None
        assert got[i]["voltage"] == got[i]["_corrupt"] == expected[i], values[i]
    lacking, twice, broken = len(EXTRA_VALUES), len(EXTRA_VALUES) + 1, len(EXTRA_VALUES) + 2
    assert got[lacking]["voltage"] is None and got[lacking]["reason"] is None
    assert got[twice]["voltage"] == "2"
    assert (got[broken]["reason"], got[broken]["voltage"]) == ("invalid JSON", None)
