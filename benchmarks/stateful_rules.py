"""Stateful alert rules: events/s of the stateful rules query over bronze, beside 02's sampling on the same bronze.

    .venv/bin/python benchmarks/stateful_rules.py --events 300000 --rules 4     # needs the broker: make broker-up
    .venv/bin/python benchmarks/stateful_rules.py --set v2                     # 20 rules of rules v2's kinds

Simulated events are produced to a scratch topic and ingested into bronze once (``--batch`` events per ingest
micro-batch, so bronze has that many commits). Then, in the same Spark application and one after the other, each on
a checkpoint of its own: the stateful rules query and the sampling query (02, the project's other
transformWithStateInPandas processor), both ``availableNow`` over the same bronze table. The rules: ``--rules`` of
each stateful kind of rules v1 (rate, count, absence, sequence, baseline), or with ``--set v2`` 20 rules of rules
v2's shapes (windowed aggregates, patterns with a repeating and a ``not`` step, a count of an ``any:`` condition);
unscoped, so every device runs every rule. It prints events/s for each, their ratio (the baseline is sampling,
measured in the same run), the alerts the rules fired, and the batch times. At 10,000 events/s of fleet traffic and
a ``10 seconds`` trigger, a query keeps up if it does at least 10,000 events/s over 100,000-event batches.

Before the measured runs, ``--warmup`` unreported runs of both queries (each on a checkpoint and an alerts topic of
its own, their tables emptied after): measured in a JVM started for the benchmark, the first query paid for compiling
the code both reach, and the ratio favoured the baseline run after it (decision 0073).

Then the alert lifecycle (03's incidents) over the alerts the rules sent, ``--lifecycle-batch`` alerts a micro-batch
(the soak's lifecycle takes a few thousand a batch): its alerts/s, and its seconds against sampling's.
"""

from __future__ import annotations

from contextlib import closing

from harness import (
    CpuMeter,
    argument_parser,
    batch_stats,
    empty_rewritten,
    kafka_consumer,
    new_kind_rule_set,
    produce_backlog,
    read_bronze,
    record,
    run_to_end,
    scratch_run,
    stateful_rule_set,
    topic_end,
)

from sensorcep.local import broker
from sensorcep.observability.monitoring import stop_session
from sensorcep.pipeline import alert_lifecycle, ingest, sampling, stateful_rules
from sensorcep.rules import catalog
from sensorcep.runtime import get_spark


def timed(label: str, run, clock: CpuMeter) -> tuple[float, dict]:
    """Run a query to its end and print how long it and its micro-batches took, and the CPU Spark used meanwhile: its
    seconds and batch statistics, with ``spark_core_s`` and ``jit_core_s`` (of it, the JVM's JIT compilers: the
    queries run one after another in one JVM started for the benchmark, and each pays for compiling the code it
    reaches first, decision 0048)."""
    clock.read()
    elapsed, _, batches = run_to_end(run)
    spark_core_s = clock.read_spark()
    stats = batch_stats([p["batchDuration"] for p in batches])
    stats.update(spark_core_s=spark_core_s, jit_core_s=clock.spark_jvm_threads["JIT compilers"])
    print(
        f"  {label:<16} {elapsed:6.1f} s, {stats['batches']} batches, batch p50 {stats['p50_ms']:,.0f} ms, "
        f"max {stats['max_ms']:,.0f} ms"
        if batches
        else f"  {label:<16} {elapsed:6.1f} s, no batch with input",
        f"; Spark {spark_core_s:.1f} core-s, of it the JIT compilers {stats['jit_core_s']:.1f}",
        sep="",
        flush=True,
    )
    return elapsed, stats


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--devices", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=100_000, help="events per ingest micro-batch (bronze commit)")
    parser.add_argument("--rules", type=int, default=1, help="rules of each stateful kind (--set v1)")
    parser.add_argument("--set", choices=("v1", "v2"), default="v1", help="v2: 20 rules of rules v2's kinds")
    parser.add_argument(
        "--files",
        type=int,
        default=0,
        help="bronze files per micro-batch of both queries (0: everything in one): a steady state of batches whose "
        "watermark releases the events of the batches before",
    )
    parser.add_argument("--lifecycle-batch", type=int, default=2_000, help="alerts per alert lifecycle micro-batch")
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="unreported runs of the rules and sampling before the measured ones (0: measured in a fresh JVM)",
    )
    args = parser.parse_args()
    if args.warmup < 0:
        parser.error("--warmup takes a count of runs, 0 or more")

    with (
        scratch_run("rules", ("events", "alerts", "acks"), max_offsets_per_trigger=str(args.batch)) as settings,
        broker.scratch_topics(
            settings.kafka_bootstrap_servers, [f"{settings.alerts_topic}-warmup"], partitions=settings.partitions
        ) as (warmup_topic,),
    ):
        produce_backlog(settings, args.events, seed=3, devices=args.devices)
        spark = get_spark()
        clock = CpuMeter()
        ingest.start_ingest(spark, settings)
        events = ingest.Tables(spark, settings).read("bronze_events").count()
        rules = stateful_rule_set(args.rules) if args.set == "v1" else new_kind_rule_set()
        catalog.apply_rules(spark, settings, rules)
        print(f"\n{events:,} bronze events from {args.devices:,} devices; {len(rules)} stateful rules", flush=True)
        fields = stateful_rules.extra_fields_read(stateful_rules.stateful_rules(spark, settings))

        def rules_query(own):
            return stateful_rules.start_stateful_rules(spark, own, events=read_bronze(spark, own, args.files, fields))

        def sampling_query(own):
            return sampling.start_sampling(spark, own, events=read_bronze(spark, own, args.files))

        for run in range(1, args.warmup + 1):  # their alerts on a topic of their own: the lifecycle reads the others
            warm = settings.replace(query_suffix=f"_warmup{run}", alerts_topic=warmup_topic)
            for label, query, start in (
                ("stateful rules", "stateful_rules", rules_query),
                ("sampling (02)", "sampling", sampling_query),
            ):
                timed(f"warm-up {run}: {label}", lambda start=start, warm=warm: start(warm), clock)
                empty_rewritten(spark, settings, query)
        rules_s, rules_stats = timed("stateful rules", lambda: rules_query(settings), clock)
        sampling_s, sampling_stats = timed("sampling (02)", lambda: sampling_query(settings), clock)
        alerts = alerts_sent(settings)
        lifecycle_s, lifecycle_stats = timed(
            "alert lifecycle",
            lambda: alert_lifecycle.start_alert_lifecycle(
                spark, settings.replace(max_offsets_per_trigger=args.lifecycle_batch)
            ),
            clock,
        )
        print(f"\nstateful rules : {events / rules_s:>10,.0f} events/s  ({alerts:,} alerts)")
        print(f"sampling (02)  : {events / sampling_s:>10,.0f} events/s")
        print(
            f"alert lifecycle: {alerts / lifecycle_s:>10,.0f} alerts/s  ({lifecycle_s / sampling_s:.2f}x sampling's s)"
        )
        print(f"ratio rules / sampling: {sampling_s / rules_s:.2f}x")
        stop_session(spark)
    figures = {"rule set": args.set, "bronze events": events, "devices": args.devices, "stateful rules": len(rules)}
    figures["unreported warm-up runs of each"] = args.warmup
    figures["bronze files per batch"] = args.files or "all"
    figures["alerts"] = alerts
    figures["alert lifecycle (alerts/s)"] = alerts / lifecycle_s
    for name, seconds, stats in (
        ("stateful rules", rules_s, rules_stats),
        ("sampling", sampling_s, sampling_stats),
        ("alert lifecycle", lifecycle_s, lifecycle_stats),
    ):
        if name != "alert lifecycle":  # its input is the rules' alerts (alerts/s above), not the bronze events
            figures[f"{name} (events/s)"] = events / seconds
        figures[f"{name} (s)"] = seconds
        figures[f"{name} (batches)"] = stats["batches"]
        figures[f"{name} (batch p50 ms)"] = stats["p50_ms"]
        figures[f"{name} (batch max ms)"] = stats["max_ms"]
        figures[f"Spark's CPU: {name} (core-s)"] = stats["spark_core_s"]
        figures[f"of it the JIT compilers: {name} (core-s)"] = stats["jit_core_s"]
    record("stateful_rules", figures, baseline="sampling")


def alerts_sent(settings) -> int:
    """Records on the alerts topic (only the stateful rules query writes it here)."""
    with closing(kafka_consumer(settings.kafka_bootstrap_servers)) as consumer:
        return topic_end(consumer, settings.alerts_topic)


if __name__ == "__main__":
    main()
