"""Ingest throughput: events/s from the broker into bronze, next to two baselines on the same topic.

    .venv/bin/python benchmarks/ingest.py --events 1000000

* raw consume: a plain confluent-kafka consumer reading every partition (no parsing, no Spark);
* Spark Kafka -> noop: Spark's Kafka connector reading the topic as an availableNow stream into the
  ``noop`` sink (the floor of any Spark query on this topic);
* ingest: the real 01 query (parse, validate, dedup, bronze + quarantine Delta writes).

All three come from the same run; the ratios are the figures to compare across machines. Spark start-up
is excluded (the session is started before the clock runs). The topic has ``partitions`` partitions.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from harness import (
    argument_parser,
    kafka_consumer,
    produce_backlog,
    read_from_start,
    record,
    run_to_end,
    scratch_run,
    source_offsets,
)

from sensorcep.pipeline import ingest
from sensorcep.runtime import get_spark


def raw_consume_rate(bootstrap: str, topic: str, expected: int) -> float:
    consumer = kafka_consumer(bootstrap, {"receive.message.max.bytes": 1_000_000_000, "fetch.max.bytes": 900_000_000})
    read_from_start(consumer, topic)
    seen, started = 0, time.perf_counter()
    while seen < expected:
        seen += sum(1 for m in consumer.consume(20_000, 5.0) if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    return seen / elapsed


def spark_noop_rate(spark, settings, expected: int) -> tuple[float, list[dict]]:
    """Spark's Kafka source alone: the topic as an availableNow stream into the noop sink, same batch size.
    Its events/s over the whole run, and its micro-batches' progress."""
    from sensorcep.io.kafka import read_kafka

    def run():
        query = (
            read_kafka(spark, settings, settings.events_topic)
            .writeStream.format("noop")
            .option("checkpointLocation", f"{settings.base_path}/checkpoints/noop")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return query

    elapsed, _, batches = run_to_end(run)
    read = sum(p["numInputRows"] for p in batches)
    assert read == expected, f"the noop query read {read:,} of {expected:,} records"
    return read / elapsed, batches


def full_batch_rate(batches: list[dict], batch_size: int) -> float | None:
    """Events/s over a query's full micro-batches after its first (which pays for the JIT and, in ingest, for
    creating the tables): records from each batch's offsets over its ``batchDuration``. None when there are none."""
    steady = [p for p in batches[1:] if records_of(p) >= batch_size // 2]
    if not steady:
        return None
    return sum(records_of(p) for p in steady) / sum(p["batchDuration"] / 1000 for p in steady)


def records_of(progress) -> int:
    """The Kafka records a micro-batch read: its end offsets minus its start offsets."""
    source = progress["sources"][0]
    start, end = source_offsets(source["startOffset"]), source_offsets(source["endOffset"])
    return sum(end[t][p] - start.get(t, {}).get(p, 0) for t in end for p in end[t])


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=250_000, help="max_offsets_per_trigger")
    parser.add_argument(
        "--steps", action="store_true", help="also time each step inside every ingest micro-batch (its foreachBatch)"
    )
    parser.add_argument(
        "--layers",
        action="store_true",
        help="also time the first pass over one batch-sized slice layer by layer (read, JSON, checks, cache), in batch "
        "mode: what each layer adds per record",
    )
    parser.add_argument(
        "--floors",
        action="store_true",
        help="also run, after ingest, four queries on the same topic that each do part of its work: the parse into "
        "noop, the parse with one Delta append per batch (foreachBatch, and Delta's sink; no dedup, no quarantine), "
        "and the records appended unparsed: the ceiling of the ratio; then ingest again on new tables, in a JVM whose "
        "JIT has compiled more of the code by then (ingest against the parse with one append, both ways)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --floors: this many rounds of the floor parse -> append and ingest again, one after the other in "
        "the same JVM, each on new tables; each round's ratio and their mean (the ratio moves by a few hundredths "
        "from run to run)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark conf for this run's session, to try a setting against the defaults (repeatable), e.g. "
        "spark.databricks.delta.properties.defaults.checkpointInterval=100",
    )
    args = parser.parse_args()
    if any("=" not in each for each in args.conf):
        parser.error("--conf takes KEY=VALUE")
    if args.rounds < 1 or (args.rounds > 1 and not args.floors):
        parser.error("--rounds takes a count of at least 1, and more than 1 only with --floors")

    with scratch_run("ingest", max_offsets_per_trigger=str(args.batch)) as settings:
        figures, table = measure(args, settings, settings.events_topic)
    record("ingest", figures, table, baseline="Spark noop")


def measure(args, settings, topic: str) -> tuple[dict, list[dict]]:
    """Produce the topic, run the baselines and ingest on it and print what they did; returns the figures (the
    baselines and ingest as ``... (events/s)``, ``Spark noop`` the baseline) and one row per micro-batch."""
    produce_backlog(settings, args.events, seed=1)

    raw = raw_consume_rate(settings.kafka_bootstrap_servers, topic, args.events)
    event_log = Path(settings.base_path) / "spark-events"  # --steps: how much of each step Spark's jobs took
    confs = tuple(tuple(each.split("=", 1)) for each in args.conf)
    spark = get_spark(extra_conf=(event_log_conf(event_log) if args.steps else ()) + confs)
    noop, noop_batches = spark_noop_rate(spark, settings, args.events)
    steps = time_steps(spark) if args.steps else None
    elapsed, _, batches = run_to_end(lambda: ingest.start_ingest(spark, settings))
    rate = args.events / elapsed
    print(f"\nevents: {args.events:,} in {len(batches)} micro-batches of <= {args.batch:,}")
    print(f"raw confluent-kafka consume : {raw:>12,.0f} events/s  ({settings.partitions} partitions)")
    print(f"Spark Kafka -> noop         : {noop:>12,.0f} events/s")
    print(f"ingest Kafka -> bronze      : {rate:>12,.0f} events/s  ({elapsed:.1f} s)")
    # records per batch from its offsets (numInputRows counts a source row once per scan of the batch)
    steady_noop, steady_ingest = full_batch_rate(noop_batches, args.batch), full_batch_rate(batches, args.batch)
    if steady_noop and steady_ingest:
        print(f"full batches after the first: noop {steady_noop:,.0f} events/s, ingest {steady_ingest:,.0f} events/s")
        print(f"  ingest full batches / noop whole run  : {steady_ingest / noop:.3f}")
        print(f"  ingest full batches / noop full batches: {steady_ingest / steady_noop:.3f}")
    print(f"ratio ingest / raw          : {rate / raw:>12.3f}")
    print(f"ratio ingest / Spark noop   : {rate / noop:>12.3f}")
    figures = {
        "events": args.events,
        "micro-batches": len(batches),
        "max_offsets_per_trigger (events)": args.batch,
        "partitions": settings.partitions,
        "raw consume (events/s)": raw,
        "Spark noop (events/s)": noop,
        "ingest (events/s)": rate,
        "ingest (s)": elapsed,
        "ingest / raw consume (x)": rate / raw,
    }
    if steady_noop and steady_ingest:
        figures["full batches: Spark noop (events/s)"] = steady_noop
        figures["full batches: ingest (events/s)"] = steady_ingest
        figures["ingest full batches / Spark noop whole run (x)"] = steady_ingest / noop
    floors = run_floors(spark, settings) if args.floors else {}
    if floors:
        print("floors, run after ingest on the same topic (what no ingest can beat; events/s, and against noop's):")
        for name, (whole, floor_batches) in floors.items():
            full = full_batch_rate(floor_batches, args.batch)
            against = f", full batches {full:,.0f} ({full / steady_noop:.3f}x)" if full and steady_noop else ""
            print(f"  {name:<32}: whole run {whole:>9,.0f} ({whole / noop:.3f}x){against}")
            figures[f"floor {name} (events/s)"] = whole
            if full:
                figures[f"full batches: floor {name} (events/s)"] = full
    if floors:  # ingest ran in a JVM whose JIT had compiled little of its code yet; the floors after it, warmer
        floor_name = "parse -> append (foreachBatch)"
        ratios = []
        for round_ in range(1, args.rounds + 1):
            if round_ > 1:  # the floor again, then ingest again: each round's ratio from a JVM as warm for both
                here = settings.replace(base_path=f"{settings.base_path}/round{round_}")
                floors[f"{floor_name}, round {round_}"] = run_floors(spark, here, only=floor_name)[floor_name]
            tag = "" if round_ == 1 else f", round {round_}"
            again = settings.replace(
                base_path=f"{settings.base_path}/again{round_}", schema=f"{settings.schema}_again{round_}"
            )
            warm_elapsed, _, warm_batches = run_to_end(lambda again=again: ingest.start_ingest(spark, again))
            floors[f"ingest again, after the floors{tag}"] = (args.events / warm_elapsed, warm_batches)
            print(f"  {'ingest again, after the floors' + tag:<32}: whole run {args.events / warm_elapsed:>9,.0f}")
            figures[f"ingest again, after the floors{tag} (events/s)"] = args.events / warm_elapsed
            floor = full_batch_rate(floors[floor_name + tag][1], args.batch)
            again_full = full_batch_rate(warm_batches, args.batch)
            labels = [("ingest", steady_ingest)] if round_ == 1 else []
            for label, ingest_full in (*labels, ("ingest again", again_full)):
                if ingest_full and floor:
                    figures[f"full batches{tag}: {label} (events/s)"] = ingest_full
                    figures[f"full batches{tag}: {label} / floor {floor_name} (x)"] = ingest_full / floor
                    print(f"  full batches{tag}, {label} / floor parse -> append: {ingest_full / floor:.3f}")
            if again_full and floor:
                ratios.append(again_full / floor)
        if args.rounds > 1 and ratios:
            mean = sum(ratios) / len(ratios)
            figures[f"full batches, mean of {len(ratios)} rounds: ingest again / floor {floor_name} (x)"] = mean
            print(f"  full batches, mean of {len(ratios)} rounds, ingest again / floor parse -> append: {mean:.3f}")
    table = []
    for name, query_batches in (("noop", noop_batches), ("ingest", batches), *((n, b) for n, (_, b) in floors.items())):
        for p in query_batches:
            d = p["durationMs"]
            print(
                f"  {name} batch {p['batchId']:>3}: {p['batchDuration']:>6,} ms  "
                f"(latestOffset {d.get('latestOffset', 0)} ms, addBatch {d.get('addBatch', 0)} ms)"
            )
            table.append(
                {
                    "query": name,
                    "batch": p["batchId"],
                    "batch ms": p["batchDuration"],
                    "latestOffset ms": d.get("latestOffset", 0),
                    "addBatch ms": d.get("addBatch", 0),
                }
            )
    if steps:
        print("inside each micro-batch (s): " + ", ".join(STEPS) + "; and how many classes Spark compiled")
        for i, step in enumerate(steps):
            times = "  ".join(f"{step.get(name, 0.0):6.2f}" for name in STEPS)
            print(f"  batch {i:>3}: {times}  {step['compiled']:>4} compiled")
        in_jobs = job_seconds(event_log)
        print(
            "of which in Spark jobs (s; the rest ran on the driver between jobs: planning, code generation, "
            "Delta's commits, Python):"
        )
        for i, step in enumerate(steps):
            jobs = in_jobs.get(i, {})
            times = "  ".join(f"{jobs.get(name, 0.0):6.2f}" for name in STEPS[:-1])
            spent = sum(jobs.values())
            print(f"  batch {i:>3}: {times}  {spent:6.2f}  ({spent / step['total']:.0%} of the batch)")
            table.append(
                {
                    "query": "ingest, inside the batch",
                    "batch": i,
                    **{f"{name} s": step.get(name, 0.0) for name in STEPS},
                    "compiled classes": step["compiled"],
                    "in Spark jobs s": spent,
                }
            )
    if args.layers:
        records, layered = print_layers(spark, settings, topic, min(args.batch, args.events // 4))  # uneven partitions
        figures["layers: records"] = records
        figures.update({f"layers: {name} (s)": seconds for name, seconds in layered.items()})
    spark.stop()  # before the scratch folder (and the event log in it) is removed
    return figures, table


def run_floors(spark, settings, only: str | None = None) -> dict[str, tuple[float, list[dict]]]:
    """Queries that do part of ingest's work, on the same topic and batch size: the whole-run events/s and the
    micro-batches of each (``only``: that one alone).

    * ``parse -> noop`` parses and validates every record as ingest does, and writes nothing;
    * ``parse -> append (foreachBatch)`` also appends the valid events to a Delta table partitioned like bronze, as
      ingest appends (a batch write in foreachBatch), one commit per batch: no dedup, no quarantine or duplicates;
    * ``parse -> Delta sink`` is the same append through Delta's streaming sink instead;
    * ``no parse -> append`` appends the Kafka records as they come (bytes and coordinates), unparsed, the same way.

    Every ingest that parses this JSON and keeps its events in Delta does at least the second one's work, and every
    ingest that keeps its records in Delta at least the last one's."""
    from pyspark.sql import functions as F

    from sensorcep.io import delta
    from sensorcep.io.kafka import read_kafka
    from sensorcep.pipeline import parsing

    raw = read_kafka(spark, settings, settings.events_topic)
    parsed = parsing.parsed_once(ingest.bronze_stream(raw, settings))  # the filter below must not parse again
    # no ingest_time: a timestamp literal in the parsing code's plan makes Spark compile that code again every batch
    valid = parsed.where(F.col("reason").isNull()).select(
        *ingest.BRONZE_COLUMNS, F.to_date("event_time").alias("part_date")
    )

    def append_to(folder: str, partition_by: list[str]):
        def append(batch, _batch_id):
            delta.write_table(batch, f"{settings.base_path}/{folder}", "append", partition_by)

        return append

    runs = {
        "parse -> noop": parsed.writeStream.format("noop"),
        "parse -> append (foreachBatch)": valid.writeStream.foreachBatch(append_to("floor_append", ["part_date"])),
        "parse -> Delta sink": valid.writeStream.format("delta")
        .partitionBy("part_date")
        .option("path", f"{settings.base_path}/floor_sink"),
        "no parse -> append": raw.writeStream.foreachBatch(append_to("floor_raw", [])),
    }
    rates = {}
    for name, writer in runs.items():
        if only is not None and name != only:
            continue
        checkpoint = f"{settings.base_path}/checkpoints/floor-{len(rates)}"

        def run(writer=writer, checkpoint=checkpoint):
            query = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
            query.awaitTermination()
            return query

        elapsed, _, batches = run_to_end(run)
        rates[name] = sum(records_of(p) for p in batches) / elapsed, batches
    return rates


#: the last layer keeps these fields through ``extra_fields`` (the simulator's events lack them: a parse still looks)
LAYER_EXTRA_FIELDS = "voltage,firmware,site"


def layers(raw, settings) -> list[tuple[str, object]]:
    """The first pass of an ingest micro-batch built up layer by layer: each adds one step to the one before."""
    from pyspark.sql import functions as F

    from sensorcep.pipeline import parsing

    def cached_with_span(frame):
        def run():
            frame.persist()
            try:
                ingest._span(frame)
            finally:
                frame.unpersist()

        return run

    as_text = raw.select(F.col("value").cast("string").alias("text"))
    return [
        ("Kafka read", raw),
        ("+ value as text", as_text),
        ("+ typed JSON parse", as_text.select(F.from_json("text", parsing.FAST_SCHEMA).alias("j"))),
        ("+ the fast path's checks", parsing._stage(raw, settings)),
        ("+ the exact path, the reason", ingest.bronze_stream(raw, settings)),
        ("+ cache and span (ingest's pass 1)", cached_with_span(ingest.bronze_stream(raw, settings))),
        (
            f"+ {len(LAYER_EXTRA_FIELDS.split(','))} extra fields kept",
            cached_with_span(ingest.bronze_stream(raw, settings.replace(extra_fields=LAYER_EXTRA_FIELDS))),
        ),
    ]


def print_layers(spark, settings, topic: str, batch: int, repeats: int = 4) -> tuple[int, dict[str, float]]:
    """Time :func:`layers` over the topic's second ``batch``-sized slice (``batch`` at most a quarter of the topic, so
    that every partition holds two shares even when the keys fill them unevenly), each ``repeats`` times into ``noop``;
    prints the median and what each layer adds per record. Returns the slice's records and the medians (s) by layer."""
    from sensorcep.io.kafka import topic_partitions

    partitions = sorted(topic_partitions(settings, topic))
    share = batch // len(partitions)
    ranges = [{topic: {str(p): share * i for p in partitions}} for i in (1, 2)]
    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps(ranges[0]))
        .option("endingOffsets", json.dumps(ranges[1]))
        .load()
    )
    records = raw.count()
    print(f"the first pass layer by layer, batch mode, {records:,} records (median of {repeats} runs):")
    before, medians = 0.0, {}
    for name, frame in layers(raw, settings):
        run = frame if callable(frame) else lambda f=frame: f.write.format("noop").mode("overwrite").save()
        seconds = []
        for _ in range(repeats):
            started = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - started)
        median = sorted(seconds)[len(seconds) // 2]
        print(f"  {name:<36} {median:6.2f} s  (+{(median - before) / records * 1e6:5.2f} µs per record)")
        before = medians[name] = median
    return records, medians


#: ingest's steps in a micro-batch, as --steps reports them (the ranking: the rest of the batch)
STEPS = [
    "read+parse+cache",
    "append quarantine_events",
    "append duplicate_events",
    "append bronze_events",
    "ranking+other",
    "total",
]


#: the Spark job properties that tie a job to its ingest micro-batch and step (set by --steps' timers)
BATCH_PROPERTY, STEP_PROPERTY = "sensorcep.bench.batch", "sensorcep.bench.step"


def time_steps(spark) -> list[dict]:
    """Wrap ingest's batch steps with timers (a classic session runs foreachBatch in this process): one dict of
    seconds per step for every micro-batch, filled while the query runs, with ``compiled``: the classes Spark generated
    and compiled during the batch (its codegen metric; a class found in Spark's codegen cache is not counted).

    Each step also marks the Spark jobs it runs (local properties, which Spark's event log keeps with every job), so
    :func:`job_seconds` can tell how much of the step its jobs took."""
    batches: list[dict] = []
    compilations = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    context = spark.sparkContext

    def timed(fn, label):
        def run(*args, **kwargs):
            name = label(*args) if callable(label) else label
            outer = context.getLocalProperty(STEP_PROPERTY)
            context.setLocalProperty(STEP_PROPERTY, None if name == "total" else name)  # no step: the ranking
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                batches[-1][name] = batches[-1].get(name, 0.0) + time.perf_counter() - started
                context.setLocalProperty(STEP_PROPERTY, outer)

        return run

    ingest._span = timed(ingest._span, "read+parse+cache")
    ingest.KnownTables.write = timed(ingest.KnownTables.write, lambda _lake, _df, name, *rest: f"append {name}")
    batch_writer = ingest.write_ingest_batch

    def write_ingest_batch(*args, **kwargs):
        write = batch_writer(*args, **kwargs)

        def each(batch, batch_id):
            batches.append({})
            context.setLocalProperty(BATCH_PROPERTY, str(len(batches) - 1))
            compiled = compilations.getCount()
            timed(write, "total")(batch, batch_id)
            done = batches[-1]
            # quarantine's append runs in a thread of its own beside the ranking, and duplicates' beside bronze's: the
            # rest is what this thread did
            beside = ("total", "append quarantine_events", "append duplicate_events")
            done["ranking+other"] = done["total"] - sum(v for k, v in done.items() if k not in beside)
            done["compiled"] = compilations.getCount() - compiled

        each.release = write.release
        return each

    ingest.write_ingest_batch = write_ingest_batch
    return batches


def event_log_conf(folder: Path) -> tuple[tuple[str, str], ...]:
    """A session conf that makes Spark log its events (jobs, with their local properties) as plain JSON lines."""
    folder.mkdir(parents=True, exist_ok=True)
    return (
        ("spark.eventLog.enabled", "true"),
        ("spark.eventLog.dir", folder.as_uri()),
        ("spark.eventLog.rolling.enabled", "false"),
        ("spark.eventLog.compress", "false"),
    )


def job_seconds(event_log: Path) -> dict[int, dict[str, float]]:
    """From Spark's event log: per ingest batch and step, the seconds its Spark jobs ran (submission to completion,
    summed). A job without a step ran in the batch between the timed steps: the ranking and the rest."""
    started, spent = {}, {}
    for path in event_log.iterdir():
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerJobStart":
                properties = event.get("Properties") or {}
                if BATCH_PROPERTY in properties:
                    where = int(properties[BATCH_PROPERTY]), properties.get(STEP_PROPERTY) or "ranking+other"
                    started[event["Job ID"]] = where, event["Submission Time"]
            elif event["Event"] == "SparkListenerJobEnd" and event["Job ID"] in started:
                (batch, step), at = started.pop(event["Job ID"])
                seconds = (event["Completion Time"] - at) / 1000
                steps = spent.setdefault(batch, {})
                steps[step] = steps.get(step, 0.0) + seconds
    return spent


if __name__ == "__main__":
    main()
