"""The alert query and the sampling query side by side in one Spark application, each in its FAIR pool: how 03 runs
them (the always-on job starts every query through its tasks instead, :mod:`sensorcep.pipeline.always_on`)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from sensorcep.pipeline import alerts, sampling
from sensorcep.pipeline.streaming import finish, stop_when_caught_up
from sensorcep.settings import Settings, is_realtime

#: checkpoint interval of a real-time alert query in a bounded run (the shortest real-time mode accepts)
BOUNDED_REALTIME_INTERVAL = "5 seconds"


def start(spark: SparkSession, settings: Settings):
    """Start the alert query (pool ``alerts``, ``alerts_trigger``) and the sampling query (pool ``sampling``) in one
    application, neither waited for: they share the cores by FAIR pool weight (``scheduler_pools``).

    In a bounded run (``trigger`` availableNow) a real-time alert query checkpoints every
    :data:`BOUNDED_REALTIME_INTERVAL`: it reports progress only at checkpoints, and :func:`finish_both`
    stops it as soon as a report shows it has caught up (not after the 5-minute default interval).
    """

    alert_settings = settings
    if is_realtime(settings.alerts_trigger) and settings.runs_to_end:
        alert_settings = settings.replace(alerts_trigger=f"realtime:{BOUNDED_REALTIME_INTERVAL}")
    # sampling first: its Python worker starts before the real-time query's tasks take the cores (on Spark Connect a
    # foreachBatch query's Python process must connect back within Spark's 10 s as the query starts)
    sampling_query = sampling.start_sampling(spark, settings, wait=False)
    return alerts.start_alerts(spark, alert_settings, wait=False), sampling_query


def finish_both(alerts_query, sampling_query, settings: Settings):
    """Wait for what :func:`start` started, as its triggers say.

    availableNow queries run to the end of their sources. A real-time alert query (which never ends by itself) is
    stopped, once the sampling query is done, at its first progress report that shows it at the end of the events
    topic. Queries with interval triggers keep running and are returned running.
    """

    sampling_query = finish(sampling_query, settings)
    if is_realtime(settings.alerts_trigger) and settings.runs_to_end:
        stop_when_caught_up(alerts_query)
    return finish(alerts_query, settings, settings.alerts_trigger), sampling_query


def run(spark: SparkSession, settings: Settings):
    """:func:`start`, then :func:`finish_both`."""
    return finish_both(*start(spark, settings), settings)
