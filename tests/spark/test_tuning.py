"""The state-store tuning harness: real runs on a tiny workload, refusal of bad configurations, the recommendation."""

import json

import pytest

from sensorcep import tuning
from sensorcep.io import delta
from sensorcep.tuning import TuningError, Workload

TINY = Workload(events=3_000, devices=20, rate=25, batch=1_000)  # 2 minutes of event time: windows close


#: the study's runs, and the tests that read them, are in make extended (decision 0063): make test runs the study
#: through notebook 04
@pytest.fixture(scope="module")
def results(spark, tmp_path_factory):
    from sensorcep.settings import Settings

    settings = Settings(base_path=str(tmp_path_factory.mktemp("tuning")), schema="tuning")
    before = spark.conf.get(tuning.PROVIDER)
    table = tuning.run_matrix(spark, settings, [("sampling", "rocksdb_changelog"), ("window_counts", "hdfs")], TINY)
    return table, before, settings


@pytest.mark.extended
def test_one_row_per_configuration_with_metrics(results):
    table, _, _ = results
    assert list(zip(table["query"], table["preset"], strict=False)) == [
        ("sampling", "rocksdb_changelog"),
        ("window_counts", "hdfs"),
    ]
    assert (table["batches"] == 3).all() and (table["input_rows"] == 3_000).all()
    for column in (
        "events_per_s",
        "batch_p50_ms",
        "batch_p95_ms",
        "commit_p50_ms",
        "commit_p95_ms",
        "state_rows_max",
        "state_memory_mb_max",
        "output_rows",
    ):
        assert (table[column] > 0).all(), column
    rocksdb, hdfs = (json.loads(m) for m in table["rocksdb_metrics"])
    assert "rocksdbCommitCheckpointLatency" in rocksdb and hdfs == {}
    assert table["run_id"].nunique() == 1 and table["spark_version"].iloc[0].startswith("4.")


@pytest.mark.extended
def test_session_settings_are_restored_after_the_runs(results, spark):
    _, before, _ = results
    assert spark.conf.get(tuning.PROVIDER) == before


@pytest.mark.extended
def test_results_land_in_delta_tuning_results(results, spark):
    table, _, settings = results
    path = tuning.save_results(spark, table, settings)
    stored = delta.read_table(spark, path).toPandas()
    assert sorted(stored["preset"]) == ["hdfs", "rocksdb_changelog"]
    assert set(stored["run_id"]) == set(table["run_id"])


@pytest.mark.parametrize(
    "key, hint",
    [
        ("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enable", "changelogCheckpointing.enabled"),
        ("spark.sql.shuffle.partition", "spark.sql.shuffle.partitions"),
        ("spark.driver.memory", None),  # static: cannot change per query
        ("spark.databricks.streaming.statefulOperator.asyncCheckpoint.enabled", None),  # Databricks only
    ],
)
def test_unknown_or_unsettable_keys_are_refused(spark, key, hint):
    with pytest.raises(TuningError, match="refusing configuration") as error:
        tuning.validate_conf(spark, {key: "true"})
    assert key in str(error.value)
    if hint:
        assert hint in str(error.value)


def test_known_keys_pass_validation(spark):
    tuning.validate_conf(spark, dict(tuning.presets()["rocksdb_bounded_memory"].conf))
