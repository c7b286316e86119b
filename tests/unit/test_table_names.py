"""The tables registry: catalog names (Unity Catalog on Databricks, Spark's catalog locally) or paths, one setting."""

import pytest

from sensorcep import runtime
from sensorcep.io import tables


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
