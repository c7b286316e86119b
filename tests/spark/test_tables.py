"""Tables on the local session: a catalog name registered again from its files in a fresh catalog, a name registered
at other files refused, paths without the catalog, and fenced appends that write each batch once across a restart."""

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


def test_fenced_appends_write_each_batch_once_across_a_restart_and_skip_empty_batches(spark, settings):
    """A writer's blind appends fenced by batch id (``late_events``, ``device_baselines``): a batch replayed after a
    restart whose rows are in adds nothing, a batch replayed whose append never committed is written, a batch with no
    row costs no commit, and another writer's rows (``mine`` names the writer's) neither fence nor hide it."""
    from pyspark.sql import functions as F

    from sensorcep.io.lake import FencedAppends, Tables

    lake = Tables(spark, settings)
    lake.create(["late_events"])

    def rows(query: str, batch_id: int, n: int = 2):
        return spark.range(n).selectExpr(
            f"'{query}' as query", "cast(id as string) as device_id", "cast(1 as double) as sensor_freq",
            "timestamp'2026-01-01 00:00:00' as event_time", "timestamp'2026-01-01 00:00:00' as watermark",
            "cast(0 as double) as late_by_s", f"cast({batch_id} as long) as batch_id", "date'2026-01-01' as part_date",
        )  # fmt: skip

    def held(query: str) -> list[int]:
        found = lake.read("late_events").where(F.col("query") == query)
        return sorted(r[0] for r in found.select("batch_id").collect())

    def writer(query: str) -> FencedAppends:
        return FencedAppends("late_events", ["part_date"], mine=F.col("query") == query, check_empty=True)

    first = writer("q")
    assert first.once(lake, rows("q", 0), 0) and first.once(lake, rows("q", 1), 1)
    assert writer("other").once(lake, rows("other", 2), 2)  # another writer's batch 2, before q's

    def version() -> int:
        return spark.sql(f"DESCRIBE HISTORY {lake['late_events'].sql_name} LIMIT 1").first()["version"]

    before = version()
    assert not first.once(lake, rows("q", 2).limit(0), 2)  # an empty batch: no commit
    assert version() == before

    restarted = writer("q")  # the fence is 1: q's own highest batch, not the other writer's 2
    assert not restarted.once(lake, rows("q", 1), 1)  # replayed, its rows are in
    assert restarted.once(lake, rows("q", 2), 2)  # replayed, its append never committed
    assert restarted.once(lake, rows("q", 3), 3)
    assert held("q") == [0, 0, 1, 1, 2, 2, 3, 3]
    assert held("other") == [2, 2]


def test_a_folder_a_crashed_first_write_left_without_a_delta_log_gets_its_table(spark, tmp_path):
    """CREATE refuses a folder that holds files but no Delta log (a first write killed before its commit); the table
    is then created by an empty append, with its columns and partitioning, and a second creation finds it."""
    folder = tmp_path / "bronze"
    spark.range(3).write.parquet(str(folder / "part_date=2026-01-01"))  # the crashed write's files, no _delta_log
    assert delta.create_table(spark, str(folder), "a bigint, part_date date", ["part_date"]) is True
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{folder}`").first()
    assert detail["partitionColumns"] == ["part_date"]
    assert delta.read_table(spark, str(folder)).columns == ["a", "part_date"]
    assert delta.create_table(spark, str(folder), "a bigint, part_date date", ["part_date"]) is False
    assert delta.read_table(spark, str(folder)).count() == 0, "the stray files are not the table's"
