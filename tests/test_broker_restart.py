"""The broker is killed (kill -9) while events are being produced and a query is running: after it is back, the
resumed query lands exactly the events the producer got acknowledged, none doubled. Uses a broker of its own."""

import threading

import pytest
from streams import delta_frame, produce_acknowledged

from sensorcep.local import broker, simulator
from sensorcep.pipeline import ingest

pytestmark = pytest.mark.integration
OWN_BROKER = "127.0.0.1:19093"


def _bronze(settings) -> list:
    frame = delta_frame(settings.table_path("bronze_events"), ["device_id", "event_time"])
    return list(zip(frame.device_id, frame.event_time.dt.tz_convert(None), strict=False))


def _keys(sim, acknowledged: set[int] | None = None) -> set:
    """(device_id, event_time) of the simulation's valid events (only those at acknowledged record indexes)."""
    valid = sim.valid if acknowledged is None else sim.valid[sim.valid.index.isin(acknowledged)]
    return set(zip(valid.device_id, valid.event_time.dt.tz_convert(None), strict=False))


def test_broker_kill_9_mid_stream_then_restart_lands_every_acknowledged_event_once(spark, settings, tmp_path):
    data_dir = tmp_path / "broker"
    settings = settings.replace(kafka_bootstrap_servers=OWN_BROKER, trigger="1 second")
    broker.up(OWN_BROKER, data_dir)
    try:
        broker.create_topics(OWN_BROKER, [settings.events_topic])
        before = simulator.generate(
            simulator.SimulationConfig(
                events=1_500, devices=20, seed=21, rate=50, malformed_share=0.02, duplicate_share=0.02
            )
        )
        simulator.produce(before, OWN_BROKER, settings.events_topic)
        running = ingest.start_ingest(spark, settings, wait=False)  # a continuous query, 1 s trigger
        running.processAllAvailable()
        assert set(_bronze(settings)) == _keys(before)

        # produce the next events while the broker dies and comes back: the producer's delivery reports say
        # which records Kafka acknowledged (an idempotent producer retries the rest without duplicates)
        during = simulator.generate(
            simulator.SimulationConfig(
                events=3_000, devices=20, seed=22, rate=50, start=before.end, malformed_share=0.02
            )
        )
        acknowledged: set[int] = set()
        producing = threading.Thread(
            target=produce_acknowledged, args=(during.records, OWN_BROKER, settings.events_topic, acknowledged, 1_000)
        )
        producing.start()
        while len(acknowledged) < 800 and producing.is_alive():  # a third of them are in: kill the broker now
            producing.join(0.05)
        broker.kill(data_dir)  # kill -9: no clean shutdown
        broker.up(OWN_BROKER, data_dir)  # recovers its logs from disk
        producing.join(180)
        assert not producing.is_alive()
        assert 800 <= len(acknowledged) <= len(during.records)

        if running.isActive:  # Spark's Kafka source may ride out the outage ...
            running.processAllAvailable()
            running.stop()
        ingest.start_ingest(spark, settings.replace(trigger="availableNow"))  # ... or resume from its checkpoint
        bronze = _bronze(settings)
        assert len(bronze) == len(set(bronze)), "an event landed twice"
        assert set(bronze) == _keys(before) | _keys(during, acknowledged)
    finally:
        broker.down(data_dir)
