"""The late-event writer every stateful query's foreachBatch goes through: output rows to the query's own writer,
late input rows to ``late_events``, and a batch with nothing in it to nobody."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from support.streams import T0, delta_frame, delta_version

from sensorcep.io.lake import Tables
from sensorcep.pipeline import lateness

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # watermark 0: the mark of a first batch
SCHEMA = (
    "_out struct<device_id: string, n: int>, _in struct<device_id: string, sensor_freq: double, event_time: timestamp>"
)


def test_a_sink_with_nothing_to_write_is_not_asked_and_a_late_row_lands_once(spark, settings, monkeypatch):
    appended = []  # the tables the writer asked to append to
    append = Tables.write
    monkeypatch.setattr(
        Tables, "write", lambda self, df, name, *a, **k: appended.append(name) or append(self, df, name, *a, **k)
    )
    Tables(spark, settings).create(["late_events"])
    checkpoint = Path(settings.checkpoint_path("sampling"))  # what a started query leaves: the id its writers use
    checkpoint.mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": "a-query-id"}) + "\n")
    version = delta_version(settings.table_path("late_events"))
    asked = []
    write = lateness.late_event_writer(
        settings, "sampling", lambda df, batch_id: asked.append((df.collect(), batch_id))
    )

    write(spark.createDataFrame([], SCHEMA), 0)
    assert asked == [], "an empty batch reached the query's own writer"
    assert delta_version(settings.table_path("late_events")) == version, "an empty batch committed to late_events"

    write(spark.createDataFrame([(("d0", 1), None)], SCHEMA), 0)  # output only: no late row to record
    assert [(out[0].asDict(), batch) for out, batch in asked] == [({"device_id": "d0", "n": 1}, 0)]
    assert appended == [], "the late-events sink was asked to append a batch without late rows"
    asked.clear()

    # batch 0: Spark's late-row filter used watermark 0, so only an input row at the epoch is late; a normal input row
    # (the operator's input, not late) is neither output nor kept
    rows = [
        (("d1", 3), None),
        (None, ("d1", 1.0, EPOCH)),
        (None, ("d2", 2.0, T0)),
    ]
    write(spark.createDataFrame(rows, SCHEMA), 0)
    assert [(out[0].asDict(), batch) for out, batch in asked] == [({"device_id": "d1", "n": 3}, 0)]
    assert appended == ["late_events"]
    late = delta_frame(settings.table_path("late_events"))
    assert list(late.device_id) == ["d1"] and list(late["query"]) == [settings.query_name("sampling")]


def test_an_input_read_twice_records_each_late_event_once_whatever_day_it_is_of(spark, settings):
    """The alert lifecycle's and the group rules' input (a topic) may hold an event twice: a late event already in
    ``late_events`` is not appended again, one of another day is, and the read of what is held covers the late rows'
    own days only."""
    Tables(spark, settings).create(["late_events"])
    checkpoint = Path(settings.checkpoint_path("alert_lifecycle"))
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": "a-query-id"}) + "\n")
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{}\n')
    write = lateness.late_event_writer(settings, "alert_lifecycle", lambda df, batch_id: None, input_repeats=True)
    day_before = datetime(1969, 12, 31, 12, tzinfo=timezone.utc)  # late too: the mark of batches 0 and 1 is the epoch

    write(spark.createDataFrame([(None, ("d1", 1.0, EPOCH)), (None, ("d1", 1.0, EPOCH))], SCHEMA), 0)
    write(
        spark.createDataFrame(
            [(None, ("d1", 1.0, EPOCH)), (None, ("d2", 2.0, day_before)), (None, ("d3", 3.0, EPOCH))], SCHEMA
        ),
        1,
    )
    late = delta_frame(settings.table_path("late_events"))
    assert sorted(zip(late.device_id, late.batch_id, strict=True)) == [("d1", 0), ("d2", 1), ("d3", 1)]
    assert sorted(str(d) for d in late.part_date) == ["1969-12-31", "1970-01-01", "1970-01-01"]


def test_a_batch_replayed_by_a_restarted_query_adds_no_late_row_and_its_next_batch_adds_its_own(spark, settings):
    """Late rows are appended blind (no Delta transaction id): a batch whose late rows an earlier run appended before
    dying is replayed by the restarted query and adds nothing; the batches after it add theirs."""
    Tables(spark, settings).create(["late_events"])
    checkpoint = Path(settings.checkpoint_path("sampling"))
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": "a-query-id"}) + "\n")
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{}\n')
    batch_0 = spark.createDataFrame([(None, ("d1", 1.0, EPOCH))], SCHEMA)

    lateness.late_event_writer(settings, "sampling", lambda df, batch_id: None)(batch_0, 0)  # then the run died
    restarted = lateness.late_event_writer(settings, "sampling", lambda df, batch_id: None)
    restarted(batch_0, 0)  # Spark replays the batch it had not committed
    restarted(spark.createDataFrame([(None, ("d2", 2.0, EPOCH))], SCHEMA), 1)
    late = delta_frame(settings.table_path("late_events"))
    assert sorted(zip(late.device_id, late.batch_id, strict=True)) == [("d1", 0), ("d2", 1)]
