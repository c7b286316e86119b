"""The pipeline's Kafka queries (ingest, sampling, alerts + their anomalies record), availableNow, in their own
process: for kill -9 tests.

    python tests/crash_driver.py '<settings as JSON>' [point]

``point`` makes the process kill its own process group (Python driver and Spark JVM) with SIGKILL at an exact spot:

* ``before_commit:K`` - as the K-th Delta commit of this process starts (mid-batch: sink half written);
* ``after_commit:K``  - right after the K-th Delta commit, before Spark records the batch as done
                        (the replay must be recognised by the Delta transaction id and skipped).

Without ``point`` the run goes to the end (the test may still kill it from outside at a random time).
"""

from __future__ import annotations

import json
import os
import signal
import sys


def die() -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)


def arm(point: str) -> None:
    """Wrap ``DataFrameWriter.save`` of the project's Delta tables (``<base_path>/tables/...``) with the kill point."""
    from pyspark.sql.readwriter import DataFrameWriter

    where, k = point.split(":")
    original, calls = DataFrameWriter.save, {"n": 0}

    def save(self, path=None, *args, **kwargs):
        ours = path is not None and "/tables/" in str(path)
        calls["n"] += ours
        if ours and where == "before_commit" and calls["n"] == int(k):
            die()
        result = original(self, path, *args, **kwargs)
        if ours and where == "after_commit" and calls["n"] == int(k):
            die()
        return result

    DataFrameWriter.save = save


def main() -> None:
    from sensorcep.pipeline import alerts, ingest, sampling
    from sensorcep.runtime import get_spark
    from sensorcep.settings import Settings

    settings = Settings(**json.loads(sys.argv[1]))
    if len(sys.argv) > 2:
        arm(sys.argv[2])
    spark = get_spark()
    ingest.start_ingest(spark, settings)
    sampling.start_sampling(spark, settings)
    alerts.run_alert_path(spark, settings)
    print("completed", flush=True)


if __name__ == "__main__":
    main()
