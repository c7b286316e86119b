"""The kafka_py data source against the real local broker: Spark's options, columns and offsets."""
import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from sensorcep.broker import create_topics, scratch_topics
from sensorcep.kafka import read_kafka, write_kafka
from sensorcep.kafka_source import _ranges, cap_offsets

pytestmark = pytest.mark.integration


def _produce(bootstrap, topic, n, partitions=1):
    create_topics(bootstrap, {topic: partitions})
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, key=f"k{i % 7}".encode(), value=f"v{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def test_scratch_topics_exist_inside_the_block_and_are_gone_after(bootstrap):
    names = ["scratch-a", "scratch-b"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with scratch_topics(bootstrap, names):
        assert set(names) <= set(admin.list_topics(timeout=10).topics)
    assert not set(names) & set(admin.list_topics(timeout=10).topics)


def test_cap_offsets_spreads_the_limit_over_the_backlog():
    start = {"t": {"0": 0, "1": 100}}
    assert cap_offsets(start, {"t": {"0": 300, "1": 200}}, 100) == {"t": {"0": 75, "1": 125}}
    assert cap_offsets(start, {"t": {"0": 10, "1": 110}}, 100) == {"t": {"0": 10, "1": 110}}


def test_ranges_split_to_reach_min_partitions():
    parts = _ranges({"t": {"0": 0}}, {"t": {"0": 10_000}}, min_partitions=2)
    assert [(p.start, p.end) for p in parts] == [(0, 5_000), (5_000, 10_000)]
    assert len(_ranges({"t": {"0": 0}}, {"t": {"0": 10}}, min_partitions=2)) == 1


def test_batch_read_has_sparks_kafka_columns_and_every_record(spark, settings):
    _produce(settings.kafka_bootstrap_servers, settings.events_topic, 500)
    df = read_kafka(spark, settings, settings.events_topic, stream=False)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    rows = df.collect()
    assert sorted(r["value"].decode() for r in rows) == sorted(f"v{i}" for i in range(500))
    assert sorted(r["offset"] for r in rows) == list(range(500))


def test_stream_honours_max_offsets_per_trigger_and_resumes_from_checkpoint(spark, settings):
    _produce(settings.kafka_bootstrap_servers, settings.events_topic, 2_500)
    s = settings.replace(max_offsets_per_trigger=1_000)

    def run():
        q = (read_kafka(spark, s, s.events_topic).writeStream.format("noop")
             .option("checkpointLocation", s.checkpoint_path("kafka_src")).trigger(processingTime="0 seconds").start())
        q.processAllAvailable()
        q.stop()
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    assert run() == [1_000, 1_000, 500]
    _produce(settings.kafka_bootstrap_servers, settings.events_topic, 300)
    assert run() == [300]  # restart: only the new records, nothing re-read


def test_starting_offsets_json_and_latest(spark, settings):
    _produce(settings.kafka_bootstrap_servers, settings.events_topic, 100)
    spec = json.dumps({settings.events_topic: {"0": 40}})
    rows = read_kafka(spark, settings, settings.events_topic, starting_offsets=spec, stream=False).collect()
    assert sorted(r["offset"] for r in rows) == list(range(40, 100))
    assert read_kafka(spark, settings, settings.events_topic, starting_offsets="latest", stream=False).count() == 0


def test_batch_writer_round_trip(spark, settings):
    create_topics(settings.kafka_bootstrap_servers, {settings.alerts_topic: 1})
    df = spark.createDataFrame([("a", "1"), ("b", "2")], "key string, value string")
    write_kafka(df, settings, settings.alerts_topic)
    got = read_kafka(spark, settings, settings.alerts_topic, stream=False).collect()
    assert sorted((r["key"], r["value"]) for r in got) == [(b"a", b"1"), (b"b", b"2")]
