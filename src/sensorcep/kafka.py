"""Kafka read/write helpers: Spark's native connector on Databricks, ``kafka_py`` locally."""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from .runtime import get_dbutils, is_databricks, kafka_format
from .settings import Settings


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
    if is_databricks():
        jaas = ("kafkashaded.org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{user}" password="{password}";')
        return {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.jaas.config": jaas}
    return {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": user, "kafka.sasl.password": password}


def client_config(settings: Settings) -> dict[str, str]:
    """The same connection as a confluent-kafka client config (simulator, benchmarks, consumers)."""
    conf = {"bootstrap.servers": settings.kafka_bootstrap_servers}
    conf.update({k[len("kafka."):]: v for k, v in security_options(settings).items() if "jaas" not in k})
    return conf


def read_kafka(spark: SparkSession, settings: Settings, topics: list[str] | str, *,
               starting_offsets: str = "earliest", stream: bool = True, bounded: bool | None = None,
               min_partitions: int | None = None) -> DataFrame:
    """Kafka records with Spark's Kafka columns (key, value, topic, partition, offset, timestamp, ...).

    ``min_partitions`` (local only) splits each Kafka partition's range into that many read tasks
    (default: one per core). ``bounded`` (default: trigger is availableNow) stops a local stream at the offsets the topics
    held when it started, in ``max_offsets_per_trigger`` batches - what availableNow means.
    """
    topics = topics if isinstance(topics, str) else ",".join(topics)
    options = {
        "kafka.bootstrap.servers": settings.kafka_bootstrap_servers,
        "subscribe": topics,
        "startingOffsets": starting_offsets,
        "failOnDataLoss": "false",
        **security_options(settings),
    }
    if not is_databricks():  # local topics have one partition (see broker.create_topics): split reads
        options["minPartitions"] = str(min_partitions or spark.sparkContext.defaultParallelism)
    if stream and settings.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(settings.max_offsets_per_trigger)
    if bounded is None:
        bounded = settings.trigger == "availableNow"
    if stream and bounded and not is_databricks():
        options["stopAtOffsets"] = "latest"
    reader = spark.readStream if stream else spark.read
    return reader.format(kafka_format()).options(**options).load()


def write_kafka(df, settings: Settings, topic: str) -> int | None:
    """Batch-write ``df`` (columns value [, key]) to ``topic``; used inside foreachBatch for small outputs.

    Databricks: Spark's Kafka sink. Locally the driver produces the rows with confluent-kafka: a Python
    data source write plans and commits in fresh Python processes (~0.7 s per call whatever the size),
    too slow for alerts, and the frames written here (alerts, escalations) are small.
    """
    if is_databricks():
        (df.write.format(kafka_format()).mode("append")
         .option("kafka.bootstrap.servers", settings.kafka_bootstrap_servers)
         .options(**security_options(settings))
         .option("topic", topic)
         .save())
        return None
    from .kafka_source import produce_arrow

    table = df.toArrow() if isinstance(df, DataFrame) else df  # a materialized micro-batch is already Arrow
    return produce_arrow(table, client_config(settings), topic)
