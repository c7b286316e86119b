"""Stateful alert rules: events/s of the stateful rules query over bronze, beside 02's sampling on the same bronze.

    .venv/bin/python benchmarks/stateful_rules.py --events 300000 --rules 4     # needs the broker: make broker-up

Simulated events are produced to a scratch topic and ingested into bronze once (``--batch`` events per ingest
micro-batch, so bronze has that many commits). Then, in the same Spark application and one after the other, each on
a checkpoint of its own: the stateful rules query with ``--rules`` rules of each stateful kind (rate, count, absence,
sequence, baseline; unscoped, so every device runs every rule), and the sampling query (02, the project's other
transformWithStateInPandas processor), both ``availableNow`` over the same bronze table. It prints events/s for
each, their ratio (the baseline is sampling, measured in the same run), the alerts the rules fired, and the batch
times. At 10,000 events/s of fleet traffic and a ``10 seconds`` trigger, a query keeps up if it does at least
10,000 events/s over 100,000-event batches.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from datetime import datetime, timezone

from sensorcep.local import broker, simulator
from sensorcep.observability.monitoring import stop_session
from sensorcep.pipeline import ingest, sampling, stateful_rules
from sensorcep.rules import catalog
from sensorcep.rules.model import parse_rules
from sensorcep.runtime import get_spark
from sensorcep.settings import env_settings


def rule_set(per_kind: int) -> list:
    """``per_kind`` rules of each stateful kind, with thresholds that fire now and then on simulated data."""
    rules = []
    for i in range(per_kind):
        rules += [
            {"id": f"rate_{i}", "kind": "rate", "field": "sensor_freq", "op": ">", "value": 100.0 + i},
            {"id": f"count_{i}", "kind": "count", "field": "sensor_freq", "op": "<", "value": 0.0, "at_least": 2,
             "within": f"{60 + i} seconds"},
            {"id": f"absence_{i}", "kind": "absence", "within": f"{30 + i} seconds"},
            {"id": f"sequence_{i}", "kind": "sequence", "first": {"field": "sensor_freq", "op": ">", "value": 90.0},
             "then": {"field": "sensor_freq", "op": "<", "value": 0.0}, "within": f"{120 + i} seconds"},
            {"id": f"baseline_{i}", "kind": "baseline", "field": "sensor_freq", "k": 4.0 + i, "span": 50},
        ]  # fmt: skip
    return parse_rules({"rules": rules})


def timed(label: str, run) -> tuple[float, object]:
    started = time.perf_counter()
    query = run()
    elapsed = time.perf_counter() - started
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    times = sorted(p["batchDuration"] for p in batches)
    print(
        f"  {label:<16} {elapsed:6.1f} s, {len(batches)} batches, batch p50 {times[len(times) // 2]:,} ms, "
        f"max {times[-1]:,} ms"
        if times
        else f"  {label:<16} {elapsed:6.1f} s, no batch with input",
        flush=True,
    )
    return elapsed, query


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--devices", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=100_000, help="events per ingest micro-batch (bronze commit)")
    parser.add_argument("--rules", type=int, default=1, help="rules of each stateful kind")
    args = parser.parse_args()

    base = tempfile.mkdtemp(prefix="sensorcep-bench-rules-")
    topic = f"bench-rules-{uuid.uuid4().hex[:8]}"
    settings = env_settings(
        base_path=base, events_topic=topic, alerts_topic=f"{topic}-alerts", max_offsets_per_trigger=str(args.batch)
    )
    broker.up(settings.kafka_bootstrap_servers)
    with broker.scratch_topics(settings.kafka_bootstrap_servers, [topic, settings.alerts_topic]):
        sim = simulator.generate(
            simulator.SimulationConfig(
                events=args.events, devices=args.devices, seed=3, start=datetime(2026, 1, 1, tzinfo=timezone.utc)
            )
        )
        simulator.produce(sim, settings.kafka_bootstrap_servers, topic, progress=True)
        spark = get_spark()
        ingest.start_ingest(spark, settings)
        events = ingest.Tables(spark, settings).read("bronze_events").count()
        rules = rule_set(args.rules)
        catalog.apply_rules(spark, settings, rules)
        print(f"\n{events:,} bronze events from {args.devices:,} devices; {len(rules)} stateful rules", flush=True)
        rules_s, _ = timed("stateful rules", lambda: stateful_rules.start_stateful_rules(spark, settings))
        sampling_s, _ = timed("sampling (02)", lambda: sampling.start_sampling(spark, settings))
        alerts = alerts_sent(settings)
        print(f"\nstateful rules : {events / rules_s:>10,.0f} events/s  ({alerts:,} alerts)")
        print(f"sampling (02)  : {events / sampling_s:>10,.0f} events/s")
        print(f"ratio rules / sampling: {sampling_s / rules_s:.2f}x")
    stop_session(get_spark())
    shutil.rmtree(base, ignore_errors=True)


def alerts_sent(settings) -> int:
    """Records on the alerts topic (only the stateful rules query writes it here)."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap_servers, "group.id": uuid.uuid4().hex})
    partitions = consumer.list_topics(settings.alerts_topic, timeout=10).topics[settings.alerts_topic].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(settings.alerts_topic, p))[1] for p in partitions}
    consumer.close()
    return sum(ends.values())


if __name__ == "__main__":
    main()
