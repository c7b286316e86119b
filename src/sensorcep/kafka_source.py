"""A Spark Python Data Source over confluent-kafka that mirrors Spark's own Kafka connector.

Used locally, where Spark's ``spark-sql-kafka`` jar cannot be installed (no Maven). Same option
names (``kafka.bootstrap.servers``, ``subscribe``, ``startingOffsets``, ``endingOffsets``,
``maxOffsetsPerTrigger``, ``failOnDataLoss``, ``topic``; any other ``kafka.*`` option is handed to
librdkafka) and the same columns (key, value, topic, partition, offset, timestamp, timestampType).

Offsets are ``{"topic": {"partition": next_offset}}`` dicts kept in Spark's checkpoint, so a
restarted query resumes where it stopped. The stream reader honours ``maxOffsetsPerTrigger`` itself
(the Python API has no ReadLimit hook), and the extra option ``stopAtOffsets=latest`` bounds a stream
to what the topic held when the query started (the project's ``availableNow`` for capped batches).
"""
from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)
EARLIEST, LATEST = -2, -1
READ_CHUNK = 20_000


class KafkaOptionError(ValueError):
    pass


class BrokerUnavailableError(RuntimeError):
    """The brokers did not answer: the query stops with this message and resumes from its checkpoint on restart."""


class DataLossError(RuntimeError):
    pass


def normalize(options) -> dict:
    """Spark hands options over case-insensitively (lower-cased keys): look them up that way."""
    return {str(k).lower(): v for k, v in dict(options).items()}


def client_config(options: dict) -> dict:
    """``kafka.*`` Spark options -> librdkafka config."""
    conf = {k[len("kafka."):]: v for k, v in normalize(options).items() if k.startswith("kafka.")}
    if "bootstrap.servers" not in conf:
        raise KafkaOptionError("option 'kafka.bootstrap.servers' is required")
    return conf


def _topics(options: dict) -> list[str]:
    topics = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
    if not topics:
        raise KafkaOptionError("option 'subscribe' (comma-separated topic list) is required")
    return topics


def _bool(options: dict, name: str, default: bool) -> bool:
    return str(options.get(name.lower(), str(default))).lower() == "true"


class KafkaRange(InputPartition):
    """Offsets [start, end) of one topic partition: one Spark input partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class _KafkaClient:
    """Broker metadata and range reads, shared by the batch and the stream reader."""

    def __init__(self, options: dict):
        self.options = normalize(options)
        self.conf = client_config(self.options)
        self.topics = _topics(self.options)
        self.fail_on_data_loss = _bool(self.options, "failOnDataLoss", True)
        self._consumer = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_consumer"] = None
        return state

    @property
    def consumer(self):
        from confluent_kafka import Consumer

        if self._consumer is None:
            self._consumer = Consumer(
                {
                    **self.conf,
                    # a group of its own per consumer, like Spark's connector (offsets are never committed)
                    "group.id": f"{self.options.get('groupidprefix', 'spark-kafka-py')}-{uuid.uuid4().hex[:12]}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": False,
                    "auto.offset.reset": "error",  # never jump silently: we re-seek or report loss
                    # the local broker (noida-db 0.2.3) ignores fetch size limits and answers with
                    # everything from the fetch offset on: accept responses up to librdkafka's max
                    "receive.message.max.bytes": 1_000_000_000,
                    "fetch.max.bytes": 900_000_000,
                }
            )
        return self._consumer

    def close(self):
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _unavailable(self, exc: Exception, what: str) -> BrokerUnavailableError:
        return BrokerUnavailableError(
            f"Kafka broker(s) {self.conf['bootstrap.servers']} not reachable while {what} ({exc}). "
            "Nothing was lost: restart the query once the brokers are back and it resumes from its checkpoint.")

    def partitions(self) -> dict[str, list[int]]:
        from confluent_kafka import KafkaException

        try:
            meta = self.consumer.list_topics(timeout=10)
        except KafkaException as exc:
            raise self._unavailable(exc, f"listing topics {', '.join(self.topics)}") from None
        found = {}
        for topic in self.topics:
            t = meta.topics.get(topic)
            if t is None or t.error is not None:
                found[topic] = []
            else:
                found[topic] = sorted(t.partitions)
        return found

    def watermarks(self) -> dict[str, dict[str, tuple[int, int]]]:
        from confluent_kafka import TopicPartition

        out = {}
        for topic, parts in self.partitions().items():
            out[topic] = {}
            for p in parts:
                out[topic][str(p)] = self._offsets(topic, p)
        return out

    def _offsets(self, topic: str, partition: int) -> tuple[int, int]:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            return self.consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
        except KafkaException as exc:
            raise self._unavailable(exc, f"reading the offsets of {topic}-{partition}") from None

    def resolve(self, spec: str, default: str) -> dict:
        """``earliest`` | ``latest`` | JSON per partition -> concrete offsets."""
        spec = (spec or default).strip()
        marks = self.watermarks()
        if spec in ("earliest", "latest"):
            pick = 0 if spec == "earliest" else 1
            return {t: {p: lh[pick] for p, lh in parts.items()} for t, parts in marks.items()}
        try:
            wanted = json.loads(spec)
        except json.JSONDecodeError:
            raise KafkaOptionError(f"offsets must be 'earliest', 'latest' or JSON, not {spec!r}") from None
        out = {}
        for topic, parts in marks.items():
            out[topic] = {}
            for p, (low, high) in parts.items():
                value = int(wanted.get(topic, {}).get(p, EARLIEST))
                out[topic][p] = low if value == EARLIEST else high if value == LATEST else value
        return out

    def read_range(self, part: KafkaRange) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import TopicPartition, KafkaException

        if part.end <= part.start:
            return
        consumer = self.consumer
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        position, first = part.start, True
        empty_polls = resets = 0
        try:
            while position < part.end:
                msgs = consumer.consume(min(READ_CHUNK, part.end - position), timeout=1.0)
                if not msgs:
                    empty_polls += 1
                    low, high = self._offsets(part.topic, part.partition)
                    if high <= position or empty_polls > 30:
                        self._lost(part, position, f"broker has no offsets beyond {high}")
                        return
                    continue
                empty_polls = 0
                keys, values, offsets, stamps, types = [], [], [], [], []
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.fatal():
                            raise KafkaException(err)
                        if err.code() in (err._AUTO_OFFSET_RESET, err.OFFSET_OUT_OF_RANGE):
                            resets += 1
                            low, high = self._offsets(part.topic, part.partition)
                            if resets > 20 or not low <= position < high:
                                self._lost(part, position, f"broker holds [{low}, {high}) ({err.str()})")
                                return
                            # the local broker sometimes answers a valid offset with out-of-range: re-seek
                            consumer.assign([TopicPartition(part.topic, part.partition, position)])
                            break
                        log.warning("Kafka client: %s (retrying)", err)  # e.g. coordinator lookups
                        continue
                    off = m.offset()
                    if first and off > part.start:
                        self._lost(part, part.start, f"first available offset is {off}")
                    first = False
                    if off >= part.end:
                        position = part.end
                        break
                    ts_type, ts = m.timestamp()
                    keys.append(m.key())
                    values.append(m.value())
                    offsets.append(off)
                    stamps.append(ts * 1000)
                    types.append(max(ts_type - 1, 0))
                    position = off + 1
                if offsets:
                    n = len(offsets)
                    yield pa.RecordBatch.from_arrays(
                        [
                            pa.array(keys, pa.binary()),
                            pa.array(values, pa.binary()),
                            pa.array([part.topic] * n, pa.string()),
                            pa.array([part.partition] * n, pa.int32()),
                            pa.array(offsets, pa.int64()),
                            pa.array(stamps, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                            pa.array(types, pa.int32()),
                        ],
                        schema=ARROW_SCHEMA,
                    )
        finally:
            self.close()

    def _lost(self, part: KafkaRange, offset: int, why: str) -> None:
        message = (
            f"Kafka data loss in {part.topic}-{part.partition}: wanted offsets [{offset}, {part.end}), {why}. "
            "Set failOnDataLoss=false to skip the missing range."
        )
        if self.fail_on_data_loss:
            raise DataLossError(message)
        log.warning(message)


def _ranges(start: dict, end: dict, min_partitions: int = 1) -> list[KafkaRange]:
    """Offset ranges per topic partition, split (like Spark's ``minPartitions``) so that at least
    ``min_partitions`` Spark tasks share the work."""
    parts = []
    for topic, ends in end.items():
        for p, e in ends.items():
            s = start.get(topic, {}).get(p, 0)
            if e > s:
                parts.append((topic, int(p), int(s), int(e)))
    total = sum(e - s for _, _, s, e in parts)
    out = []
    for topic, p, s, e in parts:
        pieces = max(1, min(round(min_partitions * (e - s) / total), (e - s) // 1_000)) if total else 1
        bounds = [s + (e - s) * i // pieces for i in range(pieces + 1)]
        out += [KafkaRange(topic, p, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
    return out


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict):
        self.client = _KafkaClient(options)
        options = self.client.options
        self.max_per_trigger = int(options.get("maxoffsetspertrigger", 0) or 0)
        self.min_partitions = int(options.get("minpartitions", 1) or 1)
        self.stop_at = None
        if options.get("stopatoffsets", "").strip() == "latest":
            self.stop_at = {t: {p: h for p, (l, h) in parts.items()} for t, parts in self.client.watermarks().items()}
        self._initial = None
        self._cursor = None  # end offset of the last batch Spark planned (or saw in the checkpoint)

    def initialOffset(self) -> dict:
        if self._initial is None:
            self._initial = self.client.resolve(self.client.options.get("startingoffsets", ""), "latest")
        return self._initial

    def latestOffset(self) -> dict:
        marks = self.client.watermarks()
        latest = {t: {p: h for p, (l, h) in parts.items()} for t, parts in marks.items()}
        if self.stop_at is not None:
            latest = {t: {p: min(h, self.stop_at.get(t, {}).get(p, 0)) for p, h in parts.items()} for t, parts in latest.items()}
        cursor = self._cursor if self._cursor is not None else json.loads(json.dumps(self.initialOffset()))
        # partitions that appeared after the start begin at their earliest offset
        for t, parts in marks.items():
            for p, (low, _) in parts.items():
                cursor.setdefault(t, {}).setdefault(p, low)
        for t, parts in latest.items():  # never move backwards
            for p, h in parts.items():
                parts[p] = max(h, cursor[t][p])
        if self.max_per_trigger > 0:
            latest = cap_offsets(cursor, latest, self.max_per_trigger)
        return latest

    def partitions(self, start: dict, end: dict):
        self._cursor = end
        return _ranges(start, end, self.min_partitions)

    def read(self, partition: KafkaRange):
        return self.client.read_range(partition)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        self.client.close()


def cap_offsets(start: dict, latest: dict, limit: int) -> dict:
    """Spread ``limit`` offsets over partitions in proportion to their backlog (like Spark's connector)."""
    backlog = {(t, p): max(h - start.get(t, {}).get(p, h), 0) for t, parts in latest.items() for p, h in parts.items()}
    total = sum(backlog.values())
    if total <= limit:
        return latest
    capped = {t: dict(parts) for t, parts in latest.items()}
    for (t, p), lag in backlog.items():
        take = int(lag * limit / total) if lag else 0
        if lag and take == 0:
            take = 1
        capped[t][p] = start.get(t, {}).get(p, 0) + take
    return capped


class KafkaBatchReader(DataSourceReader):
    def __init__(self, options: dict):
        self.client = _KafkaClient(options)
        start = self.client.resolve(self.client.options.get("startingoffsets", ""), "earliest")
        end = self.client.resolve(self.client.options.get("endingoffsets", ""), "latest")
        self.client.close()
        self.ranges = _ranges(start, end, int(self.client.options.get("minpartitions", 1) or 1))

    def partitions(self):
        return self.ranges or [KafkaRange("", 0, 0, 0)]

    def read(self, partition: KafkaRange):
        return self.client.read_range(partition)


class _ProducerMixin:
    def _setup(self, options: dict, schema: StructType):
        self.conf = client_config(options)
        self.topic = normalize(options).get("topic")
        names = schema.fieldNames()
        if "value" not in names:
            raise KafkaOptionError("a Kafka sink needs a 'value' column (string or binary)")
        if not self.topic and "topic" not in names:
            raise KafkaOptionError("set option 'topic' or provide a 'topic' column")

    def _produce(self, batches) -> "KafkaCommit":
        return KafkaCommit(produce_arrow(batches, self.conf, self.topic))


def produce_arrow(batches, conf: dict, topic: str | None) -> int:
    """Produce Arrow record batches / a table (value [, key] [, topic]) and wait for every ack."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"linger.ms": 5, "acks": "all", **conf})  # at least once; see simulator.produce
    errors: list = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    count = 0
    for batch in batches.to_batches() if hasattr(batches, "to_batches") else batches:
        cols = batch.to_pydict()
        values = cols["value"]
        keys = cols.get("key") or [None] * len(values)
        topics = cols.get("topic") if not topic else None
        for i, value in enumerate(values):
            key = keys[i]
            while True:
                try:
                    producer.produce(
                        topics[i] if topics else topic,
                        value=value.encode() if isinstance(value, str) else value,
                        key=key.encode() if isinstance(key, str) else key,
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            count += 1
        producer.poll(0)
    remaining = producer.flush(60)
    if errors or remaining:
        raise KafkaException(errors[0] if errors else f"{remaining} messages not delivered in 60 s")
    return count


@dataclass
class KafkaCommit(WriterCommitMessage):
    rows: int


class KafkaStreamWriter(_ProducerMixin, DataSourceStreamArrowWriter):
    def __init__(self, options: dict, schema: StructType):
        self._setup(options, schema)

    def write(self, iterator):
        return self._produce(iterator)

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass


class KafkaBatchWriter(_ProducerMixin, DataSourceArrowWriter):
    def __init__(self, options: dict, schema: StructType):
        self._setup(options, schema)

    def write(self, iterator):
        return self._produce(iterator)


class KafkaDataSource(DataSource):
    """``spark.readStream.format("kafka_py")`` - see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "kafka_py"

    def schema(self):
        return KAFKA_SCHEMA

    def reader(self, schema):
        return KafkaBatchReader(dict(self.options))

    def streamReader(self, schema):
        return KafkaStreamReader(dict(self.options))

    def writer(self, schema, overwrite):
        return KafkaBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema, overwrite):
        return KafkaStreamWriter(dict(self.options), schema)
