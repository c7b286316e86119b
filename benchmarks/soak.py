"""Sustained load: a steady event rate through every query of the pipeline for N minutes, reported per minute.

    make broker-up
    .venv/bin/python benchmarks/soak.py                              # 10 minutes at 5,000 events/s
    .venv/bin/python benchmarks/soak.py --minutes 3 --rate 2000      # a shorter look

A producer process sends ``--rate`` events/s (current event times, 1,000 devices, 1% anomalies) to a fresh topic
while the ingest, sampling, device-activity and alert queries run continuously in one Spark application (their
FAIR pools; ``--trigger`` for the first three, ``--alerts-trigger`` for alerts). Every minute it prints, per query:
input rate vs processing rate over that minute (rows / wall-clock minute, so a query that cannot keep up shows a
lower number), p95 batch time, state rows, and how far behind the topic's end the query is (lag, in events and in
seconds of input); plus the JVM heap. At the end: whether state rows and heap stayed flat (windows are freed) and
every query kept up (final lag under two triggers' worth of input).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from alert_latency import produce_steady  # noqa: E402 - the same steady producer, in its own process
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from sensorcep import alerts, broker, device_activity, ingest, sampling  # noqa: E402
from sensorcep.runtime import get_spark  # noqa: E402
from sensorcep.settings import env_settings, parse_duration  # noqa: E402


def topic_end(consumer, topic: str) -> int:
    """The end offset of the (one-partition) events topic: everything produced so far."""
    return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]


def processed_end(progress: dict | None) -> int:
    if not progress or not progress.get("sources"):
        return 0
    end = progress["sources"][0].get("endOffset") or {}
    end = json.loads(end) if isinstance(end, str) else end
    return sum(int(o) for parts in end.values() for o in parts.values())


def minute_row(query, since: datetime, end_offset: int, rate: int, minute: int) -> dict:
    batches = [json.loads(p.json) for p in query.recentProgress]
    recent = [p for p in batches if datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")) >= since]
    durations = [p["batchDuration"] for p in recent if p["numInputRows"] > 0]
    last = batches[-1] if batches else None
    state = sum(o.get("numRowsTotal", 0) for o in (last or {}).get("stateOperators", [])) if last else 0
    lag = max(0, end_offset - processed_end(last))
    return {"minute": minute, "query": query.name, "batches": len(recent),
            "processed_per_s": sum(p["numInputRows"] for p in recent) / 60,
            "batch_p95_ms": (statistics.quantiles(durations, n=20)[-1] if len(durations) >= 2
                             else (durations[0] if durations else 0)),
            "state_rows": state, "lag_events": lag, "lag_s": lag / rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--rate", type=int, default=5_000, help="events per second")
    parser.add_argument("--trigger", default="10 seconds", help="ingest, sampling and device-activity trigger")
    parser.add_argument("--alerts-trigger", default="0 seconds")
    args = parser.parse_args()

    run = uuid.uuid4().hex[:8]
    settings = env_settings(events_topic=f"soak-events-{run}", alerts_topic=f"soak-alerts-{run}",
                            base_path=tempfile.mkdtemp(prefix="bench-soak-"), trigger=args.trigger,
                            alerts_trigger=args.alerts_trigger, max_offsets_per_trigger=0)
    broker.wait_until_ready(settings.kafka_bootstrap_servers, timeout=10)
    broker.create_topics(settings.kafka_bootstrap_servers, [settings.events_topic, settings.alerts_topic])
    spark = get_spark()
    heap = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
    offsets = Consumer({"bootstrap.servers": settings.kafka_bootstrap_servers, "group.id": f"soak-{run}"})
    out = multiprocessing.Queue()
    producer = multiprocessing.Process(target=produce_steady, daemon=True, args=(
        settings.kafka_bootstrap_servers, settings.events_topic, args.rate, args.minutes * 60, out))
    queries = [ingest.start_ingest(spark, settings, wait=False), sampling.start_sampling(spark, settings, wait=False),
               device_activity.start_device_activity(spark, settings, wait=False),
               alerts.start_alerts(spark, settings, wait=False)]
    producer.start()
    print(f"soak: {args.rate:,} events/s for {args.minutes} min; trigger {args.trigger}, alerts {args.alerts_trigger}; "
          f"topic {settings.events_topic}", flush=True)
    print(f"{'min':>3} {'query':16} {'batches':>7} {'in/s':>7} {'processed/s':>11} {'p95 ms':>7} {'state rows':>10} "
          f"{'lag events':>10} {'lag s':>6} {'heap MB':>8}")
    rows, heaps, started, produced_before = [], [], time.monotonic(), 0
    for minute in range(1, args.minutes + 1):
        since = datetime.now().astimezone()
        time.sleep(max(0.0, started + minute * 60 - time.monotonic()))
        end = topic_end(offsets, settings.events_topic)
        used = (heap.totalMemory() - heap.freeMemory()) / 2**20
        heaps.append(used)
        for query in queries:
            if query.exception() is not None:
                raise SystemExit(f"query {query.name} failed: {query.exception()}")
            row = minute_row(query, since, end, args.rate, minute)
            row["input_per_s"] = (end - produced_before) / 60
            rows.append(row)
            print(f"{minute:>3} {row['query']:16} {row['batches']:>7} {row['input_per_s']:>7,.0f} "
                  f"{row['processed_per_s']:>11,.0f} {row['batch_p95_ms']:>7,.0f} {row['state_rows']:>10,} "
                  f"{row['lag_events']:>10,} {row['lag_s']:>6.1f} {used:>8,.0f}", flush=True)
        produced_before = end
    for query in queries:
        query.stop()
    out.get(timeout=120)  # the producer hands back its send log before it can exit
    producer.join(timeout=60)
    verdict(rows, heaps, args)


def verdict(rows: list[dict], heaps: list[float], args) -> None:
    """Flat state and heap (second half vs first half, after a 2-minute warm-up), and every query keeping up."""
    trigger_s = parse_duration(args.trigger)
    print("\nverdict:")
    half = max(3, (args.minutes + 2) // 2)
    for query in dict.fromkeys(r["query"] for r in rows):
        mine = [r for r in rows if r["query"] == query]
        early = [r["state_rows"] for r in mine if 2 < r["minute"] <= half]
        late = [r["state_rows"] for r in mine if r["minute"] > half]
        flat = not early or not late or max(late) <= 1.5 * max(max(early), 1)
        kept_up = mine[-1]["lag_s"] <= 2 * max(trigger_s, 1)
        processed = sum(r["processed_per_s"] for r in mine[2:]) / max(1, len(mine[2:]))
        print(f"  {query:16} state rows {'flat' if flat else 'GROWING'} (max {max(early or [0]):,} then "
              f"{max(late or [0]):,}); processed {processed:,.0f}/s vs {args.rate:,}/s produced; final lag "
              f"{mine[-1]['lag_s']:.1f} s: {'kept up' if kept_up else 'FELL BEHIND'}")
    early_heap, late_heap = heaps[2:half], heaps[half:]
    if early_heap and late_heap:
        print(f"  JVM heap: max {max(early_heap):,.0f} MB in minutes 3-{half}, {max(late_heap):,.0f} MB after: "
              f"{'flat' if max(late_heap) <= 1.5 * max(early_heap) else 'GROWING'}")


if __name__ == "__main__":
    main()
