"""Alert latency: from producing an anomalous event to its alert arriving on the alerts topic.

    .venv/bin/python benchmarks/alert_latency.py                      # 1,000 and 10,000 events/s, 3 triggers
    .venv/bin/python benchmarks/alert_latency.py --rates 1000 --seconds 20 --triggers realtime
    .venv/bin/python benchmarks/alert_latency.py --rates 10000 --triggers realtime --rules 1,100   # rule count
    .venv/bin/python benchmarks/alert_latency.py --rates 10000 --triggers realtime --rules 100,100c  # multi-field

``--rules N[,M]``: the alert query evaluates N threshold rules, the packaged ``negative_frequency`` (which fires for
the 1% anomalies) plus N-1 that read the same field and never fire (unscoped, device-scoped and site-free mixes of
every operator), so the alerts expected stay the same and only the rule count changes; the first count is the
baseline of the ratio. ``100c``: the N-1 rules are multi-field conditions (``all`` / ``any`` / ``not`` over
sensor_freq and a second field kept through extra_fields), against one comparison each in the same run.

For each rate and trigger (real-time mode, micro-batch ``0 seconds`` and the source design's ``5 seconds``,
in the same run) a fresh topic pair is used: the alert query (the real one: Kafka -> 01's parser -> rule ->
Kafka) runs with that trigger while the sampling query (``--sampling-trigger``) reads the same topic beside
it; a producer process sends events at a steady rate (1% anomalies) and a consumer process records when
each alert arrives. Latency = arrival of the alert - the moment its event was handed to the producer. Every
alert sent after the warm-up is waited for (up to ``--drain`` seconds) and counted.

Where the time goes, per alert, from the records' own Kafka timestamps (CreateTime, set by each producer
when it is handed a record): ``in spark`` = alert record's timestamp - event record's timestamp (Spark's
Kafka consumer fetch, parse, rule, hand-over to its producer); ``delivery`` = arrival - alert record's
timestamp (Spark's producer send, the broker, the consumer's fetch). Needs the local broker (``make broker-up``).
"""

from __future__ import annotations

import json
import multiprocessing
import time
from datetime import datetime

import numpy as np
import yaml
from harness import (
    ANOMALY_RULE,
    argument_parser,
    input_batches,
    kafka_consumer,
    percentile,
    read_from_start,
    record,
    scratch_run,
    start_producer,
)

from sensorcep.observability.monitoring import stop_session
from sensorcep.pipeline import alerts, sampling
from sensorcep.pipeline.ingest import valid_event_stream
from sensorcep.pipeline.streaming import stop_queries
from sensorcep.runtime import get_spark
from sensorcep.settings import Settings

#: where a micro-batch's time goes (StreamingQueryProgress.durationMs); addBatch = Kafka read + parse + foreachBatch
PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "triggerExecution")


def consume_alerts(bootstrap: str, topic: str, expected_q, out, drain_s: float) -> None:
    """Records each alert's arrival until every expected alert (sent on ``expected_q`` once the producer is done)
    has arrived, or ``drain_s`` after that; puts {alert_id: (arrival s, alert record ms, event record ms)}
    on ``out``."""
    import queue

    received: dict = {}
    consumer = kafka_consumer(bootstrap, {"fetch.wait.max.ms": 5})
    read_from_start(consumer, topic)
    expected, deadline = None, None
    while expected is None or (not expected <= received.keys() and time.time() < deadline):
        for message in consumer.consume(500, 0.02):
            if message.error() is None:
                arrival = time.time()
                alert = json.loads(message.value())
                event_ms = int(
                    datetime.fromisoformat(alert["kafka_timestamp"].replace("Z", "+00:00")).timestamp() * 1000
                )
                received.setdefault(alert["alert_id"], (arrival, message.timestamp()[1], event_ms))
        if expected is None:
            try:
                expected = set(expected_q.get_nowait())
                deadline = time.time() + drain_s
            except queue.Empty:
                pass
    consumer.close()
    out.put(received)


#: the field the multi-field rules (``--rules 100c``) read beside sensor_freq: kept through extra_fields, absent from
#: the benchmark's events (so it is parsed for every event and meets no comparison)
SECOND_FIELD = "voltage"


def rule_spec(spec: str) -> tuple[str, int, bool]:
    """``100`` -> 100 one-comparison rules; ``100c`` -> 100 rules whose never-firing ones are multi-field conditions:
    (label, count, combined)."""
    combined = spec.strip().endswith("c")
    count = int(spec.strip().removesuffix("c"))
    return (f"{count} multi-field" if combined else str(count)), count, combined


def rules_file(count: int, folder: str, combined: bool = False) -> str:
    """A rule set of ``count`` threshold rules: negative_frequency (fires for the anomalies) and count-1 that never
    fire on the benchmark's events (their values lie far outside what the producer sends). ``combined``: each of those
    is a condition of two alternatives over two fields (sensor_freq far out of range, and the voltage below a value
    or not above one), as ``all`` / ``any`` / ``not`` write it."""
    rules = [{"id": ANOMALY_RULE, "kind": "threshold", "field": "sensor_freq", "op": "<", "value": 0}]
    operators = [">", ">=", "=="]
    for i in range(1, count):
        rule = {"id": f"never_{i:03d}", "kind": "threshold", "field": "sensor_freq", "op": operators[i % 3]}
        rule["value"] = 1e6 + i
        if combined:
            voltage = [{"field": SECOND_FIELD, "op": "<", "value": -1e6},
                       {"not": {"field": SECOND_FIELD, "op": ">=", "value": -1e6 - i}}]  # fmt: skip
            rule = {"id": rule["id"], "kind": "threshold", "when": {"all": [{k: rule[k] for k in ("field", "op",
                    "value")}, {"any": voltage}]}}  # fmt: skip
        if i % 2:
            rule["scope"] = {"device_id": f"dev-{i:05d}"}
        rules.append(rule)
    path = f"{folder}/rules-{count}.yaml"
    with open(path, "w") as out:
        yaml.safe_dump({"rules": rules}, out)
    return path


def measure(
    spark, rate: int, trigger: str, seconds: float, warmup: float, drain: float, sampling_trigger: str, rules: str = "1"
) -> dict:
    """One run on fresh topics and tables (the broker must be up: ``make broker-up``)."""
    with scratch_run(
        "latency",
        ("events", "alerts"),
        start_broker=False,
        alerts_trigger=trigger,
        trigger=sampling_trigger if sampling_trigger != "none" else "availableNow",
        tables="paths",  # a scratch folder per run, several runs per Spark application: no names to register
        max_offsets_per_trigger=0,
    ) as settings:
        label, count, combined = rule_spec(rules)
        settings = settings.replace(
            rules_file=rules_file(count, settings.base_path, combined), extra_fields=SECOND_FIELD if combined else ""
        )
        return {**measure_on(spark, settings, rate, trigger, seconds, warmup, drain), "rules": label}


def measure_on(spark, settings: Settings, rate: int, trigger: str, seconds: float, warmup: float, drain: float) -> dict:
    query = alerts.start_alerts(spark, settings, wait=False)
    beside = None
    if not settings.runs_to_end:  # the sampling query on the same events (from Kafka: no ingest here)
        beside = sampling.start_sampling(spark, settings, wait=False, events=valid_event_stream(spark, settings))
    processes = multiprocessing.get_context("spawn")
    expected_q, received_q = processes.Queue(), processes.Queue()
    consumer = processes.Process(
        target=consume_alerts,
        args=(settings.kafka_bootstrap_servers, settings.alerts_topic, expected_q, received_q, drain),
    )
    consumer.start()
    producer, sent_q = start_producer(settings, rate, seconds, warmup)
    sent = sent_q.get()
    producer.join()
    expected_q.put(list(sent))
    received = received_q.get()
    consumer.join()
    batches = input_batches(query)
    failed = query.exception()
    stop_queries(spark, [q for q in (query, beside) if q is not None])  # quietly: a clean stop is not an error
    if failed is not None:
        raise failed
    got = [k for k in sent if k in received]
    latencies = np.array([received[k][0] - sent[k] for k in got])
    in_spark = np.array([(received[k][1] - received[k][2]) / 1000 for k in got])
    delivery = np.array([received[k][0] - received[k][1] / 1000 for k in got])
    return {
        "rate": rate,
        "trigger": trigger,
        "alerts": len(sent),
        "received": len(got),
        "p50": percentile(latencies, 50),
        "p95": percentile(latencies, 95),
        "p99": percentile(latencies, 99),
        "max": latencies.max() if len(latencies) else float("nan"),
        "spark_p50": percentile(in_spark, 50),
        "spark_p99": percentile(in_spark, 99),
        "delivery_p50": percentile(delivery, 50),
        "delivery_p99": percentile(delivery, 99),
        "batch_ms": percentile([p["batchDuration"] for p in batches], 50),
        "phases_ms": {
            phase: percentile([p["durationMs"].get(phase, 0) for p in batches], 50) if batches else 0.0
            for phase in PHASES
        },
    }


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--rates", default="1000,10000", help="events per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured production time per run")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds produced before measuring")
    parser.add_argument("--drain", type=float, default=30.0, help="seconds to wait for the last alerts")
    parser.add_argument(
        "--triggers",
        default="realtime,0 seconds,5 seconds",
        help="alert triggers, in the table's order (the last is the baseline of the ratios)",
    )
    parser.add_argument(
        "--sampling-trigger",
        default="10 seconds",
        help="trigger of the sampling query run beside the alert query ('none': alone)",
    )
    parser.add_argument("--rules", default="1", help="rule counts to run with (the first: the ratio's baseline)")
    parser.add_argument(
        "--no-cold-run",
        action="store_true",
        help="skip the first, separately reported run (a fresh JVM compiles the Kafka path first)",
    )
    args = parser.parse_args()
    triggers = [t.strip() for t in args.triggers.split(",")]
    rates = [int(r) for r in args.rates.split(",")]
    specs = args.rules.split(",")
    counts = [rule_spec(spec)[0] for spec in specs]
    spark = get_spark()
    print(
        f"alert latency: rates {rates}, triggers {triggers}, sampling beside: {args.sampling_trigger}; "
        f"{args.warmup:g} s warm-up + {args.seconds:g} s measured per run",
        flush=True,
    )
    if not args.no_cold_run:  # measured and shown, but not in the table: the table is the steady state
        cold = measure(spark, rates[0], triggers[0], args.seconds, args.warmup, args.drain, args.sampling_trigger)
        print(
            f"  cold run (first query of this JVM, not in the table): {rates[0]:,} ev/s  trigger {triggers[0]}  "
            f"p50 {cold['p50'] * 1000:,.0f} ms  p99 {cold['p99'] * 1000:,.0f} ms",
            flush=True,
        )
    results = []
    for rate in rates:
        for trigger in triggers:
            for spec, count in zip(specs, counts, strict=True):
                r = measure(spark, rate, trigger, args.seconds, args.warmup, args.drain, args.sampling_trigger, spec)
                results.append(r)
                print(
                    f"  {rate:>6,} ev/s  {trigger:12} {count:>14} rule(s)  p50 {r['p50'] * 1000:7,.0f} ms  "
                    f"p99 {r['p99'] * 1000:7,.0f} ms  "
                    f"({r['received']}/{r['alerts']} alerts)",
                    flush=True,
                )
    print(
        "\n| events/s | trigger | rules | alerts received | p50 ms | p95 ms | p99 ms | max ms | in Spark p50/p99 ms "
        "| delivery p50/p99 ms |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['rate']:,} | `{r['trigger']}` | {r['rules']} | {r['received']}/{r['alerts']} | "
            f"{r['p50'] * 1000:,.0f} | "
            f"{r['p95'] * 1000:,.0f} | {r['p99'] * 1000:,.0f} | {r['max'] * 1000:,.0f} | "
            f"{r['spark_p50'] * 1000:,.0f} / {r['spark_p99'] * 1000:,.0f} | "
            f"{r['delivery_p50'] * 1000:,.0f} / {r['delivery_p99'] * 1000:,.0f} |"
        )
    print("\n  micro-batch triggers, median ms per batch phase: " + "  ".join(PHASES))
    for r in results:
        if r["trigger"] != "realtime" and not r["trigger"].startswith("realtime"):
            print(
                f"  {r['rate']:>9,}  {r['trigger']:12} "
                + "  ".join(f"{r['phases_ms'][p]:>{len(p)},.0f}" for p in PHASES)
            )
    print()
    # the figures: p50 and p99 per rate, rule count and trigger (the last trigger the baseline), in ms
    figures: dict = {}
    if not args.no_cold_run:
        for q in ("p50", "p99"):
            figures[f"cold run, {rates[0]:,} events/s: {triggers[0]} ({q} ms)"] = cold[q] * 1000
    for r in results:
        for q in ("p50", "p99"):
            figures[f"{r['rate']:,} events/s, {r['rules']} rules: {r['trigger']} ({q} ms)"] = r[q] * 1000
    targets = {1000: 0.100, 10000: 0.250}
    for count in counts[1:]:
        for rate in rates:
            for trigger in triggers:
                one = next(r for r in results if (r["rate"], r["trigger"], r["rules"]) == (rate, trigger, counts[0]))
                many = next(r for r in results if (r["rate"], r["trigger"], r["rules"]) == (rate, trigger, count))
                verdict = "meets" if many["p99"] <= 0.100 else "misses"
                print(
                    f"  {rate:,} ev/s {trigger!r}: {count} rules p99 {many['p99'] * 1000:,.0f} ms vs {counts[0]} "
                    f"rule(s) {one['p99'] * 1000:,.0f} ms = {many['p99'] / one['p99']:.2f}x"
                    + (f"; target <= 100 ms with 100 rules: {verdict}" if int(count.split()[0]) >= 100 else "")
                )
                figures[f"{rate:,} events/s, {trigger}: {count} rules / {counts[0]} rules (p99 x)"] = (
                    many["p99"] / one["p99"]
                )
    for rate in rates:
        fast = next(r for r in results if r["rate"] == rate and r["trigger"] == triggers[0])
        base_r = next(r for r in results if r["rate"] == rate and r["trigger"] == triggers[-1])
        target = targets.get(rate)
        verdict = (
            ""
            if target is None
            else (f"; target <= {target * 1000:.0f} ms: " + ("meets" if fast["p99"] <= target else "misses"))
        )
        all_in = (
            "every alert arrived"
            if all(r["received"] == r["alerts"] for r in results if r["rate"] == rate)
            else "SOME ALERTS MISSING"
        )
        print(
            f"  {rate:,} ev/s: p99 {fast['p99'] * 1000:,.0f} ms with {triggers[0]!r}{verdict}; "
            f"{triggers[-1]!r} p99 / this p99 = {base_r['p99'] / fast['p99']:.0f}x; {all_in}"
        )
        if target is not None:
            figures[f"{rate:,} events/s: {triggers[0]} target (p99 ms)"] = target * 1000
        figures[f"{rate:,} events/s: every alert arrived"] = all_in == "every alert arrived"
    table = [
        {
            "events/s": r["rate"],
            "trigger": r["trigger"],
            "rules": r["rules"],
            "alerts": r["alerts"],
            "received": r["received"],
            **{f"{q} ms": r[q] * 1000 for q in ("p50", "p95", "p99", "max")},
            **{f"in Spark {q} ms": r[f"spark_{q}"] * 1000 for q in ("p50", "p99")},
            **{f"delivery {q} ms": r[f"delivery_{q}"] * 1000 for q in ("p50", "p99")},
            "batch ms": r["batch_ms"],
            **{f"{phase} ms": r["phases_ms"][phase] for phase in PHASES},
        }
        for r in results
    ]
    record("alert_latency", figures, table, baseline=triggers[-1])


if __name__ == "__main__":
    main()
    stop_session(get_spark())  # every progress row written before the session goes
