"""Kafka read/write through Spark's Kafka connector (``format("kafka")``), locally and on Databricks."""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame, SparkSession

from sensorcep.runtime import get_dbutils, jaas_login_module
from sensorcep.settings import Settings


def security_options(settings: Settings) -> dict[str, str]:
    """SASL credentials from a secret scope (Databricks) or environment variables (anywhere).

    With ``kafka_secret_scope`` set, keys ``kafka-username`` / ``kafka-password`` are read from it
    (locally: ``<SCOPE>_KAFKA_USERNAME`` / ``<SCOPE>_KAFKA_PASSWORD`` environment variables).
    """
    if not settings.kafka_secret_scope:
        return {}
    secrets = get_dbutils().secrets
    user = secrets.get(settings.kafka_secret_scope, "kafka-username")
    password = secrets.get(settings.kafka_secret_scope, "kafka-password")
    jaas = (
        f"{jaas_login_module('plain.PlainLoginModule')} required "
        f"username={jaas_quote(user)} password={jaas_quote(password)};"
    )
    return {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.jaas.config": jaas}


def jaas_quote(value: str) -> str:
    """A JAAS option value in double quotes; Kafka's JAAS parser reads backslash escapes inside them, so a
    password holding ``"`` or ``\\`` stays one value."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


#: librdkafka's own log, through Python logging: its retry notices (such as "Coordinator load in progress: retrying"
#: while a fresh broker loads its coordinator) stay quiet, its errors show; a failed call reaches its caller anyway
LIBRDKAFKA_LOG = logging.getLogger("sensorcep.librdkafka")
LIBRDKAFKA_LOG.setLevel(logging.ERROR)


def client_config(settings: Settings) -> dict:
    """The same connection as a confluent-kafka client config (simulator, benchmarks, consumers)."""
    conf = {"bootstrap.servers": settings.kafka_bootstrap_servers, "logger": LIBRDKAFKA_LOG}
    if settings.kafka_secret_scope:
        secrets = get_dbutils().secrets
        conf.update(
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.username": secrets.get(settings.kafka_secret_scope, "kafka-username"),
                "sasl.password": secrets.get(settings.kafka_secret_scope, "kafka-password"),
            }
        )
    return conf


def topic_partitions(settings: Settings, topic: str, timeout_s: float = 30.0) -> list[int]:
    """The topic's partition numbers, asked of the brokers (empty if the topic does not exist)."""
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415 - a C extension: loaded only when asked

    metadata = AdminClient(client_config(settings)).list_topics(topic, timeout=timeout_s)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return []
    return sorted(found.partitions)


def last_records(settings: Settings, topic: str, timeout_s: float = 10.0) -> tuple[int, list]:
    """The topic's records so far (the sum of its partitions' end offsets) and the last record of each partition
    (confluent-kafka ``Message`` objects; none for an empty partition)."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415 - a C extension: loaded only when asked

    consumer = Consumer({**client_config(settings), "group.id": "sensorcep-live", "enable.auto.commit": False})
    try:
        total, wanted = 0, []
        for partition in topic_partitions(settings, topic, timeout_s):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s, cached=False
            )
            total += high
            if high > low:
                wanted.append(TopicPartition(topic, partition, high - 1))
        if not wanted:
            return total, []
        consumer.assign(wanted)
        found = [m for m in consumer.consume(len(wanted), timeout=timeout_s) if m.error() is None]
        return total, found
    finally:
        consumer.close()


def read_kafka(
    spark: SparkSession,
    settings: Settings,
    topics: list[str] | str,
    *,
    starting_offsets: str = "earliest",
    stream: bool = True,
    realtime: bool = False,
) -> DataFrame:
    """Kafka records with Spark's Kafka columns (key, value, topic, partition, offset, timestamp, ...).

    Streams read at most ``max_offsets_per_trigger`` records per micro-batch (0 = no limit; availableNow
    honours it too; a ``realtime`` reader has no batches to size, and real-time mode refuses the option).

    Records lost before they were read (retention, a re-created topic) fail the query (Spark's ``failOnDataLoss``;
    :func:`streaming.explain_failure` says what was lost and how to go on) unless ``accept_data_loss`` is set: then
    the query goes on from the earliest records left, and ``stream_progress.kafka_records_skipped`` counts them.
    """
    topics = topics if isinstance(topics, str) else ",".join(topics)
    options = {
        "kafka.bootstrap.servers": settings.kafka_bootstrap_servers,
        "subscribe": topics,
        "startingOffsets": starting_offsets,
        "failOnDataLoss": "false" if settings.accept_data_loss else "true",
        **security_options(settings),
    }
    if stream and settings.max_offsets_per_trigger and not realtime:
        options["maxOffsetsPerTrigger"] = str(settings.max_offsets_per_trigger)
    reader = spark.readStream if stream else spark.read
    return reader.format("kafka").options(**options).load()


def sink_options(settings: Settings, topic: str) -> dict[str, str]:
    """Options of Spark's Kafka sink writing to ``topic`` (streaming ``format("kafka")`` or batch).

    ``linger.ms=0``: a record is sent as soon as it is written, not held back to fill a batch (latency first; the
    alert path writes few records).
    """
    return {
        "kafka.bootstrap.servers": settings.kafka_bootstrap_servers,
        "topic": topic,
        "kafka.linger.ms": "0",
        **security_options(settings),
    }


def write_kafka(df: DataFrame, settings: Settings, topic: str) -> None:
    """Batch-write ``df`` (columns value [, key]) to ``topic``; used inside foreachBatch."""
    (
        df.write.format("kafka")
        .mode("append")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap_servers)
        .options(**security_options(settings))
        .option("topic", topic)
        .save()
    )
