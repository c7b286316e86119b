"""What the always-on job burns while the fleet is quiet: every query of every always-on task running, a trickle of
events arriving, the CPU over a window. Three configurations one after another, in one run on the same machine:

* ``every query at trigger``: every micro-batch query at ``--trigger`` (``records_trigger`` empty, the job until
  records_trigger existed);
* ``tables at records_trigger``: sampling, device activity and anomalies (their output is tables nobody waits on) at
  ``--records-trigger``, the rest at ``--trigger`` (decision 0029);
* ``ingest waits while quiet``: the same, and ingest starts a micro-batch only once ``--min-batch-records`` records wait
  or ``--max-batch-delay`` has passed (``min_batch_records``, ``max_batch_delay``), as the bundle deploys it: the
  queries behind bronze follow ingest's commits.

    make broker-up
    .venv/bin/python benchmarks/idle_cost.py                       # ~12 minutes
    .venv/bin/python benchmarks/idle_cost.py --trigger "5 seconds" --idle-seconds 60

CPU is that of the Spark JVM, its Python workers and this driver (psutil), read after ``--warmup`` seconds (the
queries' first batches and Python workers are start-up, not idling) and again ``--idle-seconds`` later; the producer
and the broker are not counted. Figures: each configuration's cores and core-seconds per ``--trigger`` round, and its
ratio to the first; of that, what the JVM's JIT compiler threads used (a JVM that has run for minutes is still
compiling Spark's code: a cost that fades, which a job running for days does not pay); a table of each query's
micro-batches in the window (triggers that ran a batch) and their median duration.
"""

from __future__ import annotations

import statistics

from harness import (
    CpuMeter,
    always_on_window,
    argument_parser,
    progress,
    record,
    scratch_run,
    stateful_rule_set,
)

from sensorcep.observability.monitoring import stop_session
from sensorcep.rules import catalog
from sensorcep.rules.model import load_rules
from sensorcep.runtime import get_spark
from sensorcep.settings import parse_duration


def idle(spark, settings, args, clock: CpuMeter) -> tuple[float, float, list[dict]]:
    """Every always-on task running while a trickle arrives: the cores they used over the window, of them the Spark
    JVM's JIT compilers' (HotSpot's ``C1``/``C2 CompilerThread``: over the same window, not the start before it, which
    compiles most), and each query's batches in it."""
    cpu, running, since = always_on_window(spark, settings, args.trickle, args.warmup, args.idle_seconds, clock)
    jit = clock.spark_jvm_thread_cores()["JIT compilers"]
    rows = []
    for query in running:
        reports = progress(query, since)
        reports = [p for p in reports if "addBatch" in p["durationMs"]]  # a trigger that found nothing ran no batch
        durations = [p["batchDuration"] for p in reports]
        rows.append(
            {
                "query": query.name,
                "batches": len(reports),
                "median batch ms": statistics.median(durations) if durations else 0,
            }
        )
    return cpu / args.idle_seconds, jit, rows


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--trigger", default="10 seconds", help="the micro-batch queries' trigger (the bundle's)")
    parser.add_argument("--records-trigger", default="1 minute", help="the table-only queries' trigger (the bundle's)")
    parser.add_argument("--alerts-trigger", default="realtime", help="the alert query's trigger (the bundle's)")
    parser.add_argument("--min-batch-records", type=int, default=10_000, help="ingest's wait (the bundle's)")
    parser.add_argument("--max-batch-delay", default="1 minute", help="ingest's longest wait (the bundle's)")
    parser.add_argument("--trickle", type=int, default=20, help="events/s while measuring")
    parser.add_argument("--warmup", type=int, default=40, help="seconds before the window opens")
    parser.add_argument("--idle-seconds", type=int, default=120, help="how long the window measures")
    args = parser.parse_args()
    if parse_duration(args.idle_seconds) < max(map(parse_duration, (args.records_trigger, args.max_batch_delay))):
        parser.error("--idle-seconds must cover at least one --records-trigger and one --max-batch-delay interval")

    spark = get_spark()
    clock = CpuMeter()
    figures, table = {}, []
    # the configurations compared, by name: the settings each runs with beside --trigger and --alerts-trigger
    tables = {"records_trigger": args.records_trigger}
    waits = {"min_batch_records": args.min_batch_records, "max_batch_delay": args.max_batch_delay}
    configurations = {
        "every query at trigger": {"records_trigger": ""},
        "tables at records_trigger": tables,
        "ingest waits while quiet": {**tables, **waits},
    }
    for number, (name, overrides) in enumerate(configurations.items()):
        print(f"\n{name}: trigger {args.trigger}, {overrides}", flush=True)
        with scratch_run(
            "idle",
            ("events", "alerts", "acks"),
            schema=f"idle_{number}",  # the session's catalog still names the first run's tables at their old folder
            trigger=args.trigger,
            alerts_trigger=args.alerts_trigger,
            **overrides,
        ) as settings:
            catalog.apply_rules(spark, settings, [*load_rules(), *stateful_rule_set(1)])
            cores, jit, rows = idle(spark, settings, args, clock)
        round_s = parse_duration(args.trigger)
        figures[f"cores: {name} (cores)"] = cores
        figures[f"per {args.trigger} round: {name} (core-s)"] = cores * round_s
        figures[f"per {args.trigger} round, of it the JIT compilers: {name} (core-s)"] = jit * round_s
        figures[f"per {args.trigger} round without the JIT compilers: {name} (core-s)"] = (cores - jit) * round_s
        table += [{"configuration": name, **row} for row in rows]
        print(f"  {cores:.2f} cores, {cores * round_s:.1f} core-s per {args.trigger} round ({jit * round_s:.1f} JIT)")
        for row in rows:
            print(f"  {row['query']:16} {row['batches']:3} batches, median {row['median batch ms']:8,.0f} ms")
    stop_session(spark)
    figures["trickle (events/s)"] = args.trickle
    figures["window (s)"] = args.idle_seconds
    record("idle_cost", figures, table, baseline="every query at trigger")


if __name__ == "__main__":
    main()
