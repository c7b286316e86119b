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
    def createDataFrame(self, rows, schema):
        return ("empty", schema)


@pytest.mark.parametrize(
    "error, created",
    [
        (None, True),
        ("[TABLE_OR_VIEW_ALREADY_EXISTS] Cannot create table main.s.late_events", False),
        ("io.delta.exceptions.ProtocolChangedException: DELTA_PROTOCOL_CHANGED", False),
    ],
)
def test_a_table_another_task_created_at_the_same_moment_is_not_an_error(monkeypatch, error, created):
    def write(df, table, mode, partition_by):
        if error:
            raise RuntimeError(error)

    monkeypatch.setattr(delta, "table_exists", lambda table, spark: False)
    monkeypatch.setattr(delta, "write_table", write)
    assert delta.create_table(_Session(), "/tmp/x/late_events", "a string") is created


def test_any_other_error_creating_a_table_is_raised(monkeypatch):
    def write(df, table, mode, partition_by):
        raise RuntimeError("[DELTA_FAILED_TO_MERGE_FIELDS] Failed to merge fields 'a' and 'a'")

    monkeypatch.setattr(delta, "table_exists", lambda table, spark: False)
    monkeypatch.setattr(delta, "write_table", write)
    with pytest.raises(RuntimeError, match="DELTA_FAILED_TO_MERGE_FIELDS"):
        delta.create_table(_Session(), "/tmp/x/late_events", "a string")
