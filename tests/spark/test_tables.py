"""The tables registry: catalog names (Unity Catalog on Databricks, Spark's catalog locally) or paths, one setting."""

import pytest

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
