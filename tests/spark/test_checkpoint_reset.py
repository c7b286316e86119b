"""A downstream query started on a new checkpoint (deleted, or reset) while its output holds rows is refused, naming
the table and the ways on: it would read bronze (or its topic) from the start and append every row again. Its own
rows of ``late_events`` count too (a rebuild judges lateness against its own watermarks), and the statements the
refusal names are the ones that let a rebuild start."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from sensorcep.io.lake import Tables
from sensorcep.pipeline import registry, streaming
from sensorcep.pipeline.streaming import CheckpointResetError, refuse_reset


def test_a_new_checkpoint_over_rows_it_would_write_again_is_refused_and_a_restart_on_its_checkpoint_is_not(
    spark, settings
):
    sampling = registry.query("sampling")
    lake = Tables(spark, settings)
    lake.create(["sensor_samples"])
    refuse_reset(spark, settings, sampling)  # a first start: the table is empty

    empty = lake.read("sensor_samples").limit(0)
    row = empty.unionByName(spark.range(1).select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in empty.schema]))
    lake.write(row, "sensor_samples", "append")
    with pytest.raises(CheckpointResetError, match=r"already hold rows .*\(DELETE FROM .*sensor_samples.*\)"):
        refuse_reset(spark, settings, sampling)
    # through the query's start: refused before Spark starts anything (any input will do)
    with pytest.raises(CheckpointResetError, match="append them all again"):
        streaming.launch(spark.readStream.format("rate").load(), settings, sampling, wait=True)
    assert not Path(settings.checkpoint_path("sampling"), "metadata").exists(), "the refused query did not start"

    checkpoint = Path(settings.checkpoint_path("sampling"))  # the checkpoint its rows came from: Delta skips replays
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": "the-first-query"}) + "\n")
    refuse_reset(spark, settings, sampling)

    (checkpoint / "metadata").unlink()
    lake.create(["late_events"])
    for query in ("sampling", "device_activity"):  # a late event each query kept
        late = lake.read("late_events").limit(0)
        values = {"query": F.lit(settings.query_name(query))}
        lake.write(
            late.unionByName(
                spark.range(1).select(
                    *[values.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name) for f in late.schema]
                )
            ),
            "late_events",
            "append",
        )
    with pytest.raises(CheckpointResetError) as refused:
        refuse_reset(spark, settings, sampling)
    # an operator rebuilding from bronze runs what the refusal names: the samples, and sampling's own late rows
    statements = re.search(r"remove them first \((.*)\); or run", str(refused.value)).group(1).split("; ")
    assert len(statements) == 2 and "WHERE query = 'sampling'" in statements[1], statements
    for statement in statements:
        spark.sql(statement)
    refuse_reset(spark, settings, sampling)
    left = [row["query"] for row in lake.read("late_events").select("query").collect()]
    assert left == [settings.query_name("device_activity")], "the other query's late rows are left alone"
