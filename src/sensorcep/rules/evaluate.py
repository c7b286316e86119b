"""Rules -> Spark expressions: which events fire which rules, the same code live (streaming) and in a backtest (batch).

:func:`fire` keeps the events that fire at least one rule, one row per (event, rule) with the rule's id, version and
text. All rules are compiled into the query's plan as one array literal and a lambda over it (no join, no UDF, no
state), so the real-time alert query evaluates them record by record at its usual latency, and the plan stays the
same size whatever the number of rules; a scope by ``site`` or ``sensor_type`` is resolved through the ``devices``
table to its device ids when the query starts (and again at each reload).
"""

from __future__ import annotations

import logging

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from sensorcep.errors import SensorCepError
from sensorcep.io.lake import Tables
from sensorcep.rules.catalog import VersionedRule
from sensorcep.rules.model import NUMBER_PATTERN, NUMERIC_FIELDS, alternatives
from sensorcep.settings import Settings

log = logging.getLogger(__name__)

#: the columns :func:`fire` adds to each event it keeps
FIRED_COLUMNS = ["rule_id", "rule_version", "rule"]


class RuleScopeError(SensorCepError, RuntimeError):
    """A rule scoped by site or sensor type, and no ``devices`` table to say which devices those are."""


class RuleFieldError(SensorCepError, ValueError):
    """A rule reads an event field the events do not carry."""


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


def rule_table(rules: list[VersionedRule], devices: dict[tuple, list[str]]) -> Column:
    """The rules as one array literal of structs: id, version, text, ``alternatives`` (the rule's condition as
    alternatives of comparisons that must all hold: :func:`~sensorcep.rules.model.alternatives`, each comparison a
    struct of field, op, value) and ``devices`` (the device ids a scoped rule watches; null: every device)."""

    def watched(versioned: VersionedRule) -> Column:
        scope = versioned.rule.scope
        if scope is None:
            return F.lit(None).cast("array<string>")
        ids = [scope.value] if scope.column == "device_id" else devices.get((scope.column, scope.value), [])
        return F.array(*(F.lit(i) for i in ids)).cast("array<string>")

    def comparison(c) -> Column:
        value = F.lit(c.value).cast("double")
        return F.struct(F.lit(c.field).alias("field"), F.lit(c.op).alias("op"), value.alias("value"))

    return F.array(
        *(
            F.struct(
                F.lit(r.id).alias("rule_id"),
                F.lit(r.version).alias("rule_version"),
                F.lit(r.rule.text).alias("rule"),
                F.array(*(F.array(*map(comparison, option)) for option in alternatives(r.rule.test))).alias(
                    "alternatives"
                ),
                watched(r).alias("devices"),
            )
            for r in rules
        )
    )


def _holds(comparison: Column, event_value: Column) -> Column:
    """Whether an event meets ``comparison`` (a struct of field, op, value); false when the event does not carry the
    field as a finite number (null). The event's field is referenced once (``difference``): Spark inlines a column's
    expression where it pushes a filter, so a test that named the field once per rule would copy 01's whole parse
    expression into the plan once per rule (planning took seconds for 30 rules). IEEE 754 keeps the sign of a
    difference of finite numbers exact: x - v < 0 exactly when x < v."""
    difference = event_value - comparison["value"]
    sign = (
        F.when(comparison["op"] == "<", difference < 0)
        .when(comparison["op"] == "<=", difference <= 0)
        .when(comparison["op"] == ">", difference > 0)
        .when(comparison["op"] == ">=", difference >= 0)
        .when(comparison["op"] == "==", difference == 0)
        .otherwise(difference != 0)
    )
    return F.coalesce(sign, F.lit(False))


def numeric(events: DataFrame, name: str) -> Column:
    """An event field as conditions read it: ``sensor_freq`` as parsed; a field kept through ``extra_fields`` (text
    in bronze) as a finite number when it reads as one (:data:`~sensorcep.rules.model.NUMBER_PATTERN`), else null."""
    if name not in events.columns:
        raise RuleFieldError(
            f"a rule reads the event field {name!r}, which these events do not carry; keep it through extra_fields"
        )
    if name in NUMERIC_FIELDS:
        return F.col(name)
    text = F.col(name).cast("string")
    found = F.when(text.rlike(f"^(?:{NUMBER_PATTERN})\\z"), text.cast("double"))  # the whole text, as Python's
    return F.when(~F.isnan(found) & (F.abs(found) != float("inf")), found)


def fire(events: DataFrame, rules: list[VersionedRule], devices: dict[tuple, list[str]] | None = None) -> DataFrame:
    """``events`` that fire a rule, one row per (event, rule fired), with :data:`FIRED_COLUMNS` added.

    The rules are one array literal, filtered per event by a lambda (Spark's ``filter`` higher-order function, and
    ``exists`` / ``forall`` over each rule's alternatives and their comparisons): the plan's size does not grow with
    the number of rules, and an event that fires nothing leaves an empty array (and no row)."""
    devices = devices or {}
    if not rules:
        nothing = (F.lit(None).cast("string"), F.lit(None).cast("int"), F.lit(None).cast("string"))
        typed = (value.alias(name) for value, name in zip(nothing, FIRED_COLUMNS, strict=True))
        return events.where(F.lit(False)).select("*", *typed)
    fields = sorted(set().union(*(r.rule.fields for r in rules)))
    values = {name: numeric(events, name) for name in fields}

    def event_value(comparison: Column) -> Column:  # the comparison's field of the event, each field named once
        if len(fields) == 1:
            return values[fields[0]]
        chosen = F.when(comparison["field"] == fields[0], values[fields[0]])
        for name in fields[1:]:
            chosen = chosen.when(comparison["field"] == name, values[name])
        return chosen

    def fires(rule: Column) -> Column:
        meets = F.exists(rule["alternatives"], lambda option: F.forall(option, lambda c: _holds(c, event_value(c))))
        return meets & (rule["devices"].isNull() | F.array_contains(rule["devices"], F.col("device_id")))

    fired = F.filter(rule_table(rules, devices), fires)
    # explode, not a filter on the array's size: Spark pushes a filter down through 01's parse and inlines the
    # parsed field into it, so the lambda (evaluated without generated code) would parse each event again; a
    # generator reads the parsed column (empty array: no row)
    return events.select("*", F.explode(fired).alias("_fired")).select(
        *events.columns, *(F.col(f"_fired.{c}").alias(c) for c in FIRED_COLUMNS)
    )
