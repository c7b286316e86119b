"""Spark's Kafka connector against the local Apache Kafka broker, through the project's helpers."""

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from sensorcep.io.kafka import read_kafka, write_kafka
from sensorcep.local.broker import create_topics, scratch_topics


def _produce(bootstrap, topic, n, partitions=2):
    create_topics(bootstrap, {topic: partitions})
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(n):
        p.produce(topic, key=f"k{i % 7}".encode(), value=f"v{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def test_scratch_topics_exist_inside_the_block_and_are_gone_after(bootstrap):
    names = ["scratch-a", "scratch-b"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with scratch_topics(bootstrap, names):
        topics = admin.list_topics(timeout=10).topics
        assert set(names) <= set(topics)
        assert len(topics["scratch-a"].partitions) == 2  # local topics have several partitions
    assert not set(names) & set(admin.list_topics(timeout=10).topics)


def test_batch_read_has_sparks_kafka_columns_and_every_record_of_every_partition(spark, settings):
    _produce(settings.kafka_bootstrap_servers, settings.events_topic, 500)
    df = read_kafka(spark, settings, settings.events_topic, stream=False)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    rows = df.collect()
    assert sorted(r["value"].decode() for r in rows) == sorted(f"v{i}" for i in range(500))
    assert sorted((r["partition"], r["offset"]) for r in rows) == [(p, o) for p in (0, 1) for o in range(250)]


def test_available_now_honours_max_offsets_per_trigger_and_resumes_from_checkpoint(spark, settings):
    _produce(settings.kafka_bootstrap_servers, settings.events_topic, 2_500)
    s = settings.replace(max_offsets_per_trigger=1_000)

    def run():
        q = (
            read_kafka(spark, s, s.events_topic)
            .writeStream.format("noop")
            .option("checkpointLocation", s.checkpoint_path("kafka_src"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    assert run() == [1_000, 1_000, 500]
    _produce(settings.kafka_bootstrap_servers, settings.events_topic, 300)
    assert run() == [300]  # restart: only the new records, nothing re-read


def test_starting_offsets_per_partition_from_json_an_offset_or_the_earliest(spark, settings):
    _produce(settings.kafka_bootstrap_servers, settings.events_topic, 100)
    spec = json.dumps({settings.events_topic: {"0": 40, "1": -2}})  # -2: the partition's earliest record
    rows = read_kafka(spark, settings, settings.events_topic, starting_offsets=spec, stream=False).collect()
    assert sorted(r["offset"] for r in rows if r["partition"] == 0) == list(range(40, 50))
    assert len([r for r in rows if r["partition"] == 1]) == 50


def test_batch_writer_round_trip(spark, settings):
    create_topics(settings.kafka_bootstrap_servers, [settings.alerts_topic])
    df = spark.createDataFrame([("a", "1"), ("b", "2")], "key string, value string")
    write_kafka(df, settings, settings.alerts_topic)
    got = read_kafka(spark, settings, settings.alerts_topic, stream=False).collect()
    assert sorted((r["key"], r["value"]) for r in got) == [(b"a", b"1"), (b"b", b"2")]


def _delete_records_before(bootstrap, topic, partition, offset):
    from confluent_kafka import TopicPartition

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
        future.result(30)


def test_records_deleted_before_they_were_read_stop_the_query_unless_the_loss_is_accepted(spark, settings):
    from support.streams import delta_frame

    from sensorcep.observability import reports
    from sensorcep.pipeline import ingest
    from sensorcep.pipeline.streaming import DataLossError

    bootstrap, topic = settings.kafka_bootstrap_servers, settings.events_topic

    def event(i: int) -> bytes:
        return json.dumps(
            {"device_id": f"d{i}", "sensor_freq": 1.0, "event_time": f"2026-01-05T00:{i // 60:02d}:{i % 60:02d}Z"}
        ).encode()

    create_topics(bootstrap, {topic: 1})
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(100):
        producer.produce(topic, value=event(i))
    assert producer.flush(30) == 0
    ingest.start_ingest(spark, settings)
    for i in range(100, 150):
        producer.produce(topic, value=event(i))
    assert producer.flush(30) == 0
    _delete_records_before(bootstrap, topic, 0, 120)  # records 100-119: gone before ingest read them

    with pytest.raises(
        DataLossError,
        match=r"query ingest: Kafka records were deleted before it read them.*"
        r"accept_data_loss=true",
    ):
        ingest.start_ingest(spark, settings)
    assert len(delta_frame(settings.table_path("bronze_events"))) == 100, "nothing skipped silently"

    ingest.start_ingest(spark, settings.replace(accept_data_loss=True))
    bronze = delta_frame(settings.table_path("bronze_events"))
    assert sorted(bronze.offset) == list(range(100)) + list(range(120, 150))
    progress = reports.read_progress(spark, settings)
    assert progress[progress.query_name == "ingest"].kafka_records_skipped.max() == 20
