"""The tables declared once (sensorcep.schemas): names, writers and creation agree with the rest of the project."""

import pytest

from sensorcep import schemas, settings
from sensorcep.io import delta
from sensorcep.pipeline import registry


def test_the_settings_table_names_and_reserved_columns_derive_from_the_declarations():
    assert settings.TABLES == tuple(spec.name for spec in schemas.DECLARED)
    assert set(schemas.BY_NAME["bronze_events"].column_names) <= settings.RESERVED_COLUMNS


def test_each_tables_writers_are_exactly_the_queries_that_declare_it():
    declared = registry.registry()
    for spec in schemas.DECLARED:
        queries = {name for name, q in declared.items() if spec.name in q.tables}
        streaming_writers = {w for w in spec.written_by if w in declared}
        assert queries == streaming_writers, f"{spec.name}: declared by {queries}, written_by {spec.written_by}"


def test_every_table_the_queries_write_has_columns_to_be_created_with():
    written = {table for q in registry.registry().values() for table in q.tables}
    assert all(schemas.BY_NAME[t].columns for t in written)
    assert schemas.split_columns("a string, b map<string, int>, c array<struct<x: int, y: long>>") == [
        "a string",
        "b map<string, int>",
        "c array<struct<x: int, y: long>>",
    ]


class _Session:
    """Spark's ``sql`` as a creation sees it: the statement, then an error or nothing."""

    def __init__(self, error: str | None = None):
        self.error, self.statements = error, []

    def sql(self, statement):
        self.statements.append(statement)
        if self.error:
            raise RuntimeError(self.error)

    def createDataFrame(self, rows, schema):
        return ("empty", schema)


def test_a_table_is_created_by_one_create_statement_where_its_files_go():
    by_path = delta.Table("late_events", None, "/tmp/x/late`s")
    assert delta.create_statement(by_path, "a string, d date", ["d"]) == (
        "CREATE TABLE IF NOT EXISTS delta.`/tmp/x/late``s` (a string, d date) USING delta PARTITIONED BY (`d`)"
    )
    named_here = delta.Table("late_events", "spark_catalog.s.late_events", "/tmp/x/late_events")
    assert delta.create_statement(named_here, "a string").startswith("CREATE TABLE IF NOT EXISTS delta.`/tmp/x/")
    unity = delta.Table("late_events", "main.s.late_events", None)
    assert (
        delta.create_statement(unity, "a string")
        == "CREATE TABLE IF NOT EXISTS main.s.late_events (a string) USING delta"
    )


@pytest.mark.parametrize(
    "error, created",
    [
        (None, True),
        ("[TABLE_OR_VIEW_ALREADY_EXISTS] Cannot create table main.s.late_events", False),
        ("io.delta.exceptions.ProtocolChangedException: DELTA_PROTOCOL_CHANGED", False),
    ],
)
def test_a_table_another_task_created_at_the_same_moment_is_not_an_error(monkeypatch, error, created):
    monkeypatch.setattr(delta, "table_exists", lambda table, spark: False)
    monkeypatch.setattr(delta.tables, "holds_delta_table", lambda spark, location: True)  # CREATE made it
    session = _Session(error)
    assert delta.create_table(session, "/tmp/x/late_events", "a string") is created
    assert session.statements == ["CREATE TABLE IF NOT EXISTS delta.`/tmp/x/late_events` (a string) USING delta"]


def test_a_folder_with_files_but_no_delta_log_gets_its_table_from_an_empty_append(monkeypatch):
    """A Delta release that refuses CREATE there (this one creates nothing instead, silently: the spark tier's
    ``test_a_folder_a_crashed_first_write_left_without_a_delta_log_gets_its_table``)."""
    appended = []
    monkeypatch.setattr(delta, "table_exists", lambda table, spark: False)
    monkeypatch.setattr(delta.tables, "holds_delta_table", lambda spark, location: False)
    monkeypatch.setattr(delta, "write_table", lambda df, table, mode, partition_by: appended.append((df, mode)))
    session = _Session("[DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION] Cannot create table")
    assert delta.create_table(session, "/tmp/x/late_events", "a string") is True
    assert appended == [(("empty", "a string"), "append")]


def test_any_other_error_creating_a_table_is_raised(monkeypatch):
    monkeypatch.setattr(delta, "table_exists", lambda table, spark: False)
    with pytest.raises(RuntimeError, match="DELTA_FAILED_TO_MERGE_FIELDS"):
        delta.create_table(
            _Session("[DELTA_FAILED_TO_MERGE_FIELDS] Failed to merge fields 'a' and 'a'"), "/tmp/x/t", "a string"
        )
