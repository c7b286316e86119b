"""Kafka read/write through Spark's Kafka connector (``format("kafka")``), locally and on Databricks."""

from __future__ import annotations

import logging
from functools import reduce

from pyspark.sql import DataFrame, SparkSession

from sensorcep.errors import SensorCepError
from sensorcep.runtime import RealTimeUnavailableError, classic_context, get_dbutils, is_databricks, jaas_login_module
from sensorcep.settings import Settings, parse_duration

log = logging.getLogger(__name__)


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


class KafkaClientMissingError(SensorCepError, RuntimeError):
    """Neither confluent-kafka nor a JVM with Kafka's admin client is at hand to ask the brokers."""


def topic_partitions(
    settings: Settings, topic: str, timeout_s: float = 30.0, *, spark: SparkSession | None = None
) -> list[int]:
    """The topic's partition numbers, asked of the brokers (empty if the topic does not exist).

    With confluent-kafka where it is installed (the laptop twin: the ``local`` extra), else with the Kafka admin
    client in the JVM of ``spark``'s classic session: the Databricks Runtime does not ship confluent-kafka, and the
    wheel does not depend on it, while Spark's Kafka connector brings the Java client onto every cluster.
    """
    try:
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415 - a C extension, and only the laptop has it
    except ImportError:
        return _jvm_topic_partitions(spark, settings, topic, timeout_s)
    metadata = AdminClient(client_config(settings)).list_topics(topic, timeout=timeout_s)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return []
    return sorted(found.partitions)


def jvm_client_config(settings: Settings) -> dict[str, str]:
    """The same connection as a Java Kafka client config (Spark's ``kafka.*`` source options without the prefix)."""
    options = {"kafka.bootstrap.servers": settings.kafka_bootstrap_servers, **security_options(settings)}
    return {key.removeprefix("kafka."): value for key, value in options.items()}


def _jvm_topic_partitions(spark, settings: Settings, topic: str, timeout_s: float) -> list[int]:
    """:func:`topic_partitions` through the Kafka admin client in the session's JVM (Databricks shades it as
    ``kafkashaded.org.apache.kafka``)."""
    context = classic_context(spark) if spark is not None else None
    if context is None:
        raise KafkaClientMissingError(
            f"listing the partitions of Kafka topic {topic!r} needs confluent-kafka (pip install 'sensorcep[local]') "
            "or a classic Spark session, whose JVM has Kafka's admin client, and this process has neither"
        )
    jvm = context._gateway.jvm
    package = "kafkashaded.org.apache.kafka" if is_databricks() else "org.apache.kafka"
    properties = jvm.java.util.Properties()
    timeout_ms = str(int(timeout_s * 1000))  # bounds the call and close(), which waits for calls still pending
    for key, value in {**jvm_client_config(settings), "default.api.timeout.ms": timeout_ms}.items():
        properties.setProperty(key, value)
    properties.setProperty("request.timeout.ms", timeout_ms)
    admin = reduce(getattr, f"{package}.clients.admin.AdminClient".split("."), jvm).create(properties)
    try:
        described = (
            admin.describeTopics(jvm.java.util.Collections.singletonList(topic))
            .allTopicNames()
            .get(int(timeout_ms), jvm.java.util.concurrent.TimeUnit.MILLISECONDS)
        )
    except Exception as error:  # noqa: BLE001 - a Py4JJavaError; only a missing topic is an answer
        if "UnknownTopicOrPartition" in str(error):
            return []
        raise
    finally:
        admin.close()
    return sorted(int(info.partition()) for info in described.get(topic).partitions())


#: task slots a real-time alert cluster keeps beyond one per events-topic partition: the progress listener's Delta
#: writes run Spark jobs beside the query's long-running tasks (databricks.yml, ``realtime_workers``)
REALTIME_SPARE_SLOTS = 2


def check_realtime_slots(spark: SparkSession, settings: Settings, topic: str) -> None:
    """Stop a real-time-mode reader of ``topic`` at its start when the cluster has too few task slots, with one
    sentence naming the topic's partitions and the cluster's slots.

    Real-time mode runs one long-running task per source partition, and Databricks does not schedule a real-time query
    without a slot for each. Checked on Databricks' classic compute only: there the session's ``defaultParallelism``
    is the workers' cores; a Spark Connect session has no SparkContext to ask (a logged note, no check), and locally
    the laptop session's parallelism is not its slot count.
    """
    if not is_databricks():
        return
    context = classic_context(spark)
    if context is None:
        log.warning("real-time reader of %r: no SparkContext under Spark Connect, task slots not checked", topic)
        return
    slots = int(context.defaultParallelism)
    try:
        partitions = len(topic_partitions(settings, topic, spark=spark))
    except Exception as error:  # noqa: BLE001 - the query itself then says what is wrong with the brokers
        log.warning("real-time reader of %r: partitions not listed (%s), task slots not checked", topic, error)
        return
    if partitions and partitions + REALTIME_SPARE_SLOTS > slots:
        needed = partitions + REALTIME_SPARE_SLOTS
        raise RealTimeUnavailableError(
            f"real-time mode needs a task slot for each of Kafka topic {topic!r}'s {partitions} partitions plus "
            f"{REALTIME_SPARE_SLOTS} spare, {needed} in all, and this cluster has {slots} task slots: raise "
            f"realtime_workers (the always-on job's realtime_cluster) until workers x cores reaches {needed}, or set "
            "alerts_trigger to an interval."
        )


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
    waits_for_records: bool = False,
) -> DataFrame:
    """Kafka records with Spark's Kafka columns (key, value, topic, partition, offset, timestamp, ...).

    Streams read at most ``max_offsets_per_trigger`` records per micro-batch (0 = no limit; availableNow
    honours it too; a ``realtime`` reader has no batches to size, and real-time mode refuses the option).
    ``waits_for_records`` (ingest): :func:`batch_wait_options`. A
    ``realtime`` reader first checks the cluster's task slots against the topic's partitions
    (:func:`check_realtime_slots`).

    Records lost before they were read (retention, a re-created topic) fail the query (Spark's ``failOnDataLoss``;
    :func:`streaming.explain_failure` says what was lost and how to go on) unless ``accept_data_loss`` is set: then
    the query goes on from the earliest records left, and ``stream_progress.kafka_records_skipped`` counts them.
    """
    topics = topics if isinstance(topics, str) else ",".join(topics)
    if stream and realtime:
        for topic in topics.split(","):
            check_realtime_slots(spark, settings, topic)
    options = {
        "kafka.bootstrap.servers": settings.kafka_bootstrap_servers,
        "subscribe": topics,
        "startingOffsets": starting_offsets,
        "failOnDataLoss": "false" if settings.accept_data_loss else "true",
        **security_options(settings),
    }
    if stream and settings.max_offsets_per_trigger and not realtime:
        options["maxOffsetsPerTrigger"] = str(settings.max_offsets_per_trigger)
    if stream and waits_for_records and not realtime:
        options.update(batch_wait_options(settings))
    reader = spark.readStream if stream else spark.read
    return reader.format("kafka").options(**options).load()


def batch_wait_options(settings: Settings) -> dict[str, str]:
    """The Kafka source's options that hold a micro-batch back until ``min_batch_records`` records wait or
    ``max_batch_delay`` has passed since the last batch (Spark's ``minOffsetsPerTrigger`` and ``maxTriggerDelay``):
    none when the setting is 0 or the trigger runs to the end (availableNow drains what is there, and must not wait)."""
    if not settings.min_batch_records or settings.runs_to_end:
        return {}
    delay_ms = round(parse_duration(settings.max_batch_delay, "max_batch_delay") * 1000)
    return {"minOffsetsPerTrigger": str(settings.min_batch_records), "maxTriggerDelay": f"{delay_ms}ms"}


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
