"""The seeded fault test over the always-on job (``tests/support/nemesis.py``): a kill -9 of Spark at every kind of
named kill point (before and after a Delta append or MERGE; inside the write of an offset and a commit log entry, of
a Delta commit file and of a Delta checkpoint; as a state store version lands; as the notifier's message has reached
its receiver; each at its query's first non-empty commit of the run, every query that writes a table killed at a
point of its own; in ``make nightly`` also every table's write, before and after its commit), of the real-time
query's Kafka sink and of the broker, a reset of the sampling query's checkpoint (refused, then rebuilt from bronze),
a stop of the real-time alert query and a second writer, under a fleet whose clocks disagree, whose on-call people
ack and snooze (some acks for alerts that never come, some before their alert) and whose rules include one stateful
rule of each kind; then exact equality with what the producer got acknowledged, with the sampling oracle, with device
activity replayed over the batches its query ran, with the stateful rules run in plain Python and with what the
receiver got. Every planned point must be reached. The long random chain over every point (the points as a file lands
too, K up to 12) runs in ``make nightly`` (``tests/support/nemesis.py --seed 7 --kills 60``). Then nine bugs are
planted one at a time in what the verdict read (a record dropped, an append doubled, an escalation lost, an on-time
event kept as late, an ack lost, a status change lost, a delivered message the ledger lost, a stateful rule's alert
lost, an alert id sent for two events): the verdict must fail on each, naming it."""

from collections import Counter

import pandas as pd
import pytest
from support.nemesis import (
    SUITE,
    WRITES,
    Drained,
    Nemesis,
    judge,
    killed_query,
    suite_plan,
    with_an_alert_id_reused,
    without_one_stateful_alert,
)
from support.profiles import NIGHTLY

from sensorcep.local import broker


def _drop_one(bronze: pd.DataFrame) -> pd.DataFrame:
    """A record lost in ingest: one bronze row gone."""
    return bronze.sort_values(["partition", "offset"]).iloc[1:]


def _append_twice(samples: pd.DataFrame) -> pd.DataFrame:
    """A replayed micro-batch appended again: one of its rows twice."""
    return pd.concat([samples, samples.iloc[:1]], ignore_index=True)


def _lose_one(escalations: pd.DataFrame) -> pd.DataFrame:
    """An escalation lost between alert_events and alert_escalations."""
    return escalations[escalations.alert_id != escalations.alert_id.iloc[0]]


def _keep_on_time(late: pd.DataFrame) -> pd.DataFrame:
    """An on-time event kept as late: a late row's event moved past the watermark its batch used."""
    late = late.sort_values(["query", "batch_id", "device_id"]).reset_index(drop=True)
    late.loc[0, "event_time"] = late.loc[0, "watermark"] + pd.Timedelta(seconds=1)
    return late


def _lose_an_ack(transitions: pd.DataFrame) -> pd.DataFrame:
    """An ack the lifecycle never took: its ``acked`` (or ``snoozed``) transition missing from alert_events."""
    acked = transitions[transitions.transition.isin(["acked", "snoozed"])]
    return transitions.drop(acked.index[:1])


def _lose_a_message(ledger: pd.DataFrame) -> pd.DataFrame:
    """A message the receiver got that the ledger lost (its pass replayed, the row never appended)."""
    return ledger.drop(ledger.index[ledger.status == "delivered"][:1])


def _lose_a_status_change(status: pd.DataFrame) -> pd.DataFrame:
    """A device's status change lost (a replayed batch that did not write it again)."""
    return status.drop(status.index[status.status_event != "device_first_seen"][:1])


#: (bug, table, plant(the table's judged rows) -> the rows with the bug, what the verdict must say)
PLANTED = [
    ("a record dropped in ingest", "bronze_events", _drop_one, r"ingest's tables .* miss 1 of its"),
    ("an append done twice on a replay", "sensor_samples", _append_twice, "a sample row twice"),
    ("an escalation lost", "alert_escalations", _lose_one, r"alert_escalations lost 1 escalation"),
    ("an on-time event kept as late", "late_events", _keep_on_time, "after the watermark Spark used"),
    ("an ack lost", "alert_events", _lose_an_ack, "alert_events differ from the lifecycle over the alerts it took"),
    ("a status change lost", "device_status", _lose_a_status_change, r"device_status differs .* 1 change\(s\) missing"),
    (
        "a message the ledger lost",
        "notifications",
        _lose_a_message,
        r"the receiver got 1 message\(s\) the ledger does not",
    ),
]
OWN_BROKER = "127.0.0.1:19094"  # killed by the nemesis: not the session's broker
SEED = 20261126
#: half the nightly chain's records per chunk: still every path the verdict covers (the asserts below)
SUITE_PER_CHUNK = 20


@pytest.mark.timeout(1500)
def test_every_named_kill_point_is_reached_and_loses_nothing_and_doubles_nothing(spark, tmp_path):
    actions = suite_plan(SEED, every_table=NIGHTLY)
    nemesis = Nemesis(
        seed=SEED,
        actions=actions,
        workdir=tmp_path,
        bootstrap=OWN_BROKER,
        per_chunk=SUITE_PER_CHUNK,
        whole_job=False,
    )
    try:  # the broker stays up until the verdict has read the topics
        outcomes = nemesis.run()
        drained = Drained.read(nemesis.settings, nemesis.receiver.received)
        counts = judge(nemesis.settings, drained, nemesis.acknowledged)
        print("\n".join(f"{action:48} {outcome}" for action, outcome in outcomes), counts)
        assert not nemesis.missed, f"kill points planned but not reached: {nemesis.missed}"
        planned = [action.arg for action in actions if action.kind == "point"]
        assert sorted(nemesis.reached) == sorted(planned), "every planned point reached once"
        sides = ("before", "after")
        writes = {tuple(point.split(":")[:3]) for point in nemesis.reached if point.split(":")[0] in sides}
        if NIGHTLY:
            tables = {table for _, table in WRITES}
            assert {(w, t) for w in sides for t in tables} <= {(w, t) for w, _, t in writes}, (
                "every table, before and after"
            )
        killed = {killed_query(point) for point in nemesis.reached}
        assert {query for query, _ in WRITES} <= killed, "every writing query, at a point of its own"
        assert {side for side, _, _ in writes} == set(sides), "before and after a commit"
        assert set(SUITE) <= {point.split(":")[0] for point in nemesis.reached}, "every other named kind"
        kinds = Counter(action.split(":")[0] for action, _ in outcomes)
        assert kinds["sink"] == kinds["broker"] == kinds["stop_alerts"] == kinds["second_writer"] == kinds["reset"] == 1
        assert dict(outcomes)["reset:sampling"].startswith("reset refused naming"), "the reset came after it wrote"
        assert counts["acknowledged"] == counts["records"], "every record in the topic was acknowledged"
        # the run exercised every path the verdict covers
        exercised = ("quarantine", "duplicates", "late", "samples", "anomalies", "escalations", "notifications")
        exercised += ("status_changes", "stateful_alerts")
        assert all(counts[table] > 0 for table in exercised), counts
        # the delivery kill came between a send and its record: the replay sent that very message again, same id
        got = Counter(headers["Idempotency-Key"] for _, headers, _ in drained.received)
        assert nemesis.resent_after_kill and all(got[i] >= 2 for i in nemesis.resent_after_kill), (
            nemesis.resent_after_kill,
            [got[i] for i in nemesis.resent_after_kill],
        )
        # the fleet's acks reached the lifecycle: incidents acked or snoozed, and acks with nothing open to close
        assert counts["acked"] + counts["snoozed"] > 0 and counts["ignored"] > 0, counts

        # the verifier itself: each planted bug must make the verdict fail, naming what was lost or doubled (planted in
        # what the verdict read, so each costs a judgement, not a Delta write, a read of everything and a restore)
        for bug, table, plant, says in PLANTED:
            with pytest.raises(AssertionError, match=says):
                judge(nemesis.settings, drained.with_table(table, plant(drained.frame(table))), nemesis.acknowledged)
            print(f"planted: {bug}: the verdict failed, as it must")
        with pytest.raises(AssertionError, match="1 never sent"):  # planted in what the verdict read of the topic
            judge(nemesis.settings, without_one_stateful_alert(drained), nemesis.acknowledged)
        print("planted: a stateful rule's alert lost: the verdict failed, as it must")
        with pytest.raises(AssertionError, match="was sent for two events"):
            judge(nemesis.settings, with_an_alert_id_reused(drained), nemesis.acknowledged)
        print("planted: an alert id sent for two events: the verdict failed, as it must")
    finally:
        broker.down(nemesis.broker_dir)
