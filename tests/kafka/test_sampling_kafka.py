"""02 sampling from Kafka: simulated events through ingest into bronze, sampled from bronze as a Delta stream (Kafka
parsed once), equal to the pandas oracle; a second run adds nothing."""

from __future__ import annotations

import json

import pytest
from support.oracle import reference_samples
from support.streams import T0, oracle_rows, sample_rows

from sensorcep.local import simulator
from sensorcep.local.broker import create_topics
from sensorcep.pipeline import ingest, sampling


# ---------------------------------------------------------------------------- Kafka end to end
#: in make extended (decision 0063): make test's notebooks 01 and 02 run Kafka to bronze to sensor_samples
@pytest.mark.extended
def test_kafka_to_bronze_to_sensor_samples_parses_once_and_twice_adds_nothing(spark, settings):
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic])
    sim = simulator.generate(simulator.SimulationConfig(events=4_000, devices=30, seed=11, start=T0, rate=20))
    simulator.produce(sim, settings.kafka_bootstrap_servers, settings.events_topic)
    ingest.start_ingest(spark, settings)  # the one parse: Kafka -> bronze_events
    query = sampling.start_sampling(spark, settings)  # the medallion: 02 reads bronze as a Delta stream
    first = sample_rows(settings)
    sampling.start_sampling(spark, settings)
    assert sample_rows(settings) == first

    sources = [s["description"] for p in query.recentProgress for s in json.loads(p.json)["sources"]]
    assert sources and all(d.startswith("DeltaSource") and "bronze_events" in d for d in sources)
    plan = sampling.sample_stream(ingest.bronze_event_stream(spark, settings), settings)._jdf.queryExecution()
    assert "from_json" not in plan.toString() and "Kafka" not in plan.toString(), "no second parse, no Kafka"

    # bronze (4 ingest batches) is read in one micro-batch; bad records were quarantined, duplicates dropped by 01
    valid = sim.valid.assign(event_time_us=sim.valid.event_time.dt.tz_convert(None).astype("int64") // 1000)
    assert first == oracle_rows(reference_samples([valid], 60, 30, 30))
    assert any("anomaly" in r[5] for r in first) and len({r[0] for r in first}) > 5
