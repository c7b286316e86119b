"""What Delta's file statistics cost an append to bronze: the same rows appended to tables that keep statistics of
different columns (decision 0070: bronze keeps Delta's default).

    .venv/bin/python benchmarks/bronze_stats.py [--rows 100000] [--appends 12]

Delta computes, for every file an append writes, the minimum, maximum and null count of the table's first 32 columns
(``delta.dataSkippingNumIndexedCols``), or of the columns ``delta.dataSkippingStatsColumns`` names. Three tables with
bronze's columns and partitioning, in one Spark session, get the same cached rows (``--rows``, a full micro-batch of
ingest, from 1,000 devices, one day), one append each in turn, ``--appends`` times:

* **every column**: Delta's default (the baseline, in the same run);
* **filtered on**: only the columns ingest's lookups in bronze filter on (event time and the Kafka coordinates);
* **none**: no statistics at all (what they cost, at most; no table of the project is made so: reads skip no file).

The first two appends of each are left out (the JIT's first compilations). Figures: the median seconds an append
took, of each table, and each against the baseline's.
"""

from __future__ import annotations

import statistics
import tempfile
import time

from harness import argument_parser, record

from sensorcep.io import delta
from sensorcep.runtime import get_spark
from sensorcep.schemas import BY_NAME

BASELINE = "every column"
WARM_UP = 2


def kinds() -> dict[str, dict[str, str]]:
    """Each table's properties, by the name the figures give it."""
    return {
        BASELINE: {},
        "filtered on": {"delta.dataSkippingStatsColumns": "event_time,topic,partition,offset"},
        "none": {"delta.dataSkippingNumIndexedCols": "0"},
    }


def rows(spark, n: int):
    """``n`` bronze rows: 1,000 devices, 100 events a second of event time, two Kafka partitions."""
    from pyspark.sql import functions as F

    second = F.lit(1_780_000_000) + F.col("id") / 100
    return (
        spark.range(n)
        .select(
            F.format_string("dev-%04d", F.col("id") % 1000).alias("device_id"),
            (F.rand(7) * 100 - 5).alias("sensor_freq"),
            F.timestamp_seconds(second).alias("event_time"),
            F.lit("sensor-events").alias("topic"),
            (F.col("id") % 2).cast("int").alias("partition"),
            (F.col("id") / 2).cast("long").alias("offset"),
            F.timestamp_seconds(second + 0.2).alias("kafka_timestamp"),
            F.timestamp_seconds(F.lit(1_780_000_100)).alias("ingest_time"),
            F.to_date(F.timestamp_seconds(F.lit(1_780_000_000))).alias("part_date"),
        )
        .persist()
    )


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--rows", type=int, default=100_000, help="rows an append writes (default 100,000)")
    parser.add_argument("--appends", type=int, default=12, help="appends to each table (default 12; 2 are warm-up)")
    args = parser.parse_args()
    if args.appends <= WARM_UP:
        parser.error(f"--appends must be more than the {WARM_UP} warm-up appends")
    spark = get_spark("bench-bronze-stats")
    batch = rows(spark, args.rows)
    batch.count()  # cached before the clock runs
    spec = BY_NAME["bronze_events"]
    took: dict[str, list[float]] = {name: [] for name in kinds()}
    with tempfile.TemporaryDirectory(prefix="sensorcep-bench-bronze-stats-") as folder:
        tables = {}
        for i, (name, properties) in enumerate(kinds().items()):
            tables[name] = delta.Table(name, None, f"{folder}/t{i}")
            given = ", ".join(f"'{key}' = '{value}'" for key, value in properties.items())
            create = delta.create_statement(tables[name], spec.columns, spec.partition_by)
            spark.sql(create + (f" TBLPROPERTIES ({given})" if given else ""))
        for n in range(args.appends):
            for name, table in tables.items():  # in turn: the machine's drift reaches every table alike
                started = time.perf_counter()
                delta.write_table(batch, table, "append", spec.partition_by)
                took[name].append(time.perf_counter() - started)
            print(f"  append {n + 1}/{args.appends}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in took.items()))
    figures = {}
    print(f"\n{args.rows:,} rows an append, median of appends {WARM_UP + 1}-{args.appends}:")
    base = statistics.median(took[BASELINE][WARM_UP:])
    for name, seconds in took.items():
        median = statistics.median(seconds[WARM_UP:])
        figures[f"{name} (median s)"] = median
        print(f"  statistics of {name:<12}: {median:.3f} s  ({median / base:.3f}x of every column's)")
    figures["rows an append (rows)"] = args.rows
    figures["appends counted (appends)"] = args.appends - WARM_UP
    record(
        "bronze_stats",
        figures,
        [{"append": i + 1, **{k: v[i] for k, v in took.items()}} for i in range(args.appends)],
        baseline=BASELINE,
    )
    spark.stop()


if __name__ == "__main__":
    main()
