"""The broker stops mid-stream: the running query fails with a clear error, nothing is lost, and after the broker
is back the restarted query lands exactly the events of before and after. Uses a broker of its own (port 19093)."""
import pytest
from deltalake import DeltaTable

from sensorcep import broker, ingest, simulator

pytestmark = pytest.mark.integration
OWN_BROKER = "127.0.0.1:19093"


def _bronze(settings) -> set:
    frame = DeltaTable(settings.table_path("bronze_events")).to_pandas(columns=["device_id", "event_time"])
    assert not frame.duplicated().any(), "bronze holds a duplicate"
    return set(zip(frame.device_id, frame.event_time.dt.tz_localize(None) if frame.event_time.dt.tz else frame.event_time))


def _expected(*sims) -> set:
    return {key for sim in sims for key in zip(sim.valid.device_id, sim.valid.event_time.dt.tz_convert(None))}


def test_broker_down_stops_the_query_clearly_and_a_restart_loses_nothing(spark, settings, tmp_path):
    from pyspark.errors import StreamingQueryException

    data_dir = tmp_path / "broker"
    settings = settings.replace(kafka_bootstrap_servers=OWN_BROKER, trigger="1 second")
    broker.up(OWN_BROKER, data_dir)
    try:
        broker.create_topics(OWN_BROKER, [settings.events_topic])
        before = simulator.generate(simulator.SimulationConfig(events=1_500, devices=20, seed=21, rate=50,
                                                               malformed_share=0.02, duplicate_share=0.02))
        simulator.produce(before, OWN_BROKER, settings.events_topic)

        running = ingest.start_ingest(spark, settings, wait=False)  # a continuous query, 1 s trigger
        running.processAllAvailable()
        assert _bronze(settings) == _expected(before)

        broker.down(data_dir)  # mid-stream: the next trigger finds no broker
        with pytest.raises(StreamingQueryException, match=f"broker\\(s\\) {OWN_BROKER} not reachable"):
            running.awaitTermination(120)
        assert not running.isActive

        broker.up(OWN_BROKER, data_dir)  # data and topics survive a clean restart
        after = simulator.generate(simulator.SimulationConfig(events=1_500, devices=20, seed=22, rate=50,
                                                              start=before.end, malformed_share=0.02))
        simulator.produce(after, OWN_BROKER, settings.events_topic)
        ingest.start_ingest(spark, settings.replace(trigger="availableNow"))  # resumes from the checkpoint
        assert _bronze(settings) == _expected(before, after)
    finally:
        broker.down(data_dir)
