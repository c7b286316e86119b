"""The always-on job in a process of its own, for the seeded fault test (``tests/nemesis.py``).

    python tests/nemesis_driver.py '<job parameters as JSON>' [point]

It runs every task of ``sensor_cep_streaming`` as ``python -m sensorcep run --job sensor_cep_streaming`` does (one
Spark application), and prints ``write <table> <n>`` as the n-th Delta write of a table starts, so the nemesis can
act on progress. ``point`` arms one fault inside the process:

* ``before:<table>:K`` - kill -9 its own process group (Python driver, Spark JVM, Python workers) as the K-th Delta
  write (append or MERGE) of ``<table>`` starts: the micro-batch is half written;
* ``after:<table>:K``  - the same right after the K-th write, before Spark records the batch as done: the replay must
  add nothing;
* ``stop_alerts:K``    - after the K-th write of ``anomalies`` (alerts are flowing), stop the real-time alert query
  and start it again on its checkpoint (a task restart of the always-on job);
* ``drain``            - no fault: run until every query has read everything and applied the final watermark, then
  stop cleanly and exit 0.

Without ``point`` the job runs until the nemesis kills it from outside (or for 10 minutes).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def die() -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)


def arm(point: str | None, on_write) -> None:
    """Wrap the Delta writes of :class:`sensorcep.io.lake.Tables` with the progress line and the kill point."""
    from sensorcep.io.lake import Tables

    where, table, k = (point.split(":") + ["", ""])[:3] if point and point.count(":") == 2 else ("", "", "0")
    counts: dict[str, int] = {}
    lock = threading.Lock()

    def wrap(method):
        def call(self, df, name, *args, **kwargs):
            with lock:
                counts[name] = counts.get(name, 0) + 1
                n = counts[name]
            print(f"write {name} {n}", flush=True)
            on_write(name, n)
            hit = name == table and n == int(k)
            if hit and where == "before":
                die()
            result = method(self, df, name, *args, **kwargs)
            if hit and where == "after":
                die()
            return result

        return call

    Tables.append_batch = wrap(Tables.append_batch)
    Tables.merge_new_rows = wrap(Tables.merge_new_rows)
    Tables.write = wrap(Tables.write)


def main() -> None:
    from streams import drained

    from sensorcep.local import jobs
    from sensorcep.pipeline import queries
    from sensorcep.runtime import get_spark
    from sensorcep.settings import Settings

    params = json.loads(sys.argv[1])
    point = sys.argv[2] if len(sys.argv) > 2 else None
    settings = Settings.from_mapping({k: v for k, v in params.items() if k != "task"})
    spark = get_spark()
    restart_alerts_after = int(point.split(":")[1]) if point and point.startswith("stop_alerts:") else None

    def on_write(name: str, n: int) -> None:
        if name == "anomalies" and n == restart_alerts_after:
            threading.Thread(target=restart_alerts, daemon=True).start()

    def restart_alerts() -> None:
        running = [q for q in spark.streams.active if q.name == settings.query_name("alerts")]
        for query in running:
            query.stop()
        queries.query("alerts").start(spark, settings.replace(alerts_trigger=params["alerts_trigger"]), wait=False)
        print("restarted alerts", flush=True)

    arm(point, on_write)
    until = drained(settings) if point == "drain" else None
    jobs.run_always_on(params=params, until=until, minutes=10, every_s=3600, out=lambda line: None, spark=spark)
    print("completed", flush=True)


if __name__ == "__main__":
    main()
