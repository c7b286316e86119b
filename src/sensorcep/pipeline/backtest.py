"""A backtest before a rule change: what a candidate rule set would have alerted on over ``bronze_events``, against
what the live rules did alert (``anomalies``), by ``alert_id``.

The candidate runs through the live queries' own code, in batch, over bronze, which holds every valid event once: its
threshold rules through :func:`sensorcep.pipeline.alerts.alert_stream`, its stateful rules through the stateful
query's logic (:func:`sensorcep.pipeline.stateful_rules.rule_alerts_batch`, each device's events in one pass, up to
the watermark a live run would reach, and without the events the live stateful query found too late for its
watermark: they are in ``late_events``, and the live run never judged them); its group rules over the alerts those
fire, through the group rules query's logic (:func:`sensorcep.pipeline.group_rules.group_alerts_batch`, likewise
without the alerts the live group query found too late). An alert the candidate fires that
``anomalies`` lacks is *added*,
one ``anomalies`` holds that the candidate does not fire is *dropped*, one in both is *kept*. An ``alert_id``
depends on the device, the event time and the rule id (not its version), so a rule whose threshold moved keeps the
alerts both versions fire.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sensorcep.io.lake import Tables
from sensorcep.pipeline.alerts import alert_stream
from sensorcep.pipeline.group_rules import QUERY as GROUP_QUERY
from sensorcep.pipeline.group_rules import group_alerts_batch
from sensorcep.pipeline.ingest import BronzeMissingError, load_devices
from sensorcep.pipeline.lateness import LATE_KEY
from sensorcep.pipeline.stateful_rules import QUERY as STATEFUL_QUERY
from sensorcep.pipeline.stateful_rules import extra_fields_read, rule_alerts_batch
from sensorcep.rules import catalog, evaluate
from sensorcep.rules.model import Rule, check_fields
from sensorcep.settings import Settings

#: columns of each alert a backtest lists
ALERT_COLUMNS = ["alert_id", "rule_id", "device_id", "event_time", "sensor_freq"]


@dataclass
class Backtest:
    """The outcome: per rule (``by_rule``: live, candidate, added, dropped, kept) and a sample of the alerts added
    and dropped (up to ``sample`` each)."""

    events: int
    by_rule: pd.DataFrame
    added: pd.DataFrame
    dropped: pd.DataFrame
    changes: catalog.Changes

    @property
    def totals(self) -> dict[str, int]:
        return {c: int(self.by_rule[c].sum()) for c in ("live", "candidate", "added", "dropped", "kept")}

    def __str__(self) -> str:
        t = self.totals
        head = (
            f"backtest over {self.events:,} bronze events: live {t['live']:,} alerts, candidate {t['candidate']:,}: "
            f"+{t['added']:,} added, -{t['dropped']:,} dropped, {t['kept']:,} kept; as a change to alert_rules: "
            f"{self.changes}"
        )
        return head + "\n" + (self.by_rule.to_string(index=False) if len(self.by_rule) else "(no rule fired)")


def _window(frame: DataFrame, start: datetime | None, end: datetime | None) -> DataFrame:
    if start is not None:
        frame = frame.where(F.col("event_time") >= F.lit(start))
    if end is not None:
        frame = frame.where(F.col("event_time") < F.lit(end))
    return frame


def taken_by(lake: Tables, settings: Settings, query: str, events: DataFrame) -> DataFrame:
    """The ``events`` a live event-time query took: those it recorded as too late in ``late_events`` left out."""
    if not lake.exists("late_events"):
        return events
    late = lake.read("late_events").where(F.col("query") == settings.query_name(query)).select(*LATE_KEY[1:])
    return events.join(late.dropDuplicates(), LATE_KEY[1:], "left_anti")


def backtest(
    spark: SparkSession,
    settings: Settings,
    rules: list[Rule],
    start: datetime | None = None,
    end: datetime | None = None,
    sample: int = 20,
) -> Backtest:
    """Run ``rules`` over bronze events with ``start <= event_time < end`` and compare with ``anomalies``."""
    lake = Tables(spark, settings)
    if not lake.exists("bronze_events"):
        raise BronzeMissingError("bronze_events does not exist yet: run 01 ingest first; a backtest replays it")
    changes = catalog.plan_changes(catalog.current_rows(spark, settings), rules)
    version = {row["rule_id"]: row["rule_version"] for row in changes.rows}
    candidate = [catalog.VersionedRule(rule, version[rule.id]) for rule in rules if rule.enabled]
    check_fields([r.rule for r in candidate], settings.extra_field_names, "the candidate rules")
    events = _window(lake.read("bronze_events"), start, end).select(
        "device_id", "sensor_freq", "event_time", "kafka_timestamp", *extra_fields_read(candidate)
    )
    scoped = evaluate.scope_devices(spark, settings, candidate)
    stateless = [r for r in candidate if r.rule.stateless]
    groups = [r for r in candidate if r.rule.over_alerts]
    stateful = [r for r in candidate if not r.rule.stateless and not r.rule.over_alerts]
    fired = alert_stream(events, stateless, scoped).select(*ALERT_COLUMNS)
    if stateful:  # the stateful rules query's own logic, over each device's events at once, as the live run took them
        taken = taken_by(lake, settings, STATEFUL_QUERY, events)
        fired = fired.unionByName(rule_alerts_batch(taken, settings, stateful, scoped).select(*ALERT_COLUMNS))
    fired = fired.dropDuplicates(["alert_id"])
    if groups:  # the group rules query's own logic over the candidate's alerts, as the live run took them
        taken = taken_by(lake, settings, GROUP_QUERY, fired)
        grouped = group_alerts_batch(taken, load_devices(spark, settings), settings, groups)
        fired = fired.unionByName(grouped.select(*ALERT_COLUMNS))
    if lake.exists("anomalies"):
        live = _window(lake.read("anomalies"), start, end).select(*ALERT_COLUMNS).dropDuplicates(["alert_id"])
    else:
        live = fired.where(F.lit(False))
    both = (
        fired.alias("c")
        .join(live.alias("l"), "alert_id", "full_outer")
        .select(
            "alert_id",
            F.coalesce("c.rule_id", "l.rule_id").alias("rule_id"),
            F.coalesce("c.device_id", "l.device_id").alias("device_id"),
            F.coalesce("c.event_time", "l.event_time").alias("event_time"),
            F.coalesce("c.sensor_freq", "l.sensor_freq").alias("sensor_freq"),
            F.when(F.col("l.rule_id").isNull(), "added")
            .when(F.col("c.rule_id").isNull(), "dropped")
            .otherwise("kept")
            .alias("verdict"),
        )
        .cache()
    )
    try:
        counts = both.groupBy("rule_id").agg(
            *(F.sum((F.col("verdict") == v).cast("int")).alias(v) for v in ("added", "dropped", "kept"))
        )
        by_rule = counts.toPandas().sort_values("rule_id").reset_index(drop=True)
        by_rule.insert(1, "live", by_rule.dropped + by_rule.kept)
        by_rule.insert(2, "candidate", by_rule.added + by_rule.kept)
        columns = ["alert_id", *ALERT_COLUMNS[1:]]
        added = both.where("verdict = 'added'").orderBy("event_time", "alert_id").limit(sample).toPandas()[columns]
        dropped = both.where("verdict = 'dropped'").orderBy("event_time", "alert_id").limit(sample).toPandas()[columns]
        return Backtest(events.count(), by_rule, added, dropped, changes)
    finally:
        both.unpersist()
