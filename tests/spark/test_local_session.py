"""The local Spark session: a replayed micro-batch written once (catalog names and paths), the pinned connector jars,
Python workers (their priority, where they import pyspark from), task slots for real-time queries and the suite's
code generation mode."""

from pathlib import Path

import pytest
from support.streams import delta_version

from sensorcep.io import delta, tables


@pytest.mark.parametrize("tables_by", ["catalog", "paths"])
def test_a_replayed_micro_batch_is_written_once(spark, settings, tables_by):
    settings = settings.replace(tables=tables_by)
    table = tables.table(settings, "sensor_samples")
    df = spark.createDataFrame([(1, "2026-01-01")], "x int, part_date string")
    delta.write_batch(df, table, "q:t", 0, ["part_date"])
    delta.write_batch(df, table, "q:t", 0, ["part_date"])  # the replay: Delta sees txnVersion 0 of q:t, adds nothing
    delta.write_batch(df, table, "q:t", 1, ["part_date"])
    assert delta.read_table(spark, table).count() == 2
    assert delta.write_batch(df.limit(0), table, "q:t", 2, ["part_date"]) is False  # empty: no commit at all
    assert delta.read_table(spark, table, version=0).count() == 1
    assert delta_version(settings.table_path("sensor_samples")) == 1  # the files are where base_path says


def test_session_jars_are_the_pinned_connectors_without_what_pyspark_ships():
    # here, not in tests/unit: it reads the jars Maven fetched into .jars/, which `make unit` does not fetch
    from importlib.metadata import version

    from sensorcep.local import jars

    names = [Path(jar).name for jar in jars.spark_jars()]
    assert any(n.startswith("spark-sql-kafka-0-10_2.13-") for n in names)
    assert f"delta-spark_4.1_2.13-{jars.pinned_version('delta.version')}.jar" in names
    assert not any(n.startswith(("scala-library", "jackson-core", "hadoop-client")) for n in names)  # pyspark's win
    assert jars.pinned_version("delta.version") == version("delta-spark")  # Python API and jars agree


def test_local_python_workers_run_below_the_jvm_priority(spark):
    """The real-time alert query's JVM tasks must not wait behind the stateful processors' Python workers."""
    import os

    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType

    niceness = F.udf(lambda _: os.nice(0), IntegerType())
    seen = {row[0] for row in spark.range(4).select(niceness("id")).collect()}
    assert seen == {os.nice(0) + 10}


def test_local_python_workers_import_pyspark_from_the_installed_package_not_sparks_archive(spark):
    """Spark puts its pyspark.zip first on a worker's path; compiled from there, a worker's imports cost 0.5 s more."""
    import sys

    import pyspark
    from pyspark.sql import functions as F

    where = F.udf(lambda _: f"{sys.executable} {pyspark.__file__}")
    [seen] = {row[0] for row in spark.range(2).select(where("id")).collect()}
    assert seen == f"{sys.executable} {pyspark.__file__}", "the driver's interpreter, and pyspark as it has it"


def test_local_session_has_task_slots_beyond_the_cores_for_real_time_queries(spark):
    import os

    master = spark.conf.get("spark.master")
    assert master == f"local[{(os.cpu_count() or 2) + 4}]"


def test_the_suite_evaluates_interpreted_and_nightly_runs_generated_code(spark):
    """``make test`` runs Spark's expressions and plans interpreted (small data: compiling costs more than it saves);
    ``make nightly`` the product's generated code (tests/support/profiles.py ``INTERPRETED``, decision 0022)."""
    from support.profiles import NIGHTLY

    expected = ("true", "FALLBACK") if NIGHTLY else ("false", "NO_CODEGEN")
    mode = (spark.conf.get("spark.sql.codegen.wholeStage"), spark.conf.get("spark.sql.codegen.factoryMode"))
    assert mode == expected
    plan = spark.range(10).selectExpr("id * 2 AS twice")._jdf.queryExecution().executedPlan().toString()
    assert ("*(" in plan) == NIGHTLY, plan  # a whole-stage-codegen stage is starred in the physical plan
