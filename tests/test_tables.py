"""The tables registry: catalog names (Unity Catalog on Databricks, Spark's catalog locally) or paths, one setting."""

import pytest

from sensorcep import runtime
from sensorcep.io import delta, tables
from sensorcep.io.tables import TableLocationError


def _rows(spark, n: int):
    return spark.range(n).selectExpr("id", "'2026-01-01' as part_date")


def test_a_named_table_is_found_by_its_name_in_a_session_whose_catalog_never_heard_of_it(spark, settings):
    table = tables.table(settings, "devices")
    assert (table.identifier, table.location) == (f"{settings.schema}.devices", settings.table_path("devices"))
    delta.write_table(_rows(spark, 3), table)
    assert spark.table(table.identifier).count() == 3  # a real catalog entry: plain Spark finds it by name

    # a new notebook kernel starts with an empty in-memory catalog: forget the name, keep the files
    spark.sql(f"DROP TABLE {table.identifier}")  # an external table: dropping the name leaves the files
    tables._registered.clear()
    assert not spark.catalog.tableExists(table.identifier)
    assert delta.table_exists(table, spark)  # registered again from the files under base_path
    assert spark.table(table.identifier).count() == 3
    assert spark.catalog.getTable(table.identifier).tableType == "EXTERNAL"

    spark.sql(f"DROP TABLE {table.identifier}")
    tables._registered.clear()
    tables.register_all(spark, settings)  # every table with files, at once: for SQL in a fresh notebook
    assert spark.sql(f"SELECT count(*) FROM {table.identifier}").first()[0] == 3
    assert not spark.catalog.tableExists(f"{settings.schema}.anomalies")  # no files, no name


def test_a_name_registered_at_other_files_is_a_clear_error(spark, settings, tmp_path):
    delta.write_table(_rows(spark, 1), tables.table(settings, "devices"))
    elsewhere = settings.replace(base_path=str(tmp_path / "elsewhere"))  # same schema, other files
    with pytest.raises(TableLocationError, match=r"devices is registered at .* but base_path puts it at .*elsewhere"):
        delta.read_table(spark, tables.table(elsewhere, "devices"))


def test_paths_address_delta_tables_without_the_catalog(spark, settings):
    settings = settings.replace(tables="paths")
    table = tables.table(settings, "devices")
    assert (table.identifier, table.location) == (None, settings.table_path("devices"))
    delta.write_table(_rows(spark, 2), table)
    assert delta.read_table(spark, settings.table_path("devices")).count() == 2
    assert not spark.catalog.databaseExists(settings.schema)  # nothing registered


def test_on_databricks_a_named_table_is_unity_catalogs_to_place(monkeypatch, settings):
    """No workspace runs here: ``is_databricks`` is stubbed; the name is what the bundle's jobs address."""
    monkeypatch.setattr(runtime, "is_databricks", lambda: True)
    table = tables.table(settings.replace(catalog="main", schema="dev_ann_sensor_cep"), "anomalies")
    assert (table.identifier, table.location) == ("main.dev_ann_sensor_cep.anomalies", None)
    assert table.sql_name == "main.dev_ann_sensor_cep.anomalies"
    assert tables.table(settings.replace(tables="paths"), "anomalies").location == settings.table_path("anomalies")


def test_a_write_that_lost_the_race_to_create_a_table_is_tried_again_and_other_errors_are_not():
    """No JVM: Delta's DELTA_PROTOCOL_CHANGED (two queries' first batches creating late_events at once) is retried."""
    from sensorcep.io.delta import retry_first_commit_race

    calls = []

    def lose_once():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("[DELTA_PROTOCOL_CHANGED] ProtocolChangedException: ... multiple writers ...")

    retry_first_commit_race(lose_once)
    assert len(calls) == 2

    def broken():
        calls.append(1)
        raise RuntimeError("[DELTA_FAILED_TO_MERGE_FIELDS] something else")

    calls.clear()
    with pytest.raises(RuntimeError, match="FAILED_TO_MERGE"):
        retry_first_commit_race(broken)
    assert len(calls) == 1
