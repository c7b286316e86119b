"""Health rules over crafted ``stream_progress`` rows (no Spark: the rules only read a pandas frame)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest

from sensorcep.observability.health import (
    Verdict,
    check_health,
    falling_behind,
    health_line,
    health_table,
    late_rows,
    slow_batches,
    state_growth,
    trigger_interval_ms,
    unhealthy_evidence,
    watermark_stalled,
)
from sensorcep.settings import SettingsError

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def batches(n: int, query: str = "sensor_samples", run: str = "run-1", start: int = 0, **columns) -> pd.DataFrame:
    """``n`` healthy progress rows (batch ids from ``start``); each keyword replaces a column with a
    list of ``n`` values or one value for every row."""
    ids = list(range(start, start + n))
    rows = {
        "query_name": query,
        "query_id": f"id-{query}",
        "run_id": run,
        "batch_id": ids,
        "timestamp": [T0 + timedelta(seconds=5 * i) for i in ids],
        "num_input_rows": 1000,
        "input_rows_per_second": 1000.0,
        "processed_rows_per_second": 2000.0,
        "batch_duration_ms": 500,
        "watermark": [T0 + timedelta(seconds=10 * i) for i in ids],
        "event_time_max": [T0 + timedelta(seconds=10 * i + 40) for i in ids],
        "state_rows_total": 100,
        "state_memory_bytes": 10_000,
        "state_commit_ms": 5,
        "rows_dropped_by_watermark": 0,
    }
    rows.update(columns)
    return pd.DataFrame({name: value if isinstance(value, list) else [value] * n for name, value in rows.items()})


def only(verdicts: list[Verdict]) -> Verdict:
    assert len(verdicts) == 1, verdicts
    return verdicts[0]


def ids(verdict: Verdict) -> list[int]:
    return verdict.evidence.batch_id.tolist()


# ----------------------------------------------------------------------------------- falling_behind
def test_falling_behind_healthy_when_a_short_dip_stays_under_the_limit():
    processed = [2000.0] * 10
    processed[3:5] = [900.0, 950.0]
    v = only(falling_behind(batches(10, processed_rows_per_second=processed), consecutive=3))
    assert v.healthy and v.rule == "falling_behind" and (v.query_name, v.run_id) == ("sensor_samples", "run-1")
    assert "over 10 batches with input (longest stretch below the input rate: 2 batches; limit 3)" in v.summary
    assert ids(v) == list(range(10))


def test_falling_behind_flags_consecutive_slow_batches_with_the_worst_rates():
    incoming, processed = [1000.0] * 20, [2000.0] * 20
    incoming[12:16] = [2000.0, 2400.0, 2400.0, 2200.0]
    processed[12:16] = [1500.0, 810.0, 1000.0, 2100.0]
    processed[5] = 500.0  # a single dip elsewhere is not part of the evidence
    v = only(falling_behind(batches(20, input_rows_per_second=incoming, processed_rows_per_second=processed)))
    assert not v.healthy
    assert v.summary == (
        "processing rate below input rate for 4 consecutive batches (batches 12-15; worst 810 vs 2,400 rows/s)"
    )
    assert ids(v) == [12, 13, 14, 15]


def test_falling_behind_skips_unknown_rates_but_an_empty_batch_breaks_the_stretch():
    processed = [2000.0, 500.0, 500.0, np.nan, 500.0, 2000.0]
    incoming = [1000.0, 1000.0, 1000.0, None, 1000.0, 1000.0]
    v = only(falling_behind(batches(6, input_rows_per_second=incoming, processed_rows_per_second=processed)))
    assert not v.healthy and "for 3 consecutive batches (batches 1-4;" in v.summary
    assert ids(v) == [1, 2, 4]

    v = only(
        falling_behind(
            batches(
                6,
                num_input_rows=[1000, 1000, 1000, 0, 1000, 1000],
                processed_rows_per_second=[2000.0, 500.0, 500.0, 0.0, 500.0, 2000.0],
            )
        )
    )
    assert v.healthy and "over 5 batches with input (longest stretch below the input rate: 2 batches;" in v.summary
    assert ids(v) == [0, 1, 2, 4, 5]


# ----------------------------------------------------------------------------------- slow_batches
def test_slow_batches_healthy_at_the_allowed_share():
    durations = [500] * 10
    durations[2] = durations[7] = 6000
    v = only(slow_batches(batches(10, batch_duration_ms=durations), trigger_interval_ms=5000, share=0.2))
    assert v.healthy
    assert v.summary == (
        "2 of 10 batches with input (20%) took longer than the 5,000 ms trigger interval (allowed 20%)"
    )
    assert ids(v) == list(range(10))


def test_slow_batches_flags_the_late_batches_and_ignores_empty_ones():
    durations = [500] * 15
    durations[1], durations[4], durations[8] = 6000, 12_345, 5001
    durations[10:] = [60_000] * 5  # empty batches: slow, but they do not count
    frame = batches(15, batch_duration_ms=durations, num_input_rows=[1000] * 10 + [0] * 5)
    v = only(slow_batches(frame, trigger_interval_ms={"sensor_samples": 5000}))
    assert not v.healthy
    assert v.summary == (
        "3 of 10 batches with input (30%) took longer than the 5,000 ms trigger interval (worst 12,345 ms; allowed 20%)"
    )
    assert ids(v) == [1, 4, 8]


def test_slow_batches_does_not_apply_to_as_fast_as_possible_triggers():
    frame = pd.concat(
        [
            batches(5, query="ingest", batch_duration_ms=60_000),
            batches(5, query="sampling", batch_duration_ms=60_000),
            batches(5, query="alerts", batch_duration_ms=60_000),
        ]
    )
    intervals = {"ingest": trigger_interval_ms("availableNow"), "sampling": trigger_interval_ms("0 seconds")}
    verdicts = {v.query_name: v for v in slow_batches(frame, intervals)}
    assert set(verdicts) == {"ingest", "sampling", "alerts"}  # alerts: no interval given
    for v in verdicts.values():
        assert v.healthy and "does not apply" in v.summary and "as fast as possible" in v.summary
        assert v.evidence.empty
    assert not only(slow_batches(frame[frame.query_name == "alerts"], 30_000)).healthy


def test_trigger_interval_ms():
    assert trigger_interval_ms("5 seconds") == 5000
    assert trigger_interval_ms("500 ms") == 500
    assert trigger_interval_ms("1 minute") == 60_000
    assert [trigger_interval_ms(t) for t in ("availableNow", "once", "0 seconds")] == [0, 0, 0]
    with pytest.raises(SettingsError):
        trigger_interval_ms("soon")


# ----------------------------------------------------------------------------------- state_growth
def test_state_growth_flags_state_that_never_shrinks():
    v = only(state_growth(batches(8, state_rows_total=[100, 200, 300, 400, 500, 800, 900, 1000])))
    assert not v.healthy
    assert v.summary == (
        "state grew without ever decreasing over the second half (batches 4-7) to 1,000 rows, "
        "2.5x the first-half maximum of 400"
    )
    assert ids(v) == [4, 5, 6, 7]


def test_state_growth_healthy_when_windows_are_freed_or_growth_is_bounded():
    sawtooth = only(state_growth(batches(8, state_rows_total=[100, 300, 200, 400, 300, 900, 700, 1000])))
    assert (
        sawtooth.healthy and "1,000 rows at the end vs a first-half maximum of 400, 1 decrease(s)" in sawtooth.summary
    )
    assert ids(sawtooth) == list(range(8))
    bounded = only(state_growth(batches(8, state_rows_total=[100, 200, 300, 400, 450, 500, 600, 800])))
    assert bounded.healthy and "800 rows at the end vs a first-half maximum of 400, 0 decrease(s)" in bounded.summary


def test_state_growth_needs_enough_batches_with_state():
    v = only(state_growth(batches(8, state_rows_total=[None, None, None, 100, 1000, 5000, 9000, 20_000])))
    assert v.healthy and "not enough batches" in v.summary and "(5, need 6)" in v.summary
    assert ids(v) == [3, 4, 5, 6, 7]
    assert not only(
        state_growth(batches(8, state_rows_total=[None, None, None, 100, 1000, 5000, 9000, 20_000]), min_batches=5)
    ).healthy


# ----------------------------------------------------------------------------------- watermark_stalled
def stuck_watermarks(n: int, from_batch: int) -> list[datetime]:
    return [T0 + timedelta(seconds=10 * min(i, from_batch - 1)) for i in range(n)]


def test_watermark_stalled_flags_a_stuck_watermark_while_event_time_moves_on():
    v = only(watermark_stalled(batches(9, watermark=stuck_watermarks(9, 4))))
    assert not v.healthy
    assert v.summary == (
        "watermark stuck at 2026-01-05 12:00:30 for 5 consecutive batches with input "
        "(batches 4-8) while event time reached 2026-01-05 12:02:00"
    )
    assert ids(v) == [4, 5, 6, 7, 8]


def test_watermark_stalled_healthy_when_advancing_or_when_no_newer_data_arrives():
    v = only(watermark_stalled(batches(6)))
    assert v.healthy and "advanced from 2026-01-05 12:00:00 to 2026-01-05 12:00:50 over 6 batches" in v.summary
    assert ids(v) == list(range(6))
    # the same still watermark, but only late data after batch 3: event time does not move, nothing to close
    late = [T0 + timedelta(seconds=10 * min(i, 3) + 40) for i in range(9)]
    v = only(watermark_stalled(batches(9, watermark=stuck_watermarks(9, 4), event_time_max=late)))
    assert v.healthy and "to 2026-01-05 12:00:30 over 9 batches with input (longest stall 0, limit 3)" in v.summary


def test_watermark_stalled_does_not_apply_without_a_watermark():
    v = only(watermark_stalled(batches(5, watermark=None)))
    assert v.healthy and v.summary == "does not apply: no watermark (stateless query)" and v.evidence.empty


# ----------------------------------------------------------------------------------- late_rows
def test_late_rows_flags_too_many_dropped_rows():
    dropped = [0] * 10
    dropped[2], dropped[7] = 100, 50
    v = only(late_rows(batches(10, rows_dropped_by_watermark=dropped), max_share=0.01))
    assert not v.healthy
    assert v.summary == ("150 of 10,000 input rows (1.50%) dropped as later than the watermark (allowed 1.00%)")
    assert ids(v) == [2, 7]


def test_late_rows_healthy_below_the_share_and_not_applicable_when_stateless():
    v = only(late_rows(batches(10, rows_dropped_by_watermark=[0] * 9 + [50])))
    assert v.healthy and "50 of 10,000 input rows (0.50%)" in v.summary and ids(v) == list(range(10))
    v = only(late_rows(batches(10, rows_dropped_by_watermark=None)))
    assert v.healthy and "does not apply" in v.summary and v.evidence.empty


# ----------------------------------------------------------------------------------- edge cases
def test_batches_without_input_are_healthy_everywhere():
    frame = batches(
        6, num_input_rows=0, input_rows_per_second=0.0, processed_rows_per_second=0.0, batch_duration_ms=9000
    )
    verdicts = {v.rule: v for v in check_health(frame, trigger_interval_ms=1000)}
    assert all(v.healthy for v in verdicts.values())
    assert "over 0 batches with input" in verdicts["falling_behind"].summary
    assert verdicts["slow_batches"].summary.startswith("no batches with input")
    assert verdicts["watermark_stalled"].summary == "no batches with input"
    assert verdicts["late_rows"].summary == "no input rows"


def test_queries_and_runs_in_one_frame_are_judged_separately():
    behind = [500.0] * 4
    frame = pd.concat(
        [
            batches(4, query="sampling", run="run-1", processed_rows_per_second=[2000.0, 2000.0, 500.0, 500.0]),
            batches(
                4, query="sampling", run="run-2", start=4, processed_rows_per_second=[500.0, 2000.0, 2000.0, 2000.0]
            ),
            batches(4, query="alerts", run="run-9", processed_rows_per_second=behind),
        ]
    ).sample(frac=1, random_state=3)  # shuffled: the rules order by batch_id themselves
    verdicts = {(v.query_name, v.run_id): v for v in falling_behind(frame)}
    assert set(verdicts) == {("sampling", "run-1"), ("sampling", "run-2"), ("alerts", "run-9")}
    # batches 2, 3 (run-1) and 4 (run-2) are three in a row by id, but belong to different runs
    assert verdicts["sampling", "run-1"].healthy and verdicts["sampling", "run-2"].healthy
    assert not verdicts["alerts", "run-9"].healthy and ids(verdicts["alerts", "run-9"]) == [0, 1, 2, 3]


def test_empty_frames_give_no_verdicts():
    empty = batches(0)
    for frame in (empty, pd.DataFrame()):
        assert check_health(frame, trigger_interval_ms=5000) == []
        assert [rule(frame) for rule in (falling_behind, state_growth, watermark_stalled, late_rows)] == [[]] * 4
        assert slow_batches(frame, 5000) == []
    assert health_table([]).columns.tolist() == ["query_name", "run_id", "rule", "healthy", "summary"]
    assert health_table([]).empty


def test_check_health_runs_every_rule_passes_thresholds_and_sorts_unhealthy_first():
    processed = [2000.0] * 8
    processed[2:6] = [500.0] * 4
    frame = pd.concat(
        [
            batches(8, query="sampling", processed_rows_per_second=processed),
            batches(8, query="alerts", rows_dropped_by_watermark=[0] * 7 + [400]),
        ]
    )
    verdicts = check_health(frame, trigger_interval_ms={"sampling": 5000})
    assert len(verdicts) == 10
    table = health_table(verdicts)
    assert table.columns.tolist() == ["query_name", "run_id", "rule", "healthy", "summary"]
    assert table[["query_name", "rule", "healthy"]].head(3).values.tolist() == [
        ["alerts", "late_rows", False],
        ["sampling", "falling_behind", False],
        ["alerts", "falling_behind", True],
    ]
    assert table.healthy.tolist() == [False, False] + [True] * 8

    assert health_line(verdicts) == (
        "2 unhealthy verdict(s) of 10: sampling / falling_behind, alerts / late_rows"
    )  # in rule order, as the evidence
    evidence = unhealthy_evidence(verdicts, rows=2)
    assert evidence[["query_name", "rule", "batch_id"]].values.tolist() == [
        ["sampling", "falling_behind", 2],
        ["sampling", "falling_behind", 3],
        ["alerts", "late_rows", 7],
    ]
    assert evidence.columns[:3].tolist() == ["query_name", "rule", "summary"]
    assert unhealthy_evidence([v for v in verdicts if v.healthy]).empty

    relaxed = {
        (v.query_name, v.rule): v.healthy
        for v in check_health(frame, trigger_interval_ms=5000, consecutive=5, max_share=0.1)
    }
    assert relaxed["sampling", "falling_behind"] and relaxed["alerts", "late_rows"]
    with pytest.raises(TypeError, match="consecutve"):
        check_health(frame, consecutve=5)
