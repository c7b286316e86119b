"""What a Python worker's start costs a local session, with pyspark imported from Spark's source archive (what Spark
puts first on a worker's path) and from the installed package (``sensorcep-python-worker``: decision 0054).

    .venv/bin/python benchmarks/python_worker.py [--starts 5] [--queries 3]

* **A worker's imports**: a fresh Python process imports what PySpark's workers import (``pyspark.worker`` and the
  module that reads a ``transformWithStateInPandas`` processor's state schema when its query starts), with
  ``PYTHONPATH`` as Spark sets it (``pyspark.zip`` and py4j's source zip first). Started as Spark starts a worker,
  ``<python> -m <module>``: with the plain interpreter (the baseline) and with ``sensorcep-python-worker``,
  alternately. Wall seconds and the process's CPU seconds, medians.
* **A stateful query's first batch**: a fresh process starts a local session and runs one ``transformWithStateInPandas``
  query (a count per key of 2,000 rows, ``availableNow``) with its workers started each way (the baseline: the plain
  interpreter, as ``PYSPARK_PYTHON``). Wall seconds from the query's start to its end, and the CPU seconds of the
  process and everything it started (JVM, Python workers, and the workers that ended, through their parent's reaped
  children's time) over that time, medians.

No broker. Nothing else should run meanwhile.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from harness import argument_parser, record

from sensorcep.local import python_worker

BASELINE = "plain interpreter"
KINDS = (BASELINE, "sensorcep-python-worker")
#: the probe a fresh worker process runs: what PySpark's workers import, then where pyspark came from
PROBE = textwrap.dedent(
    """
    import json, sys
    import pyspark.worker  # noqa: F401
    import pyspark.sql.streaming.transform_with_state_driver_worker  # noqa: F401
    import pyspark
    print(json.dumps({"pyspark": pyspark.__file__}))
    """
)
#: a stateful query's first batch, in a fresh process with a new local session
QUERY = textwrap.dedent(
    """
    import json, os, sys, time
    import pandas as pd
    import psutil
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from sensorcep.runtime import get_spark

    class Count(StatefulProcessor):
        def init(self, handle):
            self.seen = handle.getValueState("seen", "n long")

        def handleInputRows(self, key, rows, timerValues):
            n = sum(len(frame) for frame in rows) + (self.seen.get() or (0,))[0]
            self.seen.update((n,))
            yield pd.DataFrame({"key": [key[0]], "n": [n]})

        def close(self):
            pass

    folder = sys.argv[1]
    spark = get_spark()
    spark.range(2_000).selectExpr("cast(id % 20 as string) as key").write.mode("overwrite").parquet(folder + "/in")
    me = psutil.Process()

    def cpu():  # each process's own and its reaped children's (a worker that ended)
        return sum(sum(p.cpu_times()[:4]) for p in [me, *me.children(recursive=True)] if p.is_running())

    used, started = cpu(), time.perf_counter()
    query = (
        spark.readStream.schema("key string").parquet(folder + "/in")
        .groupBy("key")
        .transformWithStateInPandas(Count(), outputStructType="key string, n long", outputMode="Update",
                                    timeMode="None")
        .writeStream.format("noop").option("checkpointLocation", folder + "/checkpoint")
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    print(json.dumps({"wall": time.perf_counter() - started, "cpu": cpu() - used,
                      "workers": os.environ["PYSPARK_PYTHON"]}))
    """
)


def worker_imports(kind: str, probe_dir: Path) -> dict:
    """One fresh worker process's imports: wall and CPU seconds, and where pyspark came from."""
    python = sys.executable if kind == BASELINE else python_worker.interpreter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*python_worker.spark_archives(), str(probe_dir)])}
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run([python, "-m", "worker_probe"], env=env, capture_output=True, text=True, check=True)
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall (s)": wall, "cpu (s)": cpu, **json.loads(done.stdout.strip().splitlines()[-1])}


def query_start(kind: str, folder: Path) -> dict:
    """One stateful query's first batch, in a fresh process: wall and CPU seconds."""
    env = dict(os.environ)
    if kind == BASELINE:  # an interpreter of the user's own (another name of this one) is left as it is
        env["PYSPARK_PYTHON"] = str(Path(sys.executable).with_name("python3"))
    else:
        env.pop("PYSPARK_PYTHON", None)
    done = subprocess.run(
        [sys.executable, "-c", QUERY, str(folder)], env=env, capture_output=True, text=True, timeout=600
    )
    if done.returncode:
        sys.exit(f"the stateful query's run failed:\n{done.stderr[-3000:]}")
    took = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall (s)": took["wall"], "cpu (s)": took["cpu"], "workers": took["workers"]}


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--starts", type=int, default=5, help="worker processes of each kind to time (default 5)")
    parser.add_argument("--queries", type=int, default=3, help="stateful query runs of each kind (default 3)")
    args = parser.parse_args()
    if python_worker.interpreter() == sys.executable:
        sys.exit(f"{python_worker.SCRIPT} is not installed beside this interpreter: run `make venv` first")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="python-worker-") as scratch:
        probe_dir = Path(scratch)
        (probe_dir / "worker_probe.py").write_text(PROBE)
        for n in range(1, args.starts + 1):
            for kind in KINDS:
                row = {"measure": "a worker's imports", "run": n, "kind": kind, **worker_imports(kind, probe_dir)}
                rows.append(row)
                print(f"imports {n}/{args.starts} {kind:24} {row['wall (s)']:.2f} s, cpu {row['cpu (s)']:.2f} s")
        for n in range(1, args.queries + 1):
            for kind in KINDS:
                row = {"measure": "a stateful query", "run": n, "kind": kind}
                row |= query_start(kind, probe_dir / f"query-{n}-{KINDS.index(kind)}")
                rows.append(row)
                print(f"query {n}/{args.queries} {kind:24} {row['wall (s)']:.2f} s, cpu {row['cpu (s)']:.2f} s")
    figures = {}
    for measure in ("a worker's imports", "a stateful query"):
        for unit in ("wall (s)", "cpu (s)"):
            for kind in KINDS:
                values = [row[unit] for row in rows if row["measure"] == measure and row["kind"] == kind]
                figures[f"{measure}, {unit.split()[0]}: {kind} (s)"] = round(statistics.median(values), 2)
    print("\n".join(f"{name:64} {value:6.2f}" for name, value in figures.items()))
    for row in rows:
        row.update({k: round(v, 2) for k, v in row.items() if isinstance(v, float)})
    record("python_worker", figures, table=rows, baseline=BASELINE)


if __name__ == "__main__":
    main()
