"""01 ingest with the real broker and real Delta tables: exactly the valid distinct events land."""

from datetime import datetime, timezone

import pytest
from support.crash import kill_after_first_commit
from support.streams import delta_frame

from sensorcep.local import simulator
from sensorcep.local.broker import create_topics
from sensorcep.pipeline import ingest

START = datetime(2026, 3, 1, 8, 0, tzinfo=timezone.utc)


def _bronze_keys(settings):
    df = delta_frame(settings.table_path("bronze_events"), ["device_id", "event_time"])
    return list(
        zip(df.device_id, df.event_time.dt.tz_localize(None) if df.event_time.dt.tz else df.event_time, strict=False)
    )


def _expected(*sims):
    rows = []
    for sim in sims:
        rows += list(zip(sim.valid.device_id, sim.valid.event_time.dt.tz_convert(None), strict=False))
    return set(rows)


def _quarantine(settings):
    return delta_frame(settings.table_path("quarantine_events"), ["offset", "reason", "raw_value"])


def _produce(settings, events, seed, start):
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic])
    sim = simulator.generate(
        simulator.SimulationConfig(
            events=events, devices=40, seed=seed, start=start, rate=100, malformed_share=0.03, duplicate_share=0.03
        )
    )
    simulator.produce(sim, settings.kafka_bootstrap_servers, settings.events_topic)
    return sim


def test_two_runs_land_exactly_the_valid_distinct_events(spark, settings):
    settings = settings.replace(max_offsets_per_trigger=1_600)  # two batches a run: judged against one another too
    first = _produce(settings, 3_000, seed=1, start=START)
    ingest.start_ingest(spark, settings)
    second = _produce(settings, 2_000, seed=2, start=first.end)
    ingest.start_ingest(spark, settings)

    bronze = _bronze_keys(settings)
    assert len(bronze) == len(set(bronze)), "no duplicate (device_id, event_time) in bronze"
    assert set(bronze) == _expected(first, second)
    quarantine = _quarantine(settings)
    assert len(quarantine) == len(first.malformed) + len(second.malformed)
    assert quarantine.reason.notna().all()
    assert set(quarantine.raw_value) == set(first.malformed.value) | set(second.malformed.value)


#: a crash of ingest (a cold JVM in a subprocess), in make extended beside the fault test, which kills it at every
#: kind of point (decisions 0040, 0063); make test replays ingest's batches in its own session
@pytest.mark.extended
def test_killed_run_then_rerun_changes_nothing(spark, settings, tmp_path):
    sim = _produce(settings, 4_000, seed=3, start=START)
    kill_after_first_commit("pipeline.ingest.start_ingest", settings, "bronze_events")
    partial = len(_bronze_keys(settings))
    assert 0 < partial < len(sim.distinct_valid)

    ingest.start_ingest(spark, settings)
    bronze = _bronze_keys(settings)
    assert len(bronze) == len(set(bronze)) and set(bronze) == _expected(sim)
    assert len(_quarantine(settings)) == len(sim.malformed)


#: in make extended (decision 0063): make test's test_ingest_accounting.py resets ingest's checkpoint and reads again
@pytest.mark.extended
def test_after_a_checkpoint_reset_the_new_querys_batches_are_written_not_taken_for_replays(spark, settings):
    import shutil

    first = _produce(settings, 1_500, seed=4, start=START)
    ingest.start_ingest(spark, settings)  # batch ids 0 and 1 of the first checkpoint are in bronze
    shutil.rmtree(settings.checkpoint_path("ingest"))  # reset: the next query reads from the start, batch ids from 0
    second = _produce(settings, 1_500, seed=5, start=first.end)
    ingest.start_ingest(spark, settings)
    bronze = set(_bronze_keys(settings))
    assert _expected(first) | _expected(second) == bronze  # nothing of the new query's first batches was skipped


#: in make extended (decision 0063): make test quarantines bad records beside good ones (test_bad_input.py)
@pytest.mark.extended
def test_a_first_run_of_only_bad_records_creates_an_empty_bronze_that_sampling_can_read(spark, settings):
    import pandas as pd

    from sensorcep.pipeline import sampling

    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic])
    stamp = int(START.timestamp() * 1000)
    bad = pd.DataFrame({"key": [None, None], "value": [b"{}", b"not json"], "timestamp_ms": [stamp, stamp]})
    simulator.produce_records(bad, settings.kafka_bootstrap_servers, settings.events_topic)
    ingest.start_ingest(spark, settings)
    assert len(_quarantine(settings)) == 2
    assert len(_bronze_keys(settings)) == 0  # the table exists, empty: 02 can start on it
    sampling.start_sampling(spark, settings)  # no BronzeMissingError
    assert len(delta_frame(settings.table_path("sensor_samples"))) == 0


def test_a_quiet_fleet_waits_for_min_batch_records_and_a_busy_one_does_not(spark, settings):
    """``min_batch_records``: while fewer records wait, ingest runs no micro-batch (Spark's ``minOffsetsPerTrigger``;
    ``max_batch_delay`` is an hour here, so only the count can release them); once enough wait, one batch takes all."""
    settings = settings.replace(trigger="1 second", min_batch_records=500, max_batch_delay="1 hour")
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic])
    query = ingest.start_ingest(spark, settings, wait=False)
    try:
        query.processAllAvailable()  # the first trigger (an empty topic) has run: the wait starts from it
        few = simulator.generate(simulator.SimulationConfig(events=100, devices=10, seed=11, start=START, rate=100))
        simulator.produce(few, settings.kafka_bootstrap_servers, settings.events_topic)
        query.processAllAvailable()  # a trigger ran and found too few records to start a batch
        assert _bronze_keys(settings) == []
        assert all(p["numInputRows"] == 0 for p in query.recentProgress)

        more = simulator.generate(simulator.SimulationConfig(events=500, devices=10, seed=12, start=few.end, rate=100))
        simulator.produce(more, settings.kafka_bootstrap_servers, settings.events_topic)
        query.processAllAvailable()
        assert set(_bronze_keys(settings)) == _expected(few, more)
        waited = len(few.records) + len(more.records)
        assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [waited]
    finally:
        query.stop()
