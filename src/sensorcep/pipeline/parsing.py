"""Validate and parse raw Kafka records into sensor events, with a reason for every rejection.

All in Spark SQL expressions (JVM, no Python UDF). A row is either a valid event (``reason`` is
null) or a quarantine row with the first check it failed; nothing is dropped.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sensorcep.settings import Settings

EVENT_COLUMNS = ["device_id", "sensor_freq", "event_time"]
KAFKA_COORDINATES = ["topic", "partition", "offset", "kafka_timestamp"]
#: a Kafka record's identity: quarantine and duplicate rows are merged on it
RECORD_KEY = ["topic", "partition", "offset"]
#: the event's fields and their short names in the slow path's helper columns
FIELD_ALIASES = [("device_id", "device"), ("sensor_freq", "freq"), ("event_time", "time")]
INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")
NUMBER_PREFIXES = ("TINYINT", "SMALLINT", "INT", "BIGINT", "DECIMAL", "DOUBLE", "FLOAT")


FAST_SCHEMA = "device_id string, sensor_freq double, event_time string, _corrupt string"
_FAST_NAMES = {"device_id", "sensor_freq", "event_time", "_corrupt"}


def fast_schema(extra_fields: list[str]) -> str:
    """:data:`FAST_SCHEMA` and the ``extra_fields`` as strings (:func:`folded_fields`): one parse reads them all."""
    return ", ".join([FAST_SCHEMA, *(f"{name} string" for name in folded_fields(extra_fields))])


def folded_fields(extra_fields: list[str]) -> list[str]:
    """The extra fields the typed parse reads beside the event's own: every one whose name is not one of its fields'
    in any case (such a name is read by ``get_json_object`` alone)."""
    taken = {name.lower() for name in _FAST_NAMES}
    return [name for name in extra_fields if name.lower() not in taken]


#: the ingest clock's granularity in the future bound: the bound changes once a minute, not with every micro-batch
CLOCK_STEP_S = 60


def trusted_clock(kafka_timestamp: Column) -> Column:
    """The latest time a record can truly have been sent: the earlier of its Kafka timestamp and the ingest clock.

    The Kafka timestamp is the producer's clock (``CreateTime``) unless the topic stamps the broker's append time
    (``LogAppendTime``); a gateway whose clock runs ahead moves both its event times and its Kafka timestamps ahead,
    and a record stamped before 1971 (or not at all) has no usable timestamp. The ingest clock bounds both: Spark's
    ``current_timestamp()``, which in a streaming query is the micro-batch's own timestamp, recorded in the offset
    log, so a replayed batch gets the same verdict. It is rounded up to the next whole minute (:data:`CLOCK_STEP_S`).
    In a batch query Spark folds the rounded bound into a constant, so the parse's generated code changes once a
    minute. In a streaming query it does not: the micro-batch's timestamp (``CurrentBatchTimestamp``) is not folded,
    and its value is written into the code, so Spark compiles the parse's stage again every micro-batch (a few tens of
    milliseconds; with the clock made constant in a trial, ingest's throughput stayed within its runs' spread).
    """
    step = CLOCK_STEP_S
    clock = F.timestamp_seconds((F.floor(F.unix_seconds(F.current_timestamp()) / step) + 1) * step)
    stamped = F.when(kafka_timestamp > F.lit("1971-01-01").cast("timestamp"), kafka_timestamp)
    return F.least(stamped, clock)  # least() skips a null: no usable Kafka timestamp, the clock alone


def future_limit(settings: Settings, kafka_timestamp: Column | None = None) -> Column:
    """The latest acceptable event time of a record: :func:`trusted_clock` + ``max_future`` (``kafka_timestamp``: the
    record's Kafka timestamp, by default the column of that name).

    Relative to the record where its Kafka timestamp can be trusted: a record re-read later (a reset checkpoint) gets
    the same verdict unless its timestamp was ahead of the ingest clock when it was first read. A record far ahead of
    both would move every downstream watermark forward and send the rest of the fleet to ``late_events``.

    Added as microseconds, not as an interval: Spark adds a day-time interval through ``java.time`` objects in the
    session's time zone, which showed in a profile of every record's parse; a fixed number of seconds is the same
    instant either way.
    """
    max_future_us = int(settings.max_future_seconds) * 1_000_000
    stamped = F.col("kafka_timestamp") if kafka_timestamp is None else kafka_timestamp
    return F.timestamp_micros(F.unix_micros(trusted_clock(stamped)) + F.lit(max_future_us))


def _may_be_a_number(text: Column) -> Column:
    """Whether Spark could cast ``text`` to a number: only then can it be a JSON number's text.

    ``from_json`` reads a JSON number given as ``device_id`` (a string field) as its text. Spark casts a string to a
    number after trimming it, and a number's text starts with a sign, a digit or a point, or is one of Spark's and
    Java's special values (``inf``, ``Infinity``, ``NaN`` ...): so a first character below ``A`` (whitespace, quotes,
    signs, digits, the point) or an ``i`` or ``n`` in either case. Every other string is surely not a number, and
    skipping the cast for it matters: Spark finds a string is not a number by a ``NumberFormatException`` thrown
    and caught for each record, which cost as much as the JSON parse itself (~0.2 s per 250,000 records, measured
    here in batch mode).
    """
    first = F.substring(text, 1, 1)
    return (first < F.lit("A")) | first.isin("i", "I", "n", "N")


def _integral_or_not_a_number(text: Column) -> Column:
    """``text`` is not a number, or an integer: a JSON float given as ``device_id`` is the wrong type."""
    return text.try_cast("double").isNull() | text.try_cast("bigint").isNotNull()


def seconds_interval(seconds: int) -> Column:
    """A literal interval of whole seconds, built from a validated number (never from a setting's text), that
    Spark can read as a join's time bound."""
    return F.expr(f"INTERVAL {int(seconds)} SECONDS")


def record_columns() -> list[Column]:
    """A Kafka row's record as this project keeps it: key, value, topic, partition, offset, ``kafka_timestamp``."""
    return [F.col(name) for name in ("key", "value", "topic", "partition", "offset")] + [
        F.col("timestamp").alias("kafka_timestamp")
    ]


def _stage(raw: DataFrame, settings: Settings) -> DataFrame:
    """Kafka rows + the typed fast parse (``_j``, ``_t``) and ``_ok``: the fast path vouches for the row."""
    latest = future_limit(settings)
    # NaN and Infinity are not JSON: the exact path calls them invalid JSON, so the fast path must not accept them
    options = {"columnNameOfCorruptRecord": "_corrupt", "allowNonNumericNumbers": "false"}
    fast = F.from_json(F.col("value").cast("string"), fast_schema(settings.extra_field_names), options)
    staged = raw.select(*record_columns(), fast.alias("_j"))
    staged = staged.select("*", F.expr("try_cast(_j.event_time as timestamp)").alias("_t"))
    j = lambda name: F.col(f"_j.{name}")  # noqa: E731
    dev = j("device_id")
    fast_ok = (  # cheap checks only (no regex): anything doubtful takes the exact VARIANT path
        F.col("_j").isNotNull()
        & j("_corrupt").isNull()
        & (F.length(F.trim(dev)) > 0)
        & ~dev.isin("true", "false")
        & ~F.substring(dev, 1, 1).isin("[", "{")
        & (~_may_be_a_number(dev) | _integral_or_not_a_number(dev))
        & j("sensor_freq").isNotNull()
        & ~F.isnan(j("sensor_freq"))
        & (F.abs(j("sensor_freq")) != float("inf"))
        & (F.substring(j("event_time"), 5, 1) == "-")
        & F.col("_t").isNotNull()
        & F.coalesce(F.col("_t") <= latest, F.lit(True))
        & F.expr("is_valid_utf8(value)")
    )
    staged = staged.select("*", fast_ok.alias("_ok"))
    return staged


def parse_events(raw: DataFrame, settings: Settings) -> DataFrame:
    """Kafka rows -> device_id, sensor_freq, event_time, the ``extra_fields``, reason (+ raw value, Kafka coordinates).

    Two paths: a typed ``from_json`` accepts the well-formed majority quickly and conservatively;
    anything it is unsure of is parsed as a VARIANT, whose JSON types give the exact reason.
    """
    staged = _stage(raw, settings)
    latest = future_limit(settings)
    j = lambda name: F.col(f"_j.{name}")  # noqa: E731
    staged = _slow_fields(staged)
    dev_t, freq_t, time_t = F.col("_v_device_t"), F.col("_v_freq_t"), F.col("_v_time_t")
    v_device, v_freq, v_time, v_time_text = F.col("_v_device"), F.col("_v_freq"), F.col("_v_time"), F.col("_v_text")
    missing = lambda t: t.isNull() | (t == "VOID")  # noqa: E731 - absent or JSON null
    slow_reason = (
        F.when(F.col("value").isNull(), F.lit("empty value"))
        .when(~F.expr("is_valid_utf8(value)"), F.lit("value is not valid UTF-8"))
        .when(F.col("_v").isNull(), F.lit("invalid JSON"))
        .when(~F.expr("schema_of_variant(_v)").startswith("OBJECT"), F.lit("JSON value is not an object"))
        .when(missing(dev_t), F.lit("missing field device_id"))
        .when(~((dev_t == "STRING") | dev_t.isin(*INTEGER_TYPES)), F.concat(F.lit("device_id has wrong type "), dev_t))
        .when(F.length(F.trim(v_device)) == 0, F.lit("device_id is empty"))
        .when(missing(freq_t), F.lit("missing field sensor_freq"))
        .when(
            ~F.greatest(*[freq_t.startswith(p) for p in NUMBER_PREFIXES]),
            F.concat(F.lit("sensor_freq has wrong type "), freq_t),
        )
        .when(
            v_freq.isNull() | F.isnan(v_freq) | (F.abs(v_freq) == float("inf")),
            F.lit("sensor_freq is not a finite number"),
        )
        .when(missing(time_t), F.lit("missing field event_time"))
        .when(time_t != "STRING", F.concat(F.lit("event_time has wrong type "), time_t))
        .when(v_time.isNull(), F.concat(F.lit("unparseable event_time "), F.substring(v_time_text, 1, 64)))
        .when(v_time > latest, F.lit(f"event_time more than {settings.max_future} in the future"))
    )
    # an extra field as get_json_object reads it: from the typed parse, whose string field holds the same text for
    # every JSON type (a number's text, an object's JSON); get_json_object parsed the whole record again for each field
    # (a profile of the 20,000 events/s soak: 8% of the executors' time for one field). Where the fast path is unsure
    # of a record (it is most likely rejected), get_json_object still reads it. A field given twice reads as its last
    # value, as the event's own fields do
    text = F.col("value").cast("string")
    folded = folded_fields(settings.extra_field_names)
    extras = [
        (F.when(F.col("_ok"), j(name)).otherwise(F.get_json_object(text, f"$.{name}")) if name in folded
         else F.get_json_object(text, f"$.{name}")).alias(name)
        for name in settings.extra_field_names
    ]  # fmt: skip
    return staged.select(
        F.when(F.col("_ok"), j("device_id")).otherwise(v_device).alias("device_id"),
        F.when(F.col("_ok"), j("sensor_freq")).otherwise(v_freq).alias("sensor_freq"),
        F.when(F.col("_ok"), F.col("_t")).otherwise(v_time).alias("event_time"),
        F.when(F.col("_ok"), F.lit(None).cast("string")).otherwise(slow_reason).alias("reason"),
        "key",
        "value",
        *KAFKA_COORDINATES,
        *extras,
    ).select(  # rejected rows carry no half-parsed fields
        *[F.when(F.col("reason").isNull(), F.col(c)).alias(c) for c in EVENT_COLUMNS + settings.extra_field_names],
        "reason",
        "key",
        "value",
        *KAFKA_COORDINATES,
    )


def parsed_once(parsed: DataFrame) -> DataFrame:
    """``parsed``'s rows behind a one-row generator, so that a filter on them (``reason IS NULL``) stays above the
    parse instead of repeating it: for a query that filters :func:`parse_events`' rows as it parses them.

    Spark 4.1's optimizer pushes a filter through projections by writing out the expressions behind the columns it
    names: under ``valid_events``' ``reason IS NULL``, that was the whole typed parse and its checks again, ~436
    ``from_json`` calls in the plan, each evaluated before the projection parsed the row once more (SPARK-47672;
    Spark 4.2 fixes it with ``spark.sql.optimizer.avoidDoubleFilterEval``). Spark pushes no filter on a generator's
    output below the generator. Measured here in batch mode into ``noop``, 250,000 records: parse and keep the valid
    events 2.1-2.3 s without it, 1.3-1.5 s with it; the parse alone costs the same either way. Ingest does not need
    it: it caches the parsed batch before it filters.
    """
    return parsed.select(F.inline(F.array(F.struct(*[parsed[name] for name in parsed.columns]))))


def _slow_fields(staged: DataFrame) -> DataFrame:
    """+ the exact VARIANT parse (``_v``) and what the reason needs from it, as columns: null for the rows the fast
    path vouched for.

    Parsed once into columns, not spelled out inside the reason: there it was repeated in every branch, and the
    generated code, though never run for a good row, cost about 0.5 s per 250,000 records (a one-off batch-mode
    measurement: parse into ``noop``, 1.3-1.7 s against 1.7-2.4 s).
    """
    staged = staged.select("*", F.expr("try_parse_json(if(_ok, null, cast(value as string)))").alias("_v"))
    field = lambda name, as_type: F.expr(f"variant_get(_v, '$.{name}', '{as_type}')")  # noqa: E731
    staged = staged.select(
        "*",
        *[F.expr(f"schema_of_variant(variant_get(_v, '$.{n}'))").alias(f"_v_{a}_t") for n, a in FIELD_ALIASES],
        field("device_id", "string").alias("_v_device"),
        F.expr("try_variant_get(_v, '$.sensor_freq', 'double')").alias("_v_freq"),
        field("event_time", "string").alias("_v_text"),
    )
    return staged.select("*", F.expr("try_cast(_v_text as timestamp)").alias("_v_time"))


def quarantine_rows(parsed: DataFrame) -> DataFrame:
    """Rejected records with their raw bytes, Kafka coordinates and the reason."""
    return parsed.where(F.col("reason").isNotNull()).select(
        "key",
        F.col("value").alias("raw_value"),
        *KAFKA_COORDINATES,
        "reason",
        F.current_timestamp().alias("quarantined_at"),
        F.to_date("kafka_timestamp").alias("part_date"),
    )
