"""The state-store tuning harness without Spark: the plan and its refusals, the workload's shape and where its tables
live, rounds combined by median, and the recommendation with its measured reasons."""

import pandas as pd
import pytest

from sensorcep import tuning
from sensorcep.tuning import TuningError, Workload


def test_plan_rejects_unknown_names_and_impossible_pairs():
    with pytest.raises(TuningError, match="unknown tuning_preset 'medium'"):
        tuning.plan("medium")
    with pytest.raises(TuningError, match="unknown preset 'rocks'"):
        tuning.plan([("sampling", "rocks")])
    with pytest.raises(TuningError, match="needs a RocksDB store"):
        tuning.plan([("sampling", "hdfs")])
    with pytest.raises(TuningError, match="shape"):
        Workload(shape="spiky")


def test_plan_drops_databricks_only_presets_locally():
    assert "databricks_async_checkpoint" not in [p.name for _, p in tuning.plan("full")]


def test_bursty_workload_alternates_the_rate():
    frame = tuning.workload_frame(Workload(events=20_000, rate=20, shape="bursty"))
    per_minute = frame.event_time.dt.floor("min").value_counts().sort_index().to_numpy()[1:-1]
    assert per_minute.max() > 5 * per_minute.min()


def _row(query, preset, p95, commit, eps, trigger="0 seconds"):
    return {
        "query": query,
        "preset": preset,
        "trigger": trigger,
        "batch_p95_ms": p95,
        "commit_p95_ms": commit,
        "events_per_s": eps,
    }


def test_recommendation_picks_lowest_p95_and_gives_measured_reasons():
    table = pd.DataFrame(
        [
            _row("sampling", "rocksdb", 900.0, 250.0, 10_000),
            _row("sampling", "rocksdb_changelog", 700.0, 110.0, 12_000),
            _row("sampling", "trigger_5s", 500.0, 100.0, 4_000, trigger="5 seconds"),
            _row("window_counts", "hdfs", 600.0, 120.0, 9_000),
            _row("window_counts", "rocksdb", 650.0, 260.0, 8_000),
            _row("window_counts", "rocksdb_changelog", 610.0, 104.0, 9_500),
        ]
    )
    advice = tuning.recommend(table)
    assert advice.preset == "rocksdb_changelog"  # trigger_5s answers another question
    assert "700 ms vs 900 ms" in advice.reasons[0] and "0.78x" in advice.reasons[0]
    assert "104 ms vs plain RocksDB 260 ms (0.40x) and HDFS 120 ms (0.87x)" in advice.reasons[1]
    assert "4,000 vs 12,000 events/s" in advice.reasons[2]
    assert advice.spark_conf[tuning.PROVIDER] == "com.databricks.sql.streaming.state.RocksDBStateStoreProvider"
    assert tuning.SHUFFLE not in advice.spark_conf


def test_recommendation_needs_sampling_results():
    with pytest.raises(TuningError, match="no sampling-query result"):
        tuning.recommend(pd.DataFrame([_row("window_counts", "hdfs", 600.0, 120.0, 9_000)]))


def test_rounds_are_combined_into_one_row_per_configuration_by_median():
    rows = pd.DataFrame(
        [
            {"query": "sampling", "preset": "b", "events_per_s": 10.0, "description": "B"},
            {"query": "sampling", "preset": "a", "events_per_s": 4.0, "description": "A"},
            {"query": "sampling", "preset": "a", "events_per_s": 6.0, "description": "A"},
            {"query": "sampling", "preset": "b", "events_per_s": 20.0, "description": "B"},
        ]
    )
    table = tuning.median_over_rounds(rows, ["sampling/a", "sampling/b"])
    assert table[["preset", "events_per_s", "rounds", "description"]].to_dict("records") == [
        {"preset": "a", "events_per_s": 5.0, "rounds": 2, "description": "A"},
        {"preset": "b", "events_per_s": 15.0, "rounds": 2, "description": "B"},
    ]


def test_a_tie_within_tolerance_goes_to_the_preset_with_fewer_settings():
    table = pd.DataFrame(
        [
            _row("sampling", "rocksdb", 1_363.0, 369.0, 21_000),
            _row("sampling", "rocksdb_changelog", 1_285.0, 288.0, 23_400),
            _row("sampling", "rocksdb_bounded_memory", 1_256.0, 228.0, 25_300),
        ]
    )
    advice = tuning.recommend(table)
    assert advice.preset == "rocksdb_changelog"
    assert "rocksdb_bounded_memory had the lowest p95 batch time (1,256 ms)" in advice.reasons[0]
    assert tuning.recommend(table, tolerance=0.01).preset == "rocksdb_bounded_memory"


def test_workload_tables_never_live_on_a_volume():
    from pathlib import Path

    from sensorcep.settings import Settings

    s = Settings(catalog="main", schema="dev_ann_sensor_cep")
    run = "20261124T120000-abc123"
    local = tuning.workload_location(s, Path("/tmp/x/tuning") / run, "workload", run)
    assert local == f"/tmp/x/tuning/{run}/workload"
    on_volume = tuning.workload_location(s, Path("/Volumes/main/dev_ann_sensor_cep/data/tuning") / run, "warm-up", run)
    assert on_volume == "main.dev_ann_sensor_cep.tuning_20261124t120000_abc123_warm_up"  # a managed table
