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
    append = Tables.append_batch
    monkeypatch.setattr(
        Tables, "append_batch", lambda self, df, name, *a, **k: appended.append(name) or append(self, df, name, *a, **k)
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
