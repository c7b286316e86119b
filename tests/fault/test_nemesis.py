"""The seeded fault test over the always-on job (``tests/support/nemesis.py``): one kill -9 of Spark at every kind of
kill point (before and after a query's K-th non-empty Delta append or MERGE, as its offset log, commit log or state
store version lands, as a table's Delta checkpoint lands), of the real-time query's Kafka sink and of the broker, a
stop of the real-time alert query and a second writer, under a fleet whose clocks disagree; then exact equality with
what the producer got acknowledged and with the sampling oracle. Every planned point must be reached. The long random
chain over every point runs in ``make nightly`` (``tests/support/nemesis.py --seed 7 --kills 60``). Then four bugs
are planted one at a time in the drained tables (a record dropped, an append doubled, an escalation lost, an on-time
event kept as late): the verdict must fail on each, naming it."""

from collections import Counter

import pytest
from support.nemesis import POINT_KINDS, Nemesis, suite_plan, verify

from sensorcep.local import broker


def _drop_one(spark, path: str) -> None:
    """A record lost in ingest: one bronze row gone."""
    row = spark.read.format("delta").load(path).orderBy("partition", "offset").first()
    spark.sql(f"DELETE FROM delta.`{path}` WHERE partition = {row.partition} AND offset = {row.offset}")


def _append_twice(spark, path: str) -> None:
    """A replayed micro-batch appended again: one of its rows twice."""
    spark.read.format("delta").load(path).limit(1).write.format("delta").mode("append").save(path)


def _lose_one(spark, path: str) -> None:
    """An escalation lost between alert_events and alert_escalations."""
    alert_id = spark.read.format("delta").load(path).first().alert_id
    spark.sql(f"DELETE FROM delta.`{path}` WHERE alert_id = '{alert_id}'")


def _keep_on_time(spark, path: str) -> None:
    """An on-time event kept as late: a late row's event moved past the watermark its batch used."""
    row = spark.read.format("delta").load(path).orderBy("query", "batch_id", "device_id").first()
    spark.sql(
        f"UPDATE delta.`{path}` SET event_time = watermark + INTERVAL 1 SECOND "
        f"WHERE query = '{row.query}' AND device_id = '{row.device_id}' AND event_time = '{row.event_time}'"
    )


#: (bug, table, plant(spark, path), what the verdict must say)
PLANTED = [
    ("a record dropped in ingest", "bronze_events", _drop_one, r"ingest's tables .* miss 1 of its"),
    ("an append done twice on a replay", "sensor_samples", _append_twice, "a sample row twice"),
    ("an escalation lost", "alert_escalations", _lose_one, r"alert_escalations lost 1 escalation"),
    ("an on-time event kept as late", "late_events", _keep_on_time, "after the watermark Spark used"),
]
OWN_BROKER = "127.0.0.1:19094"  # killed by the nemesis: not the session's broker
SEED = 20261126
#: half the nightly chain's records per chunk: still every path the verdict covers (the asserts below)
SUITE_PER_CHUNK = 20


@pytest.mark.timeout(1500)
def test_every_kind_of_kill_point_is_reached_and_loses_nothing_and_doubles_nothing(spark, tmp_path):
    actions = suite_plan(SEED)
    nemesis = Nemesis(seed=SEED, actions=actions, workdir=tmp_path, bootstrap=OWN_BROKER, per_chunk=SUITE_PER_CHUNK)
    try:  # the broker stays up until the planted bugs are judged: the verdict reads the topic
        outcomes = nemesis.run()
        counts = verify(nemesis.settings, nemesis.acknowledged)
        print("\n".join(f"{action:48} {outcome}" for action, outcome in outcomes), counts)
        assert not nemesis.missed, f"kill points planned but not reached: {nemesis.missed}"
        reached = Counter(point.split(":")[0] for point in nemesis.reached)
        assert set(reached) == set(POINT_KINDS), f"every kind of kill point once: {reached}"
        kinds = Counter(action.split(":")[0] for action, _ in outcomes)
        assert kinds["sink"] == kinds["broker"] == kinds["stop_alerts"] == kinds["second_writer"] == 1, kinds
        assert counts["acknowledged"] == counts["records"], "every record in the topic was acknowledged"
        # the run exercised every path the verdict covers
        exercised = ("quarantine", "duplicates", "late", "samples", "anomalies", "escalations")
        assert all(counts[table] > 0 for table in exercised), counts

        # the verifier itself: each planted bug must make the verdict fail, naming what was lost or doubled
        for bug, table, plant, says in PLANTED:
            path = nemesis.settings.table_path(table)
            version = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()["version"]
            plant(spark, path)
            try:
                with pytest.raises(AssertionError, match=says):
                    verify(nemesis.settings, nemesis.acknowledged)
            finally:
                spark.sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF {version}")
            print(f"planted: {bug}: the verdict failed, as it must")
        verify(nemesis.settings, nemesis.acknowledged)  # and passes again on the restored tables
    finally:
        broker.down(nemesis.broker_dir)
