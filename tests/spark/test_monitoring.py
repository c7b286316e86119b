"""Progress capture (listener -> Delta stream_progress), the live view and the state data source, on real queries."""

import json
import time
from types import SimpleNamespace

import pandas as pd
import pytest
from support.streams import batch_stream, delta_frame, delta_version, events, write_batches

from sensorcep.observability import live, monitoring, reports
from sensorcep.pipeline import registry, sampling, streaming


def _progress(event) -> SimpleNamespace:
    return SimpleNamespace(**json.loads(event.json))


def _noop(batch, batch_id):
    batch.count()


@pytest.fixture
def short_run(spark, settings, tmp_path, monkeypatch):
    """Four micro-batches through a project query (start_query + finish), flushed every 2 events."""
    monkeypatch.setattr(monitoring, "FLUSH_EVERY", 2)
    write_batches(tmp_path / "in", [events(("d1", 1.0, s), ("d2", 2.0, s + 1)) for s in (10, 50, 90, 130)])
    query = streaming.run_available_now(
        batch_stream(spark, tmp_path / "in").withWatermark("event_time", "30 seconds"),
        settings,
        "progress_probe",
        foreach_batch=_noop,
    )
    return query, settings


def test_listener_writes_every_progress_event_of_the_run_including_the_last(short_run):
    query, settings = short_run
    expected = [
        (p["batchId"], p["numInputRows"], p["eventTime"].get("watermark"))
        for p in (json.loads(p.json) for p in query.recentProgress)
    ]
    stored = delta_frame(settings.table_path("stream_progress"))
    stored = stored[stored.run_id == str(query.runId)].sort_values("batch_id")
    got = [
        (int(r.batch_id), int(r.num_input_rows), json.loads(r.progress_json)["eventTime"].get("watermark"))
        for r in stored.itertuples()
    ]
    assert got == expected
    assert len(expected) >= 4 and sum(n for _, n, _ in expected) == 8
    assert set(stored.query_name) == {settings.query_name("progress_probe")}
    commits = delta_version(settings.table_path("stream_progress")) + 1
    assert 2 <= commits <= -(-len(expected) // 2)  # written in the background every >= 2 events, not once per event


def test_queries_not_started_by_the_project_are_not_recorded(spark, settings, tmp_path):
    write_batches(tmp_path / "in", [events(("d1", 1.0, 10))])
    monitoring.ensure_progress_listener(spark, settings, "registered_elsewhere")
    other = (
        batch_stream(spark, tmp_path / "in")
        .writeStream.queryName("not_ours")
        .foreachBatch(_noop)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    other.processAllAvailable()
    other.stop()
    assert other.recentProgress, "the other query reported progress the listener heard"
    # the control: a project query on the same session and settings is recorded
    ours = streaming.run_available_now(
        batch_stream(spark, tmp_path / "in"), settings, "progress_probe", foreach_batch=_noop
    )
    monitoring.flush_progress(spark, settings, other)
    progress = reports.read_progress(spark, settings)
    assert not progress.empty
    assert set(progress.run_id) == {str(ours.runId)}
    assert set(progress.query_name) == {settings.query_name("progress_probe")}


def test_read_progress_and_health_of_the_recorded_run(short_run, spark):
    from sensorcep.observability import health

    query, settings = short_run
    progress = reports.read_progress(spark, settings)
    ran = progress[progress.run_id == str(query.runId)]  # the session's other tests record their runs beside it
    verdicts = health.check_health(ran, registry.trigger_intervals(settings))
    assert {v.rule for v in verdicts} == {
        "falling_behind",
        "slow_batches",
        "state_growth",
        "watermark_stalled",
        "late_rows",
    }
    assert all(v.query_name == settings.query_name("progress_probe") for v in verdicts)
    assert sorted(ran.batch_id) == [p.batchId for p in map(_progress, query.recentProgress)]
    assert ran.num_input_rows.sum() == 8
    # four small batches, each moving the watermark, none late, no state: the rules that judge those find the run
    # healthy (falling_behind and slow_batches judge its rates and durations, which depend on the machine's load)
    judged = {v.rule: v.healthy for v in verdicts}
    assert {rule: judged[rule] for rule in ("state_growth", "watermark_stalled", "late_rows")} == dict.fromkeys(
        ("state_growth", "watermark_stalled", "late_rows"), True
    )
    assert all(v.run_id == str(query.runId) and v.summary for v in verdicts)


def test_live_view_shows_each_querys_last_progress(short_run, capsys):
    query, _ = short_run
    with live.LiveView([query], every_s=0.05) as view:
        deadline = time.monotonic() + 10
        while view.refreshes == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert view.refreshes >= 1, "the background loop refreshed the view while it was open"
    table = view.render()
    last = json.loads(query.lastProgress.json)
    assert table.to_dict("records")[0] == {
        "query": query.name,
        "status": "stopped",
        "batch": last["batchId"],
        "input rows/s": round(last["inputRowsPerSecond"]),
        "processed rows/s": round(last["processedRowsPerSecond"]),
        "batch ms": last["batchDuration"],
        "state rows": None,
        "watermark": last["eventTime"]["watermark"][11:19],
    }
    assert query.name in capsys.readouterr().out


def test_state_data_source_shows_the_chunks_open_windows_still_need(spark, settings, tmp_path):
    # batch 0: 10 s, 20 s, 50 s; batch 1: 100 s; batch 2: 130 s -> watermark 100 s closes the windows ending at 30,
    # 60 and 90 s
    write_batches(
        tmp_path / "in",
        [events(("d1", 1.0, 10), ("d2", 2.0, 20), ("d3", 3.0, 50)), events(("d1", 4.0, 100)), events(("d2", 5.0, 130))],
    )
    sampling.start_sampling(spark, settings, events=batch_stream(spark, tmp_path / "in"))
    operators = reports.state_metadata(spark, settings, "sampling").toPandas()
    assert operators.operatorName.str.contains("transformWithState").all() and len(operators) == 1
    held = sampling.state_chunks(spark, settings)
    t0 = pd.Timestamp(events(("x", 0.0, 0)).event_time_us[0], unit="us")
    # batch 0's chunk (buckets 0-30 s) was freed with the window [30, 90); batch 1's and 2's wait for later windows
    seconds = lambda column: [(b - t0).total_seconds() for b in held[column]]  # noqa: E731
    assert held.chunk.tolist() == [1, 2] and held.scope.tolist() == ["all", "all"]
    assert seconds("first_bucket") == [90, 120] and seconds("last_bucket") == [90, 120]
    assert (held.bytes > 0).all()


def test_a_progress_table_that_cannot_be_written_costs_a_bounded_buffer_and_says_how_many_rows_it_lost(
    spark, settings, tmp_path, caplog
):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # a real write failure: the table's folder would be inside a file
    broken = settings.replace(base_path=str(blocker), tables="paths")
    listener = monitoring.DeltaProgressListener(spark)  # not registered: fed by hand below
    listener.route("probe", broken)
    for batch_id in range(5):
        progress = {"name": "probe", "id": "q", "runId": "r", "batchId": batch_id, "timestamp": "2026-01-05T12:00:00Z"}
        listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json.dumps(progress))))
    outcomes = [(listener.flush(), listener.rows_lost) for _ in range(monitoring.WRITE_ATTEMPTS)]
    assert outcomes == [(0, 0)] * (monitoring.WRITE_ATTEMPTS - 1) + [(0, 5)]
    assert listener.flush() == 0 and listener.rows_lost == 5  # given up, not retried forever
    assert any("gave up 5 progress rows" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
