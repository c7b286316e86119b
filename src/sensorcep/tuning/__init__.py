"""State-store tuning, measured: run a stateful query once per configuration and tabulate what it cost.

A *configuration* is a named :class:`Preset` (Spark settings + trigger) applied to one of the project's
stateful queries:

* ``sampling``      - the 02 sampling query (``transformWithStateInPandas``; needs a RocksDB store);
* ``window_counts`` - Spark's built-in sliding-window aggregation per device (count, min, max) over the
                      same windows and watermark: it runs on every state store, so it is where the HDFS
                      store can be compared with RocksDB.

Every configuration reads the same pre-generated micro-batches (a Delta table, one commit per trigger), starts
from a clean checkpoint in the same Spark application (the settings tested are all session settings read
when a query starts) and reports throughput, batch time, state commit time (``commitTimeMs``), state
rows and memory and RocksDB's custom metrics, all reported by the state stores on the executors (where state
lives; a driver-side heap reading would say nothing about them). :func:`recommend` reads the table.

The package: :mod:`.presets` (what is compared), :mod:`.workload` (what every configuration reads),
:mod:`.harness` (running the matrix), :mod:`.recommend` (reading the table); its public names are here.
"""

from sensorcep.tuning.harness import (  # noqa: F401
    NUMERIC,
    ROUNDS,
    SUMMARY_COLUMNS,
    median_over_rounds,
    print_progress_line,
    run_configuration,
    run_matrix,
    save_results,
    summarize,
    warm_up,
)
from sensorcep.tuning.presets import (  # noqa: F401
    ASYNC_CHECKPOINT,
    BOUNDED,
    CHANGELOG,
    DATABRICKS_KEYS,
    FORMAT_V2,
    MATRICES,
    MAX_MEMORY,
    PROVIDER,
    QUERIES,
    ROCKSDB_OPTIONS,
    ROCKSDB_PREFIX,
    SHUFFLE,
    Preset,
    TuningError,
    databricks_conf,
    plan,
    presets,
    validate_conf,
)
from sensorcep.tuning.recommend import (  # noqa: F401
    RECOMMENDED,
    Recommendation,
    recommend,
)
from sensorcep.tuning.workload import (  # noqa: F401
    WORKLOAD_SCHEMA,
    WORKLOADS,
    Workload,
    is_table_name,
    workload_frame,
    workload_location,
    workload_stream,
    write_workload,
)
