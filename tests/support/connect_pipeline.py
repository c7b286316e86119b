"""The pipeline's streaming queries on one session, for the Spark Connect test.

    python tests/support/connect_pipeline.py '<settings as JSON>'   # with SPARK_REMOTE=sc://localhost:<port>

runs them as a Spark Connect client (a separate process: PySpark switches its whole namespace to Connect once a
remote session exists, so one process cannot hold a classic and a Connect session side by side); the test runs
:func:`run_pipeline` on its classic session too and compares what both wrote.
"""

from __future__ import annotations

import json
import sys


def run_pipeline(spark, settings) -> None:
    """01 ingest -> bronze; 02 sampling and device activity from bronze; 03 alerts -> Kafka -> anomalies, and
    the alert lifecycle; every query's progress into ``stream_progress`` (availableNow, to the end of every source)."""
    from sensorcep.observability import monitoring
    from sensorcep.pipeline import alert_lifecycle, alerts, device_activity, ingest, sampling

    ingest.start_ingest(spark, settings)
    sampling.start_sampling(spark, settings)
    device_activity.start_device_activity(spark, settings)
    alerts.run_alert_path(spark, settings)
    alert_lifecycle.start_alert_lifecycle(spark, settings)
    monitoring.stop_progress_listener(spark)  # flushed; and a Connect client with a listener cannot exit


if __name__ == "__main__":
    from sensorcep.runtime import get_spark, is_connect
    from sensorcep.settings import Settings

    session = get_spark()
    if not is_connect(session):
        sys.exit(f"expected a Spark Connect session (SPARK_REMOTE), got {type(session).__module__}")
    run_pipeline(session, Settings(**json.loads(sys.argv[1])))
    print(json.dumps({"session": type(session).__module__}))
