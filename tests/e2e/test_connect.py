"""Spark Connect (serverless, standard access mode): the pipeline through a local Connect server, end to end.

The server is Spark Connect's plugin on the test session's own JVM (same jars and confs, no second JVM on 2
cores); the client is a separate Python process (``connect_pipeline.py``). It runs ingest, sampling
(transformWithStateInPandas), device activity, alerts, anomalies, the alert lifecycle and the progress listener on the
real broker and must write what the classic session writes from the same topics.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.connect_pipeline import run_pipeline
from support.ports import CONNECT_PORT
from support.streams import T0, delta_frame

from sensorcep.local import simulator
from sensorcep.local.broker import create_topics

#: columns that differ between two correct runs: when a row was written, and the alert records' Kafka times
VOLATILE = {"ingest_time", "quarantined_at", "detected_at", "escalated_at", "batch_id"}
COMPARED = [
    "bronze_events",
    "quarantine_events",
    "sensor_samples",
    "device_status",
    "anomalies",
    "alert_escalations",
    "alert_events",
]


def table_rows(settings, table: str) -> list[tuple]:
    frame = delta_frame(settings.table_path(table))
    frame = frame[[c for c in sorted(frame.columns) if c not in VOLATILE]]
    return sorted(tuple(str(v) for v in row) for row in frame.itertuples(index=False))


#: in make extended (decision 0063): make test runs notebooks 01, 02, 04 and 05 as Spark Connect clients
@pytest.mark.extended
def test_the_pipeline_through_spark_connect_writes_what_the_classic_session_writes(spark, settings, tmp_path):
    create_topics(settings.kafka_bootstrap_servers, [settings.events_topic, settings.acks_topic])
    sim = simulator.generate(simulator.SimulationConfig(events=1_500, devices=20, seed=3, start=T0, rate=10))
    simulator.produce(sim, settings.kafka_bootstrap_servers, settings.events_topic)
    simulator.produce_records(simulator.acknowledgements(sim), settings.kafka_bootstrap_servers, settings.acks_topic)
    # each side reads the topics in one batch: parity is the question here, batch boundaries are other tests'
    common = dict(alerts_trigger="availableNow", ack_timeout="2 minutes", max_offsets_per_trigger=10_000)
    classic, connect = (  # the Connect server is the test session's: the same catalog, so a schema each
        settings.replace(
            base_path=str(tmp_path / kind),
            schema=f"{settings.schema}_{kind}",
            alerts_topic=f"{settings.alerts_topic}-{kind}",
            **common,
        )
        for kind in ("classic", "connect")
    )
    create_topics(settings.kafka_bootstrap_servers, [classic.alerts_topic, connect.alerts_topic])

    run_pipeline(spark, classic)
    client = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).parents[1] / "support" / "connect_pipeline.py"),
            json.dumps(dataclasses.asdict(connect)),
        ],
        env={**os.environ, "SPARK_REMOTE": f"sc://localhost:{CONNECT_PORT}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert client.returncode == 0, client.stderr[-4000:]
    assert json.loads(client.stdout.strip().splitlines()[-1]) == {"session": "pyspark.sql.connect.session"}

    for table in COMPARED:
        rows = table_rows(classic, table)
        assert rows, f"{table}: the classic run wrote nothing to compare"
        assert table_rows(connect, table) == rows, f"{table} differs between Spark Connect and classic"
    progress = delta_frame(connect.table_path("stream_progress"))
    assert set(progress.query_name) == {
        "ingest",
        "sampling",
        "device_activity",
        "alerts",
        "anomalies",
        "alert_lifecycle",
    }
    assert (progress.groupby("query_name").num_input_rows.sum() > 0).all()


#: 04's study as a Spark Connect client runs it: its foreachBatch runs in the server's Python worker
TUNING_CLIENT = """
import json, sys
from sensorcep import tuning
from sensorcep.runtime import get_spark, is_connect
from sensorcep.settings import Settings
spark = get_spark()
assert is_connect(spark), type(spark)
workload = tuning.Workload(events=3_000, devices=20, rate=25, batch=1_000)
table = tuning.run_matrix(spark, Settings(**json.loads(sys.argv[1])), [("window_counts", "hdfs")], workload)
print(json.dumps(table[["batches", "input_rows", "events_per_s", "output_rows"]].to_dict("records")))
"""


#: in make extended (decision 0063): make test runs notebook 04's study as a Spark Connect client
@pytest.mark.extended
def test_the_tuning_study_through_spark_connect_counts_the_rows_it_ran(spark, settings, tmp_path):
    params = json.dumps({"base_path": str(tmp_path), "schema": settings.schema})
    client = subprocess.run(
        [sys.executable, "-c", TUNING_CLIENT, params],
        env={**os.environ, "SPARK_REMOTE": f"sc://localhost:{CONNECT_PORT}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert client.returncode == 0, client.stderr[-4000:]
    [row] = json.loads(client.stdout.strip().splitlines()[-1])
    assert (row["batches"], row["input_rows"]) == (3, 3_000), row  # the progress' rows, which Connect's JSON omits
    assert row["events_per_s"] > 0 and row["output_rows"] > 0, row  # the output, counted where the batches ran
