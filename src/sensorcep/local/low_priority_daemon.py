"""PySpark's Python worker daemon at a lower CPU priority (local sessions only: ``spark.python.daemon.module``).

On a laptop the real-time alert query's long-running tasks (JVM threads) share the cores with the micro-batch
queries' Python workers (the sampling and device-activity processors). Workers forked by this daemon run at
``nice`` +10 (``SENSORCEP_PYTHON_WORKER_NICE``), so a sampling batch takes the CPU the alerts leave idle instead of
delaying them. On Databricks the always-on job runs the alert query on a cluster of its own instead.
"""

import os

from pyspark import daemon

if __name__ == "__main__":
    os.nice(int(os.environ.get("SENSORCEP_PYTHON_WORKER_NICE", "10")))
    daemon.manager()
