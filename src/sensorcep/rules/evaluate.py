"""Rules -> Spark expressions: which events fire which rules, the same code live (streaming) and in a backtest (batch).

:func:`fire` keeps the events that fire at least one rule, one row per (event, rule) with the rule's id, version and
text. All rules are compiled into the query's plan as plain column expressions (no join, no UDF, no state), so the
real-time alert query evaluates them record by record at its usual latency; a scope by ``site`` or ``sensor_type``
is resolved through the ``devices`` table to its device ids when the query starts (and again at each reload).

With many rules, an event is first tested against all of them in one OR (generated code); only an event that fires
builds the array of the rules it fires, so the cost per ordinary event is one comparison per rule.
"""

from __future__ import annotations

import logging
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from sensorcep.errors import SensorCepError
from sensorcep.io.lake import Tables
from sensorcep.rules.catalog import VersionedRule
from sensorcep.settings import Settings

log = logging.getLogger(__name__)

#: the columns :func:`fire` adds to each event it keeps
FIRED_COLUMNS = ["rule_id", "rule_version", "rule"]
_COMPARE = {
    "<": Column.__lt__,
    "<=": Column.__le__,
    ">": Column.__gt__,
    ">=": Column.__ge__,
    "==": Column.__eq__,
    "!=": Column.__ne__,
}


class RuleScopeError(SensorCepError, RuntimeError):
    """A rule scoped by site or sensor type, and no ``devices`` table to say which devices those are."""


def scope_devices(spark: SparkSession, settings: Settings, rules: list[VersionedRule]) -> dict[tuple, list[str]]:
    """(column, value) of each site/sensor_type scope -> the device ids the ``devices`` table gives it."""
    wanted = {
        (r.rule.scope.column, r.rule.scope.value) for r in rules if r.rule.scope and r.rule.scope.column != "device_id"
    }
    if not wanted:
        return {}
    lake = Tables(spark, settings)
    if not lake.exists("devices"):
        names = ", ".join(f"{c}={v}" for c, v in sorted(wanted))
        raise RuleScopeError(
            f"rules scoped by {names} need the devices table (device_id, site, sensor_type) to know which devices "
            "those are, and it does not exist; write it (locally: python -m sensorcep simulate --devices-table) or "
            "scope the rules by device_id"
        )
    devices = lake.read("devices")
    found: dict[tuple, list[str]] = {}
    for column, value in sorted(wanted):
        if column not in devices.columns:
            raise RuleScopeError(f"the devices table has no column {column!r}, which a rule's scope names")
        ids = [row.device_id for row in devices.where(F.col(column) == value).select("device_id").collect()]
        if not ids:
            log.warning("alert rules: no device has %s=%s; the rules scoped to it fire for no event", column, value)
        found[(column, value)] = sorted(ids)
    return found


def condition(versioned: VersionedRule, devices: dict[tuple, list[str]]) -> Column:
    """The rule as a boolean column over an event (device_id and the rule's field)."""
    rule = versioned.rule
    test = _COMPARE[rule.op](F.col(rule.field), F.lit(rule.value))
    if rule.scope is None:
        return test
    if rule.scope.column == "device_id":
        return test & (F.col("device_id") == F.lit(rule.scope.value))
    ids = devices.get((rule.scope.column, rule.scope.value), [])
    return test & F.col("device_id").isin(ids) if ids else F.lit(False)


def fire(events: DataFrame, rules: list[VersionedRule], devices: dict[tuple, list[str]] | None = None) -> DataFrame:
    """``events`` that fire a rule, one row per (event, rule fired), with :data:`FIRED_COLUMNS` added."""
    devices = devices or {}
    if not rules:
        nothing = (F.lit(None).cast("string"), F.lit(None).cast("int"), F.lit(None).cast("string"))
        typed = (value.alias(name) for value, name in zip(nothing, FIRED_COLUMNS, strict=True))
        return events.where(F.lit(False)).select("*", *typed)
    conditions = [condition(r, devices) for r in rules]
    fired = F.array(*(F.when(c, _fired_struct(r)) for c, r in zip(conditions, rules, strict=True)))
    any_fires = reduce(lambda a, b: a | b, conditions)
    return (
        events.where(any_fires)
        .select("*", F.explode(F.array_compact(fired)).alias("_fired"))
        .select(*events.columns, *(F.col(f"_fired.{c}").alias(c) for c in FIRED_COLUMNS))
    )


def _fired_struct(versioned: VersionedRule) -> Column:
    return F.struct(
        F.lit(versioned.id).alias("rule_id"),
        F.lit(versioned.version).alias("rule_version"),
        F.lit(versioned.rule.text).alias("rule"),
    )
