"""Small platform pieces: Java check, broker start errors, simulator determinism, idempotent Delta writes."""

import socket
from datetime import datetime, timezone
from pathlib import Path

import pytest
from streams import delta_version

from sensorcep.io import delta, tables
from sensorcep.local import broker, simulator
from sensorcep.local.session import JavaMissingError, check_java


def test_missing_java_is_one_clear_sentence(monkeypatch):
    monkeypatch.setenv("JAVA_HOME", "/nonexistent-jdk")
    with pytest.raises(JavaMissingError, match=r"^Java 17 was not found: .*run the command again\.$"):
        check_java()


def test_busy_port_is_a_clear_broker_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(broker.BrokerError, match=f"port {port} .* already in use"):
            broker.up(f"127.0.0.1:{port}", tmp_path / "broker")


def test_simulator_is_deterministic_for_a_seed_and_has_every_kind():
    config = simulator.SimulationConfig(
        events=20_000, devices=100, seed=5, start=datetime(2026, 1, 1, tzinfo=timezone.utc)
    )
    a, b = simulator.generate(config), simulator.generate(config)
    assert a.records.value.tolist() == b.records.value.tolist()
    assert a.records.timestamp_ms.is_monotonic_increasing  # produced in arrival order
    assert {"ontime", "late", "too_late", "duplicate", "malformed"} <= set(a.records.kind)
    assert (a.valid.sensor_freq < 0).any() and len(a.distinct_valid) < len(a.valid)
    other = simulator.generate(simulator.SimulationConfig(events=20_000, devices=100, seed=6, start=config.start))
    assert other.records.value.tolist() != a.records.value.tolist()


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
    from importlib.metadata import version

    from sensorcep.local import jars

    names = [Path(jar).name for jar in jars.spark_jars()]
    assert any(n.startswith("spark-sql-kafka-0-10_2.13-") for n in names)
    assert f"delta-spark_4.1_2.13-{jars.pinned_version('delta.version')}.jar" in names
    assert not any(n.startswith(("scala-library", "jackson-core", "hadoop-client")) for n in names)  # pyspark's win
    assert jars.pinned_version("delta.version") == version("delta-spark")  # Python API and jars agree


def test_broker_down_leaves_a_process_alone_whose_pid_was_recycled(tmp_path):
    import os

    (tmp_path / "broker.pid").write_text(f"{os.getpid()} 12345.0")  # our pid, another start time
    assert broker.pid(tmp_path) is None
    assert broker.down(tmp_path) is False  # and this test process is still alive to say so


def test_a_broker_that_cannot_start_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SENSORCEP_BROKER_HEAP", "not-a-size")  # the JVM refuses to start
    with pytest.raises(broker.BrokerError, match="could not format|exited during start"):
        broker.up("127.0.0.1:19094", tmp_path / "broker")
    assert not broker.is_running(tmp_path / "broker")


def test_missing_maven_is_one_clear_sentence(monkeypatch):
    from sensorcep.local import jars

    monkeypatch.setattr(jars, "is_current", lambda: False)  # the jars would have to be fetched
    monkeypatch.setattr(jars.shutil, "which", lambda name: None)
    with pytest.raises(jars.JarsError, match=r"^Apache Maven \(`mvn`\) was not found: install Maven 3\.8\+"):
        jars.fetch(quiet=True)


def test_local_python_workers_run_below_the_jvm_priority(spark):
    """The real-time alert query's JVM tasks must not wait behind the stateful processors' Python workers."""
    import os

    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType

    niceness = F.udf(lambda _: os.nice(0), IntegerType())
    seen = {row[0] for row in spark.range(4).select(niceness("id")).collect()}
    assert seen == {os.nice(0) + 10}


def test_local_session_has_task_slots_beyond_the_cores_for_real_time_queries(spark):
    import os

    master = spark.conf.get("spark.master")
    assert master == f"local[{(os.cpu_count() or 2) + 4}]"
