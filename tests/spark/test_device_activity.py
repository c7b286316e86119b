"""Device activity: first seen, offline after a silence longer than the timeout, online again."""

from __future__ import annotations

import pandas as pd
from support.streams import T0, T0_US, batch_stream, delta_frame, events, late_rows, write_batches

from sensorcep.pipeline import device_activity

# timeout 5 minutes, watermark 30 s; times are seconds after T0
BATCHES = [
    events(
        ("a", 1.0, 0),
        ("a", 1.0, 10),
        ("a", 1.0, 400),  # a gap of 390 s inside one batch
        ("b", 1.0, 0),
    ),  # b then stays silent
    events(
        ("a", 1.0, 20),  # out of order (after 400) but not late (the late-row mark is still 0): no change
        ("c", 1.0, 100),
        ("c", 1.0, 700),
    ),  # final watermark 670: b's timer (300) fires, a's (700) not
    events(("d", 1.0, 50)),  # older than the late-row watermark (370): too late, kept in late_events
]


def _status(settings) -> list[tuple]:
    table = delta_frame(settings.table_path("device_status"))
    seconds = lambda t: (pd.Timestamp(t).value // 1000 - int(T0.timestamp() * 1e6)) / 1e6  # noqa: E731
    return sorted(
        (r.device_id, r.status_event, r.status, seconds(r.changed_at), int(r.event_count))
        for r in table.itertuples(index=False)
    )


def test_offline_after_timeout_and_online_again(spark, settings, tmp_path):
    write_batches(tmp_path / "in", BATCHES)
    device_activity.start_device_activity(spark, settings, events=batch_stream(spark, tmp_path / "in"))
    assert _status(settings) == [
        ("a", "device_first_seen", "online", 0.0, 3),
        ("a", "device_offline", "offline", 310.0, 3),
        ("a", "device_online", "online", 400.0, 3),
        ("b", "device_first_seen", "online", 0.0, 1),
        ("b", "device_offline", "offline", 300.0, 1),
        ("c", "device_first_seen", "online", 100.0, 2),
        ("c", "device_offline", "offline", 400.0, 2),
        ("c", "device_online", "online", 700.0, 2),
    ]
    current = device_activity.current_status(spark.createDataFrame(delta_frame(settings.table_path("device_status"))))
    assert {r.device_id: r.status for r in current.collect()} == {"a": "online", "b": "offline", "c": "online"}
    assert device_activity.status_counts(spark.createDataFrame(delta_frame(settings.table_path("device_status")))) == {
        "offline": 1,
        "online": 2,
    }
    assert late_rows(settings, "device_activity") == [("d", 1.0, T0_US + 50_000_000, T0_US // 1000 + 370_000)]
