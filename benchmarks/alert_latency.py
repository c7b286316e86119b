"""Alert latency: from producing an anomalous event to its alert arriving on the alerts topic.

    .venv/bin/python benchmarks/alert_latency.py                      # 1,000 and 10,000 events/s, 3 triggers
    .venv/bin/python benchmarks/alert_latency.py --rates 1000 --seconds 20 --triggers realtime
    .venv/bin/python benchmarks/alert_latency.py --rates 10000 --triggers realtime --rules 1,100   # rule count

``--rules N[,M]``: the alert query evaluates N threshold rules, the packaged ``negative_frequency`` (which fires for
the 1% anomalies) plus N-1 that read the same field and never fire (unscoped, device-scoped and site-free mixes of
every operator), so the alerts expected stay the same and only the rule count changes; the first count is the
baseline of the ratio.

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

import argparse
import json
import multiprocessing
import tempfile
import time
import uuid
from datetime import datetime, timezone

import numpy as np
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition

from sensorcep.local import broker
from sensorcep.observability.monitoring import stop_session
from sensorcep.pipeline import alerts, sampling
from sensorcep.pipeline.ingest import valid_event_stream
from sensorcep.pipeline.streaming import stop_queries
from sensorcep.runtime import get_spark
from sensorcep.settings import Settings, env_settings

RULE = "negative_frequency"  # the packaged rule set's rule: sensor_freq < 0
#: where a micro-batch's time goes (StreamingQueryProgress.durationMs); addBatch = Kafka read + parse + foreachBatch
PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "triggerExecution")


def produce_steady(bootstrap: str, topic: str, rate: int, seconds: float, out, warmup: float = 0.0) -> None:
    """``rate`` events/s for ``warmup + seconds``, 1% anomalous; puts {alert_id: send time} of the anomalies sent
    after the warm-up on ``out`` (the first micro-batches of a query pay for JIT compilation and worker start).

    Runs in a process of its own, so it never competes with the Spark driver for the GIL.
    """
    sent: dict = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    rng = np.random.default_rng(1)
    tick, n, started = 0.01, 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < warmup + seconds:
        due = int(elapsed * rate)
        now = datetime.now(timezone.utc)
        event_us = int(now.timestamp() * 1_000_000) // 1000 * 1000
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        for _ in range(due - n):
            device = f"dev-{rng.integers(0, 1000):05d}"
            anomalous = rng.random() < 0.01
            freq = -float(rng.uniform(0.1, 20)) if anomalous else float(rng.normal(50, 10))
            producer.produce(
                topic,
                key=device.encode(),
                value=json.dumps({"device_id": device, "sensor_freq": freq, "event_time": stamp}).encode(),
            )
            if anomalous and elapsed >= warmup:
                sent.setdefault(alerts.alert_id(device, event_us, RULE), time.time())
            n += 1
        producer.poll(0)
        time.sleep(tick)
    producer.flush(30)
    out.put(sent)


def consume_alerts(bootstrap: str, topic: str, expected_q, out, drain_s: float) -> None:
    """Records each alert's arrival until every expected alert (sent on ``expected_q`` once the producer is done)
    has arrived, or ``drain_s`` after that; puts {alert_id: (arrival s, alert record ms, event record ms)}
    on ``out``."""
    import queue

    received: dict = {}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lat-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5,
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
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


def rules_file(count: int, folder: str) -> str:
    """A rule set of ``count`` threshold rules: negative_frequency (fires for the anomalies) and count-1 that never
    fire on the benchmark's events (their values lie far outside what the producer sends)."""
    rules = [{"id": RULE, "kind": "threshold", "field": "sensor_freq", "op": "<", "value": 0}]
    operators = [">", ">=", "=="]
    for i in range(1, count):
        rule = {"id": f"never_{i:03d}", "kind": "threshold", "field": "sensor_freq", "op": operators[i % 3]}
        rule["value"] = 1e6 + i
        if i % 2:
            rule["scope"] = {"device_id": f"dev-{i:05d}"}
        rules.append(rule)
    path = f"{folder}/rules-{count}.yaml"
    with open(path, "w") as out:
        yaml.safe_dump({"rules": rules}, out)
    return path


def measure(
    spark,
    base: Settings,
    rate: int,
    trigger: str,
    seconds: float,
    warmup: float,
    drain: float,
    sampling_trigger: str,
    rules: int = 1,
) -> dict:
    run = uuid.uuid4().hex[:8]
    scratch = tempfile.mkdtemp(prefix="bench-alerts-")
    settings = base.replace(
        events_topic=f"lat-events-{run}",
        alerts_topic=f"lat-alerts-{run}",
        alerts_trigger=trigger,
        trigger=sampling_trigger if sampling_trigger != "none" else "availableNow",
        base_path=scratch,
        rules_file=rules_file(rules, scratch),
        tables="paths",  # a scratch folder per run, several runs per Spark application: no names to register
        max_offsets_per_trigger=0,
    )
    with broker.scratch_topics(settings.kafka_bootstrap_servers, [settings.events_topic, settings.alerts_topic]):
        return {**measure_on(spark, settings, rate, trigger, seconds, warmup, drain), "rules": rules}


def measure_on(spark, settings: Settings, rate: int, trigger: str, seconds: float, warmup: float, drain: float) -> dict:
    query = alerts.start_alerts(spark, settings, wait=False)
    beside = None
    if not settings.runs_to_end:  # the sampling query on the same events (from Kafka: no ingest here)
        beside = sampling.start_sampling(spark, settings, wait=False, events=valid_event_stream(spark, settings))
    processes = multiprocessing.get_context("spawn")
    expected_q, sent_q, received_q = processes.Queue(), processes.Queue(), processes.Queue()
    consumer = processes.Process(
        target=consume_alerts,
        args=(settings.kafka_bootstrap_servers, settings.alerts_topic, expected_q, received_q, drain),
    )
    producer = processes.Process(
        target=produce_steady,
        args=(settings.kafka_bootstrap_servers, settings.events_topic, rate, seconds, sent_q, warmup),
    )
    consumer.start()
    producer.start()
    sent = sent_q.get()
    producer.join()
    expected_q.put(list(sent))
    received = received_q.get()
    consumer.join()
    batches = [p for p in query.recentProgress if p.numInputRows]
    failed = query.exception()
    stop_queries(spark, [q for q in (query, beside) if q is not None])  # quietly: a clean stop is not an error
    if failed is not None:
        raise failed
    got = [k for k in sent if k in received]
    latencies = np.array([received[k][0] - sent[k] for k in got])
    in_spark = np.array([(received[k][1] - received[k][2]) / 1000 for k in got])
    delivery = np.array([received[k][0] - received[k][1] / 1000 for k in got])
    pct = lambda values, q: float(np.percentile(values, q)) if len(values) else float("nan")  # noqa: E731
    return {
        "rate": rate,
        "trigger": trigger,
        "alerts": len(sent),
        "received": len(got),
        "p50": pct(latencies, 50),
        "p95": pct(latencies, 95),
        "p99": pct(latencies, 99),
        "max": latencies.max() if len(latencies) else float("nan"),
        "spark_p50": pct(in_spark, 50),
        "spark_p99": pct(in_spark, 99),
        "delivery_p50": pct(delivery, 50),
        "delivery_p99": pct(delivery, 99),
        "batch_ms": np.median([p.batchDuration for p in batches]) if batches else float("nan"),
        "phases_ms": {
            phase: float(np.median([p.durationMs.get(phase, 0) for p in batches])) if batches else 0.0
            for phase in PHASES
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    base = env_settings()
    triggers = [t.strip() for t in args.triggers.split(",")]
    rates = [int(r) for r in args.rates.split(",")]
    counts = [int(n) for n in args.rules.split(",")]
    spark = get_spark()
    print(
        f"alert latency: rates {rates}, triggers {triggers}, sampling beside: {args.sampling_trigger}; "
        f"{args.warmup:g} s warm-up + {args.seconds:g} s measured per run",
        flush=True,
    )
    if not args.no_cold_run:  # measured and shown, but not in the table: the table is the steady state
        cold = measure(spark, base, rates[0], triggers[0], args.seconds, args.warmup, args.drain, args.sampling_trigger)
        print(
            f"  cold run (first query of this JVM, not in the table): {rates[0]:,} ev/s  trigger {triggers[0]}  "
            f"p50 {cold['p50'] * 1000:,.0f} ms  p99 {cold['p99'] * 1000:,.0f} ms",
            flush=True,
        )
    results = []
    for rate in rates:
        for trigger in triggers:
            for count in counts:
                r = measure(
                    spark, base, rate, trigger, args.seconds, args.warmup, args.drain, args.sampling_trigger, count
                )
                results.append(r)
                print(
                    f"  {rate:>6,} ev/s  {trigger:12} {count:>4} rule(s)  p50 {r['p50'] * 1000:7,.0f} ms  "
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
                    + (f"; target <= 100 ms with 100 rules: {verdict}" if count >= 100 else "")
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


if __name__ == "__main__":
    main()
    stop_session(get_spark())  # every progress row written before the session goes
