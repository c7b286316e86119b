"""What one keyed pass over bronze would save: the three queries that read bronze by device, against their plumbing.

    .venv/bin/python benchmarks/shared_pass.py       # 400,000 events, 100,000 a batch; needs the broker: make broker-up

Issue 43 asks whether queries that do one concern each over the same stream and keys belong together. Sampling (02),
device activity and the stateful rules each read ``bronze_events``, put the watermark on it, shuffle it by a key
(a bucket of devices; sampling's default scope: the window) and send every event through
``transformWithStateInPandas`` to a Python processor of their own. One query doing all three would read, shuffle
and send each event once: what it saves is, at most, two queries' plumbing.

So this measures, on one bronze table, each of the three queries alone, and three queries that do only their
plumbing: **read** (bronze as the queries read it, into Spark's ``noop`` sink), **plumbing** (the same read, the
watermark, the shuffle by device bucket and a ``transformWithStateInPandas`` processor that reads its rows and keeps
and emits nothing), and **plumbing with late rows** (that, beside its own input read again, whose late rows go to
``late_events``, as each of the three keeps its late rows: ``sensorcep.pipeline.lateness``). Each is run to the end
(``availableNow``) on a checkpoint of its own, every query once per round in turn in one JVM, the first round
unreported (the JIT compiles the code each query reaches first: decision 0048), and reports Spark's CPU (the JVM, its
Python workers and this process) per million events, each against plumbing's (the baseline, measured in the same
run). The rules are the soak's ``examples`` (the packaged examples of every kind).

The saving of one pass is at most ``2 x plumbing``, and of the pair that shares a key (device activity in the
stateful rules' pass) ``1 x plumbing``, each without the late rows' second read (a merged query would still read its
input a second time, but once, not three times): printed as shares of the three queries' CPU. These queries run alone
over a backlog here, so their core-seconds per event are higher than a running job's (``cost_model.py`` prices
those): compare the shares, not the core-seconds with a soak's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
from harness import (
    STEADY_DEVICES,
    CpuMeter,
    argument_parser,
    batch_stats,
    empty_rewritten,
    produce_backlog,
    read_bronze,
    record,
    run_to_end,
    scratch_run,
)
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from sensorcep.local.simulator import write_devices_table
from sensorcep.observability.monitoring import stop_session
from sensorcep.pipeline import device_activity, ingest, lateness, sampling, stateful_rules, timers
from sensorcep.pipeline.streaming import start_query
from sensorcep.rules import catalog
from sensorcep.rules.model import load_rules, packaged_examples
from sensorcep.runtime import get_spark


class Plumbing(StatefulProcessor):
    """Reads every row it is given (the Arrow batches are turned into pandas frames, as the real processors' are) and
    keeps and emits nothing."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        for _ in rows:
            pass
        return iter([])

    def close(self) -> None:
        pass


def read_only(spark, settings, files: int):
    """Bronze as the three queries read it, into ``noop``."""
    return _to_end(
        start_query(read_bronze(spark, settings, files), settings, "read", sink=("noop", {}), trigger="availableNow")
    )


def plumbing(spark, settings, files: int, late_rows: bool = False):
    """Bronze, the watermark, the shuffle by device bucket, a processor that does nothing, into ``noop``; with
    ``late_rows``, as the three queries run it: beside its input, whose late rows go to ``late_events``
    (:mod:`sensorcep.pipeline.lateness`: the input read a second time)."""
    timed = read_bronze(spark, settings, files).withWatermark("event_time", settings.interval("watermark_delay"))
    stream = (
        timed.select(
            "device_id", "event_time", F.unix_millis("event_time").alias("event_time_ms"), timers.device_bucket()
        )
        .groupBy("device_bucket")
        .transformWithStateInPandas(
            statefulProcessor=Plumbing(), outputStructType="device_id string", outputMode="Append", timeMode="EventTime"
        )
    )
    if late_rows:
        writer = lateness.late_event_writer(settings, "plumbing_late", lambda _rows, _batch_id: None)
        with_late = lateness.with_input(stream, timed)
        return _to_end(start_query(with_late, settings, "plumbing_late", foreach_batch=writer, trigger="availableNow"))
    return _to_end(start_query(stream, settings, "plumbing", sink=("noop", {}), trigger="availableNow"))


def _to_end(query):
    query.awaitTermination()
    return query


#: the registry's name of each real query measured
REGISTERED = {"sampling": "sampling", "device activity": "device_activity", "stateful rules": "stateful_rules"}


def fresh_output(spark, settings, name: str) -> None:
    """Empty the tables a real query rewrites from its input's start: each round's run starts on a new checkpoint."""
    if name in REGISTERED:
        empty_rewritten(spark, settings, REGISTERED[name])


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--devices", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=100_000, help="events per ingest micro-batch (bronze commit)")
    parser.add_argument("--files", type=int, default=4, help="bronze files per micro-batch of every query")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every query; the first is not reported")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds takes at least 2: the first round warms the JVM and is not reported")

    overrides = {"max_offsets_per_trigger": str(args.batch), "extra_fields": "voltage"}
    with scratch_run("shared", ("events", "alerts"), **overrides) as settings:
        produce_backlog(settings, args.events, seed=3, devices=args.devices)
        spark = get_spark()
        ingest.start_ingest(spark, settings)
        write_devices_table(settings, STEADY_DEVICES, seed=1)  # the examples' site-scoped rule reads it
        events = ingest.Tables(spark, settings).read("bronze_events").count()
        catalog.apply_rules(spark, settings, [*load_rules(), *packaged_examples()])
        fields = stateful_rules.extra_fields_read(stateful_rules.stateful_rules(spark, settings))
        queries = {
            "read": lambda s: read_only(spark, s, args.files),
            "plumbing": lambda s: plumbing(spark, s, args.files),
            "plumbing with late rows": lambda s: plumbing(spark, s, args.files, late_rows=True),
            "sampling": lambda s: sampling.start_sampling(spark, s, events=read_bronze(spark, s, args.files)),
            "device activity": lambda s: device_activity.start_device_activity(
                spark, s, events=read_bronze(spark, s, args.files)
            ),
            "stateful rules": lambda s: stateful_rules.start_stateful_rules(
                spark, s, events=read_bronze(spark, s, args.files, fields)
            ),
        }
        print(f"\n{events:,} bronze events from {args.devices:,} devices", flush=True)
        clock = CpuMeter()
        rows = []
        for round_ in range(1, args.rounds + 1):
            for name, run in queries.items():
                own = settings.replace(query_suffix=f"_r{round_}")
                fresh_output(spark, own, name)
                clock.read()
                elapsed, _, batches = run_to_end(lambda run=run, own=own: run(own))
                used = clock.read()
                stats = batch_stats([p["batchDuration"] for p in batches])
                row = {
                    "round": round_,
                    "query": name,
                    "s": elapsed,
                    "batches": stats["batches"],
                    "spark JVM core-s": used["spark JVM"],
                    "python workers core-s": used["python workers"],
                    "driver core-s": used["driver"],
                    "JIT core-s": clock.spark_jvm_threads["JIT compilers"],
                }
                row["core-s per million events"] = (
                    (row["spark JVM core-s"] + row["python workers core-s"] + row["driver core-s"]) / events * 1e6
                )
                rows.append(row)
                print(
                    f"  round {round_} {name:<16} {elapsed:6.1f} s, {stats['batches']:>3} batches, "
                    f"{row['core-s per million events']:6.1f} core-s per million events "
                    f"(JVM {row['spark JVM core-s']:.1f}, Python workers {row['python workers core-s']:.1f}, "
                    f"driver {row['driver core-s']:.1f}, of the JVM the JIT {row['JIT core-s']:.1f})",
                    flush=True,
                )
        stop_session(spark)

    table = pd.DataFrame(rows)
    measured = table[table["round"] > 1].groupby("query")["core-s per million events"].mean()
    figures = {"bronze events": events, "devices": args.devices, "bronze files per batch": args.files}
    figures["rounds reported"] = args.rounds - 1
    for name in queries:
        figures[f"{name} (core-s per million events)"] = measured[name]
    three = measured[["sampling", "device activity", "stateful rules"]].sum()
    figures["the three bronze readers (core-s per million events)"] = three
    figures["at most saved by one pass: 2 x plumbing (core-s per million events)"] = 2 * measured["plumbing"]
    figures["at most saved by one pass, of the three readers' CPU (x)"] = 2 * measured["plumbing"] / three
    # sampling's default key is the window, not a bucket of devices: only the other two can share a device-keyed pass
    figures["saved by device activity in the stateful rules' pass: 1 x plumbing, of the three readers' CPU (x)"] = (
        measured["plumbing"] / three
    )
    # each of the three unions its output with its input, read again, to keep its late rows
    figures["the late rows' second read, each (core-s per million events)"] = (
        measured["plumbing with late rows"] - measured["plumbing"]
    )
    figures["the late rows' second read, the three's, of the three readers' CPU (x)"] = (
        3 * (measured["plumbing with late rows"] - measured["plumbing"]) / three
    )
    print("\n" + "\n".join(f"{k}: {v:,.3f}" if isinstance(v, float) else f"{k}: {v}" for k, v in figures.items()))
    record("shared_pass", figures, table, baseline="plumbing")


if __name__ == "__main__":
    main()
